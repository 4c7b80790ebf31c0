"""Options of `format("eddy")`, by Spark's Kafka source names, and offset resolution.

Spark users already know `format("kafka")`: the same option names work here
(`kafka.bootstrap.servers`, `subscribe`, `subscribePattern`, `assign`,
`startingOffsets`, `endingOffsets`, `startingTimestamp`,
`startingOffsetsByTimestamp`, `maxOffsetsPerTrigger`, `includeHeaders`, and
`kafka.<property>` for the client). Offsets travel as `{"topic/partition": offset}`.
Schema-aware keys and values (`value.format`, `schema.registry.url`, ...): see
eddy.connect.formats.value_decoding (reading) and eddy.connect.formats.value_encoding (writing).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eddy.connect.formats.value_decoding import FieldDecoding, parse_decodings
from eddy.connect.formats.value_encoding import FieldEncoding, parse_encodings
from eddy.connect.options import OptionError, int_option

EARLIEST = -2
LATEST = -1
#: how long one metadata or list-offsets call may take
ADMIN_TIMEOUT_S = 15.0

#: Spark's row schema for Kafka records (headers only with includeHeaders)
BASE_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, "
    "timestamp TIMESTAMP, timestampType INT"
)
HEADERS_FIELD = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
#: values of the `reader` option (see KafkaOptions.reader)
READERS = ("auto", "native", "librdkafka")



def key_of(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: expected true or false, got {raw!r}")


def _json(options: Mapping[str, str], name: str) -> Any:
    try:
        return json.loads(options[name])
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name}: not valid JSON ({exc.msg})") from None


def _parse_value_schema(lower: Mapping[str, str]) -> str | None:
    """The parseValueSchema option (options keyed in lower case), checked."""
    from eddy.connect.reader.json_columns import OPTION, pushable_fields

    raw = lower.get(OPTION.lower())
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {OPTION}: not a JSON struct type ({exc.msg})") from None
    if not isinstance(parsed, dict) or pushable_fields(parsed) is None:
        raise OptionError(f"option {OPTION}: expected a flat struct of STRING, BIGINT, INT, "
                          "DOUBLE and BOOLEAN fields (Spark's JSON form)")
    return raw


def _offsets_spec(raw: Any, name: str) -> str | dict[str, int]:
    """'earliest' | 'latest' | {"topic": {"0": 23, "1": -2}} -> keyed offsets."""
    if isinstance(raw, str) and raw in ("earliest", "latest"):
        return raw
    if not isinstance(raw, dict):
        raise OptionError(
            f'option {name}: expected earliest, latest or JSON like {{"topic":{{"0":23}}}}'
        )
    out: dict[str, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: {topic!r} must map partitions to offsets")
        for partition, offset in parts.items():
            if not str(partition).lstrip("-").isdigit() or not isinstance(offset, int):
                raise OptionError(
                    f"option {name}: {topic}/{partition} must be an integer offset"
                )
            out[key_of(topic, int(partition))] = offset
    return out


@dataclass(frozen=True)
class KafkaOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: str | dict[str, int] = "earliest"
    ending: str | dict[str, int] = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: dict[str, int] = field(default_factory=dict)
    max_offsets_per_trigger: int | None = None
    include_headers: bool = True
    client: dict[str, str] = field(default_factory=dict)
    topic: str | None = None  # writing: the fixed target topic
    #: auto: the fast reader (eddy.connect.reader.fetcher), librdkafka where it cannot serve;
    #: native: the fast reader or an error; librdkafka: always librdkafka
    reader: str = "auto"
    #: a pipeline's leading parse_json done in the reader (eddy.connect.reader.json_columns)
    parse_value_schema: str | None = None
    #: keys/values decoded through a schema registry (eddy.connect.formats.value_decoding)
    decodings: tuple[FieldDecoding, ...] = ()
    #: writing: keys/values encoded through a schema registry (value_encoding)
    encodings: tuple[FieldEncoding, ...] = ()
    #: writing: (bootstrap, topic) for rows that cannot be encoded (else the task fails),
    #: and the pipeline and stage their headers name
    dead_letter: tuple[str, str] | None = None
    pipeline: str = ""
    stage: str = "eddy"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, reading: bool = True,
              writing: bool = False) -> KafkaOptions:
        opts = {str(k): str(v) for k, v in options.items()}
        lower = {k.lower(): v for k, v in opts.items()}
        bootstrap = lower.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise OptionError("option kafka.bootstrap.servers is required (HOST:PORT)")
        client = {
            k[len("kafka."):]: v for k, v in opts.items()
            if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"
        }
        subscribe = tuple(
            t.strip() for t in lower.get("subscribe", "").split(",") if t.strip()
        )
        pattern = lower.get("subscribepattern")
        assign: tuple[tuple[str, int], ...] = ()
        if "assign" in lower:
            raw = _json(lower, "assign")
            if not isinstance(raw, dict) or not all(
                isinstance(v, list) and all(isinstance(p, int) for p in v) for v in raw.values()
            ):
                raise OptionError('option assign: expected JSON like {"topic":[0,1]}')
            assign = tuple((t, p) for t, ps in raw.items() for p in ps)
        if reading:
            chosen = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern),
                                     ("assign", assign)) if v]
            if len(chosen) != 1:
                raise OptionError(
                    "set exactly one of the options subscribe, subscribePattern or assign"
                )
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"option subscribePattern: bad regex ({exc})") from None
        starting: str | dict[str, int] = "earliest" if reading else "latest"
        if "startingoffsets" in lower:
            raw_start = lower["startingoffsets"]
            value = raw_start if raw_start in ("earliest", "latest") else _json(
                lower, "startingoffsets")
            starting = _offsets_spec(value, "startingOffsets")
        ending: str | dict[str, int] = "latest"
        if "endingoffsets" in lower:
            raw_end = lower["endingoffsets"]
            value = raw_end if raw_end in ("earliest", "latest") else _json(
                lower, "endingoffsets")
            ending = _offsets_spec(value, "endingOffsets")
        by_ts: dict[str, int] = {}
        if "startingoffsetsbytimestamp" in lower:
            raw_ts = _json(lower, "startingoffsetsbytimestamp")
            spec = _offsets_spec(raw_ts, "startingOffsetsByTimestamp")
            by_ts = spec if isinstance(spec, dict) else {}
            if not by_ts:
                raise OptionError(
                    'option startingOffsetsByTimestamp: expected {"topic":{"0":1700000000000}}'
                )
        reader = lower.get("reader", "auto").strip().lower()
        if reader not in READERS:
            raise OptionError(f"option reader: expected one of {', '.join(READERS)}, "
                              f"got {reader!r}")
        topics = subscribe or tuple(sorted({t for t, _ in assign}))
        decodings = () if writing else parse_decodings(lower, topics)
        encodings = parse_encodings(lower, lower.get("topic")) if writing else ()
        dead_bootstrap = lower.get("dead_letter_bootstrap") or None
        dead_topic = lower.get("dead_letter_topic") or None
        if (dead_bootstrap is None) != (dead_topic is None):
            raise OptionError("options dead_letter_bootstrap and dead_letter_topic go "
                              "together")
        parse_value = _parse_value_schema(lower)
        if parse_value is not None and any(d.field == "value" for d in decodings):
            raise OptionError("options parseValueSchema and value.format exclude each other")
        return cls(
            bootstrap=bootstrap,
            subscribe=subscribe,
            pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            starting_timestamp=int_option(lower, "startingtimestamp"),
            starting_by_timestamp=by_ts,
            max_offsets_per_trigger=int_option(lower, "maxoffsetspertrigger", minimum=1),
            include_headers=_bool(lower, "includeheaders", True),
            client=client,
            topic=lower.get("topic"),
            reader=reader,
            parse_value_schema=parse_value,
            decodings=decodings,
            encodings=encodings,
            dead_letter=(dead_bootstrap, dead_topic) if dead_bootstrap and dead_topic
            else None,
            pipeline=lower.get("pipeline", ""),
            stage=lower.get("stage") or "eddy",
        )

    def schema(self) -> str:
        """The rows' DDL (with decodings: call on resolved() options)."""
        out = f"{BASE_SCHEMA}, {HEADERS_FIELD}" if self.include_headers else BASE_SCHEMA
        if self.parse_value_schema is not None:
            from eddy.connect.reader.json_columns import column_ddl

            out += ", " + column_ddl(self.parse_value_schema)
        if self.decodings:
            from eddy.connect.formats.value_decoding import extra_ddl, field_ddl

            for dec in self.decodings:
                out = out.replace(f"{dec.field} BINARY", f"{dec.field} {field_ddl(dec)}", 1)
            out += ", " + extra_ddl(self.decodings)
        return out

    def resolved(self) -> KafkaOptions:
        """These options with the decodings' reader schemas fetched from the registry
        (driver side, once per query: the tasks decode into that schema)."""
        if not self.decodings or all(d.reader is not None for d in self.decodings):
            return self
        from eddy.connect.formats.value_decoding import resolve

        return replace(self, decodings=tuple(resolve(d) for d in self.decodings))

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "log_level": 3}
        conf.update(overrides)
        conf.update(self.client)
        return conf


# ---- the cluster, seen from the driver ----------------------------------------------------


class Cluster:
    """Topic metadata and offsets through a Kafka AdminClient (driver side)."""

    def __init__(self, options: KafkaOptions) -> None:
        from confluent_kafka.admin import AdminClient

        self.options = options
        self.admin = AdminClient(options.client_config(**{"client.id": "eddy-connect"}))
        self.read_committed = (
            options.client.get("isolation.level", "read_committed") == "read_committed"
        )

    def partitions(self) -> list[tuple[str, int]]:
        """The partitions the options select, now (new partitions and topics included)."""
        opts = self.options
        if opts.assign:
            return sorted(opts.assign)
        md = self.admin.list_topics(timeout=ADMIN_TIMEOUT_S)
        if opts.subscribe:
            names = [t for t in opts.subscribe if t in md.topics]
        else:
            assert opts.pattern is not None
            rx = re.compile(opts.pattern)
            names = [t for t in md.topics if rx.fullmatch(t) and not t.startswith("__")]
        out: list[tuple[str, int]] = []
        for name in names:
            meta = md.topics[name]
            if meta.error is not None:
                continue
            out.extend((name, p) for p in meta.partitions)
        return sorted(out)

    def list_offsets(self, specs: Mapping[tuple[str, int], int]) -> dict[str, int]:
        """{(topic, partition): EARLIEST|LATEST|timestamp>=0} -> {"topic/p": offset}.
        Latest is the last stable offset under read_committed, as a consumer sees it."""
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        def spec_of(value: int) -> Any:
            if value == EARLIEST:
                return OffsetSpec.earliest()  # type: ignore[no-untyped-call]
            if value == LATEST:
                return OffsetSpec.latest()  # type: ignore[no-untyped-call]
            return OffsetSpec.for_timestamp(value)

        request = {TopicPartition(t, p): spec_of(v) for (t, p), v in specs.items()}
        level = (IsolationLevel.READ_COMMITTED if self.read_committed
                 else IsolationLevel.READ_UNCOMMITTED)
        futures = self.admin.list_offsets(
            request, isolation_level=level, request_timeout=ADMIN_TIMEOUT_S
        )
        out: dict[str, int] = {}
        latest: list[tuple[str, int]] = []
        for tp, future in futures.items():
            offset = future.result().offset
            if offset < 0:  # a timestamp after the last record: start at the end
                latest.append((tp.topic, tp.partition))
            else:
                out[key_of(tp.topic, tp.partition)] = offset
        if latest:
            out.update(self.list_offsets({tp: LATEST for tp in latest}))
        return out

    def latest(self, partitions: list[tuple[str, int]]) -> dict[str, int]:
        return self.list_offsets({tp: LATEST for tp in partitions})

    def resolve(self, spec: str | dict[str, int], partitions: list[tuple[str, int]],
                timestamp: int | None = None, by_timestamp: Mapping[str, int] | None = None,
                ) -> dict[str, int]:
        """Concrete offsets for every partition, from a starting/ending offsets spec."""
        wanted: dict[tuple[str, int], int] = {}
        for tp in partitions:
            key = key_of(*tp)
            if by_timestamp and key in by_timestamp:
                wanted[tp] = by_timestamp[key]
            elif timestamp is not None:
                wanted[tp] = timestamp
            elif isinstance(spec, dict):
                wanted[tp] = spec.get(key, EARLIEST)
            else:
                wanted[tp] = EARLIEST if spec == "earliest" else LATEST
        by_time = timestamp is not None or bool(by_timestamp)
        concrete = {key_of(*tp): v for tp, v in wanted.items() if v >= 0 and not by_time}
        symbolic = {tp: v for tp, v in wanted.items() if key_of(*tp) not in concrete}
        concrete.update(self.list_offsets(symbolic))
        return concrete
