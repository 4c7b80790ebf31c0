"""The cluster settings of a node: the metadata quorum's voters, its Raft timings,
brokers' heartbeats and fencing, replication (replica.*) and the log's group commit
(group.commit.*). ``BrokerConfig`` inherits them; what needs other groups too (the
controller role, the quorum of a cluster of one) is in eddy.config.

Raft's timings (issue 28). Seed 004 gave 250 ms heartbeats and a 299 ms minimum election
timeout: a follower then campaigns once its leader is 49 ms late, which a busy machine
(a CPU hog on every core, a long step on the leader's loop) makes routine, and a 3-node
cluster churned. The election timeout is 1000 ms now (each wait drawn in [1, 2) s, as
etcd's default), the heartbeat stays 250 ms: a leader may be 750 ms late before anyone
campaigns, and a node's own stalls are not counted against its leader at all (see
``RaftNode.tick``). Failover after a kill -9 does not wait for these timeouts: the
followers find the leader's Kafka listener refusing connections
(``broker.liveness.probe.ms``) and campaign at once, so it stays well under 2 s; only a
leader that is alive but silent (cut off, stopped) waits out 1-2 s of election timeout.
Measured (``bench/raft_calm.py``, 3 nodes, a busy loop per core on a busy 2-core machine,
5 minutes): at 299 ms 3.8 metadata and 3.6 offsets elections a minute, at 1000 ms none
(none either in 10 idle minutes or under 1 MB produce); kill -9 of the controller under the
hog: a new one in 0.5 s (median), 1.4 s at most."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from eddy.config_parse import parse_host_port, split_list
from eddy.mesh.settings import NodeIdentity

__all__ = ["ClusterNode", "ClusterSettings", "parse_quorum_voters"]


def parse_quorum_voters(value: str) -> dict[int, str]:
    """Kafka's controller.quorum.voters, ``id@host:port,...`` (here the hosts are mesh
    addresses), as node id -> ``host:port``."""
    voters: dict[int, str] = {}
    for item in split_list(value):
        node, sep, addr = item.partition("@")
        if not sep or not node.strip().isdigit() or int(node) <= 0:
            raise ValueError(f"expected ID@HOST:PORT items (ids from 1), got {item!r}")
        parse_host_port(addr.strip(), f"controller.quorum.voters ({node})")
        if int(node) in voters:
            raise ValueError(f"node {int(node)} is named twice")
        voters[int(node)] = addr.strip()
    return voters


class ClusterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    controller_quorum_voters: str = Field(
        "", alias="controller.quorum.voters",
        description="ID@HOST:PORT list of the metadata quorum's voters (HOST:PORT: their mesh "
        "addresses); set: the node is part of a cluster whose metadata lives in Raft",
    )
    raft_heartbeat_interval_ms: int = Field(
        250, ge=10, alias="raft.heartbeat.interval.ms",
        description="how often a Raft leader (metadata and offsets groups) heartbeats its "
        "followers (seed 004's 250 ms)",
    )
    raft_election_timeout_ms: int = Field(
        1000, ge=20, alias="raft.election.timeout.ms",
        description="the least a Raft follower waits without hearing from its leader before "
        "it campaigns (each wait is drawn in [this, twice this)); 1000 ms: calm under a CPU "
        "hog (seed 004's 299 ms churned), see this module's docstring",
    )
    broker_heartbeat_interval_ms: int = Field(
        250, ge=10, alias="broker.heartbeat.interval.ms",
        description="how often a broker heartbeats to the controller (seed 004's 250 ms)",
    )
    broker_session_timeout_ms: int = Field(
        1500, ge=50, alias="broker.session.timeout.ms",
        description="a broker silent this long is fenced and loses its leaderships (6 "
        "heartbeats: failover within 2 s, see cluster/controller/config.py)",
    )
    broker_liveness_probe_ms: int = Field(
        300, ge=0, alias="broker.liveness.probe.ms",
        description="a broker this long without a heartbeat has its Kafka listener probed by "
        "the controller; a refused connection (the process is gone) fences it at once "
        "instead of after broker.session.timeout.ms; 0: off",
    )
    auto_leader_rebalance_enable: bool = Field(
        True, alias="auto.leader.rebalance.enable",
        description="the controller moves leadership back to each partition's preferred "
        "replica (the first one) when it is alive and in the ISR and its broker leads too "
        "few of the partitions it prefers (leader.imbalance.per.broker.percentage)",
    )
    leader_imbalance_check_interval_seconds: int = Field(
        300, ge=1, alias="leader.imbalance.check.interval.seconds",
        description="how often the controller checks for leaders to move back (the first "
        "check comes within 60 s of a controller taking over or a broker coming back)",
    )
    leader_imbalance_per_broker_percentage: int = Field(
        10, ge=0, le=100, alias="leader.imbalance.per.broker.percentage",
        description="a broker's partitions led elsewhere, in percent of those it is the "
        "preferred leader of, above which their leadership moves back to it",
    )
    replica_lag_time_max_ms: int = Field(
        10000, ge=1, alias="replica.lag.time.max.ms",
        description="a follower not caught up for this long leaves the ISR",
    )
    replica_lag_max_messages: int = Field(
        0, ge=0, alias="replica.lag.max.messages",
        description="a follower this many offsets behind leaves the ISR (0: off, as Kafka "
        "since KIP-16: a burst of produce would make every follower flap out and in)",
    )
    replica_fetch_max_bytes: int = Field(
        1048576, ge=1, alias="replica.fetch.max.bytes",
        description="bytes a follower asks per partition in one fetch",
    )
    replica_fetch_response_max_bytes: int = Field(
        10485760, ge=1, alias="replica.fetch.response.max.bytes",
        description="bytes a follower asks in one fetch over every partition",
    )
    replica_fetch_wait_max_ms: int = Field(
        500, ge=0, alias="replica.fetch.wait.max.ms",
        description="how long a leader holds a follower's fetch that finds nothing new",
    )
    group_commit_window_us: int = Field(
        200, ge=0, le=1_000_000, alias="group.commit.window.us",
        description="an fsync about to start waits this long for more appends to join it "
        "(seed 001's group commit window; 0: at once)",
    )
    group_commit_max_bytes: int = Field(
        4 << 20, ge=0, alias="group.commit.max.bytes",
        description="...unless this many bytes are already waiting for it",
    )
    group_commit_max_writes: int = Field(
        1000, ge=0, alias="group.commit.max.writes",
        description="...or this many records",
    )

    @field_validator("controller_quorum_voters")
    @classmethod
    def _voters(cls, v: str) -> str:
        parse_quorum_voters(v)
        return v

    @model_validator(mode="after")
    def _session_outlasts_heartbeats(self) -> ClusterSettings:
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms:
            raise ValueError("broker.session.timeout.ms must be above "
                             "broker.heartbeat.interval.ms")
        if self.raft_election_timeout_ms <= self.raft_heartbeat_interval_ms:
            raise ValueError("raft.election.timeout.ms must be above "
                             "raft.heartbeat.interval.ms")
        return self


class ClusterNode(NodeIdentity, Protocol):
    """What the cluster service reads of its node's settings: who the node is, the quorum's
    voters, the defaults of topics it creates and the brokers' heartbeats and fencing. The
    node's settings (``eddy.broker.settings.BrokerSettings``) have them all; the cluster does
    not import them."""

    @property
    def quorum_voters(self) -> dict[int, str]: ...

    @property
    def num_partitions(self) -> int: ...

    @property
    def default_replication_factor(self) -> int: ...

    @property
    def raft_heartbeat_interval_ms(self) -> int: ...

    @property
    def raft_election_timeout_ms(self) -> int: ...

    @property
    def broker_heartbeat_interval_ms(self) -> int: ...

    @property
    def broker_session_timeout_ms(self) -> int: ...

    @property
    def broker_liveness_probe_ms(self) -> int: ...

    @property
    def auto_leader_rebalance_enable(self) -> bool: ...

    @property
    def leader_imbalance_check_interval_seconds(self) -> int: ...

    @property
    def leader_imbalance_per_broker_percentage(self) -> int: ...
