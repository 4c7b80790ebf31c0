"""The real ``metadata`` state machine for the Raft benchmarks, its commands, and
`python -m bench.metadata_snapshot`: ``snapshot()`` / ``restore()`` times of a big state.

The state machine is the product's (``eddy.cluster.machine.MetadataMachine``). The commands
are real ``encode_command`` bytes:

- setup: three brokers registered and unfenced, and the topic ``bench.configs``;
- writes (``write_command``): round robin over AlterTopicConfigs on ``bench.configs``,
  CreateAcl with a principal of its own, and BrokerHeartbeat;
- a big state (``entry_commands``) of N records, either N ACL bindings (``acls``: one
  CreateAcl each, distinct principals) or topics x partitions totalling N partition records
  (``partitions``: 1000 partitions of replication factor 3 per CreateTopic).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from eddy.cluster.machine import MetadataMachine
from eddy.metadata import encode_command
from eddy.metadata.commands import (
    AlterTopicConfigs,
    BrokerHeartbeat,
    CreateAcl,
    CreateTopic,
    MetadataCommand,
    RegisterBroker,
    UnfenceBroker,
)
from eddy.metadata.records import AclBinding, ConfigEntry

BROKERS = (1, 2, 3)
CONFIG_TOPIC = "bench.configs"
PARTITIONS_PER_TOPIC = 1000
KINDS = ("acls", "partitions")

# Kafka's ACL enums: resource TOPIC, pattern LITERAL, operation READ, permission ALLOW
_TOPIC, _LITERAL, _READ, _ALLOW = 2, 3, 3, 3


def _topic_id(n: int) -> bytes:
    return (n + 1).to_bytes(16, "big")


def _replicas(p: int) -> tuple[int, ...]:
    k = p % len(BROKERS)
    return BROKERS[k:] + BROKERS[:k]


def setup_commands() -> list[bytes]:
    """Brokers 1-3 registered and unfenced, and ``bench.configs`` (3 partitions, RF 3)."""
    cmds: list[MetadataCommand] = []
    for b in BROKERS:
        cmds.append(RegisterBroker(b, bytes([b]) * 32, f"rack-{b}", f"127.0.0.1:{9091 + b}",
                                   f"127.0.0.1:{7001 + b}", 1))
        cmds.append(UnfenceBroker(b, 1))
    cmds.append(CreateTopic(CONFIG_TOPIC, _topic_id(0), tuple(_replicas(p) for p in range(3)),
                            ()))
    return [encode_command(c) for c in cmds]


def acl(i: int, who: str = "user") -> AclBinding:
    return AclBinding(_TOPIC, f"topic-{i % 1000}", _LITERAL, f"User:{who}-{i}", "*", _READ,
                      _ALLOW)


def write_command(proposer: int, k: int) -> bytes:
    """The k-th write of a proposer: configs, a new ACL or a heartbeat, in turn."""
    kind = (proposer + k) % 3
    cmd: MetadataCommand
    if kind == 0:
        cmd = AlterTopicConfigs(CONFIG_TOPIC, (ConfigEntry("retention.ms", str(60_000 + k)),),
                                ())
    elif kind == 1:
        cmd = CreateAcl(acl(k, f"p{proposer}"))
    else:
        cmd = BrokerHeartbeat(BROKERS[proposer % len(BROKERS)], 1, 1_000 + k)
    return encode_command(cmd)


def entry_commands(kind: str, entries: int) -> list[bytes]:
    """Commands that add ``entries`` records of ``kind`` to a state made by the setup."""
    if kind == "acls":
        return [encode_command(CreateAcl(acl(i))) for i in range(entries)]
    if kind != "partitions":
        raise ValueError(f"unknown state kind {kind!r} (one of {', '.join(KINDS)})")
    out: list[bytes] = []
    for t, first in enumerate(range(0, entries, PARTITIONS_PER_TOPIC), start=1):
        count = min(PARTITIONS_PER_TOPIC, entries - first)
        out.append(encode_command(CreateTopic(
            f"bench-{t:05d}", _topic_id(t), tuple(_replicas(p) for p in range(count)), ())))
    return out


def build_state(kind: str, entries: int) -> MetadataMachine:
    """A state of ``entries`` records applied locally (no Raft)."""
    sm = MetadataMachine()
    for i, data in enumerate(setup_commands() + entry_commands(kind, entries), start=1):
        if not sm.apply(i, data).ok:
            raise RuntimeError(f"command {i} was rejected while building the state")
    return sm


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_snapshot_restore(kind: str, entries: int, repeats: int = 3) -> dict[str, float]:
    """Median ``snapshot()`` and ``restore()`` times of a state of ``entries`` records,
    and the snapshot's size; checks that the restored state encodes to the same bytes."""
    sm = build_state(kind, entries)
    data = sm.snapshot()
    snapshot_s = _median_s(sm.snapshot, repeats)
    fresh = MetadataMachine()
    restore_s = _median_s(lambda: fresh.restore(data), repeats)
    if fresh.snapshot() != data:
        raise RuntimeError("the restored state does not encode to the snapshot's bytes")
    return {"entries": entries, "bytes": len(data), "snapshot_s": snapshot_s,
            "restore_s": restore_s}


def describe(kind: str, entries: int) -> str:
    if kind == "acls":
        return f"{entries} ACL bindings"
    topics = -(-entries // PARTITIONS_PER_TOPIC)
    return f"{entries} partitions ({topics} topics, RF 3)"


def snapshot_row(kind: str, r: dict[str, float]) -> tuple[str, str]:
    return (f"snapshot()/restore(), {describe(kind, int(r['entries']))}",
            f"snapshot {r['snapshot_s'] * 1e3:6.0f} ms  restore {r['restore_s'] * 1e3:6.0f} ms"
            f"  ({r['bytes'] / 1e6:.2f} MB)")


def cli() -> None:
    p = argparse.ArgumentParser(description="snapshot()/restore() of the metadata state")
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--kind", choices=KINDS, default="acls")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    name, value = snapshot_row(args.kind, time_snapshot_restore(args.kind, args.entries,
                                                                args.repeats))
    print(f"  {name}  {value}")


if __name__ == "__main__":
    cli()
