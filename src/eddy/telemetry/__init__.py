"""What every part reports with: spans, hot-path counters, Prometheus metrics, log formats, the
OpenTelemetry SDK set-up, record traces, pipelines' status records."""
