"""Scenario tests of the classic group coordinator under a virtual clock (Kafka's rules)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from test_groups_support import NONE, RANGE, Sim, subscription

from eddy.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    decode_group_metadata_value,
    decode_key,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from eddy.groups.state import (
    GroupState,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    SyncGroupResponse,
)

E = ErrorCode


def group_records(sim: Sim, group: str = "g") -> list[bytes | None]:
    return [r.value for r in sim.log if decode_key(r.key) == GroupMetadataKey(group)]


# ---------------------------------------------------------------------------------------------
# JoinGroup basics


def test_v4_new_member_gets_member_id_required_then_joins_alone() -> None:
    sim = Sim()
    first = sim.resp(sim.join(client="app"))
    assert first == JoinGroupResponse(E.member_id_required, member_id="app-u1")
    assert sim.snap("g").pending_member_ids == ("app-u1",)
    resp = sim.resp(sim.join(member_id="app-u1", client="app"))
    assert resp.error_code == NONE
    assert resp.generation_id == 1
    assert resp.protocol_type == "consumer"
    assert resp.protocol_name == "range"
    assert resp.leader == "app-u1"
    assert resp.member_id == "app-u1"
    assert resp.members == (JoinGroupMember("app-u1", None, RANGE[0][1]),)
    assert sim.snap("g").state is GroupState.COMPLETING_REBALANCE


def test_v3_join_gets_member_id_at_once() -> None:
    sim = Sim()
    resp = sim.resp(sim.join(client="old", version=3))
    assert resp.error_code == NONE and resp.member_id == "old-u1" and resp.generation_id == 1


def test_static_member_never_gets_member_id_required() -> None:
    sim = Sim()
    resp = sim.resp(sim.join(client="app", instance="i-1"))
    assert resp.error_code == NONE
    assert resp.member_id == "i-1-u1"  # Kafka: instance id, not client id, prefixes the id
    assert resp.members == (JoinGroupMember("i-1-u1", "i-1", RANGE[0][1]),)


def test_session_timeout_bounds_are_configurable() -> None:
    sim = Sim(min_session_timeout_ms=1000, max_session_timeout_ms=5000)
    assert sim.resp(sim.join(session=999)).error_code == E.invalid_session_timeout
    assert sim.resp(sim.join(session=5001)).error_code == E.invalid_session_timeout
    assert sim.resp(sim.join(session=1000)).error_code == E.member_id_required
    default = Sim()
    assert default.resp(default.join(session=5999)).error_code == E.invalid_session_timeout
    assert default.resp(default.join(session=1_800_001)).error_code == E.invalid_session_timeout
    assert default.c.group_ids() == []  # a failed join leaves no group behind


def test_invalid_group_id_and_unknown_member() -> None:
    sim = Sim()
    assert sim.resp(sim.join(group="")).error_code == E.invalid_group_id
    resp = sim.resp(sim.join(member_id="ghost"))
    assert resp == JoinGroupResponse(E.unknown_member_id, member_id="ghost")
    sim.stable_group("g", ["a"])
    assert sim.resp(sim.join(member_id="ghost")).error_code == E.unknown_member_id


def test_inconsistent_group_protocol() -> None:
    sim = Sim()
    assert sim.resp(sim.join(protocols=[])).error_code == E.inconsistent_group_protocol
    assert sim.resp(sim.join(protocol_type="")).error_code == E.inconsistent_group_protocol
    sim.stable_group("g", ["a"])
    other = [("roundrobin", subscription("t"))]
    resp = sim.resp(sim.join(client="b", protocols=other))
    assert resp.error_code == E.inconsistent_group_protocol and resp.member_id == ""
    assert sim.resp(sim.join(client="b", protocol_type="connect")).error_code == (
        E.inconsistent_group_protocol
    )
    assert sim.snap("g").state is GroupState.STABLE


def test_protocol_chosen_by_votes_among_protocols_every_member_supports() -> None:
    sim = Sim()
    sub = subscription("t")
    prefs = {
        "a": [("range", sub), ("rr", sub), ("sticky", sub)],
        "b": [("rr", sub), ("range", sub)],
        "c": [("sticky", sub), ("rr", sub), ("range", sub)],
    }
    _ra, a = sim.join_new(client="a", protocols=prefs["a"])
    _rb, b = sim.join_new(client="b", protocols=prefs["b"])
    sim.join("g", a, client="a", protocols=prefs["a"])
    rc, _c = sim.join_new(client="c", protocols=prefs["c"])
    sim.join("g", a, client="a", protocols=prefs["a"])
    sim.join("g", b, client="b", protocols=prefs["b"])
    # sticky is not supported by b; votes: a -> range, b -> rr, c -> rr
    assert sim.resp(rc).protocol_name == "rr"
    assert sim.resp(rc).members == ()
    leader = sim.resp(sim.join("g", a, client="a", protocols=prefs["a"]))
    assert [m.metadata for m in leader.members] == [sub, sub, sub]


def test_tie_goes_to_first_members_preference() -> None:
    sim = Sim()
    sub = subscription("t")
    _a, a_id = sim.join_new(client="a", protocols=[("rr", sub), ("range", sub)])
    b, _ = sim.join_new(client="b", protocols=[("range", sub), ("rr", sub)])
    sim.join("g", a_id, client="a", protocols=[("rr", sub), ("range", sub)])
    assert sim.resp(b).protocol_name == "rr"


# ---------------------------------------------------------------------------------------------
# rebalances


def test_second_member_triggers_rebalance_and_both_get_next_generation() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"])
    rid_b, b = sim.join_new(client="b")
    assert not sim.answered(rid_b)
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert sim.hb("g", gen, a) == E.rebalance_in_progress
    rid_a = sim.join("g", a, client="a")
    ra, rb = sim.resp(rid_a), sim.resp(rid_b)
    assert ra.generation_id == rb.generation_id == gen + 1
    assert ra.leader == rb.leader == a  # the leader rejoined: it stays leader
    assert {m.member_id for m in ra.members} == {a, b}
    assert rb.members == ()  # followers get no member list
    assert ra.member_id == a  # member ids are kept across rejoin


def test_follower_sync_waits_for_leader_and_everyone_gets_its_own_assignment() -> None:
    sim = Sim()
    gen, (a, b, c) = sim.stable_group("g", ["a", "b", "c"])
    sim.join("g", a, client="a")
    rb, rc = sim.join("g", b, client="b"), sim.join("g", c, client="c")
    gen = sim.resp(rb).generation_id
    sync_b = sim.sync("g", gen, b)
    assert not sim.answered(sync_b)
    sync_a = sim.sync("g", gen, a, [(a, b"A"), (b, b"B")])  # c missing -> empty bytes
    sync_c = sim.sync("g", gen, c)
    assert sim.resp(sync_a) == SyncGroupResponse(NONE, "consumer", "range", b"A")
    assert sim.resp(sync_b).assignment == b"B"
    assert sim.resp(sync_c) == SyncGroupResponse(NONE, "consumer", "range", b"")
    assert sim.snap("g").state is GroupState.STABLE
    assert sim.resp(rc).generation_id == gen


def test_sync_answers_wait_for_durable_assignment() -> None:
    sim = Sim(auto_ack=False)
    _rid, a = sim.join_new(client="a")
    sync = sim.sync("g", 1, a, [(a, b"A")])
    assert not sim.answered(sync) and len(sim.pending_writes) == 1
    assert sim.snap("g").state is GroupState.COMPLETING_REBALANCE
    sim.ack()
    assert sim.resp(sync).assignment == b"A"
    value = decode_group_metadata_value(group_records(sim)[-1] or b"")
    assert value.generation == 1 and value.leader == a and value.protocol == "range"
    assert value.members[0].assignment == b"A"
    assert value.members[0].subscription == RANGE[0][1]


def test_failed_assignment_write_sends_error_and_rebalances() -> None:
    sim = Sim(auto_ack=False)
    _, a = sim.join_new(client="a")
    sync = sim.sync("g", 1, a, [(a, b"A")])
    sim.ack(E.not_enough_replicas)
    assert sim.resp(sync) == SyncGroupResponse(E.coordinator_not_available)
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert sim.snap("g").members[0].assignment == b""


def test_sync_errors() -> None:
    sim = Sim()
    assert sim.resp(sim.sync("nope", 1, "x")).error_code == E.unknown_member_id
    assert sim.resp(sim.sync("", 1, "x")).error_code == E.invalid_group_id
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    assert sim.resp(sim.sync("g", gen, "ghost")).error_code == E.unknown_member_id
    assert sim.resp(sim.sync("g", gen + 7, a)).error_code == E.illegal_generation
    assert sim.resp(sim.sync("g", gen, a, protocol_name="rr")).error_code == (
        E.inconsistent_group_protocol
    )
    assert sim.resp(sim.sync("g", gen, a, protocol_type="x")).error_code == (
        E.inconsistent_group_protocol
    )
    # a stable group returns the stored assignment again
    assert sim.resp(sim.sync("g", gen, b, protocol_name="range")).assignment == b.encode()
    sim.join("g", a, client="a")  # leader rejoins: rebalance
    assert sim.resp(sim.sync("g", gen, b)).error_code == E.rebalance_in_progress


def test_heartbeat_errors_and_states() -> None:
    sim = Sim()
    assert sim.hb("nope", 1, "x") == E.unknown_member_id
    assert sim.hb("", 1, "x") == E.invalid_group_id
    _rid, a = sim.join_new(client="a")
    assert sim.hb("g", 1, a) == NONE  # CompletingRebalance: a normal heartbeat
    assert sim.hb("g", 0, a) == E.illegal_generation
    assert sim.hb("g", 1, "ghost") == E.unknown_member_id
    sim.sync("g", 1, a, [(a, b"x")])
    assert sim.hb("g", 1, a) == NONE
    sim.join_new(client="b")
    assert sim.hb("g", 1, a) == E.rebalance_in_progress


def test_join_during_completing_rebalance_fails_pending_syncs() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    sim.join("g", a, client="a")
    sim.join("g", b, client="b")
    follower_sync = sim.sync("g", gen + 1, b)
    assert not sim.answered(follower_sync)
    late, _c = sim.join_new(client="c")
    assert sim.resp(follower_sync) == SyncGroupResponse(E.rebalance_in_progress)
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert not sim.answered(late)


def test_rejoin_in_completing_rebalance_with_same_metadata_returns_current_generation() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    sim.join("g", a, client="a")
    sim.join("g", b, client="b")
    again = sim.resp(sim.join("g", a, client="a"))  # lost its response; same metadata
    assert again.generation_id == gen + 1 and {m.member_id for m in again.members} == {a, b}
    assert sim.snap("g").state is GroupState.COMPLETING_REBALANCE


def test_stable_follower_rejoin_is_answered_at_once_but_leader_rejoin_rebalances() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    follower = sim.resp(sim.join("g", b, client="b"))
    assert follower.generation_id == gen and follower.members == () and follower.leader == a
    assert sim.snap("g").state is GroupState.STABLE
    changed = sim.join("g", b, client="b", protocols=[("range", subscription("t", "u"))])
    assert not sim.answered(changed)  # changed metadata: rebalance
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE


def test_rebalance_timeout_evicts_members_that_did_not_rejoin() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"], rebalance=20_000)
    rid_c, c = sim.join_new(client="c", rebalance=15_000)
    rid_a = sim.join("g", a, client="a", rebalance=20_000)
    for _ in range(3):  # b heartbeats (REBALANCE_IN_PROGRESS) but never rejoins
        sim.advance(6_000)
        assert sim.hb("g", gen, b) == E.rebalance_in_progress
    sim.advance(1_999)  # the timeout is the largest of the members' rebalance timeouts
    assert not sim.answered(rid_a)
    sim.advance(1)
    ra = sim.resp(rid_a)
    assert ra.error_code == NONE and ra.generation_id == gen + 1
    assert {m.member_id for m in ra.members} == {a, c}
    assert sim.resp(rid_c).generation_id == gen + 1
    assert sim.hb("g", gen + 1, b) == E.unknown_member_id


def test_leader_that_does_not_rejoin_is_replaced_by_a_member_that_did() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    rc, c = sim.join_new(client="c")
    rb = sim.join("g", b, client="b")
    for _ in range(4):  # a stays alive but never rejoins
        sim.advance(6_000)
        assert sim.hb("g", gen, a) == E.rebalance_in_progress
    sim.advance(5_999)
    assert not sim.answered(rb)
    sim.advance(1)  # the rebalance timeout
    resp = sim.resp(rb)
    assert resp.leader == b and resp.generation_id == gen + 1
    assert [m.member_id for m in resp.members] == [b, c]
    assert sim.resp(rc).leader == b


def test_session_timeout_evicts_member_and_rebalances() -> None:
    sim = Sim()
    gen, (a, _b) = sim.stable_group("g", ["a", "b"], session=10_000)
    for _ in range(2):
        sim.advance(4_000)
        assert sim.hb("g", gen, a) == NONE
    sim.advance(2_000)  # b has been silent 10 s
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert [m.member_id for m in sim.snap("g").members] == [a]
    assert sim.hb("g", gen, a) == E.rebalance_in_progress
    resp = sim.resp(sim.join("g", a, client="a"))
    assert resp.generation_id == gen + 1 and len(resp.members) == 1


def test_heartbeat_exactly_at_deadline_is_too_late() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"], session=10_000)
    sim.now += 9_999
    assert sim.hb("g", gen, a) == NONE
    sim.now += 10_000
    assert sim.hb("g", gen, a) == E.unknown_member_id


def test_last_member_expiring_leaves_the_group_empty_and_persisted() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"], session=10_000)
    sim.advance(10_000)
    snap = sim.snap("g")
    assert snap.state is GroupState.EMPTY and snap.generation == gen + 1
    assert snap.protocol_name is None and snap.protocol_type == "consumer"
    last = decode_group_metadata_value(group_records(sim)[-1] or b"")
    assert last.generation == gen + 1 and last.members == () and last.protocol is None
    assert sim.hb("g", gen, a) == E.unknown_member_id


def test_member_waiting_in_join_is_not_expired_by_its_session() -> None:
    """Kafka: a member awaiting a JoinGroup response needs no heartbeat."""
    sim = Sim()
    kw = {"session": 6_000, "rebalance": 60_000}
    gen, (a, b) = sim.stable_group("g", ["a", "b"], **kw)
    _rc, c = sim.join_new(client="c", **kw)  # starts a rebalance
    rid_b = sim.join("g", b, client="b", **kw)
    for _ in range(5):
        sim.advance(5_000)
        sim.hb("g", gen, a)
    assert [m.member_id for m in sim.snap("g").members] == [a, b, c]  # b waited 25 s
    rid_a = sim.join("g", a, client="a", **kw)
    assert sim.resp(rid_b).generation_id == sim.resp(rid_a).generation_id == gen + 1
    # ...but once answered it must heartbeat again
    sim.sync("g", gen + 1, a, [])
    sim.sync("g", gen + 1, c)
    assert sim.resp(sim.sync("g", gen + 1, b)).error_code == NONE
    sim.advance(5_000)
    sim.hb("g", gen + 1, a)
    sim.hb("g", gen + 1, c)
    sim.advance(1_000)
    assert [m.member_id for m in sim.snap("g").members] == [a, c]


def test_new_member_stuck_in_join_times_out_with_unknown_member_id() -> None:
    sim = Sim(new_member_join_timeout_ms=50_000)
    gen, (a,) = sim.stable_group("g", ["a"], rebalance=120_000)
    rid_b, _b = sim.join_new(client="b", rebalance=120_000)
    for _ in range(10):  # a keeps its session but does not rejoin
        sim.advance(5_000)
        sim.hb("g", gen, a)
    assert sim.resp(rid_b) == JoinGroupResponse(E.unknown_member_id)
    rid_a = sim.join("g", a, client="a", rebalance=120_000)
    assert sim.resp(rid_a).generation_id == gen + 1 and len(sim.resp(rid_a).members) == 1


def test_follower_in_sync_that_never_gets_leader_assignment() -> None:
    sim = Sim()
    kw = {"session": 30_000, "rebalance": 20_000}
    gen, (a, b) = sim.stable_group("g", ["a", "b"], **kw)
    sim.join("g", a, client="a", **kw)
    sim.join("g", b, client="b", **kw)
    follower = sim.sync("g", gen + 1, b)
    sim.advance(19_999)
    assert not sim.answered(follower)
    sim.advance(1)  # the leader never syncs: it is removed, followers rejoin
    assert sim.resp(follower) == SyncGroupResponse(E.rebalance_in_progress)
    assert [m.member_id for m in sim.snap("g").members] == [b]
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE


def test_member_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    sim = Sim()
    kw = {"session": 30_000, "rebalance": 20_000}
    gen, (a, b) = sim.stable_group("g", ["a", "b"], **kw)
    sim.join("g", a, client="a", **kw)
    sim.join("g", b, client="b", **kw)
    sim.sync("g", gen + 1, a, [(a, b"A"), (b, b"B")])
    assert sim.snap("g").state is GroupState.STABLE
    sim.hb("g", gen + 1, b)
    sim.advance(10_000)
    sim.hb("g", gen + 1, a)
    sim.hb("g", gen + 1, b)
    sim.advance(10_000)
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert [m.member_id for m in sim.snap("g").members] == [a]


def test_pending_member_delays_the_rebalance_until_it_joins_or_expires() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"], session=10_000, rebalance=60_000)
    # b got MEMBER_ID_REQUIRED but c joined fully: the rebalance waits for b
    first_b = sim.resp(sim.join(client="b", session=10_000))
    _rid_c, _c = sim.join_new(client="c", session=10_000, rebalance=60_000)
    rid_a = sim.join("g", a, client="a", session=10_000, rebalance=60_000)
    assert not sim.answered(rid_a)
    sim.advance(10_000)  # b's pending id expires after its session timeout
    assert sim.resp(rid_a).generation_id == gen + 1
    assert sim.snap("g").pending_member_ids == ()
    assert sim.resp(sim.join("g", first_b.member_id, client="b")).error_code == (
        E.unknown_member_id
    )


# ---------------------------------------------------------------------------------------------
# LeaveGroup


def test_leader_leaves_and_remaining_member_becomes_leader() -> None:
    sim = Sim()
    gen, (a, b) = sim.stable_group("g", ["a", "b"])
    assert sim.leave("g", [(a, None)]).members == (LeaveGroupMemberResponse(a, None, NONE),)
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert sim.snap("g").leader_id == b
    resp = sim.resp(sim.join("g", b, client="b"))
    assert resp.leader == b and resp.generation_id == gen + 1


def test_last_member_leaves() -> None:
    sim = Sim()
    gen, (a,) = sim.stable_group("g", ["a"])
    sim.leave("g", [(a, None)])
    assert sim.snap("g").state is GroupState.EMPTY and sim.snap("g").generation == gen + 1


def test_batched_leave_v3() -> None:
    sim = Sim()
    s_id = sim.resp(sim.join(client="s", instance="inst")).member_id
    ra, a = sim.join_new(client="a")
    sim.join("g", s_id, client="s", instance="inst")
    assert sim.resp(ra).error_code == NONE
    resp = sim.leave("g", [(a, None), ("", "inst"), ("ghost", None), ("", "nobody")])
    assert [m.error_code for m in resp.members] == [
        NONE, NONE, E.unknown_member_id, E.unknown_member_id
    ]
    assert resp.error_code == NONE and resp.legacy_error_code == E.unknown_member_id
    assert sim.snap("g").members == ()
    assert sim.snap("g").state is GroupState.EMPTY
    assert sim.leave("nope", [("x", None)]).members[0].error_code == E.unknown_member_id
    assert sim.leave("", [("x", None)]).error_code == E.invalid_group_id


def test_leave_of_pending_member_and_fenced_static_member() -> None:
    sim = Sim()
    sim.stable_group("g", ["a"])
    pending = sim.resp(sim.join(client="p")).member_id
    assert sim.leave("g", [(pending, None)]).members[0].error_code == NONE
    assert sim.snap("g").pending_member_ids == ()
    sim2 = Sim()
    s_id = sim2.resp(sim2.join(client="s", instance="i")).member_id
    leave = sim2.leave("g", [("stale-id", "i")])
    assert leave.members[0].error_code == E.fenced_instance_id
    assert sim2.snap("g").members[0].member_id == s_id


# ---------------------------------------------------------------------------------------------
# static membership


def _static_pair(sim: Sim, **kw: object) -> tuple[int, str, str]:
    s1 = sim.resp(sim.join(client="x", instance="i1", **kw)).member_id  # type: ignore[arg-type]
    r2 = sim.join(client="y", instance="i2", **kw)  # type: ignore[arg-type]
    r1 = sim.join("g", s1, client="x", instance="i1", **kw)  # type: ignore[arg-type]
    s2 = sim.resp(r2).member_id
    gen = sim.resp(r1).generation_id
    sim.sync("g", gen, s2, instance="i2")
    sim.sync("g", gen, s1, [(s1, b"one"), (s2, b"two")], instance="i1")
    assert sim.snap("g").state is GroupState.STABLE
    return gen, s1, s2


def test_static_member_restart_replaces_old_member_without_rebalance() -> None:
    sim = Sim()
    gen, s1, s2 = _static_pair(sim)
    sim.auto_ack = False
    rid = sim.join(client="y", instance="i2")  # i2 restarted: empty member id
    assert not sim.answered(rid)  # waits for the new member id to be durable
    assert sim.snap("g").state is GroupState.STABLE
    sim.ack()
    resp = sim.resp(rid)
    assert resp.error_code == NONE and resp.generation_id == gen
    new_id = resp.member_id
    assert new_id != s2 and new_id.startswith("i2-")
    assert resp.leader == s1 and resp.members == ()
    sim.auto_ack = True
    assert sim.resp(sim.sync("g", gen, new_id, instance="i2")).assignment == b"two"
    assert sim.snap("g").generation == gen
    # the old incarnation is fenced everywhere
    assert sim.hb("g", gen, s2, "i2") == E.fenced_instance_id
    assert sim.resp(sim.join("g", s2, client="y", instance="i2")).error_code == (
        E.fenced_instance_id
    )
    assert sim.resp(sim.sync("g", gen, s2, instance="i2")).error_code == E.fenced_instance_id
    commit = sim.commit("g", [("t", 0, 5)], generation_id=gen, member_id=s2,
                        group_instance_id="i2")
    assert sim.resp(commit).partitions[0].error_code == E.fenced_instance_id
    assert sim.hb("g", gen, new_id, "i2") == NONE
    stored = decode_group_metadata_value(group_records(sim)[-1] or b"")
    assert {m.member_id for m in stored.members} == {s1, new_id}


def test_static_leader_restart_before_v9_gets_old_leader_id() -> None:
    sim = Sim()
    _gen, s1, _s2 = _static_pair(sim)
    resp = sim.resp(sim.join(client="x", instance="i1", version=8))
    assert resp.leader == s1 != resp.member_id  # so it does not assign again
    assert sim.snap("g").leader_id == resp.member_id


def test_static_leader_restart_v9_skips_assignment() -> None:
    sim = Sim()
    _gen, _s1, s2 = _static_pair(sim)
    resp = sim.resp(sim.join(client="x", instance="i1", version=9))
    assert resp.leader == resp.member_id and resp.skip_assignment
    assert {m.member_id for m in resp.members} == {resp.member_id, s2}
    assert {m.group_instance_id for m in resp.members} == {"i1", "i2"}


def test_failed_static_replacement_is_reverted() -> None:
    sim = Sim()
    gen, s1, s2 = _static_pair(sim)
    sim.auto_ack = False
    rid = sim.join(client="y", instance="i2")
    sim.ack(E.not_leader_or_follower)
    resp = sim.resp(rid)
    assert resp.error_code == E.not_coordinator and resp.member_id == ""
    assert {m.member_id for m in sim.snap("g").members} == {s1, s2}
    assert sim.hb("g", gen, s2, "i2") == NONE


def test_static_rejoin_with_new_protocol_rebalances() -> None:
    sim = Sim()
    gen, _s1, _s2 = _static_pair(sim)
    rid = sim.join(client="y", instance="i2", protocols=[("rr", subscription("t")), *RANGE])
    assert sim.snap("g").state is GroupState.STABLE  # range still selected: no rebalance
    assert sim.resp(rid).generation_id == gen
    rid = sim.join(client="x", instance="i1", protocols=[("rr", subscription("t"))],
                   version=8)
    assert sim.resp(rid).error_code == E.inconsistent_group_protocol


def test_static_member_joining_during_completing_rebalance_restarts_it() -> None:
    sim = Sim()
    gen, s1, s2 = _static_pair(sim)
    sim.join("g", s1, client="x", instance="i1")
    r2 = sim.join("g", s2, client="y", instance="i2")
    assert sim.snap("g").state is GroupState.COMPLETING_REBALANCE
    waiting = sim.sync("g", gen + 1, s2, instance="i2")
    restarted = sim.join(client="y", instance="i2")
    assert sim.resp(waiting).error_code == E.fenced_instance_id
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    assert sim.resp(r2).generation_id == gen + 1
    sim.join("g", s1, client="x", instance="i1")
    assert sim.resp(restarted).generation_id == gen + 2


def test_static_member_that_does_not_rejoin_stays_until_session_expires() -> None:
    sim = Sim()
    gen, s1, s2 = _static_pair(sim, session=10_000, rebalance=5_000)
    r1 = sim.join("g", s1, client="x", instance="i1", session=10_000, rebalance=5_000)
    sim.advance(5_000)
    resp = sim.resp(r1)
    assert resp.generation_id == gen + 1
    assert {m.member_id for m in resp.members} == {s1, s2}  # static s2 kept
    sim.sync("g", gen + 1, s1, [(s1, b"1"), (s2, b"2")], instance="i1")
    assert sim.snap("g").state is GroupState.STABLE
    sim.advance(5_000)  # s2 silent for 10 s (and never synced): removed
    assert [m.member_id for m in sim.snap("g").members] == [s1]


# ---------------------------------------------------------------------------------------------
# initial rebalance delay, max size


def test_initial_rebalance_delay_extends_while_members_arrive() -> None:
    sim = Sim(initial_rebalance_delay_ms=3_000)
    t0 = sim.now
    ra, _ = sim.join_new(client="a", rebalance=10_000)
    sim.advance(2_000)
    rb, _ = sim.join_new(client="b", rebalance=10_000)
    sim.advance(3_999)
    assert not sim.answered(ra) and sim.now == t0 + 5_999
    sim.advance(1)  # t0 + 6000: first delay + one extension
    assert sim.resp(ra).generation_id == sim.resp(rb).generation_id == 1
    assert len(sim.resp(ra).members) == 2


def test_initial_rebalance_delay_is_capped_by_rebalance_timeout() -> None:
    sim = Sim(initial_rebalance_delay_ms=3_000)
    t0 = sim.now
    first, _ = sim.join_new(client="m0", rebalance=10_000)
    n = 1
    while not sim.answered(first):
        sim.advance(1_000)
        if sim.now - t0 < 12_000 and (sim.now - t0) % 2_000 == 0:
            sim.join_new(client=f"m{n}", rebalance=10_000)
            n += 1
    assert sim.now == t0 + 10_000
    assert sim.resp(first).generation_id == 1


def test_no_delay_by_default_and_delay_only_for_empty_groups() -> None:
    sim = Sim()
    rid, _ = sim.join_new(client="a")
    assert sim.answered(rid)  # Eddy's embedded default: 0 ms
    delayed = Sim(initial_rebalance_delay_ms=3_000)
    rid, a = delayed.join_new(client="a")
    assert not delayed.answered(rid)
    delayed.advance(3_000)
    assert delayed.resp(rid).generation_id == 1
    delayed.sync("g", 1, a, [])
    rb, _ = delayed.join_new(client="b")
    ra = delayed.join("g", a, client="a")
    assert delayed.answered(ra) and delayed.answered(rb)  # not empty: no initial delay


def test_group_max_size() -> None:
    sim = Sim(max_size=2)
    sim.stable_group("g", ["a", "b"])
    assert sim.resp(sim.join(client="c")).error_code == E.group_max_size_reached


# ---------------------------------------------------------------------------------------------
# describe, list, delete


def test_describe_groups() -> None:
    sim = Sim()
    _gen, (a, b) = sim.stable_group("g", ["a", "b"])
    (d,) = sim.c.describe_groups(["g"])
    assert d.error_code == NONE and d.group_state == "Stable"
    assert d.protocol_type == "consumer" and d.protocol_data == "range"
    assert [(m.member_id, m.client_id, m.member_assignment) for m in d.members] == [
        (a, "a", a.encode()), (b, "b", b.encode())
    ]
    assert d.members[0].client_host == "/10.0.0.a"
    assert d.members[0].member_metadata == RANGE[0][1]
    sim.join("g", a, client="a")
    (d,) = sim.c.describe_groups(["g"])
    assert d.group_state == "PreparingRebalance" and d.protocol_data == ""
    assert d.members[0].member_metadata == b"" and d.members[0].member_assignment == b""
    (unknown,) = sim.c.describe_groups(["nope"])
    assert (unknown.error_code, unknown.group_state, unknown.members) == (NONE, "Dead", ())


def test_list_groups_with_state_and_type_filters() -> None:
    sim = Sim()
    sim.stable_group("s", ["a"])
    sim.join_new("p", "x")
    sim.join_new("p", "y")
    sim.commit("simple", [("t", 0, 1)])
    listed = {g.group_id: (g.group_state, g.protocol_type) for g in sim.c.list_groups().groups}
    assert listed == {
        "s": ("Stable", "consumer"),
        "p": ("PreparingRebalance", "consumer"),
        "simple": ("Empty", ""),
    }
    assert [g.group_id for g in sim.c.list_groups(["stable", "Empty"]).groups] == ["s", "simple"]
    assert sim.c.list_groups(types_filter=["consumer"]).groups == ()
    assert len(sim.c.list_groups(types_filter=["Classic"]).groups) == 3


def test_delete_groups() -> None:
    sim = Sim()
    sim.stable_group("busy", ["a"])
    sim.commit("idle", [("t", 0, 10), ("t", 1, 20)])
    rid, m = sim.join_new("was-used", "z")
    sim.leave("was-used", [(m, None)])
    sim.auto_ack = False
    rid = sim.take(sim.c.delete_groups(sim.now, ["busy", "idle", "nope", "was-used"]))
    assert not sim.answered(rid)
    assert sim.snap("idle").state is GroupState.DEAD
    # a Dead group answers like Kafka's transient Dead state
    assert sim.resp(sim.join("idle")).error_code == E.coordinator_not_available
    assert sim.resp(sim.commit("idle", [("t", 0, 1)])).partitions[0].error_code == (
        E.coordinator_not_available
    )
    assert len(sim.pending_writes) == 2
    idle_write = sim.ack()
    assert [r.value for r in idle_write.records] == [None, None]  # offsets only: gen 0
    sim.ack()
    assert sim.resp(rid).results == (
        ("busy", E.non_empty_group),
        ("idle", NONE),
        ("nope", E.group_id_not_found),
        ("was-used", NONE),
    )
    assert sorted(sim.c.group_ids()) == ["busy"]
    assert sim.c.fetch_offsets("idle", [("t", 0)]).partitions[0].committed_offset == -1
    assert group_records(sim, "was-used")[-1] is None  # the group's tombstone


def test_failed_delete_leaves_the_group_empty() -> None:
    sim = Sim()
    sim.commit("idle", [("t", 0, 10)])
    sim.auto_ack = False
    rid = sim.take(sim.c.delete_groups(sim.now, ["idle"]))
    sim.ack(E.request_timed_out)
    assert sim.resp(rid).results == (("idle", E.coordinator_not_available),)
    assert sim.snap("idle").state is GroupState.EMPTY
    assert sim.c.fetch_offsets("idle", [("t", 0)]).partitions[0].committed_offset == 10


def test_next_deadline_and_poll() -> None:
    sim = Sim()
    assert sim.c.next_deadline() is None
    _gen, (_a,) = sim.stable_group("g", ["a"], session=10_000)
    deadline = sim.c.next_deadline()
    assert deadline == sim.now + 10_000
    sim.take(sim.c.poll(deadline - 1))
    assert sim.snap("g").state is GroupState.STABLE
    sim.take(sim.c.poll(deadline))
    assert sim.snap("g").state is GroupState.EMPTY


def test_two_groups_rebalancing_at_once_keep_their_members() -> None:
    sim = Sim()
    g1 = sim.stable_group("g1", ["a", "b"])
    g2 = sim.stable_group("g2", ["c", "d"])
    r = [sim.join("g1", g1[1][0], client="a"), sim.join("g2", g2[1][0], client="c"),
         sim.join("g1", g1[1][1], client="b"), sim.join("g2", g2[1][1], client="d")]
    assert all(sim.resp(x).error_code == NONE for x in r)
    assert {m.member_id for m in sim.snap("g1").members} == set(g1[1])
    assert {m.member_id for m in sim.snap("g2").members} == set(g2[1])


def test_delete_batch_with_a_group_that_needs_no_write() -> None:
    sim = Sim()
    sim.join(group="never-joined", client="p")  # MEMBER_ID_REQUIRED, never comes back
    sim.advance(10_000)
    assert sim.snap("never-joined").state is GroupState.EMPTY
    sim.commit("idle", [("t", 0, 1)])
    sim.auto_ack = False
    rid = sim.take(sim.c.delete_groups(sim.now, ["never-joined", "idle"]))
    assert not sim.answered(rid)
    sim.ack()
    assert sim.resp(rid).results == (("never-joined", NONE), ("idle", NONE))
    assert sim.c.group_ids() == []


def test_events_for_traces_and_metrics() -> None:
    sim = Sim()
    first = sim.c.join_group(sim.now, group_id="g", member_id="", client_id="a",
                             client_host="/h", session_timeout_ms=10_000,
                             rebalance_timeout_ms=10_000, protocol_type="consumer",
                             protocols=RANGE)
    step = sim.c.join_group(sim.now, group_id="g", member_id=first.response_to().member_id,
                            client_id="a", client_host="/h", session_timeout_ms=10_000,
                            rebalance_timeout_ms=10_000, protocol_type="consumer",
                            protocols=RANGE)
    (event,) = step.events
    assert (event.kind, event.group_id, event.generation_id, event.detail) == (
        "rebalance-complete", "g", 1, "a-u1"
    )
    expired = sim.c.poll(sim.now + 10_000)
    kinds = [(e.kind, e.member_id, e.detail) for e in expired.events]
    assert kinds == [("member-removed", "a-u1", "session-timeout")]
    assert sim.c.snapshot("g").state is GroupState.EMPTY  # type: ignore[union-attr]
    deleted = sim.c.delete_groups(sim.now + 10_000, ["g"])
    done = sim.c.write_completed(sim.now + 10_000, deleted.writes[0].write_id)
    assert [(e.kind, e.detail) for e in done.events] == [("group-removed", "deleted")]


def test_zero_rebalance_timeout_with_absent_static_members_does_not_spin() -> None:
    sim = Sim()
    members = tuple(
        MemberMetadataValue(f"{i}-m", i, "c", "/h", 0, 6_000, RANGE[0][1], b"")
        for i in ("i1", "i2", "i3")
    )
    value = GroupMetadataValue("consumer", 4, "range", "i1-m", 0, members)
    sim.c.replay(encode_group_metadata_key("g"), encode_group_metadata_value(value))
    sim.leave("g", [("i1-m", "i1")])  # rebalance; the other static members never rejoin
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    sim.advance(5_999)
    assert sim.snap("g").state is GroupState.PREPARING_REBALANCE
    sim.advance(1)  # their sessions end it
    assert sim.snap("g").state is GroupState.EMPTY and sim.snap("g").generation == 5
