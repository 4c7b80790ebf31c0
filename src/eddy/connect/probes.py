"""What `eddy connect check` finds when it tries what a pipeline names: a broker, a
directory, an HTTP endpoint. Each probe answers a Check; connectors pick theirs
(eddy.connect.connectors), the inventory adds the dead-letter topic and the checkpoint
(eddy.connect.runtime.inventory)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


@dataclass
class Check:
    what: str
    ok: bool
    message: str


def kafka(bootstrap: str, what: str, topics: list[str] | None = None,
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


def readable_dir(path: str, what: str) -> Check:
    p = Path(path)
    ok = p.is_dir() and os.access(p, os.R_OK)
    return Check(what, ok, f"{p.resolve()} " + (
        "readable" if ok else "is not a readable directory"))


def writable_dir(path: str, what: str) -> Check:
    p = Path(path).resolve()
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        return Check(what, False, f"{p}: cannot create or write here ({probe} not writable)")
    return Check(what, True, f"{p} writable")


def http(url: str, what: str, timeout_s: float = 5.0) -> Check:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            pass
    except OSError as exc:
        return Check(what, False, f"cannot connect to {parts.hostname}:{port}: "
                                  f"{exc.strerror or exc}")
    return Check(what, True, f"{parts.hostname}:{port} accepts connections")
