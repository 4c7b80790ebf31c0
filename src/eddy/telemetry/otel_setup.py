"""The OpenTelemetry SDK for traces, set up at node start only when the standard
environment asks for it, flushed and shut down when the node stops.

On when OTEL_TRACES_EXPORTER names `otlp` (or `console`), or, with OTEL_TRACES_EXPORTER
unset, when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; off
with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Off, nothing beyond the API is
imported and every span is the API's no-op. On: a TracerProvider whose resource comes from
OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (service.name "eddy" when neither names one),
whose sampler is the SDK's from OTEL_TRACES_SAMPLER(_ARG), and a BatchSpanProcessor
(OTEL_BSP_*) exporting OTLP/HTTP protobuf (OTEL_EXPORTER_OTLP_* endpoint, headers,
timeout, compression).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from eddy.telemetry import tracing

log = logging.getLogger(__name__)

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
DEFAULT_SERVICE_NAME = "eddy"

#: the provider this process set up (one per process: the API's global is set once)
_provider: Any = None


def exporters_wanted(env: Mapping[str, str]) -> list[str]:
    """The span exporters the environment asks for (empty: traces are off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if not named:
        return ["otlp"] if any(env.get(k, "").strip() for k in _ENDPOINTS) else []
    wanted = [n.strip().lower() for n in named.split(",") if n.strip()]
    if "none" in wanted:
        return []
    unknown = sorted(set(wanted) - {"otlp", "console"})
    if unknown:
        log.warning("OTEL_TRACES_EXPORTER: %s not supported (otlp, console are): ignored",
                    ", ".join(unknown))
    return [n for n in dict.fromkeys(wanted) if n in ("otlp", "console")]


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = next((env[k].strip() for k in _PROTOCOLS if env.get(k, "").strip()),
                    "http/protobuf")
    if protocol != "http/protobuf":
        log.warning("OTLP protocol %s is not supported: exporting with http/protobuf",
                    protocol)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout, compression from OTEL_* env


def start(node_id: int | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Set up the SDK when the environment asks for traces; True when tracing is on."""
    global _provider
    environ = os.environ if env is None else env
    if _provider is not None:
        return True
    exporters = exporters_wanted(environ)
    if not exporters:
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    if node_id is not None and "eddy.node_id" not in resource.attributes:
        resource = resource.merge(Resource({"eddy.node_id": node_id}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER(_ARG)
    for name in exporters:
        exporter = _otlp_exporter(environ) if name == "otlp" else ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:  # set once per process, by someone else
        log.warning("traces off: this process already has a tracer provider")
        provider.shutdown()
        return False
    _provider = provider
    tracing.enabled = True
    where = next((environ[k] for k in _ENDPOINTS if environ.get(k, "").strip()), "default")
    log.info("traces on: %s (service.name=%s, endpoint %s)", ", ".join(exporters),
             resource.attributes.get(SERVICE_NAME), where)
    return True


async def stop() -> None:
    """Flush the spans not yet exported and shut the SDK down (in a thread: an export may
    wait on its endpoint up to the exporter's timeout)."""
    global _provider
    provider, _provider = _provider, None
    if provider is None:
        return
    tracing.enabled = False
    try:
        await asyncio.to_thread(provider.shutdown)
    except Exception as exc:  # an exporter failing at shutdown must not stop the node's
        log.warning("shutting the trace exporter down failed: %s", exc)
