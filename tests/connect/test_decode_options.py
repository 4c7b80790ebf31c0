"""The options of schema-aware sources (value.format and friends): the pipeline file's
checks with file:line, the `format("eddy")` options a source becomes, and the option
parser's errors. No Spark, no broker."""

from __future__ import annotations

import pytest

from eddy.connect.formats.value_decoding import FieldDecoding, parse_decodings
from eddy.connect.options import OptionError
from eddy.connect.reader.kafka_options import KafkaOptions
from eddy.connect.runtime.spec import SpecError, load_pipeline_text
from eddy.connect.sources.eddy import EddySource, eddy_options

LONG_A = '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}}]}'


def pipeline(source_lines: str) -> str:
    return ("name: p\nsource:\n  type: eddy\n" + source_lines
            + "sinks:\n  - {type: stdout}\n")


def test_spec_fields_become_reader_options() -> None:
    p = load_pipeline_text(pipeline(
        "  topic: users\n  value.format: avro\n  key.format: json\n"
        "  schema.registry.url: http://127.0.0.1:8081\n  value.schema.version: 3\n"
        "  key.subject: user-keys\n"))
    assert isinstance(p.source, EddySource)
    opts = eddy_options(p.source)
    assert {k: v for k, v in opts.items() if "format" in k or "schema" in k or "subject" in k
            } == {"value.format": "avro", "key.format": "json",
                  "schema.registry.url": "http://127.0.0.1:8081", "value.schema.version": "3",
                  "key.subject": "user-keys"}
    parsed = KafkaOptions.parse(opts)
    assert parsed.decodings == (
        FieldDecoding("key", "json", "http://127.0.0.1:8081", "user-keys"),
        FieldDecoding("value", "avro", "http://127.0.0.1:8081", "users-value", 3))
    plain = load_pipeline_text(pipeline("  topic: users\n"))
    assert isinstance(plain.source, EddySource)
    assert "value.format" not in eddy_options(plain.source)
    assert KafkaOptions.parse(eddy_options(plain.source)).decodings == ()


@pytest.mark.parametrize(("lines", "problem"), [
    ("  topic: t\n  value.format: avro\n",
     "test-pipeline.yaml:2: source: Value error, value.format: avro needs schema.registry.url"),
    ("  pattern: 't.*'\n  value.format: avro\n  schema.registry.url: http://r:1\n",
     "value.format: set value.subject"),
    ("  topic: t\n  value.format: thrift\n  schema.registry.url: http://r:1\n",
     "test-pipeline.yaml:5: source.value.format: Input should be 'avro', 'json', 'protobuf' "
     "or 'bytes'"),
    ("  topic: t\n  value.format: avro\n  schema.registry.url: r:1\n",
     "source.schema.registry.url: expected an http:// or https:// URL"),
    ("  topic: t\n  value.format: avro\n  schema.registry.url: http://r:1\n"
     "  value.schema.version: 0\n", "source.value.schema.version: Input should be greater"),
])
def test_spec_errors_name_the_field(lines: str, problem: str) -> None:
    with pytest.raises(SpecError) as info:
        load_pipeline_text(pipeline(lines), "test-pipeline.yaml")
    assert any(problem.replace("Value error, ", "") in p for p in info.value.problems), (
        info.value.problems)


def test_pattern_with_a_subject_is_fine() -> None:
    p = load_pipeline_text(pipeline(
        "  pattern: 't.*'\n  value.format: avro\n  schema.registry.url: http://r:1\n"
        "  value.subject: shared-value\n"))
    assert isinstance(p.source, EddySource)
    assert KafkaOptions.parse(eddy_options(p.source)).decodings[0].subject == "shared-value"


@pytest.mark.parametrize(("options", "problem"), [
    ({"value.format": "avro"}, "needs the option schema.registry.url"),
    ({"value.format": "xml", "schema.registry.url": "http://r:1"}, "expected one of avro"),
    ({"value.format": "avro", "schema.registry.url": "r:1"}, "expected http://"),
    ({"value.format": "avro", "schema.registry.url": "http://r:1",
      "value.schema.version": "two"}, "expected a version number"),
])
def test_reader_option_errors(options: dict[str, str], problem: str) -> None:
    with pytest.raises(OptionError, match=problem):
        parse_decodings(options, ["t"])


def test_default_subject_needs_one_topic_and_excludes_parse_value_schema() -> None:
    with pytest.raises(OptionError, match=r"value\.subject"):
        parse_decodings({"value.format": "avro", "schema.registry.url": "http://r:1"},
                        ["a", "b"])
    with pytest.raises(OptionError, match="exclude each other"):
        KafkaOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                            "value.format": "avro", "schema.registry.url": "http://r:1",
                            "parseValueSchema": LONG_A})
