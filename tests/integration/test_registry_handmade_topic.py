"""A ``_schemas`` topic written by hand in Confluent's format, byte for byte as Confluent (and
Karapace) write it, served by a real `eddy serve` started on it afterwards: ids as written
(500, 501), a SCHEMA value without ``schemaType`` read as AVRO, global CONFIG keys without a
subject and with ``"subject":null``, a per-subject CONFIG, a DELETE_SUBJECT and a NOOP; the
next registration gets the next id. While the topic is not compacted the registry refuses to
serve it and every route but ``GET /`` answers Confluent's 50004; once it is, the registry
reads it. A clean restart (SIGTERM) serves the same ids, subjects and configs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from conftest import EddyProcess, free_port
from kafka_helpers import create_topic
from registry_http import call, poll, refusal, register_id, set_topic_config

from eddy.registry.guid import schema_guid

USER = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}'
ORDER = '{"type":"object","properties":{"id":{"type":"integer"}}}'


def schema_key(subject: str, version: int) -> bytes:
    return (f'{{"keytype":"SCHEMA","subject":"{subject}","version":{version},'
            f'"magic":1}}').encode()


def value(**fields: Any) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


HANDMADE: list[tuple[bytes, bytes | None]] = [
    # no schemaType: AVRO
    (schema_key("users-value", 1),
     value(subject="users-value", version=1, id=500, schema=USER, deleted=False)),
    (schema_key("orders-value", 1),
     value(subject="orders-value", version=1, id=501, schemaType="JSON", schema=ORDER,
           deleted=False)),
    # the same schema under another subject keeps its id; that subject is then deleted
    (schema_key("legacy-value", 1),
     value(subject="legacy-value", version=1, id=500, schema=USER, deleted=False)),
    (b'{"keytype":"DELETE_SUBJECT","subject":"legacy-value","magic":0}',
     value(subject="legacy-value", version=1)),
    # the global config as newer Confluent writes it: no subject at all
    (b'{"keytype":"CONFIG","magic":0}', value(compatibilityLevel="FULL")),
    (b'{"keytype":"CONFIG","subject":"users-value","magic":0}',
     value(subject="users-value", compatibilityLevel="NONE")),
    (b'{"keytype":"NOOP","magic":0}', None),
]
#: the global config as older Confluent and Karapace write it, produced while the node runs
GLOBAL_NULL_SUBJECT = (b'{"keytype":"CONFIG","subject":null,"magic":0}',
                       value(compatibilityLevel="FORWARD_TRANSITIVE"))


def produce_records(bootstrap: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    errors: list[str] = []
    for key, data in records:
        producer.produce("_schemas", key=key, value=data, partition=0,
                         on_delivery=lambda err, _: errors.append(str(err)) if err else None)
    assert producer.flush(20) == 0 and not errors, errors


def check_served(url: str, *registered: str) -> None:
    """What the hand-made records say (``registered``: subjects added through the API)."""
    assert call(f"{url}/schemas/ids/500") == (200, {"schema": USER})
    assert call(f"{url}/schemas/ids/501") == (200, {"schemaType": "JSON", "schema": ORDER})
    assert call(f"{url}/subjects") == (200, sorted(["orders-value", "users-value",
                                                     *registered]))
    assert call(f"{url}/subjects?deleted=true") == (
        200, sorted(["legacy-value", "orders-value", "users-value", *registered]))
    assert call(f"{url}/schemas/ids/500/subjects?deleted=true") == (
        200, ["legacy-value", "users-value"])
    assert call(f"{url}/subjects/users-value/versions/1") == (
        200, {"subject": "users-value", "version": 1, "id": 500,
              "guid": schema_guid(USER, (), None, None), "schema": USER})
    assert call(f"{url}/config/users-value") == (200, {"compatibilityLevel": "NONE"})


def test_a_handmade_schemas_topic_is_served(tmp_path: Path) -> None:
    proc = EddyProcess(tmp_path / "data")  # no registry (tests' default): nothing reads it
    proc.start()
    try:
        # compaction left out on purpose: the registry must refuse to serve such a topic
        create_topic(proc.bootstrap, "_schemas", 1, {"cleanup.policy": "delete"})
        produce_records(proc.bootstrap, HANDMADE)
        proc.stop()

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc.extra_args = ["--set", f"registry.listener=127.0.0.1:{port}"]
        # the node waits for its registry before it says it is ready: start it aside
        starting = threading.Thread(target=proc.start, daemon=True)
        starting.start()
        poll(f"{url}/", 200)
        # the registry refuses the topic (and says why in the log), and keeps refusing
        wait_for_log(proc, "cleanup.policy=delete")
        status, code, message = refusal(f"{url}/subjects")
        assert (status, code) == (500, 50004), message
        assert refusal(f"{url}/schemas/ids/500")[:2] == (500, 50004)
        assert not starting.is_alive() or proc.alive()
        # compacted now: the registry's next try reads it
        set_topic_config(proc.bootstrap, "_schemas", cleanup_policy="compact")
        starting.join(30)
        assert proc.alive() and not starting.is_alive(), proc.logs()

        check_served(url)
        assert call(f"{url}/config") == (200, {"compatibilityLevel": "FULL"})
        # the other global key form, written while the registry runs, is read too
        produce_records(proc.bootstrap, [GLOBAL_NULL_SUBJECT])
        forward_transitive = {"compatibilityLevel": "FORWARD_TRANSITIVE"}
        assert poll_until(f"{url}/config", forward_transitive)
        # ids go on after the largest one in the topic
        assert register_id(url, "new-value", '"string"') == 502

        assert proc.stop() == 0  # SIGTERM: a clean shutdown
        proc.start()
        check_served(url, "new-value")
        assert call(f"{url}/config") == (200, forward_transitive)
        assert call(f"{url}/schemas/ids/502") == (200, {"schema": '"string"'})
        assert register_id(url, "new-value", '"string"') == 502
        assert register_id(url, "more-value", '"int"') == 503
    finally:
        proc.kill()


def wait_for_log(proc: EddyProcess, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in proc.logs():
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{proc.logs()}"
        time.sleep(0.05)


def poll_until(url: str, body: Any, timeout: float = 10.0) -> bool:
    """Whether GET ``url`` answers 200 with ``body`` before the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if call(url) == (200, body):
            return True
        time.sleep(0.05)
    return False
