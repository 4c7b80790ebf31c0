"""The connector inventory (Airbyte-style spec/check) behind `eddy connect list-connectors`,
`spec NAME` and `check FILE`."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from eddy.connect.runtime import spec as s


@dataclass(frozen=True)
class Connector:
    name: str
    kind: str  # source | sink | transform
    model: type[BaseModel]

    @property
    def description(self) -> str:
        doc = (self.model.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""


CONNECTORS: tuple[Connector, ...] = (
    Connector("eddy", "source", s.EddySource),
    Connector("datagen", "source", s.DatagenSource),
    Connector("files", "source", s.FilesSource),
    Connector("eddy", "sink", s.EddySink),
    Connector("stdout", "sink", s.StdoutSink),
    Connector("files", "sink", s.FilesSink),
    Connector("webhook", "sink", s.WebhookSink),
    *(Connector(name, "transform", model) for name, model in s.TRANSFORMS.items()),
)

TRANSFORM_HELP = {
    "parse_json": "JSON value to columns (schema given or inferred from a sample)",
    "mask": "redact, hash with a salt, or keep the last N characters of a field",
    "rename": "rename columns {old: new}",
    "drop": "drop columns",
    "select": "keep these columns or SQL expressions",
    "cast": "cast columns {column: TYPE}; values that do not convert are dead letters",
    "timestamp": "text or epoch numbers to timestamps (format, zone)",
    "filter": "keep rows where a SQL predicate holds",
    "route": "a SQL expression chooses each row's target topic",
    "sql": "any Spark SQL over the view `input`",
}


def describe(c: Connector) -> str:
    return TRANSFORM_HELP.get(c.name, "") if c.kind == "transform" else c.description


def find(name: str) -> list[Connector]:
    """`eddy`, `source/eddy`, `sink/files`, `transform/mask`..."""
    kind, _, bare = name.rpartition("/")
    return [c for c in CONNECTORS if c.name == bare and (not kind or c.kind == kind)]


def json_schema(c: Connector) -> dict[str, Any]:
    return c.model.model_json_schema(by_alias=True)


# ---- check: can the pipeline reach what it names? -----------------------------------------


@dataclass
class Check:
    what: str
    ok: bool
    message: str


def _kafka(bootstrap: str, what: str, topics: list[str] | None = None,
           timeout_s: float = 5.0) -> Check:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         "socket.connection.setup.timeout.ms": int(timeout_s * 1000)})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        return Check(what, False, f"cannot reach a broker at {bootstrap}: {exc.args[0]}")
    missing = [t for t in topics or [] if t not in md.topics]
    if missing:
        return Check(what, True, f"{bootstrap} reachable; topic(s) not there yet "
                                 f"(created on first write if the broker allows): "
                                 f"{', '.join(missing)}")
    return Check(what, True, f"{bootstrap} reachable ({len(md.brokers)} broker(s))")


def _writable_dir(path: str, what: str) -> Check:
    p = Path(path).resolve()
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        return Check(what, False, f"{p}: cannot create or write here ({probe} not writable)")
    return Check(what, True, f"{p} writable")


def _http(url: str, what: str, timeout_s: float = 5.0) -> Check:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            pass
    except OSError as exc:
        return Check(what, False, f"cannot connect to {parts.hostname}:{port}: "
                                  f"{exc.strerror or exc}")
    return Check(what, True, f"{parts.hostname}:{port} accepts connections")


def check(p: s.Pipeline) -> list[Check]:
    checks: list[Check] = []
    src = p.source
    if isinstance(src, s.EddySource):
        topics = [src.topic] if src.topic else list(src.topics or [])
        checks.append(_kafka(src.bootstrap, "source eddy", topics))
    elif isinstance(src, s.FilesSource):
        path = Path(src.path)
        ok = path.is_dir() and os.access(path, os.R_OK)
        checks.append(Check("source files", ok, f"{path.resolve()} " + (
            "readable" if ok else "is not a readable directory")))
    else:
        checks.append(Check("source datagen", True, "generated locally"))
    for i, sink in enumerate(p.sinks):
        what = f"sinks[{i}] {sink.type}"
        if isinstance(sink, s.EddySink):
            checks.append(_kafka(p.sink_bootstrap(sink), what,
                                 [sink.topic] if sink.topic else None))
        elif isinstance(sink, s.FilesSink):
            checks.append(_writable_dir(sink.path, what))
        elif isinstance(sink, s.WebhookSink):
            checks.append(_http(sink.url, what))
        else:
            checks.append(Check(what, True, "prints to standard output"))
    target = p.dead_letter_target()
    if target is not None:
        checks.append(_kafka(target[0], "dead letters", None))
    checks.append(_writable_dir(str(p.checkpoint_dir()), "checkpoint"))
    return checks
