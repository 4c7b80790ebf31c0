"""The whole-cluster simulation's settings (``ClusterConfig``), its result
(``ClusterResult``) and the command that replays a run (``replay_command``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from eddy.cluster.controller import ControllerConfig
from eddy.cluster.raft.ready import RaftConfig
from eddy.cluster.raft.sim.network import SimConfig

__all__ = ["ClusterConfig", "ClusterResult", "replay_command"]


def _controller_config() -> ControllerConfig:
    # the preferred-leader rebalance runs within a short run too
    return ControllerConfig(leader_imbalance_check_interval_ms=2_000)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    nodes: int = 3
    duration_ms: int = 4_000  # faults and clients run this long, then the cluster heals
    settle_ms: int = 6_000  # healed, faults off: the cluster must settle in this time
    #: then no new commands (controller ticks, AlterPartition) this long, so what is in
    #: flight reaches every node before the final checks compare them
    quiesce_ms: int = 500
    faults: bool = True
    fault_gap_ms: int = 450
    pauses: bool = True  # pauses among the faults (a node, the leader, every node)
    drop: float | None = None  # None: drawn per seed
    duplicate: float | None = None
    crash_mid_ready: float = 0.02
    crash_all_at_ms: tuple[int, ...] = ()
    compact_every: int = 40
    topics: int = 4  # created besides the key-value topic
    kv_clients: int = 2
    kv_keys: tuple[str, ...] = ("retention.ms", "flush.ms")
    max_ops_per_client: int = 200
    client_timeout_ms: int = 1_500
    rpc_timeout_ms: int = 600  # a broker's attempt at one controller
    alter_isr: bool = True
    #: the offsets Raft group and the group coordinator on its leader, with clients
    #: committing and fetching offsets of ``offsets_groups`` x ``offsets_partitions``
    offsets: bool = True
    offsets_clients: int = 2
    offsets_groups: tuple[str, ...] = ("g0", "g1")
    offsets_partitions: int = 2
    offsets_wander: float = 0.2  # a request sent to a random node instead
    #: the offsets driver's write timeout (seed 004: 30 s): a read barrier not confirmed
    #: within it is asked for again (``caught_up_as_leader``)
    offsets_write_timeout_ms: int = 30_000
    #: OffsetFetch answered only after a read barrier confirms the coordinator still leads
    #: (the broker's handler in a cluster); False: from memory at once (the model before
    #: that change: a coordinator cut off from the quorum answers stale offsets)
    offsets_fetch_barrier: bool = True
    fence_grace_ms: int = 5_000
    #: the controller's probes of silent brokers find crashed ones (None: drawn per seed;
    #: False: every probe times out, as across a network partition)
    probes: bool | None = None
    controller: ControllerConfig = field(default_factory=_controller_config)
    raft: RaftConfig = field(default_factory=RaftConfig)

    def sim_config(self) -> SimConfig:
        return SimConfig(nodes=self.nodes, duration_ms=self.duration_ms,
                         settle_ms=self.settle_ms + self.quiesce_ms, drop=self.drop,
                         duplicate=self.duplicate,
                         faults=self.faults, fault_gap_ms=self.fault_gap_ms,
                         pauses=self.pauses,
                         crash_mid_ready=self.crash_mid_ready, clients=0,
                         compact_every=self.compact_every,
                         crash_all_at_ms=self.crash_all_at_ms, raft=self.raft)


def replay_command(nodes: int, seed: int, config: ClusterConfig | None = None) -> str:
    """The command that replays a run, every event printed."""
    extra = ""
    if config is not None:
        default = ClusterConfig()
        if config.duration_ms != default.duration_ms:
            extra += f" --duration-ms {config.duration_ms}"
        if config.settle_ms != default.settle_ms:
            extra += f" --settle-ms {config.settle_ms}"
        if config.crash_all_at_ms:
            extra += f" --crash-all-at {','.join(map(str, config.crash_all_at_ms))}"
        if not config.offsets:
            extra += " --no-offsets"
        if not config.offsets_fetch_barrier:
            extra += " --no-fetch-barrier"
    return f"python -m bench.sim --nodes {nodes} --seed {seed}{extra} --trace"


@dataclass
class ClusterResult:
    seed: int
    nodes: int
    failure: str | None
    failed_at_event: int | None
    events: int
    elections: int
    activations: int  # controllers started
    failovers: int  # activations on another node than the previous controller's
    controller_after_crash_ms: list[int]  # the controller's node crashed -> a new one
    commands_applied: int  # distinct log entries applied without rejection
    applied_kinds: dict[str, int]  # the same, by command kind
    kv_ops_ok: int
    offsets_ops_ok: int  # offset commits and fetches answered without error
    offsets_fetched: int  # fetches that found a committed offset
    offsets_elections: int
    coordinator_activations: int  # group coordinators rebuilt on an offsets leader
    topics_created: int
    power_cuts: int
    virtual_ms: int
    digest: str  # of every event and the final state: equal runs, equal digests
    replay: str  # the command that replays this run

    def report(self) -> str:
        if self.failure is None:
            return f"nodes={self.nodes} seed={self.seed}: ok"
        return (f"FAIL nodes={self.nodes} seed={self.seed} at event {self.failed_at_event}: "
                f"{self.failure}\n  replay: {self.replay}")
