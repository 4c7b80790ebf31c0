"""The whole-cluster simulation (``eddy.sim.cluster``): a few hundred seeds of 3-
and 5-node clusters (metadata and offsets Raft groups, controllers, group coordinators,
brokers, clients) under message loss, duplication, reordering, partitions, crashes losing
unsynced writes, power cuts, clock jumps and pauses. Every Raft, metadata and coordinator
invariant is checked after each step, the cluster must settle once healed, and the
key-value and offset commit/fetch histories must be linearizable. Deliberately broken variants
(subclasses using the simulation's hooks) show that the checks do fail; a directed run
cuts the group coordinator off and checks it answers no stale OffsetFetch."""

from __future__ import annotations

import pytest

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.messages import Heartbeat
from eddy.cluster.raft.ready import ReadState, Ready
from eddy.cluster.raft.sim.kv import HistOp, KvOp
from eddy.cluster.raft.sim.lockstep import LockstepCluster
from eddy.cluster.raft.types import Entry
from eddy.metadata import ApplyResult, MetadataState
from eddy.metadata.commands import CreateTopic, FenceBroker, RegisterBroker, UnfenceBroker
from eddy.sim.check import MetaChecker, SafetyViolation
from eddy.sim.cluster import ClusterConfig, ClusterResult, ClusterSim
from eddy.sim.node import (
    CLIENT_BASE,
    CommitRequest,
    FetchRequest,
    MetaNode,
    OffsetsReply,
    ReadReply,
    ReadRequest,
    Rpc,
    node_key,
)
from eddy.sim.offsets.clients import OFFSETS_CLIENT_BASE, TOPIC, register
from eddy.sim.offsets.group import (
    NOT_COORDINATOR,
    OffsetsGroup,
    Replica,
    rebuilt_offsets,
)
from eddy.sim.service import Responder

#: shorter runs than the bench's (a failure's replay command names these settings)
DURATION_MS = 3_000
SETTLE_MS = 4_500


#: the metadata checks' broken variants need no offsets group
_METADATA_ONLY = ClusterConfig(nodes=3, offsets=False)


def _config(nodes: int) -> ClusterConfig:
    return ClusterConfig(nodes=nodes, duration_ms=DURATION_MS, settle_ms=SETTLE_MS)


def _run(nodes: int, seeds: range) -> list[ClusterResult]:
    results = [ClusterSim(seed, _config(nodes)).run() for seed in seeds]
    failures = [r.report() for r in results if r.failure]
    assert not failures, "\n".join(failures)
    for r in results:
        assert r.activations >= 1 and r.kv_ops_ok > 0 and r.topics_created >= 1, r
        assert r.coordinator_activations >= 1 and r.offsets_ops_ok > 0, r
    return results


@pytest.mark.parametrize("block", range(3))
def test_three_node_clusters(block: int) -> None:
    _run(3, range(block * 40, block * 40 + 40))


@pytest.mark.parametrize("block", range(3))
def test_five_node_clusters(block: int) -> None:
    _run(5, range(5000 + block * 30, 5000 + block * 30 + 30))


def test_the_runs_exercise_failover_fencing_and_leader_moves() -> None:
    results = _run(5, range(500, 520))
    assert sum(r.failovers for r in results) >= 10
    assert sum(len(r.controller_after_crash_ms) for r in results) >= 5

    def kind(name: str) -> int:
        return sum(r.applied_kinds.get(name, 0) for r in results)

    for name in ("UnfenceBroker", "ChangePartitionLeader", "ChangeIsr",
                 "CreateTopic", "RegisterBroker", "AlterTopicConfigs"):
        assert kind(name) >= 3, (name, kind(name))
    # a controller's own stalls and clock jumps fence nobody any more (issue 28: its
    # sessions count its running time only), so fencing follows only a broker silent for a
    # session of the controller's running time: rarer in these runs (2 in these 20 seeds),
    # and tested directly in test_controller_stalls.py
    assert kind("FenceBroker") >= 1
    # the group coordinator moves too, and fetches find what was committed before a move
    assert sum(r.coordinator_activations for r in results) >= 2 * len(results)
    assert sum(r.offsets_elections for r in results) >= 2 * len(results)
    assert sum(r.offsets_fetched for r in results) >= 10 * len(results)


def test_every_node_losing_power_at_once_is_survived() -> None:
    for seed in range(8):
        config = ClusterConfig(nodes=3, crash_all_at_ms=(1_500, 3_000))
        r = ClusterSim(seed, config).run()
        assert r.failure is None, r.report()
        assert r.power_cuts >= 1


def test_a_seed_replays_exactly() -> None:
    a = ClusterSim(11, ClusterConfig(nodes=5)).run()
    b = ClusterSim(11, ClusterConfig(nodes=5)).run()
    c = ClusterSim(12, ClusterConfig(nodes=5)).run()
    assert a.digest == b.digest and a.events == b.events
    assert a.offsets_ops_ok == b.offsets_ops_ok > 0
    assert a.digest != c.digest
    metadata_only = ClusterSim(11, ClusterConfig(nodes=3, duration_ms=1_000, settle_ms=3_000,
                                                 offsets=False)).run()
    assert metadata_only.failure is None and metadata_only.offsets_ops_ok == 0
    assert "--no-offsets" in metadata_only.replay


def test_a_failure_names_its_seed_and_replay_command() -> None:
    r = _Diverges(3, ClusterConfig(nodes=3)).run()
    assert r.failure is not None
    assert "seed=3" in r.report()
    assert "python -m bench.sim --nodes 3 --seed 3 --trace" in r.report()
    short = _Diverges(4, _config(5)).run()
    assert (f"python -m bench.sim --nodes 5 --seed 4 --duration-ms {DURATION_MS} "
            f"--settle-ms {SETTLE_MS} --trace") in short.report()


# -- the checks catch broken clusters -----------------------------------------------------
class _Diverges(ClusterSim):
    """Node 2's state machine skips some entries."""

    def _apply_entry(self, meta: MetaNode, entry: Entry) -> ApplyResult:
        if meta.node_id == 2 and entry.index % 23 == 0:
            return ApplyResult()
        return super()._apply_entry(meta, entry)


class _StaleReads(ClusterSim):
    """Reads served without read-index, from the state of any live replica (the node
    asked, or another: a follower, or a leader that lost its lead without knowing yet).
    Clients follow the controller, so reads answered by the node asked alone were seldom
    stale once stalls stopped starting elections; a replica picked at random often
    lags."""

    def _on_rpc(self, msg: Rpc) -> None:
        node = self.nodes.get(msg.dst)
        if (not msg.reply and isinstance(msg.body, ReadRequest) and msg.dst < CLIENT_BASE
                and node is not None and node.raft is not None
                and (msg.src, msg.dst) not in self.blocked):
            replica = self.rng.choice(self.up())
            value = self.read_register(replica, msg.body.key)
            Responder(self, msg.dst, msg).answer(ReadReply(True, value=value))
            return
        super()._on_rpc(msg)


class _NeverStops(ClusterSim):
    """A controller that keeps running after its node lost leadership."""

    def _observe(self, raft: RaftNode, rd: Ready) -> None:
        meta = self.meta[raft.id]
        was = meta.controller.active
        super()._observe(raft, rd)
        if was and not meta.controller.active:
            meta.controller.active = True


class _ForgetfulCoordinator(OffsetsGroup):
    """A new coordinator that is not rebuilt from the offsets group's records."""

    def _activate(self, rep: Replica) -> None:
        records, rep.machine.records = rep.machine.records, {}
        try:
            super()._activate(rep)
        finally:
            rep.machine.records = records


class _CoordinatorNeverStops(OffsetsGroup):
    """A coordinator that keeps serving after its node lost the offsets leadership."""

    def _observe(self, rep: Replica, rd: Ready) -> None:
        was = rep.serving
        super()._observe(rep, rd)
        rep.serving = rep.serving or was


class _FetchAnywhere(OffsetsGroup):
    """OffsetFetch answered from the records some replica (any) applied."""

    def handle(self, i: int, rpc: Rpc) -> None:
        rep = self.live.get(i)
        body = rpc.body
        if rep is None or not isinstance(body, FetchRequest):
            super().handle(i, rpc)
            return
        replica = self.live[self.sim.rng.choice(sorted(self.live))]
        tp = (body.topic, body.partition)
        offset = rebuilt_offsets(replica.machine.ordered()).committed_offsets(
            body.group).get(tp)
        self._reply(rep, rpc, OffsetsReply(0, -1 if offset is None else offset.offset), False)


def _broken(group: type[OffsetsGroup]) -> type[ClusterSim]:
    class Broken(ClusterSim):
        def _offsets_group(self) -> OffsetsGroup:
            return group(self)
    return Broken


def test_a_coordinator_not_rebuilt_from_the_records_is_caught() -> None:
    sim = _broken(_ForgetfulCoordinator)
    failures = [r.failure for r in (sim(s, _config(3)).run() for s in range(8)) if r.failure]
    assert len(failures) >= 3
    assert all(f.startswith(("offsets coordinator", "offsets linearizability"))
               for f in failures), failures


def test_a_coordinator_outliving_its_leadership_is_caught() -> None:
    sim = _broken(_CoordinatorNeverStops)
    failures = [r.failure for r in (sim(s, _config(3)).run() for s in range(4)) if r.failure]
    assert failures and all("coordinator safety" in f for f in failures), failures


def test_offset_fetches_from_followers_are_caught_by_the_linearizability_check() -> None:
    sim = _broken(_FetchAnywhere)
    failures = [r.failure for r in (sim(s, _config(3)).run() for s in range(10)) if r.failure]
    assert failures and all("offsets linearizability" in f for f in failures), failures


class _IsolatedCoordinator(ClusterSim):
    """A directed run (no random faults, no loss): offset 1 is committed through the group
    coordinator, its node is then cut off from the other nodes both ways (clients still
    reach it), offset 2 is committed through the coordinator the others elect, and once
    that is acknowledged a fetch goes to the old one. At the cut the old node's clock
    steps back ``STALL_MS`` (its Raft core counts that as no time passing): its
    check-quorum runs that much later, so it still leads and serves when the fetch
    reaches it, whichever election timeouts the others draw (without the stall that is
    so in about 1 seed of 6; with 500 ms in 59 of 60). The ops go to the offsets history
    the run checks."""

    CLIENT = OFFSETS_CLIENT_BASE + 99
    KEY = register("g0", 0)
    STALL_MS = 1_500

    def __init__(self, seed: int, barrier: bool) -> None:
        super().__init__(seed, ClusterConfig(
            nodes=3, duration_ms=3_000, settle_ms=2_500, faults=False, drop=0.0,
            duplicate=0.0, kv_clients=0, offsets_clients=0, offsets_fetch_barrier=barrier))
        self._handlers["script"] = self._script
        self.old = 0  # the coordinator cut off
        self.committed = 0  # the last offset whose commit was acknowledged
        self.old_serving_at_fetch: bool | None = None  # when the fetch reached it
        self.fetched: OffsetsReply | None = None
        self._phase = "first"
        self._op: HistOp | None = None
        self.schedule(1_500, "script", None)

    def _send(self, dst: int, offset: int | None) -> None:
        n = len(self.oworkload.history) + 1
        if offset is None:
            op = KvOp(self.CLIENT, n, "get", self.KEY)
            body: CommitRequest | FetchRequest = FetchRequest("g0", TOPIC, 0)
        else:
            op = KvOp(self.CLIENT, n, "put", self.KEY, str(offset))
            body = CommitRequest("g0", TOPIC, 0, offset)
        self._op = HistOp(op, call=self.events)
        self.send_rpc(Rpc(self.CLIENT, dst, n, body))

    def _script(self, _: object) -> None:
        """Polled every 5 ms until a serving coordinator (another than the old one after
        the partition) is there to send the next commit to."""
        if self._phase == "fetch" and self._op is None:
            self._send(self.old, None)
        if self._op is None and self._phase in ("first", "second"):
            serving = [i for i, rep in self.offsets.live.items()
                       if rep.serving and i != self.old]
            if serving:
                self._send(serving[0], self.committed + 1)
        if self._phase != "done":
            self.schedule(5, "script", None)

    def _on_rpc(self, msg: Rpc) -> None:
        if msg.dst == self.old and msg.src == self.CLIENT:
            self.old_serving_at_fetch = self.offsets.live[self.old].serving
        if msg.dst != self.CLIENT:
            super()._on_rpc(msg)
            return
        h, body = self._op, msg.body
        assert h is not None and isinstance(body, OffsetsReply)
        self._op = None
        if h.op.kind == "get":
            if not body.error:
                h.ret, h.result = self.events, str(body.offset) if body.offset >= 0 else None
                self.oworkload.history.append(h)
            self.fetched, self._phase = body, "done"
            self.blocked.clear()
            return
        if body.error:  # not the coordinator (any more): the script sends it again
            assert not msg.proposed  # no loss here: no outcome is left unknown
            return
        h.ret, h.result = self.events, True
        self.oworkload.history.append(h)
        self.committed = int(h.op.value)
        if self._phase == "first":  # cut the coordinator off
            self.old, self._phase = msg.src, "second"
            others = [i for i in self.nodes if i != self.old]
            self.blocked |= {(self.old, i) for i in others} | {(i, self.old) for i in others}
            self.nodes[self.old].clock_offset -= self.STALL_MS
            self.note(f"script: coordinator {self.old} cut off from {others}")
        else:  # acknowledged: the fetch goes in a later event (after, in real time)
            self._phase = "fetch"
            self.schedule(1, "script", None)


def test_a_coordinator_cut_off_from_the_quorum_answers_no_stale_offset() -> None:
    """The old coordinator still serves when the fetch reaches it: with the read barrier
    it answers NOT_COORDINATOR (its barrier reaches no quorum; check-quorum then steps it
    down), without it the offset the new coordinator replaced, which the linearizability
    check catches."""
    seeds = range(8)
    runs = [(_IsolatedCoordinator(s, barrier=True), _IsolatedCoordinator(s, barrier=False))
            for s in seeds]
    for fixed, broken in runs:
        r, b = fixed.run(), broken.run()
        assert r.failure is None, r.report()
        for sim in (fixed, broken):
            assert sim.committed == 2 and sim.old_serving_at_fetch, sim.seed
        assert fixed.fetched is not None and fixed.fetched.error == NOT_COORDINATOR
        assert broken.fetched is not None
        assert (broken.fetched.error, broken.fetched.offset) == (0, 1)
        assert b.failure is not None and b.failure.startswith(
            "offsets linearizability"), b.report()
        assert "--no-fetch-barrier" in b.replay


def test_diverging_replicas_are_caught() -> None:
    r = _Diverges(1, ClusterConfig(nodes=3)).run()
    assert r.failure is not None and "metadata" in r.failure


def test_stale_reads_are_caught_by_the_linearizability_check() -> None:
    failures = [r.failure for r in (_StaleReads(s, _METADATA_ONLY).run()
                                    for s in range(20)) if r.failure]
    assert failures and all("linearizability" in f for f in failures)


def test_a_controller_outliving_its_leadership_is_caught() -> None:
    failures = [r.failure for r in (_NeverStops(s, _METADATA_ONLY).run()
                                    for s in range(6)) if r.failure]
    assert failures and all("controller safety" in f for f in failures)


def _state_with_a_fenced_isr_member() -> MetadataState:
    state = MetadataState()
    for node in (1, 2):
        assert state.apply(RegisterBroker(node, node_key(node), None, f"h{node}:1",
                                          f"h{node}:2", 1)).ok
        assert state.apply(UnfenceBroker(node, 1)).ok
    assert state.apply(CreateTopic("t", bytes(range(1, 17)), ((1, 2),), ())).ok
    assert state.apply(FenceBroker(2, 1)).ok  # its ISR removal not applied yet
    return state


def test_a_fenced_isr_member_is_a_transient_only() -> None:
    checker = MetaChecker(fence_grace_ms=1_000)
    state = _state_with_a_fenced_isr_member()
    checker.check_fencing(10_000, 4, state)
    checker.check_fencing(10_900, 4, state)
    checker.check_fencing(11_500, 5, state)  # a new controller gets its own grace
    with pytest.raises(SafetyViolation, match=r"fencing: .*fenced ISR members \[2\]"):
        checker.check_fencing(12_600, 5, state)


def test_replicas_at_one_index_must_hold_one_state() -> None:
    checker = MetaChecker(fence_grace_ms=1_000)
    a, b = _state_with_a_fenced_isr_member(), _state_with_a_fenced_isr_member()
    checker.on_state(1, 7, a)
    checker.on_state(2, 7, b)
    assert b.apply(UnfenceBroker(2, 1)).ok
    checker.on_state(2, 8, b)
    with pytest.raises(SafetyViolation, match="metadata prefix: node 3"):
        checker.on_state(3, 7, b)
    with pytest.raises(SafetyViolation, match="controller safety"):
        checker.controller_started(1, 3)
        checker.controller_started(2, 3)


def test_a_read_barrier_whose_heartbeats_were_lost_is_confirmed_by_the_next_heartbeat() -> None:
    """A coordinator's (or controller's) read barrier: its read-index heartbeats lost, the
    leader's periodic heartbeats carry the pending read (etcd's rule) instead of waiting
    for the driver's 30 s write timeout (the simulation found coordinators that never
    activated after healing)."""
    c = LockstepCluster(3)
    lead = c.elect(1)
    c.propose(1, b"x")
    lead.read_index(b"barrier")
    rd = lead.ready()
    assert rd is not None
    assert any(isinstance(m, Heartbeat) and m.ctx == b"barrier" for m in rd.messages)
    lead.advance(rd)  # those heartbeats are lost
    states: list[ReadState] = []
    ready = lead.ready

    def capture() -> Ready | None:
        out = ready()
        if out is not None:
            states.extend(out.read_states)
        return out

    lead.ready = capture  # type: ignore[method-assign]
    c.tick(400)
    assert [(s.index, s.ctx) for s in states] == [(lead.commit, b"barrier")]
