"""The hand-written FetchResponse encoder is byte-identical to kio's for every version."""

from __future__ import annotations

import datetime
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.protocol.apis import SUPPORTED, ApiKey
from eddy.protocol.codec import build, encode_response, response_module
from eddy.protocol.errors import ErrorCode
from eddy.protocol.fetch_codec import FetchPartition, FetchTopic, encode_fetch_response

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
)
topics = st.builds(
    FetchTopic,
    name=st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20),
    topic_id=st.uuids(),
    partitions=st.lists(partitions, max_size=4),
)


def _kio_bytes(version: int, corr: int, tlist: list[FetchTopic]) -> bytes:
    mod = response_module(ApiKey.FETCH, version)
    body = build(
        mod.FetchResponse,
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
       tlist=st.lists(topics, max_size=3))
def test_fetch_encoder_matches_kio(version: int, corr: int, tlist: list[FetchTopic]) -> None:
    ours = b"".join(bytes(c) for c in encode_fetch_response(version, corr, tlist))
    assert ours == _kio_bytes(version, corr, tlist)


def test_records_are_not_copied() -> None:
    records = b"r" * 1000
    chunks = encode_fetch_response(16, 7, [FetchTopic("t", uuid.uuid4(), [
        FetchPartition(0, 0, 10, 10, 0, None, records)])])
    assert any(c is records for c in chunks)
