"""The pipeline file: a valid file loads; every problem names the file, line and field.

No Spark, no broker: these run in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eddy.connect.runtime.spec import (
    SpecError,
    load_pipeline,
    load_pipeline_text,
    parse_duration_ms,
)
from eddy.connect.sinks.eddy import EddySink
from eddy.connect.sinks.files import FilesSink
from eddy.connect.sources.datagen import DatagenSource
from eddy.connect.sources.eddy import EddySource
from eddy.connect.transforms.spec import Mask, ParseJson, Route

VALID = """\
name: orders-to-lake
source:
  type: eddy
  bootstrap: 127.0.0.1:9092
  topic: orders
  max_records_per_batch: 5000
transforms:
  - parse_json:
      schema: "id INT, email STRING, amount STRING"
      keep: [key]
  - mask:
      field: email
      method: hash
      salt: pepper
  - cast:
      amount: "DECIMAL(10,2)"
  - filter: "amount > 0"
sinks:
  - type: files
    format: parquet
    path: /tmp/lake/orders
  - type: eddy
    topic: orders-clean
checkpoint: /tmp/checkpoints/orders
trigger: 500ms
dead_letter: orders-bad
"""


def problems(text: str, filename: str = "p.yaml") -> list[str]:
    with pytest.raises(SpecError) as info:
        load_pipeline_text(text, filename)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def only_problem(text: str, filename: str = "p.yaml") -> str:
    found = problems(text, filename)
    assert len(found) == 1, found
    return found[0]


def test_valid_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(VALID)
    p = load_pipeline(path)
    assert p.name == "orders-to-lake"
    assert isinstance(p.source, EddySource)
    assert p.source.topic == "orders" and p.source.max_records_per_batch == 5000
    assert [next(iter(type(t).model_fields)) for t in p.transforms] == [
        "parse_json", "mask", "cast", "filter"]
    first, second = p.transforms[0], p.transforms[1]
    assert isinstance(first, ParseJson) and first.parse_json.keep == ["key"]
    assert first.parse_json.schema_ == "id INT, email STRING, amount STRING"
    assert isinstance(second, Mask)
    assert (second.mask.field, second.mask.method, second.mask.salt) == (
        "email", "hash", "pepper")
    files, topic = p.sinks
    assert isinstance(files, FilesSink) and files.path == "/tmp/lake/orders"
    assert isinstance(topic, EddySink) and topic.topic == "orders-clean"
    assert p.sink_bootstrap(topic) == "127.0.0.1:9092"  # the source's broker
    assert str(p.checkpoint_dir()) == "/tmp/checkpoints/orders"
    assert not p.available_now and p.interval_ms == 500
    assert p.dead_letter_target() == ("127.0.0.1:9092", "orders-bad")


def test_defaults() -> None:
    p = load_pipeline_text(
        "name: gen\nsource: {type: datagen, count: 10, seed: 7}\nsinks: [{type: stdout}]\n")
    assert isinstance(p.source, DatagenSource)
    assert (p.source.count, p.source.seed) == (10, 7)
    assert p.trigger == "10 seconds" and p.interval_ms == 10_000
    assert str(p.checkpoint_dir()) == "checkpoints/gen"
    # no broker named anywhere: no dead-letter topic
    assert p.dead_letter_target() is None
    p2 = load_pipeline_text(VALID.replace("dead_letter: orders-bad\n", ""))
    assert p2.dead_letter_target() == ("127.0.0.1:9092", "orders-to-lake.dead-letter")


def test_route_lets_an_eddy_sink_go_without_topic() -> None:
    p = load_pipeline_text(
        "name: r\n"
        "source: {type: eddy, bootstrap: '127.0.0.1:9092', topic: events}\n"
        "transforms:\n"
        "  - route: \"CASE WHEN value IS NULL THEN 'nulls' ELSE 'rest' END\"\n"
        "sinks:\n"
        "  - type: eddy\n")
    assert isinstance(p.transforms[0], Route)
    assert isinstance(p.sinks[0], EddySink) and p.sinks[0].topic is None


@pytest.mark.parametrize(("text", "ms"), [
    ("500ms", 500), ("10 seconds", 10_000), ("1 minute", 60_000), ("10s", 10_000),
    ("2 min", 120_000), ("1.5 s", 1500), ("250 milliseconds", 250), (250, 250),
])
def test_durations(text: str | int, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("trigger", ["500ms", "10 seconds", "1 minute"])
def test_trigger_durations(trigger: str) -> None:
    p = load_pipeline_text(VALID.replace("trigger: 500ms", f"trigger: {trigger}"))
    assert p.interval_ms == parse_duration_ms(trigger)
    assert not p.available_now


@pytest.mark.parametrize("trigger", ["available-now", "once"])
def test_available_now(trigger: str) -> None:
    p = load_pipeline_text(VALID.replace("trigger: 500ms", f"trigger: {trigger}"))
    assert p.available_now and p.interval_ms == 0


@pytest.mark.parametrize("bad", ["soon", "10 parsecs", "-5s", "ms", ""])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration_ms(bad)


def test_bad_trigger_names_line_and_field() -> None:
    text = VALID.replace("trigger: 500ms", "trigger: 10 parsecs")
    message = only_problem(text)
    assert message.startswith("p.yaml:25: trigger: ")
    assert "'10 parsecs'" in message and "duration" in message


def test_bad_topic_name() -> None:
    message = only_problem(VALID.replace("topic: orders\n", "topic: bad topic!\n"))
    assert message.startswith("p.yaml:5: source.topic: "), message
    assert "'bad topic!' is not a valid topic name" in message


def test_bad_sink_topic_name() -> None:
    message = only_problem(VALID.replace("topic: orders-clean", "topic: 'a/b'"))
    assert message.startswith("p.yaml:23: sinks[1].topic: "), message
    assert "'a/b'" in message


def test_bad_dead_letter_topic() -> None:
    message = only_problem(VALID.replace("dead_letter: orders-bad", "dead_letter: 'x y'"))
    assert message.startswith("p.yaml:26: dead_letter.topic: "), message


def test_unknown_transform_key() -> None:
    text = VALID.replace('  - filter: "amount > 0"\n', "  - explode: {field: items}\n")
    message = only_problem(text)
    assert message.startswith("p.yaml:17: transforms[3]: "), message
    assert "parse_json" in message and "mask" in message and "sql" in message


def test_transform_with_two_keys() -> None:
    text = VALID.replace('  - filter: "amount > 0"\n',
                         '  - filter: "amount > 0"\n    drop: [x]\n')
    assert only_problem(text).startswith("p.yaml:17: transforms[3]: ")


def test_bad_mask_method() -> None:
    message = only_problem(VALID.replace("method: hash", "method: scramble"))
    assert message.startswith("p.yaml:13: transforms[1].mask.method: "), message
    assert "'redact'" in message and "'hash'" in message and "'keep_last'" in message


def test_unknown_field_in_a_transform() -> None:
    message = only_problem(VALID.replace("salt: pepper", "pepper: salt"))
    assert message.startswith("p.yaml:14: transforms[1].mask.pepper: "), message
    assert "not permitted" in message


def test_bad_sink_type() -> None:
    message = only_problem(VALID.replace("type: files\n", "type: kafka\n"))
    assert message.startswith("p.yaml:19: sinks[0]"), message
    assert "'kafka'" in message
    for known in ("eddy", "stdout", "files", "webhook"):
        assert f"'{known}'" in message


def test_bad_source_type() -> None:
    message = only_problem(VALID.replace("type: eddy\n  bootstrap", "type: mqtt\n  bootstrap"))
    assert message.startswith("p.yaml:2: source: "), message
    assert "'mqtt'" in message


def test_missing_sinks() -> None:
    text = VALID[: VALID.index("sinks:")] + VALID[VALID.index("checkpoint:"):]
    message = only_problem(text)
    assert message.startswith("p.yaml:1: sinks: "), message
    assert "required" in message.lower()


def test_empty_sinks() -> None:
    text = VALID[: VALID.index("sinks:")] + "sinks: []\n" + VALID[VALID.index("checkpoint:"):]
    message = only_problem(text)
    assert message.startswith("p.yaml:18: sinks: "), message
    assert "at least 1" in message


def test_missing_field_of_a_sink() -> None:
    message = only_problem(VALID.replace("    path: /tmp/lake/orders\n", ""))
    assert message.startswith("p.yaml:19: sinks[0].path: "), message
    assert "required" in message.lower()


def test_eddy_sink_without_topic_and_without_route() -> None:
    text = (
        "name: gen\n"                               # 1
        "source:\n"                                 # 2
        "  type: datagen\n"                         # 3
        "sinks:\n"                                  # 4
        "  - type: stdout\n"                        # 5
        "  - type: eddy\n"                          # 6
        "    bootstrap: 127.0.0.1:9092\n"           # 7
    )
    message = only_problem(text)
    assert "an eddy sink needs `topic`" in message
    # the problem is sinks[1], which starts on line 6 (not the top level, line 1)
    assert message.startswith("p.yaml:6: sinks[1]"), message


def test_several_problems_reported_at_once() -> None:
    text = (VALID.replace("topic: orders\n", "topic: 'no good'\n")
            .replace("method: hash", "method: scramble")
            .replace("trigger: 500ms", "trigger: whenever"))
    found = problems(text)
    assert [m.split(": ")[0:2] for m in found] == [
        ["p.yaml:5", "source.topic"],
        ["p.yaml:13", "transforms[1].mask.method"],
        ["p.yaml:25", "trigger"],
    ]


def test_bad_name() -> None:
    message = only_problem(VALID.replace("name: orders-to-lake", "name: -orders"))
    assert message.startswith("p.yaml:1: name: "), message


def test_bad_bootstrap() -> None:
    message = only_problem(VALID.replace("bootstrap: 127.0.0.1:9092", "bootstrap: localhost"))
    assert message.startswith("p.yaml:4: source.bootstrap: "), message
    assert "HOST:PORT" in message


def test_invalid_yaml_names_the_line() -> None:
    text = (
        "name: x\n"
        "source:\n"
        "  type: datagen\n"
        "sinks:\n"
        "  - type: stdout\n"
        "trigger: a: b\n"
    )
    message = only_problem(text, "bad.yaml")
    assert message.startswith("bad.yaml:6: not valid YAML: "), message


def test_yaml_with_a_tab() -> None:
    text = "name: x\nsource:\n  type: datagen\nsinks:\n\t- type: stdout\n"
    message = only_problem(text, "tab.yaml")
    assert message.startswith("tab.yaml:5: not valid YAML: "), message


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just text\n"])
def test_not_a_mapping(text: str) -> None:
    message = only_problem(text, "m.yaml")
    assert message.startswith("m.yaml:1: ")
    assert "name, source and sinks" in message


def test_errors_name_the_file_path(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(VALID.replace("method: hash", "method: scramble"))
    with pytest.raises(SpecError) as info:
        load_pipeline(path)
    assert info.value.problems[0].startswith(f"{path}:13: transforms[1].mask.method: ")


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_pipeline(missing)
    (message,) = info.value.problems
    assert message.startswith(f"{missing}: cannot read the pipeline file: ")
    assert "No such file" in message

    with pytest.raises(SpecError) as info:
        load_pipeline(tmp_path)  # a directory
    assert info.value.problems[0].startswith(f"{tmp_path}: cannot read the pipeline file")
