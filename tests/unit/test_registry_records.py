"""The ``_schemas`` records: Confluent's exact key and value bytes, tolerant reading of what
Confluent and Karapace write, hostile bytes refused by name, and a hand-written Confluent
topic replayed into the registry state."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.registry import records as rec
from eddy.registry.contract import RegistryError
from eddy.registry.memory_log import MemoryLog
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

# -- exact bytes of every key kind ---------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), [
    (rec.SchemaKey("orders-value", 3),
     b'{"keytype":"SCHEMA","subject":"orders-value","version":3,"magic":1}'),
    (rec.ConfigKey("orders-value"), b'{"keytype":"CONFIG","subject":"orders-value","magic":0}'),
    (rec.ConfigKey(None), b'{"keytype":"CONFIG","subject":null,"magic":0}'),
    (rec.ModeKey("orders-value"), b'{"keytype":"MODE","subject":"orders-value","magic":0}'),
    (rec.ModeKey(None), b'{"keytype":"MODE","subject":null,"magic":0}'),
    (rec.DeleteSubjectKey("orders-value"),
     b'{"keytype":"DELETE_SUBJECT","subject":"orders-value","magic":0}'),
    (rec.ClearSubjectKey("orders-value"),
     b'{"keytype":"CLEAR_SUBJECT","subject":"orders-value","magic":0}'),
    (rec.ClearSubjectKey(None), b'{"keytype":"CLEAR_SUBJECT","subject":null,"magic":0}'),
    (rec.NoopKey(), b'{"keytype":"NOOP","magic":0}'),
])
def test_key_bytes_are_confluents(key: rec.RecordKey, expected: bytes) -> None:
    assert rec.encode_key(key) == expected
    assert rec.decode_key(expected) == key


# -- exact bytes of every value kind -------------------------------------------------------------


def test_avro_schema_value_leaves_out_type_and_empty_fields() -> None:
    value = rec.SchemaValue("s", 1, 7, '"string"')
    assert rec.encode_value(value) == (
        b'{"subject":"s","version":1,"id":7,"schema":"\\"string\\"","deleted":false}')


def test_schema_value_with_every_field_in_confluents_order() -> None:
    value = rec.SchemaValue(
        "person", 2, 9, '{"type":"object"}', "JSON",
        (rec.Reference("addr.json", "addr", 1),), {"properties": {"owner": "x"}},
        {"domainRules": []}, True)
    assert rec.encode_value(value) == (
        b'{"subject":"person","version":2,"id":9,"schemaType":"JSON",'
        b'"references":[{"name":"addr.json","subject":"addr","version":1}],'
        b'"metadata":{"properties":{"owner":"x"}},"ruleSet":{"domainRules":[]},'
        b'"schema":"{\\"type\\":\\"object\\"}","deleted":true}')
    assert rec.decode_value(rec.SchemaKey("person", 2), rec.encode_value(value)) == value


@pytest.mark.parametrize(("value", "expected"), [
    (rec.ConfigValue(None, {"compatibilityLevel": "FULL"}), b'{"compatibilityLevel":"FULL"}'),
    (rec.ConfigValue("s", {"compatibilityLevel": "NONE", "normalize": True}),
     b'{"subject":"s","normalize":true,"compatibilityLevel":"NONE"}'),
    (rec.ModeValue("READONLY"), b'{"mode":"READONLY"}'),
    (rec.ModeValue("IMPORT", "s"), b'{"subject":"s","mode":"IMPORT"}'),
    (rec.DeleteSubjectValue("s", 4), b'{"subject":"s","version":4}'),
    (rec.ClearSubjectValue("s"), b'{"subject":"s"}'),
    (rec.ClearSubjectValue(None), b"{}"),
])
def test_other_value_bytes(value: rec.RecordValue, expected: bytes) -> None:
    assert rec.encode_value(value) == expected


def test_strings_are_written_as_jackson_writes_them() -> None:
    key = rec.encode_key(rec.SchemaKey('a"b\\c\n\x01é€\ud800', 1))
    assert key == ('{"keytype":"SCHEMA","subject":"a\\"b\\\\c\\n\\u0001é€\\uD800",'
                   '"version":1,"magic":1}').encode()
    assert rec.decode_key(key) == rec.SchemaKey('a"b\\c\n\x01é€\ud800', 1)


# -- tolerant reading ----------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b'{"keytype":"CONFIG","magic":0}',
    b'{"keytype":"CONFIG","subject":null,"magic":0}',
    b'{"keytype": "CONFIG", "subject": null, "magic": 0}',
    b'{"magic":0,"keytype":"CONFIG","subject":""}',
])
def test_global_config_key_in_every_written_form(raw: bytes) -> None:
    assert rec.decode_key(raw) == rec.ConfigKey(None)


def test_global_mode_key_without_subject() -> None:
    assert rec.decode_key(b'{"keytype":"MODE","magic":0}') == rec.ModeKey(None)


def test_karapace_key_with_spaces_and_magic_zero_schema_key() -> None:
    raw = b'{"subject": "s", "version": 2, "magic": 0, "keytype": "SCHEMA"}'
    assert rec.decode_key(raw) == rec.SchemaKey("s", 2, 0)


def test_missing_schema_type_is_avro_and_unknown_fields_are_ignored() -> None:
    raw = b'{"subject":"s","version":1,"id":3,"md5":"abc","schema":"\\"int\\"","future":[1]}'
    value = rec.decode_value(rec.SchemaKey("s", 1), raw)
    assert value == rec.SchemaValue("s", 1, 3, '"int"', "AVRO", (), None, None, False)


def test_unknown_key_types_are_read_and_ignored() -> None:
    key = rec.decode_key(b'{"keytype":"CONTEXT","tenant":"default","context":".x","magic":0}')
    assert key == rec.OtherKey("CONTEXT")
    assert rec.decode_value(key, b"{}") is None


def test_config_value_keeps_known_fields_only() -> None:
    raw = b'{"compatibilityLevel":"FORWARD","alias":"other","whatever":1}'
    value = rec.decode_value(rec.ConfigKey("s"), raw)
    assert isinstance(value, rec.ConfigValue)
    assert value.compatibility_level == "FORWARD"
    assert dict(value.fields) == {"compatibilityLevel": "FORWARD", "alias": "other"}


# -- hostile bytes -------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "field"), [
    (b"\xff\xfe", "not JSON"),
    (b"[1,2]", "not a JSON object"),
    (b'{"magic":0}', "'keytype'"),
    (b'{"keytype":"SCHEMA","subject":"s","magic":1}', "'version'"),
    (b'{"keytype":"SCHEMA","subject":"s","version":0,"magic":1}', "less than 1"),
    (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":7}', "'magic'"),
    (b'{"keytype":"SCHEMA","subject":5,"version":1,"magic":1}', "'subject'"),
    (b'{"keytype":"SCHEMA","subject":"s","version":99999999999,"magic":1}', "out of range"),
    (b'{"keytype":"DELETE_SUBJECT","magic":0}', "'subject'"),
    (b"[" * 60_000, "not JSON"),
    (b'{"keytype":"NOOP","magic":0,"pad":"' + b"x" * rec.MAX_KEY_BYTES + b'"}', "more than"),
])
def test_bad_keys_are_refused_by_name(raw: bytes, field: str) -> None:
    with pytest.raises(rec.RecordError, match=field):
        rec.decode_key(raw)


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"subject":"s","version":1,"schema":"x"}', "'id'"),
    (b'{"subject":"s","version":1,"id":1}', "'schema'"),
    (b'{"subject":"s","version":1,"id":1,"schema":"x","deleted":"no"}', "'deleted'"),
    (b'{"subject":"s","version":1,"id":1,"schema":"x","schemaType":3}', "'schemaType'"),
    (b'{"subject":"s","version":1,"id":1,"schema":"x","references":{}}', "'references'"),
    (b'{"subject":"s","version":1,"id":1,"schema":"x","references":[{"name":"n"}]}',
     "references\\[0\\].*'subject'"),
])
def test_bad_schema_values_are_refused_by_name(raw: bytes, field: str) -> None:
    with pytest.raises(rec.RecordError, match=field):
        rec.decode_value(rec.SchemaKey("s", 1), raw)


def test_deeply_nested_metadata_is_refused() -> None:
    deep = "[" * (rec.MAX_JSON_DEPTH + 1) + "]" * (rec.MAX_JSON_DEPTH + 1)
    raw = ('{"subject":"s","version":1,"id":1,"schema":"x","metadata":{"m":' + deep + "}}")
    with pytest.raises(rec.RecordError, match="'metadata' nests deeper"):
        rec.decode_value(rec.SchemaKey("s", 1), raw.encode())


def test_oversized_value_is_refused_before_parsing() -> None:
    raw = b'{"pad":"' + b"x" * rec.MAX_VALUE_BYTES + b'"}'
    with pytest.raises(rec.RecordError, match="more than"):
        rec.decode_value(rec.ConfigKey(None), raw)


def test_state_skips_unreadable_records_and_keeps_going() -> None:
    state = SchemaState()
    state.apply(b"garbage", b"{}")
    state.apply(rec.encode_key(rec.SchemaKey("s", 1)), b'{"subject":"s"}')
    state.apply(rec.encode_key(rec.SchemaKey("s", 1)),
                rec.encode_value(rec.SchemaValue("s", 1, -4, '"int"')))
    state.apply(rec.encode_key(rec.SchemaKey("s", 1)),
                rec.encode_value(rec.SchemaValue("s", 1, 4, '"int"')))
    assert (state.skipped, state.applied) == (3, 1)
    assert state.latest("s") is not None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.one_of(st.none(), st.binary(max_size=200)))
def test_no_bytes_crash_the_state(key: bytes, value: bytes | None) -> None:
    state = SchemaState()
    state.apply(key, value)
    assert state.applied + state.skipped == 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.integers(1, (1 << 31) - 1), st.integers(0, (1 << 31) - 1),
       st.text(max_size=60), st.booleans())
def test_schema_records_round_trip(subject: str, version: int, schema_id: int, schema: str,
                                   deleted: bool) -> None:
    key = rec.SchemaKey(subject, version)
    value = rec.SchemaValue(subject, version, schema_id, schema, deleted=deleted)
    raw_key, raw_value = rec.encode_key(key), rec.encode_value(value)
    assert json.loads(raw_key) == {"keytype": "SCHEMA", "subject": subject, "version": version,
                                   "magic": 1}
    assert rec.decode_key(raw_key) == key
    assert rec.decode_value(key, raw_value) == value


# -- a hand-written Confluent topic, replayed ----------------------------------------------------

AVRO_V1 = '{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}'
AVRO_V2 = ('{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},'
           '{"name":"note","type":"string","default":""}]}')
JSON_ADDR = '{"type":"object","properties":{"street":{"type":"string"}}}'
JSON_PERSON = '{"type":"object","properties":{"home":{"$ref":"addr.json"}}}'


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


#: as Confluent (newer: global key without subject) and Karapace (``"subject":null``, keys
#: with spaces) wrote them, with a NOOP, soft and hard deletes and a record from the future
TOPIC: list[tuple[bytes, bytes | None]] = [
    (b'{"keytype":"NOOP","magic":0}', None),
    (b'{"keytype":"CONFIG","magic":0}', b'{"compatibilityLevel":"FULL"}'),
    (b'{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}',
     _dump({"subject": "orders-value", "version": 1, "id": 1, "schema": AVRO_V1,
            "deleted": False})),
    (b'{"keytype":"SCHEMA","subject":"orders-value","version":2,"magic":1}',
     _dump({"subject": "orders-value", "version": 2, "id": 2, "schema": AVRO_V2,
            "deleted": False})),
    (b'{"keytype": "SCHEMA", "subject": "addr", "version": 1, "magic": 1}',
     _dump({"subject": "addr", "version": 1, "id": 3, "schemaType": "JSON",
            "schema": JSON_ADDR, "deleted": False})),
    (b'{"keytype":"SCHEMA","subject":"person","version":1,"magic":1}',
     _dump({"subject": "person", "version": 1, "id": 4, "schemaType": "JSON",
            "references": [{"name": "addr.json", "subject": "addr", "version": 1}],
            "schema": JSON_PERSON, "deleted": False})),
    (b'{"keytype":"SCHEMA","subject":"old","version":1,"magic":0}',
     _dump({"subject": "old", "version": 1, "id": 5, "schema": '"string"', "deleted": False})),
    (b'{"keytype":"DELETE_SUBJECT","subject":"old","magic":0}',
     b'{"subject":"old","version":1}'),
    (b'{"keytype":"SCHEMA","subject":"gone","version":1,"magic":1}',
     _dump({"subject": "gone", "version": 1, "id": 6, "schema": '"bytes"', "deleted": True})),
    (b'{"keytype":"SCHEMA","subject":"gone","version":1,"magic":1}', None),
    (b'{"keytype":"CONFIG","subject":"orders-value","magic":0}',
     b'{"subject":"orders-value","compatibilityLevel":"BACKWARD"}'),
    (b'{"keytype":"MODE","subject":null,"magic":0}', b'{"mode":"READWRITE"}'),
    (b'{"keytype":"CONTEXT","tenant":"default","context":".","magic":0}', b"{}"),
]


def test_a_confluent_topic_replays_into_the_state() -> None:
    state = SchemaState()
    for key, value in TOPIC:
        state.apply(key, value)
    assert state.skipped == 0
    assert state.subject_names() == ["addr", "orders-value", "person"]
    assert state.subject_names(include_deleted=True) == ["addr", "old", "orders-value", "person"]
    assert [e.version for e in state.versions("orders-value")] == [1, 2]
    assert state.referenced_by("addr", 1) == [4]
    assert state.schema_by_id(6) is None
    assert state.next_id == 7  # the hard-deleted id 6 is never handed out again
    assert state.config(None) == rec.ConfigValue(None, {"compatibilityLevel": "FULL"})
    assert state.mode(None) == "READWRITE"
    # writes replace the keys as the topic spelled them, so compaction matches
    assert state.config_key_bytes(None) == b'{"keytype":"CONFIG","magic":0}'
    assert state.schema_key_bytes("addr", 1) == (
        b'{"keytype": "SCHEMA", "subject": "addr", "version": 1, "magic": 1}')


def test_the_registry_serves_a_replayed_confluent_topic() -> None:
    state = SchemaState()
    log = MemoryLog(state.apply)
    for key, value in TOPIC:
        state.apply(key, value)
    service = RegistryService(log, state)

    async def scenario() -> None:
        assert await service.get_config() == {"compatibilityLevel": "FULL"}
        assert await service.get_config("orders-value") == {"compatibilityLevel": "BACKWARD"}
        latest = await service.get_version("orders-value", "latest")
        assert (latest["id"], latest["version"]) == (2, 2)
        assert await service.schema_by_id(4) == {
            "schemaType": "JSON", "schema": JSON_PERSON,
            "references": [{"name": "addr.json", "subject": "addr", "version": 1}]}
        assert await service.list_versions("old", deleted=True) == [1]
        with pytest.raises(RegistryError) as err:
            await service.schema_by_id(6)
        assert (err.value.code, err.value.message) == (40403, "Schema 6 not found")

    asyncio.run(scenario())
