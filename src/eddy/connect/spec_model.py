"""The base of every pipeline-file model, and the field checks its models share.

The pipeline (eddy.connect.runtime.spec), each connector's spec (eddy.connect.sources,
eddy.connect.sinks) and each transform's (eddy.connect.transforms.spec) are pydantic
models of this base: unknown keys are errors, aliases and field names both load, and a
loaded model does not change.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
HTTP_URL_RE = re.compile(r"^https?://[^/\s]+")
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def check_topic(value: str) -> str:
    if not TOPIC_RE.match(value) or value in (".", ".."):
        raise ValueError(
            f"{value!r} is not a valid topic name (letters, digits, '.', '_', '-'; 1-249)"
        )
    return value


def check_bootstrap(value: str) -> str:
    for part in value.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT[,HOST:PORT...], got {value!r}")
    return value


def check_http_url(value: str) -> str:
    if not HTTP_URL_RE.match(value):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value
