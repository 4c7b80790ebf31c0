"""The registry's last differences from Confluent Schema Registry (issue 30), through real
HTTP requests on the route table: subjects with ``{``/``}``, 404 codes for a missing subject
and a missing version per endpoint, compatibility checks against subjects without versions,
``messages`` only with ``verbose=true``, and deletes of referenced versions.

Where Confluent's documentation leaves a case open, the test follows Confluent's
implementation (its REST resources and ``KafkaSchemaRegistry``, 7.x-8.x) and says so."""

from __future__ import annotations

import json

import pytest
from test_registry_api import V1_SCHEMA, V2_SCHEMA, Api, run

BAD = json.dumps({"type": "record", "name": "R", "fields": [{"name": "c", "type": "string"}]})


# -- subjects with braces ------------------------------------------------------------------------


@pytest.mark.parametrize(("encoded", "subject"), [
    ("a%7Bb%7D", "a{b}"),
    ("%7B%7D", "{}"),
    ("%7Borders%7D-value", "{orders}-value"),
    ("x%7By%2Fz%7D", "x{y/z}"),
])
def test_subjects_with_braces_register_and_resolve(encoded: str, subject: str) -> None:
    async def scenario(api: Api) -> None:
        assert await api.register(encoded, V1_SCHEMA) == 1
        assert await api.ok("GET", "/subjects") == [subject]
        got = await api.ok("GET", f"/subjects/{encoded}/versions/1")
        assert (got["subject"], got["version"], got["id"]) == (subject, 1, 1)
        assert await api.ok("GET", f"/subjects/{encoded}/versions") == [1]
        assert (await api.ok("POST", f"/subjects/{encoded}", {"schema": V1_SCHEMA}))[
            "version"] == 1
        assert await api.ok("GET", f"/subjects/{encoded}/versions/latest/schema") == json.loads(
            V1_SCHEMA)
        assert await api.ok("GET", f"/subjects/{encoded}/versions/1/referencedby") == []
        assert await api.ok("POST", f"/compatibility/subjects/{encoded}/versions/latest",
                            {"schema": V2_SCHEMA}) == {"is_compatible": True}
        assert await api.ok("POST", f"/compatibility/subjects/{encoded}/versions",
                            {"schema": V2_SCHEMA}) == {"is_compatible": True}
        assert await api.ok("PUT", f"/config/{encoded}", {"compatibility": "FULL"}) == {
            "compatibility": "FULL"}
        assert (await api.ok("GET", f"/config/{encoded}"))["compatibilityLevel"] == "FULL"
        assert await api.ok("PUT", f"/mode/{encoded}", {"mode": "READWRITE"}) == {
            "mode": "READWRITE"}
        assert await api.ok("GET", "/schemas/ids/1/subjects") == [subject]
        assert await api.ok("DELETE", f"/subjects/{encoded}/versions/1") == 1
        assert await api.ok("DELETE", f"/subjects/{encoded}?permanent=true") == [1]

    run(scenario)
