"""What every part reports with: spans, hot-path counters, log formats, the OpenTelemetry SDK
set-up, record traces, pipelines' status records (read by the observe role)."""
