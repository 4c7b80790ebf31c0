"""Observability: metrics, tracing, dashboard."""
