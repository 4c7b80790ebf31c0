"""Plain HTTP calls to a registry served by a real `eddy serve`, and the helpers the registry's
error-code and hand-made-topic tests share (a node started by the module, `_schemas` configs
changed through the AdminClient)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(url: str, method: str = "GET", body: Any = None,
         timeout: float = 30.0) -> tuple[int, Any]:
    """(status, JSON body) of one request; errors are answers too."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": CONTENT_TYPE}
    if data is not None:
        headers["Content-Type"] = CONTENT_TYPE
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def refusal(url: str, method: str = "GET", body: Any = None) -> tuple[int, int, str]:
    """(status, error_code, message) of a request that must be refused."""
    status, answer = call(url, method, body)
    assert isinstance(answer, dict) and set(answer) == {"error_code", "message"}, (status,
                                                                                  answer)
    return status, answer["error_code"], answer["message"]


def poll(url: str, want_status: int = 200, timeout: float = 20.0) -> Any:
    """The body of the first answer with ``want_status`` (polled with a deadline)."""
    deadline = time.monotonic() + timeout
    last: tuple[int, Any] | None = None
    while time.monotonic() < deadline:
        try:
            last = call(url, timeout=5.0)
        except OSError as exc:  # not listening yet
            last = (0, str(exc))
        if last[0] == want_status:
            return last[1]
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered {want_status}: last {last}")


def set_topic_config(bootstrap: str, topic: str, **configs: str | None) -> None:
    """Set (a value) or delete (None) topic configs, named with ``_`` for ``.``."""
    entries = [ConfigEntry(name.replace("_", "."), value,
                           incremental_operation=AlterConfigOpType.SET if value is not None
                           else AlterConfigOpType.DELETE)
               for name, value in configs.items()]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(15)


def register_id(url: str, subject: str, schema: str, **extra: Any) -> int:
    """POST a schema under ``subject``: its id (the answer also carries the GUID)."""
    status, answer = call(f"{url}/subjects/{subject}/versions", "POST",
                          {"schema": schema, **extra})
    assert status == 200, answer
    assert set(answer) == {"id", "guid"}, answer
    return int(answer["id"])
