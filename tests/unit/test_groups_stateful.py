"""Random interleavings of group traffic, time and durable writes against the coordinator.

Clients (dynamic and static) join, sync, heartbeat, leave and commit; time jumps; writes are
acknowledged or fail, in order, whenever the machine decides. After every step:

- at most one leader per generation (every JoinGroup answer of a generation names the same
  leader; only the leader's answer lists the members);
- every member of a Stable group holds exactly the assignment the leader sent for its
  generation (a static member that took over an old member id holds that id's assignment);
- no SyncGroup hands an assignment to a member that left or was evicted, and a dynamic
  member id never comes back once gone;
- a group's generation never decreases;
- every request id is answered at most once, and the coordinator's pending requests are the
  ones the clients are still waiting for;
- replaying the durable ``__consumer_offsets`` records gives the same committed offsets and,
  for every Stable or Empty group with no write in flight, the same group metadata.

At the end all writes are acknowledged and time runs past every timeout: no request may be
left unanswered, and the replay check must hold.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from kio.schema.errors import ErrorCode
from test_groups_support import subscription

from eddy.groups.records import (
    GroupMetadataKey,
    Record,
    decode_group_metadata_value,
    decode_key,
)
from eddy.groups.state import (
    GroupConfig,
    GroupCoordinator,
    GroupSnapshot,
    GroupState,
    HeartbeatResponse,
    JoinGroupResponse,
    MemberSnapshot,
    OffsetCommitEntry,
    Step,
    SyncGroupResponse,
    Write,
)

NONE = ErrorCode.none
GROUPS = ("g1", "g2")
CLIENTS = ("c0", "c1", "c2", "c3", "s0", "s1")  # s*: static members
SUB = subscription("t", "u")
PROTOCOLS = {
    "range": [("range", SUB)],
    "both": [("rr", SUB), ("range", SUB)],
    "rr": [("rr", SUB)],
}
ERRORS = (
    ErrorCode.not_enough_replicas,
    ErrorCode.not_leader_or_follower,
    ErrorCode.request_timed_out,
    ErrorCode.message_too_large,
)


@dataclass
class Client:
    name: str
    group: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    join_rid: int | None = None
    sync_rid: int | None = None
    needs_rejoin: bool = True
    synced_generation: int = -1
    protocols: str = "range"
    previous_id: str = ""


@dataclass(frozen=True)
class Sent:
    """What a request was sent with."""

    kind: str
    client: str
    group: str
    incarnation: int
    member_id: str
    generation: int


@dataclass
class Assignment:
    by_member: dict[str, bytes]
    instances: dict[str, str | None]  # member id -> instance id, when the leader synced

    def expected(self, member_id: str, instance: str | None) -> bytes:
        if member_id in self.instances:
            return self.by_member.get(member_id, b"")
        # a static member that took over an old member id keeps that id's assignment
        old = [m for m, i in self.instances.items() if i is not None and i == instance]
        assert old, f"{member_id} was not a member when the leader synced"
        return self.by_member.get(old[0], b"")


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = GroupCoordinator()
        self.now = 1_000_000

    @initialize(delay=st.sampled_from([0, 0, 2_000]))
    def setup(self, delay: int) -> None:
        ids = itertools.count(1)
        self.config = GroupConfig(
            initial_rebalance_delay_ms=delay,
            new_member_join_timeout_ms=40_000,
            offsets_retention_ms=120_000,
            offsets_retention_check_interval_ms=30_000,
        )
        self.c = GroupCoordinator(self.config, uuid_factory=lambda: f"u{next(ids)}")
        self.clients = {
            name: Client(name, GROUPS[i % 2], f"inst-{name}" if name[0] == "s" else None)
            for i, name in enumerate(CLIENTS)
        }
        self.sent: dict[int, Sent] = {}
        self.answered: set[int] = set()
        self.writes: deque[Write] = deque()
        self.log: list[Record] = []
        self.dirty: set[str] = set()
        self.leaders: dict[tuple[str, int, int], str] = {}
        self.assignments: dict[tuple[str, int, int], Assignment] = {}
        self.generations: dict[str, int] = {}
        self.incarnation = dict.fromkeys(GROUPS, 0)
        self.seen_dynamic: set[str] = set()
        self.current: dict[str, set[str]] = {g: set() for g in GROUPS}

    # -- plumbing -----------------------------------------------------------------------------

    def _snap(self, group: str) -> GroupSnapshot | None:
        return self.c.snapshot(group)

    def _send(self, kind: str, client: Client, step: Step) -> int:
        rid = step.request_id
        assert rid is not None
        self.sent[rid] = Sent(
            kind, client.name, client.group, self.incarnation[client.group], client.member_id,
            client.generation,
        )
        self._take(step)
        return rid

    def _take(self, step: Step) -> None:
        self.writes.extend(step.writes)
        self._track_groups()
        for rid, response in step.responses:
            assert rid not in self.answered, f"request {rid} answered twice"
            self.answered.add(rid)
            sent = self.sent.get(rid)
            if sent is None:
                continue
            code = getattr(response, "error_code", NONE)
            event(f"{sent.kind}: {code.name}")
            client = self.clients[sent.client]
            if sent.kind == "join":
                assert isinstance(response, JoinGroupResponse)
                client.join_rid = None
                self._on_join(client, sent, response)
            elif sent.kind == "sync":
                assert isinstance(response, SyncGroupResponse)
                client.sync_rid = None
                self._on_sync(client, sent, response)
            elif isinstance(response, HeartbeatResponse):
                if response.error_code in (
                    ErrorCode.unknown_member_id,
                    ErrorCode.fenced_instance_id,
                ):
                    client.member_id, client.generation = "", -1
                if response.error_code != NONE:
                    client.needs_rejoin = True

    def _on_join(self, client: Client, sent: Sent, r: JoinGroupResponse) -> None:
        if r.error_code == NONE:
            key = (sent.group, self.incarnation[sent.group], r.generation_id)
            assert self.leaders.setdefault(key, r.leader) == r.leader, "two leaders"
            if r.members:
                assert r.member_id == r.leader and not r.skip_assignment
            if client.instance and client.previous_id not in ("", r.member_id):
                event("static member replaced")
                snap = self._snap(sent.group)
                if snap is not None and snap.generation == r.generation_id:
                    event("static member replaced without rebalance")
            client.previous_id = ""
            client.member_id, client.generation = r.member_id, r.generation_id
            client.leader = r.member_id == r.leader
            client.members = [m.member_id for m in r.members]
            client.needs_rejoin = False
        elif r.error_code == ErrorCode.member_id_required:
            client.member_id = r.member_id
        elif r.error_code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            client.member_id, client.generation = "", -1

    def _on_sync(self, client: Client, sent: Sent, r: SyncGroupResponse) -> None:
        if r.error_code != NONE:
            if r.error_code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                client.member_id, client.generation = "", -1
            client.needs_rejoin = True
            return
        client.synced_generation = sent.generation
        assert sent.member_id in self.current[sent.group], "assignment after leaving"
        record = self.assignments[(sent.group, sent.incarnation, sent.generation)]
        assert r.assignment == record.expected(sent.member_id, client.instance)

    def _track_groups(self) -> None:
        for g in GROUPS:
            snap = self._snap(g)
            if snap is None:
                if g in self.generations:
                    event("group removed")
                    del self.generations[g]
                    self.incarnation[g] += 1
                self.current[g] = set()
                continue
            previous = self.generations.get(g, 0)
            assert snap.generation >= previous, "generation went backwards"
            self.generations[g] = snap.generation
            ids = {m.member_id for m in snap.members}
            for m in snap.members:
                if m.group_instance_id is None:
                    if m.member_id not in self.current[g]:
                        assert m.member_id not in self.seen_dynamic, "a member came back"
                    self.seen_dynamic.add(m.member_id)
            self.current[g] = ids

    def _ack(self, error: ErrorCode) -> None:
        write = self.writes.popleft()
        for record in write.records:
            key = decode_key(record.key)
            if isinstance(key, GroupMetadataKey) and record.value is not None:
                empty = not decode_group_metadata_value(record.value).members
                if error == NONE:
                    self.dirty.discard(key.group)
                elif empty:
                    # Kafka too only warns: memory says Empty, the log the generation before.
                    self.dirty.add(key.group)
        if error == NONE:
            self.log.extend(write.records)
        self._take(self.c.write_completed(self.now, write.write_id, error))

    # -- rules --------------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(CLIENTS),
        protocols=st.sampled_from(["range", "range", "both", "rr"]),
        session=st.sampled_from([6_000, 10_000]),
        rebalance=st.sampled_from([6_000, 15_000]),
    )
    def join(self, name: str, protocols: str, session: int, rebalance: int) -> None:
        self.clients[name].protocols = protocols
        self._join(name, session, rebalance)

    def _join(self, name: str, session: int = 10_000, rebalance: int = 15_000) -> None:
        client = self.clients[name]
        if client.join_rid is not None:
            return
        protocols = client.protocols
        step = self.c.join_group(
            self.now,
            group_id=client.group,
            member_id=client.member_id,
            client_id=name,
            client_host="/127.0.0.1",
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            protocol_type="consumer",
            protocols=PROTOCOLS[protocols],
            group_instance_id=client.instance,
            api_version=8 if client.instance else 9,
        )
        client.join_rid = self._send("join", client, step)
        if client.join_rid in self.answered:
            client.join_rid = None

    def _client_step(self, name: str, drop: int, commit: bool) -> None:
        """What a well-behaved client does next."""
        client = self.clients[name]
        if client.join_rid is None and (not client.member_id or client.needs_rejoin):
            self._join(name)
        elif client.join_rid is None and client.sync_rid is None and (
            client.synced_generation != client.generation
        ):
            self.sync(name, drop)
        elif commit and client.synced_generation == client.generation:
            self.commit(name, False, drop % 3, drop * 10)
        elif client.member_id:
            self.heartbeat(name)

    @rule(name=st.sampled_from(CLIENTS), drop=st.integers(0, 6), commit=st.booleans())
    def client_step(self, name: str, drop: int, commit: bool) -> None:
        self._client_step(name, drop, commit)

    @rule(name=st.sampled_from(CLIENTS), drop=st.integers(0, 6), commit=st.booleans())
    def client_step_again(self, name: str, drop: int, commit: bool) -> None:
        self._client_step(name, drop, commit)

    @rule(name=st.sampled_from(CLIENTS))
    def all_clients_step(self, name: str) -> None:
        for other in CLIENTS:
            self._client_step(other, CLIENTS.index(name), False)

    @rule(name=st.sampled_from(CLIENTS))
    def restart(self, name: str) -> None:
        """The client process restarts: it forgets its member id (not its instance id)."""
        client = self.clients[name]
        client.previous_id = client.member_id
        client.member_id, client.generation, client.synced_generation = "", -1, -1
        client.needs_rejoin = True
        client.join_rid = client.sync_rid = None

    @rule(name=st.sampled_from(CLIENTS), drop=st.integers(0, 6))
    def sync(self, name: str, drop: int) -> None:
        client = self.clients[name]
        if client.sync_rid is not None or not client.member_id or client.generation < 0:
            return
        group = client.group
        key = (group, self.incarnation[group], client.generation)
        assignments = [
            (m, f"{group}:{client.generation}:{m}".encode())
            for i, m in enumerate(client.members)
            if i != drop
        ]
        snap = self._snap(group)
        first_leader_sync = (
            client.leader
            and snap is not None
            and snap.state is GroupState.COMPLETING_REBALANCE
            and snap.generation == client.generation
            and snap.leader_id == client.member_id
            and key not in self.assignments
        )
        if first_leader_sync:
            assert snap is not None
            self.assignments[key] = Assignment(
                {m: a for m, a in assignments if m in {x.member_id for x in snap.members}},
                {m.member_id: m.group_instance_id for m in snap.members},
            )
        step = self.c.sync_group(
            self.now,
            group_id=group,
            generation_id=client.generation,
            member_id=client.member_id,
            assignments=assignments if client.leader else (),
            group_instance_id=client.instance,
        )
        client.sync_rid = self._send("sync", client, step)
        if client.sync_rid in self.answered:
            client.sync_rid = None

    @rule(name=st.sampled_from(CLIENTS))
    def heartbeat(self, name: str) -> None:
        client = self.clients[name]
        step = self.c.heartbeat(
            self.now,
            group_id=client.group,
            generation_id=client.generation,
            member_id=client.member_id,
            group_instance_id=client.instance,
        )
        self._send("hb", client, step)

    @rule(name=st.sampled_from(CLIENTS), by_instance=st.booleans())
    def leave(self, name: str, by_instance: bool) -> None:
        client = self.clients[name]
        member = ("", client.instance) if by_instance and client.instance else (
            client.member_id, client.instance
        )
        self._send("leave", client, self.c.leave_group(self.now, group_id=client.group,
                                                         members=[member]))

    @rule(
        name=st.sampled_from(CLIENTS),
        simple=st.booleans(),
        partition=st.integers(0, 2),
        offset=st.integers(0, 1000),
    )
    def commit(self, name: str, simple: bool, partition: int, offset: int) -> None:
        client = self.clients[name]
        topic = "t" if partition < 2 else "gone"
        entry = OffsetCommitEntry(topic, partition, offset, metadata=f"{name}@{offset}")
        if simple:
            step = self.c.commit_offsets(self.now, group_id=client.group, offsets=[entry])
        else:
            step = self.c.commit_offsets(
                self.now,
                group_id=client.group,
                offsets=[entry],
                generation_id=client.generation,
                member_id=client.member_id,
                group_instance_id=client.instance,
            )
        self._send("commit", client, step)

    @rule(group=st.sampled_from(GROUPS), dice=st.integers(0, 3))
    def delete_group(self, group: str, dice: int) -> None:
        if dice:
            return
        self._send("delete", self.clients[CLIENTS[GROUPS.index(group)]],
                   self.c.delete_groups(self.now, [group]))

    @rule(group=st.sampled_from(GROUPS), partition=st.integers(0, 2))
    def delete_offsets(self, group: str, partition: int) -> None:
        topic = "t" if partition < 2 else "gone"
        step = self.c.delete_offsets(self.now, group_id=group, partitions=[(topic, partition)])
        self._send("offset-delete", self.clients[CLIENTS[GROUPS.index(group)]], step)

    @rule(ms=st.sampled_from([0, 300, 1_000, 2_000, 3_000, 5_000, 7_000, 16_000, 45_000]))
    def advance(self, ms: int) -> None:
        self.now += ms
        self._take(self.c.poll(self.now))

    @precondition(lambda self: bool(self.writes))
    @rule(fail=st.integers(0, 5), error=st.sampled_from(ERRORS))
    def ack(self, fail: int, error: ErrorCode) -> None:
        self._ack(error if fail == 0 else NONE)

    @precondition(lambda self: bool(self.writes))
    @rule()
    def ack_all(self) -> None:
        while self.writes:
            self._ack(NONE)

    @rule()
    def replay_matches(self) -> None:
        self._check_replay()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def stable_groups_hold_the_leaders_assignment(self) -> None:
        for g in GROUPS:
            snap = self._snap(g)
            if snap is None or snap.state is not GroupState.STABLE:
                continue
            record = self.assignments.get((g, self.incarnation[g], snap.generation))
            if record is None:
                continue
            for m in snap.members:
                assert m.assignment == record.expected(m.member_id, m.group_instance_id)
            if len(snap.members) > 1:
                event("stable group with several members")

    @invariant()
    def pending_requests_are_the_unanswered_ones(self) -> None:
        assert self.c.pending_request_ids() == set(self.sent) - self.answered

    def _check_replay(self) -> None:
        fresh = GroupCoordinator(self.config)
        for record in self.log:
            fresh.replay(record.key, record.value)
        for g in GROUPS:
            assert fresh.committed_offsets(g) == self.c.committed_offsets(g)
            if g in self.dirty or self._group_write_pending(g):
                continue
            live, back = self._snap(g), fresh.snapshot(g)
            if live is None or live.state is GroupState.DEAD:
                continue
            if live.state not in (GroupState.STABLE, GroupState.EMPTY) or live.generation == 0:
                continue
            assert back is not None
            assert (back.generation, back.protocol_type, back.protocol_name, back.leader_id) == (
                live.generation, live.protocol_type, live.protocol_name, live.leader_id
            )
            assert [_member_view(m, back.protocol_name) for m in back.members] == [
                _member_view(m, live.protocol_name) for m in live.members
            ]
        for g in fresh.group_ids():
            assert g in self.c.group_ids() or g in self.dirty

    def _group_write_pending(self, group: str) -> bool:
        return any(
            decode_key(r.key) == GroupMetadataKey(group) for w in self.writes for r in w.records
        )

    def teardown(self) -> None:
        if not hasattr(self, "clients"):
            return
        for _ in range(6):
            while self.writes:
                self._ack(NONE)
            self.now += 400_000
            self._take(self.c.poll(self.now))
        while self.writes:
            self._ack(NONE)
        assert self.c.pending_request_ids() == set()
        assert set(self.sent) <= self.answered, "a request was never answered"
        self._check_replay()


def _member_view(m: MemberSnapshot, protocol: str | None) -> tuple[object, ...]:
    metadata = next((meta for name, meta in m.protocols if name == protocol), b"")
    return (
        m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
        m.rebalance_timeout_ms, m.assignment, metadata,
    )


GroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupMachine = GroupMachine.TestCase
