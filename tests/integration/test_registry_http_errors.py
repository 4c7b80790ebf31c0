"""Confluent's error codes from a real `eddy serve`, one plain HTTP request each: status,
``error_code`` and message as Confluent Schema Registry answers them (its ``Errors`` and REST
resources). The 5000x codes come from the broker refusing the registry's writes to
``_schemas``: a topic ``max.message.bytes`` below a schema's record is a permanent refusal
(50001), ``min.insync.replicas`` above the topic's one replica a retriable one that outlasts
the write's wait (50002); 50004 (no ``_schemas`` read yet) is in
test_registry_handmade_topic. One node serves the whole module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EddyProcess
from registry_http import call, refusal, set_topic_config
from registry_http import register_id as register
from test_registry_clients import registry_url


def compact(schema: Any) -> str:
    """An Avro schema as the registry stores it (Confluent's canonical text: no spaces)."""
    return json.dumps(schema, separators=(",", ":"))


AVRO_V1 = json.dumps({"type": "record", "name": "Thing", "fields": [
    {"name": "a", "type": "int"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "Thing", "fields": [
    {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EddyProcess, str]]:
    data = Path(tmp_path_factory.mktemp("registry-errors")) / "data"
    proc = EddyProcess(data, ["--set", "registry.listener=127.0.0.1:0",
                              # the write's wait before 50002 (10 s by default)
                              "--set", "registry.kafkastore.timeout.ms=1000"]).start()
    try:
        yield proc, registry_url(proc)
    finally:
        proc.kill()


def test_not_found_and_soft_delete_codes(node: tuple[EddyProcess, str]) -> None:
    _, url = node
    register(url, "s", AVRO_V1)
    register(url, "s", AVRO_V2)
    register(url, "gone", '"string"')
    assert refusal(f"{url}/subjects/nope/versions") == (
        404, 40401, "Subject 'nope' not found.")
    assert refusal(f"{url}/subjects/s/versions/7") == (404, 40402, "Version 7 not found.")
    assert refusal(f"{url}/schemas/ids/9999") == (404, 40403, "Schema 9999 not found")
    # a subject soft-deleted, then deleted again without permanent=true
    assert call(f"{url}/subjects/gone", "DELETE") == (200, [1])
    assert refusal(f"{url}/subjects/gone", "DELETE") == (
        404, 40404, "Subject 'gone' was soft deleted.Set permanent=true to delete permanently")
    # a live subject deleted permanently without a soft delete first
    assert refusal(f"{url}/subjects/s?permanent=true", "DELETE") == (
        404, 40405, "Subject 's' was not deleted first before being permanently deleted")
    # a version soft-deleted twice; a live version deleted permanently
    assert call(f"{url}/subjects/s/versions/1", "DELETE") == (200, 1)
    assert refusal(f"{url}/subjects/s/versions/1", "DELETE") == (
        404, 40406, "Subject 's' Version 1 was soft deleted.Set permanent=true to delete "
        "permanently")
    assert refusal(f"{url}/subjects/s/versions/2?permanent=true", "DELETE") == (
        404, 40407, "Subject 's' Version 2 was not deleted first before being permanently "
        "deleted")
    assert call(f"{url}/subjects/s/versions/1?permanent=true", "DELETE") == (200, 1)
    assert refusal(f"{url}/config/s") == (
        404, 40408, "Subject 's' does not have subject-level compatibility configured")
    assert refusal(f"{url}/mode/s") == (
        404, 40409, "Subject 's' does not have subject-level mode configured")


def test_unprocessable_codes(node: tuple[EddyProcess, str]) -> None:
    _, url = node
    status, code, message = refusal(f"{url}/subjects/bad/versions", "POST",
                                    {"schema": '{"type": "record", "name": "R"}'})
    assert (status, code) == (422, 42201)
    assert message.startswith('Invalid schema {"type": "record", "name": "R"} with refs [] '
                              "of type AVRO, details: "), message
    assert refusal(f"{url}/subjects/bad/versions", "POST", {"schema": " "}) == (
        422, 42201, "Empty schema")
    for version in ("0", "abc", "2147483648"):
        assert refusal(f"{url}/subjects/bad/versions/{version}") == (
            422, 42202, f"The specified version '{version}' is not a valid version id. "
            'Allowed values are between [1, 2^31-1] and the string "latest"')
    assert refusal(f"{url}/config", "PUT", {"compatibility": "SIDEWAYS"}) == (
        422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, "
        "full, backward_transitive, forward_transitive, and full_transitive")
    assert refusal(f"{url}/mode/bad", "PUT", {"mode": "FAST"}) == (
        422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, and IMPORT.")
    assert call(f"{url}/mode/ro", "PUT", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert refusal(f"{url}/subjects/ro/versions", "POST", {"schema": '"int"'}) == (
        422, 42205, "Subject ro is in read-only mode")


def test_deleting_a_referenced_version_is_42206(node: tuple[EddyProcess, str]) -> None:
    _, url = node
    register(url, "address", json.dumps({"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string"}]}))
    person = json.dumps({"type": "record", "name": "Person", "fields": [
        {"name": "home", "type": "Address"}]})
    register(url, "person", person,
             references=[{"name": "Address", "subject": "address", "version": 1}])
    expected = (422, 42206, "One or more references exist to the schema "
                "{magic=1,keytype=SCHEMA,subject=address,version=1}.")
    assert refusal(f"{url}/subjects/address/versions/1", "DELETE") == expected
    assert refusal(f"{url}/subjects/address", "DELETE") == expected
    assert call(f"{url}/subjects/address/versions") == (200, [1])


def test_a_write_the_broker_refuses_is_50001(node: tuple[EddyProcess, str]) -> None:
    proc, url = node
    big = compact({"type": "record", "name": "Big", "doc": "x" * 4000, "fields": []})
    set_topic_config(proc.bootstrap, "_schemas", max_message_bytes="1024")
    try:
        assert refusal(f"{url}/subjects/big/versions", "POST", {"schema": big}) == (
            500, 50001, "Register schema operation failed while writing to the Kafka store")
        assert refusal(f"{url}/subjects/big/versions") == (  # nothing was written
            404, 40401, "Subject 'big' not found.")
    finally:
        set_topic_config(proc.bootstrap, "_schemas", max_message_bytes=None)
    # the node stays up and its producer goes on: the same request now registers
    big_id = register(url, "big", big)
    assert call(f"{url}/schemas/ids/{big_id}")[1]["schema"] == big
    assert "Message size too large" in proc.logs()  # the cause, logged


def test_a_write_kafka_does_not_ack_in_time_is_50002(node: tuple[EddyProcess, str]) -> None:
    proc, url = node
    late = compact({"type": "record", "name": "Late", "fields": []})
    set_topic_config(proc.bootstrap, "_schemas", min_insync_replicas="2")
    try:  # NOT_ENOUGH_REPLICAS is retriable: the producer retries past the write's wait
        assert refusal(f"{url}/subjects/late/versions", "POST", {"schema": late}) == (
            500, 50002, "Register operation timed out")
    finally:
        set_topic_config(proc.bootstrap, "_schemas", min_insync_replicas=None)
    # the write that timed out lands once the broker accepts it again; the next write waits
    # for it, so the two schemas get different ids
    other = compact({"type": "record", "name": "Other", "fields": []})
    other_id = register(url, "other", other)
    status, versions = call(f"{url}/subjects/late/versions")
    assert (status, versions) == (200, [1])
    late_id = call(f"{url}/subjects/late/versions/1")[1]["id"]
    assert late_id != other_id
    assert call(f"{url}/schemas/ids/{late_id}")[1]["schema"] == late
    assert call(f"{url}/schemas/ids/{other_id}")[1]["schema"] == other
    assert register(url, "late", late) == late_id  # the client's retry: the same id
