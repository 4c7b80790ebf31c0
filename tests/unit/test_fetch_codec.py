"""The hand-written FetchResponse encoder is byte-identical to kio's for every version."""

from __future__ import annotations

import datetime
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.protocol.apis import SUPPORTED, ApiKey
from eddy.protocol.codec import build, encode_response, response_module
from eddy.protocol.errors import ErrorCode
from eddy.protocol.fetch_codec import (
    FetchPartition,
    FetchTopic,
    NodeEndpoint,
    encode_fetch_response,
)

versions = st.integers(SUPPORTED[ApiKey.FETCH].min, SUPPORTED[ApiKey.FETCH].max)
partitions = st.builds(
    FetchPartition,
    index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 1, 3, 74, 100]),
    high_watermark=st.integers(-1, 2**62),
    last_stable_offset=st.integers(-1, 2**62),
    log_start_offset=st.integers(-1, 2**62),
    aborted=st.none() | st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
                                 max_size=3),
    records=st.none() | st.binary(max_size=300),
    current_leader=st.none() | st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
)
endpoints = st.lists(st.builds(
    NodeEndpoint, node_id=st.integers(0, 2**31 - 1),
    host=st.text(alphabet="abc.0123456789-", min_size=1, max_size=20),
    port=st.integers(1, 65535), rack=st.none() | st.text(max_size=8)), max_size=3)
topics = st.builds(
    FetchTopic,
    name=st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20),
    topic_id=st.uuids(),
    partitions=st.lists(partitions, max_size=4),
)


def _kio_bytes(version: int, corr: int, tlist: list[FetchTopic],
               nodes: list[NodeEndpoint] | None = None) -> bytes:
    mod = response_module(ApiKey.FETCH, version)
    body = build(
        mod.FetchResponse,
        node_endpoints=tuple(
            mod.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
            for n in nodes or ()) if hasattr(mod, "NodeEndpoint") else (),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(
            build(
                mod.FetchableTopicResponse,
                topic=t.name,
                topic_id=t.topic_id,
                partitions=tuple(
                    build(
                        mod.PartitionData,
                        partition_index=p.index,
                        error_code=ErrorCode(p.error_code),
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.last_stable_offset,
                        log_start_offset=p.log_start_offset,
                        aborted_transactions=None if p.aborted is None else tuple(
                            mod.AbortedTransaction(producer_id=a, first_offset=b)
                            for a, b in p.aborted
                        ),
                        preferred_read_replica=-1,
                        records=p.records,
                        current_leader=mod.LeaderIdAndEpoch(
                            leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
                        if p.current_leader is not None and hasattr(mod, "LeaderIdAndEpoch")
                        else (mod.LeaderIdAndEpoch() if hasattr(mod, "LeaderIdAndEpoch")
                              else None),
                    )
                    for p in t.partitions
                ),
            )
            for t in tlist
        ),
    )
    return encode_response(ApiKey.FETCH, version, corr, body)


@settings(max_examples=300, deadline=None)
@given(version=versions, corr=st.integers(-(2**31), 2**31 - 1),
       tlist=st.lists(topics, max_size=3), nodes=endpoints)
def test_fetch_encoder_matches_kio(version: int, corr: int, tlist: list[FetchTopic],
                                   nodes: list[NodeEndpoint]) -> None:
    if version < 12:  # no tagged fields before v12: nothing to say the leader with
        for t in tlist:
            for p in t.partitions:
                p.current_leader = None
    ours = b"".join(bytes(c) for c in encode_fetch_response(version, corr, tlist,
                                                            node_endpoints=nodes))
    assert ours == _kio_bytes(version, corr, tlist, nodes if version >= 16 else [])


def test_records_are_not_copied() -> None:
    records = b"r" * 1000
    chunks = encode_fetch_response(16, 7, [FetchTopic("t", uuid.uuid4(), [
        FetchPartition(0, 0, 10, 10, 0, None, records)])])
    assert any(c is records for c in chunks)
