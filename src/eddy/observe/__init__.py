"""The observe role: the HTTP admin listener (Prometheus metrics, health checks) and the web
console, reading the node's state (what its parts report with is ``eddy.telemetry``)."""
