"""Offsets: the __consumer_offsets record formats, the store, commits, deletion, expiry, replay."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from test_groups_support import NONE, Sim, subscription

from eddy.groups.offsets import OffsetStore
from eddy.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetAndMetadata,
    OffsetCommitKey,
    RecordFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    parse_subscription_topics,
    partition_for,
)
from eddy.groups.state import GroupCoordinator, GroupState, OffsetCommitEntry

E = ErrorCode
DAY = 24 * 3600 * 1000


def s16(v: str | None) -> bytes:
    if v is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(v.encode())) + v.encode()


def compact(v: str | bytes | None) -> bytes:
    if v is None:
        return b"\x00"
    raw = v.encode() if isinstance(v, str) else v
    assert len(raw) < 127
    return bytes([len(raw) + 1]) + raw


# =============================================================================================
# record formats


def test_offset_commit_key_and_value_bytes() -> None:
    assert encode_offset_commit_key("g", "t", 3) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    value = OffsetAndMetadata(100, 5, "m", 1234)
    assert encode_offset_commit_value(value) == (
        b"\x00\x03" + struct.pack(">q", 100) + struct.pack(">i", 5) + b"\x00\x01m"
        + struct.pack(">q", 1234)
    )
    # a commit with a retention time (OffsetCommit v2-v4) is written as version 1
    expiring = OffsetAndMetadata(7, -1, "", 10, expire_timestamp=99)
    assert encode_offset_commit_value(expiring) == (
        b"\x00\x01" + struct.pack(">q", 7) + b"\x00\x00" + struct.pack(">qq", 10, 99)
    )
    assert decode_offset_commit_value(encode_offset_commit_value(expiring)) == expiring


def test_group_metadata_bytes() -> None:
    assert encode_group_metadata_key("grp") == b"\x00\x02\x00\x03grp"
    value = GroupMetadataValue(
        "consumer", 4, "range", "m1", 555,
        (MemberMetadataValue("m1", "i1", "cid", "/h", 30000, 10000, b"S", b"AS"),),
    )
    expected = (
        b"\x00\x03" + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m1")
        + struct.pack(">q", 555) + struct.pack(">i", 1)
        + s16("m1") + s16("i1") + s16("cid") + s16("/h") + struct.pack(">ii", 30000, 10000)
        + struct.pack(">i", 1) + b"S" + struct.pack(">i", 2) + b"AS"
    )
    assert encode_group_metadata_value(value) == expected
    empty = GroupMetadataValue("consumer", 5, None, None, 9, ())
    assert encode_group_metadata_value(empty)[16:20] == b"\xff\xff\xff\xff"  # null protocol, leader


def test_decode_older_and_flexible_offset_values() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 42) + s16("md") + struct.pack(">q", 7)
    assert decode_offset_commit_value(v0) == OffsetAndMetadata(42, -1, "md", 7)
    v1 = b"\x00\x01" + struct.pack(">q", 42) + s16("") + struct.pack(">qq", 7, -1)
    assert decode_offset_commit_value(v1) == OffsetAndMetadata(42, -1, "", 7, None)
    v2 = b"\x00\x02" + struct.pack(">q", 42) + s16("") + struct.pack(">q", 7)
    assert decode_offset_commit_value(v2) == OffsetAndMetadata(42, -1, "", 7)
    tagged = b"\x01\x05\x02zz"  # one unknown tagged field (tag 5, 2 bytes)
    v4 = b"\x00\x04" + struct.pack(">qi", 42, 3) + compact("md") + struct.pack(">q", 7) + tagged
    assert decode_offset_commit_value(v4) == OffsetAndMetadata(42, 3, "md", 7)


def test_decode_older_and_flexible_group_values() -> None:
    member_v0 = s16("m") + s16("c") + s16("/h") + struct.pack(">i", 6000)
    member_v0 += struct.pack(">i", 1) + b"S" + struct.pack(">i", 1) + b"A"
    v0 = b"\x00\x00" + s16("consumer") + struct.pack(">i", 2) + s16("range") + s16("m")
    v0 += struct.pack(">i", 1) + member_v0
    decoded = decode_group_metadata_value(v0)
    assert decoded.current_state_timestamp == -1
    assert decoded.members == (MemberMetadataValue("m", None, "c", "/h", 6000, 6000, b"S", b"A"),)
    member_v2 = s16("m") + s16("c") + s16("/h") + struct.pack(">ii", 9000, 6000)
    member_v2 += struct.pack(">i", 1) + b"S" + struct.pack(">i", 0)
    v2 = b"\x00\x02" + s16("consumer") + struct.pack(">i", 2) + s16(None) + s16(None)
    v2 += struct.pack(">qi", 77, 1) + member_v2
    decoded = decode_group_metadata_value(v2)
    assert (decoded.protocol, decoded.leader, decoded.current_state_timestamp) == (None, None, 77)
    assert decoded.members[0].rebalance_timeout_ms == 9000
    member_v4 = compact("m") + compact("i") + compact("c") + compact("/h")
    member_v4 += struct.pack(">ii", 9000, 6000) + compact(b"S") + compact(b"A") + b"\x00"
    v4 = b"\x00\x04" + compact("consumer") + struct.pack(">i", 3) + compact("range")
    v4 += compact("m") + struct.pack(">q", 5) + b"\x02" + member_v4 + b"\x00"
    decoded = decode_group_metadata_value(v4)
    assert decoded == GroupMetadataValue(
        "consumer", 3, "range", "m", 5,
        (MemberMetadataValue("m", "i", "c", "/h", 9000, 6000, b"S", b"A"),),
    )


def test_keys_and_malformed_records() -> None:
    assert decode_key(encode_offset_commit_key("g", "t", 1)) == OffsetCommitKey("g", "t", 1)
    legacy_key = b"\x00\x00" + s16("g") + s16("t") + struct.pack(">i", 1)
    assert decode_key(legacy_key) == OffsetCommitKey("g", "t", 1)
    assert decode_key(encode_group_metadata_key("g")) == GroupMetadataKey("g")
    assert decode_key(b"\x00\x05\x00\x01x") == UnknownKey(5)  # newer Kafka record types
    for bad in (b"\x00", b"\x00\x01\x00\x05ab", encode_group_metadata_key("g") + b"!"):
        with pytest.raises(RecordFormatError):
            decode_key(bad)
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(b"\x00\x09" + bytes(20))
    with pytest.raises(RecordFormatError):
        decode_group_metadata_value(encode_group_metadata_value(
            GroupMetadataValue("c", 1, None, None, 0, ())
        )[:-2])


texts = st.text(max_size=12)
opt_texts = st.none() | texts
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@given(st.builds(OffsetAndMetadata, i64, i32, texts, i64, st.none()))
def test_offset_value_roundtrip(value: OffsetAndMetadata) -> None:
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


@given(
    st.builds(
        GroupMetadataValue, texts, i32, opt_texts, opt_texts, i64,
        st.lists(
            st.builds(
                MemberMetadataValue, texts, opt_texts, texts, texts, i32, i32,
                st.binary(max_size=20), st.binary(max_size=20),
            ),
            max_size=4,
        ).map(tuple),
    )
)
def test_group_value_roundtrip(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@given(texts, texts, i32)
def test_key_roundtrip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(
        group, topic, partition
    )
    assert decode_key(encode_group_metadata_key(group)) == GroupMetadataKey(group)


def test_partition_for_matches_kafka() -> None:
    # abs(String.hashCode) % partitions; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-group", 50) == 1906497762 % 50


def test_parse_subscription_topics() -> None:
    for version in range(4):
        assert parse_subscription_topics(subscription("a", "b", version=version)) == {"a", "b"}
    assert parse_subscription_topics(subscription(version=1, user_data=b"x")) == frozenset()
    assert parse_subscription_topics(b"junk") is None
    assert parse_subscription_topics(b"") is None


# =============================================================================================
# the store


def test_store_applies_changes_only_when_durable() -> None:
    store = OffsetStore()
    records = store.stage(1, "g", {("t", 0): OffsetAndMetadata(5), ("t", 1): None})
    assert [r.key for r in records] == [
        encode_offset_commit_key("g", "t", 0), encode_offset_commit_key("g", "t", 1)
    ]
    assert records[1].value is None
    assert store.get("g", ("t", 0)) is None and store.has_offsets("g")
    assert store.has_pending("g", ("t", 0))
    store.complete(1)
    assert store.get("g", ("t", 0)) == OffsetAndMetadata(5)
    store.stage(2, "g", {("t", 0): OffsetAndMetadata(9)})
    store.abort(2)
    assert store.get("g", ("t", 0)) == OffsetAndMetadata(5)
    assert not store.has_pending("g")


def test_store_ignores_an_older_write_confirmed_after_a_newer_one() -> None:
    store = OffsetStore()
    store.stage(1, "g", {("t", 0): OffsetAndMetadata(1)})
    store.stage(2, "g", {("t", 0): OffsetAndMetadata(2)})
    store.stage(3, "g", {("t", 1): OffsetAndMetadata(3)})
    store.complete(2)
    store.complete(1)
    store.complete(3)
    assert store.offsets("g") == {("t", 0): OffsetAndMetadata(2), ("t", 1): OffsetAndMetadata(3)}
    store.stage(4, "g", {("t", 0): OffsetAndMetadata(4)})
    store.stage(5, "g", {("t", 0): None})
    store.complete(5)
    store.complete(4)
    assert store.offsets("g") == {("t", 1): OffsetAndMetadata(3)}


def test_store_expiry_rules() -> None:
    store = OffsetStore()
    store.replay("g", ("a", 0), OffsetAndMetadata(1, commit_timestamp=100))
    store.replay("g", ("b", 0), OffsetAndMetadata(1, commit_timestamp=500))
    store.replay("g", ("c", 0), OffsetAndMetadata(1, commit_timestamp=0, expire_timestamp=300))
    assert store.expired("g", 600, 400) == [("a", 0), ("c", 0)]
    assert store.expired("g", 600, 400, keep_topics={"a"}) == [("c", 0)]
    assert store.expired("g", 600, 400, base_timestamp_ms=250) == [("c", 0)]
    assert store.expired("g", 650, 400, base_timestamp_ms=250) == [("a", 0), ("b", 0), ("c", 0)]
    store.stage(1, "g", {("a", 0): OffsetAndMetadata(2, commit_timestamp=600)})
    assert store.expired("g", 600, 400) == [("c", 0)]  # pending commit: kept


# =============================================================================================
# OffsetCommit / OffsetFetch through the coordinator


def test_simple_commit_creates_a_group_and_is_visible_once_durable() -> None:
    sim = Sim(auto_ack=False)
    rid = sim.commit("simple", [OffsetCommitEntry("t", 0, 42, 3, "hello"),
                                OffsetCommitEntry("t", 1, 7, metadata=None)])
    assert not sim.answered(rid)
    fetched = sim.c.fetch_offsets("simple", [("t", 0)]).partitions[0]
    assert (fetched.committed_offset, fetched.committed_leader_epoch, fetched.metadata) == (
        -1, -1, ""
    )
    (write,) = sim.pending_writes
    assert [decode_key(r.key) for r in write.records] == [
        OffsetCommitKey("simple", "t", 0), OffsetCommitKey("simple", "t", 1)
    ]
    sim.ack()
    assert [p.error_code for p in sim.resp(rid).partitions] == [NONE, NONE]
    all_offsets = sim.c.fetch_offsets("simple").partitions
    assert [(p.topic, p.partition, p.committed_offset, p.committed_leader_epoch, p.metadata)
            for p in all_offsets] == [("t", 0, 42, 3, "hello"), ("t", 1, 7, -1, "")]
    snap = sim.snap("simple")
    assert (snap.state, snap.protocol_type, snap.generation) == (GroupState.EMPTY, None, 0)
    assert sim.c.fetch_offsets("nope").partitions == ()
    unknown = sim.c.fetch_offsets("nope", [("t", 0)]).partitions[0]
    assert (unknown.committed_offset, unknown.error_code) == (-1, NONE)


def test_commit_write_failure_is_reported_and_not_applied() -> None:
    sim = Sim(auto_ack=False)
    rid = sim.commit("g", [("t", 0, 1)])
    sim.ack(E.not_enough_replicas)
    assert sim.resp(rid).partitions[0].error_code == E.coordinator_not_available
    assert sim.c.fetch_offsets("g", [("t", 0)]).partitions[0].committed_offset == -1
    assert sim.c.group_ids() == []  # nothing was ever stored for it
    rid = sim.commit("g", [("t", 0, 1)])
    sim.ack(E.message_too_large)
    assert sim.resp(rid).partitions[0].error_code == E.invalid_commit_offset_size


def test_metadata_too_large_fails_only_that_partition() -> None:
    sim = Sim(offset_metadata_max_bytes=4)
    rid = sim.commit("g", [OffsetCommitEntry("t", 0, 1, metadata="12345"),
                           OffsetCommitEntry("t", 1, 2, metadata="1234")])
    assert [p.error_code for p in sim.resp(rid).partitions] == [
        E.offset_metadata_too_large, NONE
    ]
    assert sim.resp(rid).by_topic() == {"t": [(0, E.offset_metadata_too_large), (1, NONE)]}
    assert [p.partition for p in sim.c.fetch_offsets("g").partitions] == [1]
    default = Sim()
    rid = default.commit("x", [OffsetCommitEntry("t", 0, 1, metadata="m" * 4097)])
    assert default.resp(rid).partitions[0].error_code == E.offset_metadata_too_large
    assert default.c.group_ids() == []


def test_commit_checks_for_group_members() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])

    def commit(**kw: object) -> ErrorCode:
        response = sim.resp(sim.commit("g", [("t", 0, 1)], **kw))  # type: ignore[arg-type]
        return response.partitions[0].error_code  # type: ignore[no-any-return]

    assert commit(generation_id=gen, member_id=a) == NONE
    assert commit() == E.unknown_member_id  # a simple commit to a group with members
    assert commit(generation_id=gen + 1, member_id=a) == E.illegal_generation
    assert commit(generation_id=gen, member_id="ghost") == E.unknown_member_id
    assert commit(generation_id=-1, member_id=a) == E.illegal_generation
    sim.join("g", a, client="a")  # PreparingRebalance: commits still allowed
    assert commit(generation_id=gen, member_id=b) == NONE
    sim.join("g", b, client="b")  # CompletingRebalance
    assert commit(generation_id=gen + 1, member_id=b) == E.rebalance_in_progress
    # unknown group with a generation
    unknown = sim.commit("other", [("t", 0, 1)], generation_id=3, member_id="m", api_version=8)
    assert sim.resp(unknown).partitions[0].error_code == E.illegal_generation
    unknown = sim.commit("other", [("t", 0, 1)], generation_id=3, member_id="m", api_version=9)
    assert sim.resp(unknown).partitions[0].error_code == E.group_id_not_found


def test_commit_keeps_member_alive() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"], session=10_000)
    for _ in range(3):
        sim.advance(6_000)
        sim.commit("g", [("t", 0, 1)], generation_id=gen, member_id=a)
    assert sim.snap("g").state is GroupState.STABLE


def test_simple_commit_to_empty_group_after_members_left() -> None:
    sim = Sim()
    _gen, (a,) = sim.stable_group("g", ["a"])
    sim.leave("g", [(a, None)])
    assert sim.resp(sim.commit("g", [("t", 0, 9)])).partitions[0].error_code == NONE
    assert sim.c.fetch_offsets("g", [("t", 0)]).partitions[0].committed_offset == 9


def test_commit_timestamp_and_retention_time() -> None:
    sim = Sim()
    sim.commit("g", [OffsetCommitEntry("t", 0, 1, commit_timestamp=5)])
    assert sim.c.committed_offsets("g")[("t", 0)].commit_timestamp == 5
    sim.commit("g", [("t", 1, 1)], retention_time_ms=1000)
    value = sim.c.committed_offsets("g")[("t", 1)]
    assert value.commit_timestamp == sim.now and value.expire_timestamp == sim.now + 1000
    assert decode_offset_commit_value(sim.log[-1].value or b"") == value


# =============================================================================================
# OffsetDelete


def test_offset_delete() -> None:
    sim = Sim()
    sim.commit("idle", [("t", 0, 1), ("t", 1, 2), ("u", 0, 3)])
    sim.auto_ack = False
    rid = sim.take(sim.c.delete_offsets(sim.now, group_id="idle",
                                        partitions=[("t", 0), ("u", 0), ("v", 9)]))
    assert not sim.answered(rid)
    sim.ack()
    resp = sim.resp(rid)
    assert resp.error_code == NONE
    assert [(p.topic, p.partition, p.error_code) for p in resp.partitions] == [
        ("t", 0, NONE), ("u", 0, NONE), ("v", 9, NONE)
    ]
    assert list(sim.c.committed_offsets("idle")) == [("t", 1)]
    assert [r.value for r in sim.log[-2:]] == [None, None]
    nope = sim.take(sim.c.delete_offsets(sim.now, group_id="nope", partitions=[("t", 0)]))
    assert sim.resp(nope).error_code == E.group_id_not_found


def test_offset_delete_of_a_topic_the_consumer_group_subscribes_to() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"], protocols=[("range", subscription("t"))])
    sim.commit("g", [("t", 0, 1), ("old", 0, 2)], generation_id=gen, member_id=a)
    rid = sim.take(sim.c.delete_offsets(sim.now, group_id="g",
                                        partitions=[("t", 0), ("old", 0)]))
    assert [p.error_code for p in sim.resp(rid).partitions] == [
        E.group_subscribed_to_topic, NONE
    ]
    assert list(sim.c.committed_offsets("g")) == [("t", 0)]


def test_offset_delete_on_non_consumer_or_unparseable_groups() -> None:
    sim = Sim()
    sim.stable_group("connect", ["a"], protocol_type="connect", protocols=[("v1", b"x")])
    rid = sim.take(sim.c.delete_offsets(sim.now, group_id="connect", partitions=[("t", 0)]))
    assert sim.resp(rid).error_code == E.non_empty_group
    sim.stable_group("weird", ["a"], protocols=[("range", b"not a subscription")])
    rid = sim.take(sim.c.delete_offsets(sim.now, group_id="weird", partitions=[("t", 0)]))
    assert sim.resp(rid).partitions[0].error_code == E.group_subscribed_to_topic  # safe side


# =============================================================================================
# expiry


def test_offsets_of_an_empty_group_expire_retention_after_it_became_empty() -> None:
    sim = Sim(offsets_retention_ms=DAY, offsets_retention_check_interval_ms=60_000)
    gen, (a,) = sim.stable_group("g", ["a"], session=30_000)
    sim.commit("g", [("t", 0, 1)], generation_id=gen, member_id=a)
    for _ in range(60):  # an hour as a live member: nothing expires
        sim.advance(30_000 - 1)
        sim.hb("g", gen, a)
        sim.advance(30_000 - 1)
        sim.hb("g", gen, a)
    sim.leave("g", [(a, None)])
    left_at = sim.now
    sim.advance(DAY - 1_000)
    assert sim.now - left_at < DAY and sim.c.committed_offsets("g")
    sim.advance(61_000)  # the next check after the retention passed (checks every minute)
    assert sim.c.committed_offsets("g") == {}
    assert "g" not in sim.c.group_ids()
    tail = [(decode_key(r.key), r.value) for r in sim.log[-2:]]
    assert tail == [(OffsetCommitKey("g", "t", 0), None), (GroupMetadataKey("g"), None)]


def test_stable_consumer_group_expires_only_unsubscribed_topics() -> None:
    sim = Sim(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=10_000)
    gen, (a,) = sim.stable_group("g", ["a"], session=30_000)
    sim.commit("g", [("t", 0, 1), ("gone", 0, 2)], generation_id=gen, member_id=a)
    for _ in range(15):
        sim.advance(10_000)
        sim.hb("g", gen, a)
    assert list(sim.c.committed_offsets("g")) == [("t", 0)]
    assert sim.snap("g").state is GroupState.STABLE


def test_simple_group_offsets_expire_from_their_commit_time() -> None:
    sim = Sim(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=10_000)
    sim.commit("s", [("t", 0, 1)])
    sim.advance(50_000)
    sim.commit("s", [("t", 1, 1)])
    sim.advance(60_000)
    assert list(sim.c.committed_offsets("s")) == [("t", 1)]
    sim.advance(50_000)
    assert "s" not in sim.c.group_ids()
    assert decode_key(sim.log[-1].key) == OffsetCommitKey("s", "t", 1)  # no group tombstone


def test_pending_commit_is_not_expired() -> None:
    sim = Sim(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=10_000)
    sim.commit("s", [("t", 0, 1)])
    sim.auto_ack = False
    sim.advance(90_000)
    rid = sim.commit("s", [("t", 0, 2)])
    sim.advance(20_000)
    assert [w.records[0].value is None for w in sim.pending_writes] == [False]
    sim.ack()
    assert sim.resp(rid).partitions[0].error_code == NONE
    assert sim.c.committed_offsets("s")[("t", 0)].offset == 2


# =============================================================================================
# replay


def replayed(sim: Sim) -> GroupCoordinator:
    fresh = GroupCoordinator(sim.c.config)
    for record in sim.log:
        fresh.replay(record.key, record.value)
    return fresh


def test_replay_rebuilds_offsets_and_group_metadata() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    rs = sim.join("g", client="s", instance="inst")
    ra, _ = sim.join("g", a, client="a"), sim.join("g", b, client="b")
    s_id = sim.resp(rs).member_id
    gen = sim.resp(ra).generation_id
    sim.sync("g", gen, b)
    sim.sync("g", gen, s_id, instance="inst")
    sim.sync("g", gen, a, [(a, b"A"), (b, b"B"), (s_id, b"S")])
    sim.commit("g", [OffsetCommitEntry("t", 0, 10, 2, "md")], generation_id=gen, member_id=a)
    sim.commit("g", [("t", 1, 11)], generation_id=gen, member_id=b)
    sim.commit("simple", [("x", 0, 1), ("x", 1, 2)])
    sim.take(sim.c.delete_offsets(sim.now, group_id="simple", partitions=[("x", 1)]))
    sim.commit("doomed", [("x", 0, 1)])
    sim.take(sim.c.delete_groups(sim.now, ["doomed"]))
    _, e = sim.join_new("emptied", "e")
    sim.leave("emptied", [(e, None)])

    fresh = replayed(sim)
    assert sorted(fresh.group_ids()) == ["emptied", "g", "simple"]
    for gid in ("g", "simple", "emptied", "doomed"):
        assert fresh.committed_offsets(gid) == sim.c.committed_offsets(gid)
    live, back = sim.snap("g"), fresh.snapshot("g")
    assert back is not None and back.state is GroupState.STABLE
    assert (back.generation, back.protocol_type, back.protocol_name, back.leader_id) == (
        live.generation, live.protocol_type, live.protocol_name, live.leader_id
    )
    assert [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment,
             m.session_timeout_ms, m.rebalance_timeout_ms) for m in back.members] == [
        (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment,
         m.session_timeout_ms, m.rebalance_timeout_ms) for m in live.members
    ]
    emptied = fresh.snapshot("emptied")
    assert emptied is not None and emptied.state is GroupState.EMPTY
    assert emptied.generation == sim.snap("emptied").generation
    simple = fresh.snapshot("simple")
    assert simple is not None and (simple.state, simple.protocol_type) == (GroupState.EMPTY, None)
    (described,) = fresh.describe_groups(["g"])
    assert {m.member_assignment for m in described.members} == {b"A", b"B", b"S"}


def test_loaded_members_carry_on_or_expire() -> None:
    sim = Sim()
    gen, (a, _b) = sim.stable_group("g", ["a", "b"], session=10_000)
    restarted = Sim()
    restarted.now = sim.now + 5_000
    for record in sim.log:
        restarted.c.replay(record.key, record.value)
    # a keeps heartbeating with the generation it had; b is gone with the old process
    assert restarted.hb("g", gen, a) == NONE
    sync = restarted.sync("g", gen, a)
    assert restarted.resp(sync).assignment == a.encode()
    restarted.advance(9_999)
    assert restarted.hb("g", gen, a) == NONE
    assert restarted.snap("g").state is GroupState.STABLE
    restarted.advance(1)  # b's session, counted from the restart
    assert restarted.snap("g").state is GroupState.PREPARING_REBALANCE
    resp = restarted.resp(restarted.join("g", a, client="a"))
    assert resp.generation_id == gen + 1 and [m.member_id for m in resp.members] == [a]


def test_replay_skips_unknown_record_types_and_applies_tombstones() -> None:
    c = GroupCoordinator()
    assert not c.replay(b"\x00\x07\x00\x01g", b"whatever")
    c.replay(encode_offset_commit_key("g", "t", 0), encode_offset_commit_value(
        OffsetAndMetadata(1, -1, "", 0)))
    assert c.group_ids() == ["g"]
    c.replay(encode_offset_commit_key("g", "t", 0), None)
    assert c.group_ids() == [] and c.committed_offsets("g") == {}
    value = GroupMetadataValue("consumer", 3, None, None, 0, ())
    c.replay(encode_group_metadata_key("h"), encode_group_metadata_value(value))
    assert c.snapshot("h") is not None
    c.replay(encode_group_metadata_key("h"), None)
    assert c.snapshot("h") is None
