"""Confluent's built-in Protobuf imports (issue 30): the files Confluent Schema Registry
resolves without a reference -- ``google/type/*.proto``, ``confluent/meta.proto``,
``confluent/type/decimal.proto`` and the ``google/protobuf`` well-known types.

Which files: Confluent's ``ProtobufSchema.KNOWN_DEPENDENCIES`` (protobuf-provider), followed
as its implementation has it: sixteen ``google/type`` files (not ``localized_text.proto``,
which it does not ship), the two ``confluent/`` files, eleven ``google/protobuf`` files.
Eddy's copies are data files written from the published APIs' facts; the test holds them to
the descriptors of the published packages (googleapis-common-protos, confluent-kafka)."""

from __future__ import annotations

import importlib

import pytest
from google.protobuf import descriptor_pb2
from test_registry_service import Registry

from eddy.formats.base import InvalidSchema
from eddy.formats.protobuf.schema import BUILTIN, WELL_KNOWN, parse
from eddy.registry.contract import RegistryError

P3 = 'syntax = "proto3";\n'

GOOGLE_TYPE = ("calendar_period", "color", "date", "datetime", "dayofweek", "decimal", "expr",
               "fraction", "interval", "latlng", "money", "month", "phone_number",
               "postal_address", "quaternion", "timeofday")
#: the published Python modules with each built-in file's descriptor
PUBLISHED = {
    **{f"google/type/{stem}.proto": f"google.type.{stem}_pb2" for stem in GOOGLE_TYPE},
    "confluent/meta.proto": "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent/type/decimal.proto":
        "confluent_kafka.schema_registry.confluent.type.decimal_pb2",
}


def test_confluents_list_of_built_in_files() -> None:
    assert set(BUILTIN) == set(PUBLISHED)
    assert set(WELL_KNOWN) == {f"google/protobuf/{stem}.proto" for stem in (
        "any", "api", "descriptor", "duration", "empty", "field_mask", "source_context",
        "struct", "timestamp", "type", "wrappers")}


@pytest.mark.parametrize("path", sorted(PUBLISHED))
def test_each_built_in_resolves_without_a_reference(path: str) -> None:
    s = parse(P3 + f'package app;\nimport "{path}";\nmessage M {{ int32 a = 1; }}\n')
    assert path in s.dependencies


def _shape(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """What the API's facts fix: no json names (derived), no source info, fields in number
    order (Eddy's builder lists a message's oneof members after its other fields)."""
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(fdp)
    out.ClearField("source_code_info")
    for message in [*out.message_type, *(n for m in out.message_type for n in m.nested_type)]:
        for fld in message.field:
            fld.ClearField("json_name")
        ordered = sorted(message.field, key=lambda f: f.number)
        copies = [descriptor_pb2.FieldDescriptorProto() for _ in ordered]
        for copy, fld in zip(copies, ordered, strict=True):
            copy.CopyFrom(fld)
        del message.field[:]
        message.field.extend(copies)
    for ext in out.extension:
        ext.ClearField("json_name")
    return out


@pytest.mark.parametrize("path", sorted(PUBLISHED))
def test_each_built_in_matches_the_published_descriptor(path: str) -> None:
    ours = parse(P3 + f'import "{path}";\n').dependencies[path].descriptor
    module = importlib.import_module(PUBLISHED[path])
    published = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    # the published confluent-kafka files carry Python's options, Confluent's Java's
    ours_shape, theirs_shape = _shape(ours), _shape(published)
    if path.startswith("confluent/"):
        ours_shape.ClearField("options")
        theirs_shape.ClearField("options")
    assert ours_shape == theirs_shape


def test_localized_text_is_not_built_in_as_in_confluent() -> None:
    # Confluent's KNOWN_DEPENDENCIES has no google/type/localized_text.proto: a reference
    # is needed, as there
    with pytest.raises(InvalidSchema, match="missing reference 'google/type/localized_text"):
        parse(P3 + 'import "google/type/localized_text.proto";\n')


def test_a_reference_with_a_built_in_name_is_taken_first() -> None:
    mine = P3 + "package google.type;\nmessage Money { string amount = 1; }\n"
    s = parse(P3 + 'import "google/type/money.proto";\n'
              "message Pay { google.type.Money m = 1; }\n",
              {"google/type/money.proto": mine})
    money = s.resolve("google.type.Money", "Pay")
    assert money is not None and money.message is not None
    assert [f.name for f in money.message.fields] == ["amount"]


ORDER_V1 = P3 + """package shop;
import "google/type/postal_address.proto";
import "google/type/money.proto";
message Order {
  google.type.PostalAddress ship_to = 1;
  google.type.Money total = 2;
}
"""
ORDER_V2 = ORDER_V1.replace("  google.type.Money total = 2;\n",
                            "  google.type.Money total = 2;\n  google.type.Money tax = 3;\n")
ORDER_BAD = ORDER_V1.replace("google.type.Money total = 2;", "google.type.LatLng total = 2;")


def test_a_schema_importing_built_ins_registers_and_evolves() -> None:
    reg = Registry()
    assert reg.register("orders-value", ORDER_V1, schemaType="PROTOBUF") == 1
    assert reg.register("orders-value", ORDER_V2, schemaType="PROTOBUF") == 2
    bad = ORDER_BAD.replace('import "google/type/money.proto";',
                            'import "google/type/latlng.proto";')
    err = reg.fails(reg.service.register("orders-value", reg.request(bad,
                                                                     schemaType="PROTOBUF")))
    assert (err.status, err.code) == (409, 409)
    assert "FIELD_NAMED_TYPE_CHANGED" in err.message


def test_a_missing_reference_still_names_the_import() -> None:
    reg = Registry()
    err = reg.fails(reg.service.register("s", reg.request(
        P3 + 'import "google/type/nope.proto";\n', schemaType="PROTOBUF")))
    assert isinstance(err, RegistryError)
    assert (err.status, err.code) == (422, 42201)
    assert "missing reference 'google/type/nope.proto'" in err.message


def test_confluent_meta_options_and_decimal_resolve() -> None:
    # the annotations Confluent's data contracts use (tags, params) on its own Decimal
    s = parse(P3 + """package app;
import "confluent/meta.proto";
import "confluent/type/decimal.proto";
option (confluent.file_meta).doc = "file doc";
message M {
  option (confluent.message_meta) = { doc: "a message", tags: ["T"] };
  string ssn = 1 [(confluent.field_meta).tags = "PII"];
  confluent.type.Decimal price = 2 [(confluent.field_meta) = {
    params: [{key: "precision", value: "8"}] }];
}
""")
    assert '[(confluent.field_meta).tags = "PII"]' in s.canonical()
    assert s.resolve("confluent.type.Decimal", "app.M") is not None
    assert set(s.dependencies) >= {"confluent/meta.proto", "confluent/type/decimal.proto",
                                   "google/protobuf/descriptor.proto"}
