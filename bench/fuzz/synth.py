"""Frames for advertised (API, version) pairs that no recorded client sent: a recorded
frame of the same API at the nearest version is decoded with kio and its fields carried
over, by name, into the request type of the missing version (fields the other version
lacks take their default, or a zero value), then encoded with kio's entity_writer.
Stored under corpus/requests/synth/ and marked ``synth`` in the coverage table.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import sys
import types
import typing
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from bench.fuzz.corpus_files import (
    REQUESTS_DIR,
    SYNTH,
    CorpusFrame,
    advertised_pairs,
    load_corpus,
    write_frames,
)
from eddy.protocol.apis import ApiKey, is_flexible
from eddy.protocol.codec import _read_header

_ZERO: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "float64": 0.0,
    "bool": False, "string": "", "bytes": b"", "uuid": uuid.UUID(int=0), "records": None,
    "timedelta_i32": 0, "timedelta_i64": 0, "datetime_i64": None,
}


def _inner(tp: Any) -> Any:
    """The entity type of a field annotated X, X | None or tuple[X, ...]."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _inner(args[0]) if args else tp
    if origin is tuple:
        return _inner(typing.get_args(tp)[0])
    return tp


def _default(field: dataclasses.Field[Any], tp: Any) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    if typing.get_origin(tp) is tuple:
        return ()
    inner = _inner(tp)
    if dataclasses.is_dataclass(inner) and isinstance(inner, type):
        return convert(None, inner)
    kind = field.metadata.get("kafka_type", "")
    if kind in _ZERO:
        value = _ZERO[kind]
        if value is None and type(None) not in typing.get_args(tp):
            return 0
        return value
    return None


def convert(src: Any, cls: type[Any]) -> Any:
    """An instance of the kio entity cls with src's same-named fields (recursively)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if src is None or not hasattr(src, f.name):
            values[f.name] = _default(f, tp)
            continue
        value = getattr(src, f.name)
        inner = _inner(tp)
        if dataclasses.is_dataclass(inner) and isinstance(inner, type):
            if isinstance(value, tuple):
                value = tuple(convert(v, inner) for v in value)
            elif value is not None:
                value = convert(value, inner)
        values[f.name] = value
    return cls(**values)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """A whole size-prefixed request frame (header v1, or v2 for flexible versions)."""
    head = struct.pack(">hhi", api_key, version, correlation_id)
    cid = client_id.encode() if client_id is not None else None
    head += struct.pack(">h", -1) if cid is None else struct.pack(">h", len(cid)) + cid
    if is_flexible(ApiKey(api_key), version):
        head += b"\x00"  # no header tagged fields
    buf = io.BytesIO()
    entity_writer(load_request_schema(api_key, version))(buf, body)
    payload = head + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def resynthesise(source: CorpusFrame, version: int) -> bytes:
    key = ApiKey(source.api_key)
    body_frame = source.body
    client_id, used = _read_header(body_frame, is_flexible(key, source.version))
    obj, _ = entity_reader(load_request_schema(key, source.version))(body_frame, used)
    (corr,) = struct.unpack_from(">i", body_frame, 4)
    target = convert(obj, load_request_schema(key, version))
    return encode_request(key, version, corr, client_id, target)


def _describe_quorum() -> Any:
    from kio.schema.describe_quorum.v2.request import (
        DescribeQuorumRequest,
        PartitionData,
        TopicData,
    )

    return DescribeQuorumRequest(topics=(TopicData(
        topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=0),)),))


def _offset_for_leader_epoch() -> Any:
    """A follower's question (librdkafka asks it only after a leader change or a seek with
    an epoch, which the recorded sessions do not do): two partitions, one fenced."""
    from kio.schema.offset_for_leader_epoch.v4.request import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )

    return OffsetForLeaderEpochRequest(replica_id=2, topics=(OffsetForLeaderTopic(
        topic="fuzz-healthy", partitions=(
            OffsetForLeaderPartition(partition=0, current_leader_epoch=3, leader_epoch=2),
            OffsetForLeaderPartition(partition=1, current_leader_epoch=-1, leader_epoch=0),
        )),))


def _elect_leaders() -> Any:
    """An operator's preferred election of two partitions of one topic."""
    from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions

    return ElectLeadersRequest(election_type=0, topic_partitions=(TopicPartitions(
        topic="fuzz-healthy", partitions=(0, 1)),), timeout=datetime.timedelta(seconds=5))


def _alter_partition_reassignments() -> Any:
    """An operator moving one partition and cancelling another's move."""
    from kio.schema.alter_partition_reassignments.v0.request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
        ReassignableTopic,
    )

    return AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=5), topics=(ReassignableTopic(
            name="fuzz-healthy", partitions=(
                ReassignablePartition(partition_index=0, replicas=(1,)),
                ReassignablePartition(partition_index=1, replicas=None))),))


def _list_partition_reassignments() -> Any:
    """The moves under way of two partitions of one topic."""
    from kio.schema.list_partition_reassignments.v0.request import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsTopics,
    )

    return ListPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=5), topics=(ListPartitionReassignmentsTopics(
            name="fuzz-healthy", partition_indexes=(0, 1)),))


def _sasl_handshake() -> Any:
    """A client choosing SCRAM-SHA-256 (the recording sessions use no SASL listener)."""
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    return SaslHandshakeRequest(mechanism="SCRAM-SHA-256")


def _sasl_authenticate() -> Any:
    """A SCRAM client-first message, the token parsed first on a SASL listener."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

    return SaslAuthenticateRequest(auth_bytes=b"n,,n=fuzz-user,r=fyko+d2lbbFgONRv9qkxdawL")


#: APIs no recorded client sends (operator tools' requests): a hand-made body to start from
HANDMADE: dict[int, Callable[[], Any]] = {
    ApiKey.DESCRIBE_QUORUM: _describe_quorum,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _list_partition_reassignments,
    ApiKey.SASL_HANDSHAKE: _sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: _sasl_authenticate,
}


def synthesise_missing(root: Path = REQUESTS_DIR) -> int:
    """Write synth frames for every advertised pair without recorded frames."""
    recorded = [f for f in load_corpus(root) if f.client != SYNTH]
    have = {(f.api_key, f.version) for f in recorded}
    out: list[bytes] = []
    for key, version in advertised_pairs():
        if (key, version) in have:
            continue
        same_api = [f for f in recorded if f.api_key == key]
        if not same_api and key in HANDMADE:
            target = convert(HANDMADE[key](), load_request_schema(key, version))
            out.append(encode_request(key, version, 1, "eddy-synth", target))
            continue
        if not same_api:
            print(f"synth: no recorded {ApiKey(key).name} frame to start from", file=sys.stderr)
            continue
        nearest = min(abs(f.version - version) for f in same_api)
        made = 0
        for src in (f for f in same_api if abs(f.version - version) == nearest):
            try:
                out.append(resynthesise(src, version))
                made += 1
            except Exception as exc:
                print(f"synth: {ApiKey(key).name} v{src.version} -> v{version}: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)
            if made >= 2:
                break
    write_frames(SYNTH, out, root)
    return len(out)
