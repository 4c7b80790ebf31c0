"""The controller's settings (Kafka's names where Kafka has the setting) and its error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from eddy.protocol.errors import ErrorCode

__all__ = ["ControllerConfig", "ControllerError"]


class ControllerError(Exception):
    """A request the controller refuses before proposing anything; ``code`` is the Kafka
    error to answer with, ``message`` names the field or the reason."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Controller settings, all times in milliseconds.

    Why ``heartbeat_interval_ms`` 250 and ``session_timeout_ms`` 1500 (Kafka: 2000 and
    9000, so ~9 s without a leader after a hard kill): the issue asks for failover within
    2 s. A broker killed right after a heartbeat is fenced 1.5 s later, on the first
    controller tick after that (ticks every ``heartbeat_interval_ms`` or faster), and the
    fence and its leader elections go out in one Raft batch (one round trip and one fsync,
    a few ms on a LAN); clients then learn the new leader from NOT_LEADER_OR_FOLLOWER or
    KIP-951's current-leader field without a metadata round trip. So a partition has a new
    leader ~1.6 s after the kill. A session is 6 heartbeats: five in a row may be lost (a
    QUIC loss burst, a GC or fsync stall up to ~1.2 s) before a live broker is fenced, and
    being fenced wrongly costs only a leader move (it is unfenced on its next heartbeat).

    When the metadata leader dies too, a new one is elected first (election timeout from
    299 ms, randomised: ~0.3-0.6 s) and starts with no sessions: every broker gets a fresh
    grace of ``session_timeout_ms`` (never fence everyone at once), except the brokers passed
    as suspects (the old leader, silent for at least an election timeout already), which
    get ``suspect_grace_ms`` (2 heartbeats): ~0.5 s + 0.5 s, still inside 2 s.

    Faster still when the process is gone (kill -9, a crash) rather than cut off:
    ``probe_after_ms`` after its last heartbeat the controller tries the broker's Kafka
    listener; refused, its leaderships move at once (``Controller.on_unreachable``), and a
    silent Raft leader is found the same way by its followers (``leader_watch``): ~0.5 s
    from the kill to the first acknowledged write on the new leader, measured.
    """

    heartbeat_interval_ms: int = 250  # broker.heartbeat.interval.ms
    session_timeout_ms: int = 1500  # broker.session.timeout.ms
    suspect_grace_ms: int = 500
    #: the controller not run for longer than this (a stall of its process: CPU starvation,
    #: a long step of its event loop, SIGSTOP, a clock jump) does not count against the
    #: brokers' sessions: each is extended by the gap, so brokers heartbeat again before any
    #: is fenced. It runs at least every heartbeat interval (0: twice that)
    stall_after_ms: int = 0
    #: the broker of this controller's own process (-1: none): its heartbeats are local
    #: calls, so its silence is this process's stall, never a broker failure: it is never
    #: fenced for an expired session (nor probed)
    local_broker: int = -1
    #: a broker silent this long (a heartbeat late) has its Kafka listener probed; nothing
    #: listening there (connection refused: the process died) fences it at once (0: off)
    probe_after_ms: int = 300
    unclean_leader_election: bool = False  # unclean.leader.election.enable (topic default)
    auto_leader_rebalance: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    #: the leader check also runs this soon after this controller starts and after a broker
    #: comes back (a rolling restart's leaders return within a minute, not five)
    leader_rebalance_soon_ms: int = 60_000
    default_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    producer_id_block_size: int = 1000  # Kafka's block size
    #: a full scan of every partition's leader and ISR against the brokers' liveness (also run
    #: at once whenever liveness changes): retries what was proposed and dropped
    partition_reconcile_interval_ms: int = 1000
    #: a proposed command is not proposed again before this (unless the state moved on)
    command_retry_ms: int = 3000
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    storage_gc_interval_ms: int = 30_000
    #: a hosted topic id must be unknown to the state this long before its data is deleted
    #: (covers a node whose applied metadata is ahead of this controller's)
    storage_gc_grace_ms: int = 10_000
    pipeline_schedule_interval_ms: int = 5_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or f.name == "local_broker":
                continue
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{f.name} must be a non-negative integer, got {value!r}")
        for name in ("heartbeat_interval_ms", "session_timeout_ms", "default_partitions",
                     "default_replication_factor", "producer_id_block_size",
                     "partition_reconcile_interval_ms", "leader_imbalance_check_interval_ms",
                     "offsets_retention_check_interval_ms", "storage_gc_interval_ms",
                     "pipeline_schedule_interval_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.session_timeout_ms <= self.heartbeat_interval_ms:
            raise ValueError(
                f"session_timeout_ms ({self.session_timeout_ms}) must be above "
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms})"
            )
        if 0 < self.stall_after_ms <= self.heartbeat_interval_ms:
            raise ValueError(
                f"stall_after_ms ({self.stall_after_ms}) must be above heartbeat_interval_ms "
                f"({self.heartbeat_interval_ms}): the controller runs that often"
            )
        if not isinstance(self.local_broker, int) or self.local_broker < -1:
            raise ValueError(f"local_broker must be a node id or -1, got {self.local_broker!r}")
        if self.leader_imbalance_per_broker_percentage > 100:
            raise ValueError("leader_imbalance_per_broker_percentage must be 0 to 100")

    @property
    def stall_limit_ms(self) -> int:
        """The longest gap between two runs of the controller that is not a stall."""
        return self.stall_after_ms or 2 * self.heartbeat_interval_ms

    @staticmethod
    def from_properties(props: Mapping[str, str]) -> ControllerConfig:
        """From Kafka-named properties (unknown names are ignored: they belong to others).
        Raises ``ValueError`` naming the property on a bad value."""
        out: dict[str, int | bool] = {}
        for prop, (field_name, scale) in _INT_PROPS.items():
            if prop in props:
                try:
                    out[field_name] = int(props[prop]) * scale
                except ValueError:
                    raise ValueError(f"{prop}: {props[prop]!r} is not an integer") from None
        for prop, field_name in _BOOL_PROPS.items():
            if prop in props:
                raw = props[prop].strip().lower()
                if raw not in ("true", "false"):
                    raise ValueError(f"{prop}: {props[prop]!r} is not true or false")
                out[field_name] = raw == "true"
        return ControllerConfig(**out)  # type: ignore[arg-type]


_INT_PROPS: dict[str, tuple[str, int]] = {
    "broker.heartbeat.interval.ms": ("heartbeat_interval_ms", 1),
    "broker.session.timeout.ms": ("session_timeout_ms", 1),
    "broker.liveness.probe.ms": ("probe_after_ms", 1),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_ms", 1000),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", 1),
    "num.partitions": ("default_partitions", 1),
    "default.replication.factor": ("default_replication_factor", 1),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", 1),
}
_BOOL_PROPS: dict[str, str] = {
    "unclean.leader.election.enable": "unclean_leader_election",
    "auto.leader.rebalance.enable": "auto_leader_rebalance",
}
