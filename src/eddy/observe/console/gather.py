"""What the console's pages show, read from the node's own state on its event loop: the
cluster's metadata replica (every node has one), this node's logs, its Raft groups, its
transaction coordinator and the pipelines registered in the metadata. A node shows what
it knows: offsets and sizes of the partitions it holds a replica of.

Every list is bounded (``MAX_ROWS``); the answer says how many were left out.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eddy.log.config import TOPIC_CONFIGS, TopicConfig
from eddy.log.manager import INTERNAL_TOPICS
from eddy.mesh.directory import ALIVE
from eddy.metadata.records import NO_LEADER
from eddy.observe.console.params import ParamError
from eddy.observe.console.sampler import Sampler
from eddy.telemetry.pipeline_status import STATUS_TOPIC
from eddy.txn.coordinator import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.node.parts import Node
    from eddy.observe.pipelines import PipelineSource

#: rows any list of the console holds at most
MAX_ROWS = 1000
Readiness = Callable[["Node"], dict[str, str | None]]


def broker_of(node: Node) -> Broker:
    broker = node.broker
    assert broker is not None  # the admin listener runs only on a node with a broker
    return broker


def overview(node: Node, readiness: Readiness) -> dict[str, Any]:
    broker = broker_of(node)
    cluster = node.cluster
    checks = readiness(node)
    missing = {name: why for name, why in checks.items() if why is not None}
    now_ms = broker.clock.now_ms()
    brokers: list[dict[str, Any]] = []
    under = offline = partitions = 0
    announced = _announced_roles(node)
    if cluster is not None:
        state = cluster.state
        for b in state.all_brokers()[:MAX_ROWS]:
            brokers.append({
                "node_id": b.node_id, "rack": b.rack or "", "kafka_addr": b.kafka_addr,
                "roles": _roles(node, b.node_id, announced), "live": not b.fenced,
                "epoch": b.epoch,
                "this_node": b.node_id == node.config.node_id,
                "heartbeat_age_s": round(max(0, now_ms - b.last_heartbeat_ms) / 1000, 1)
                if b.last_heartbeat_ms > 0 else None,
            })
        for topic in list(state.topics.values()):
            for part in topic.partitions:
                partitions += 1
                if part.leader == NO_LEADER:
                    offline += 1
                elif len(part.isr) < len(part.replicas):
                    under += 1
        cluster_id, controller = cluster.cluster_id, cluster.controller_id
    else:
        brokers.append({"node_id": broker.node_id, "rack": node.config.broker_rack or "",
                        "kafka_addr": f"{broker.host}:{broker.port}",
                        "roles": _roles(node, broker.node_id, announced), "live": True,
                        "epoch": None, "this_node": True, "heartbeat_age_s": None})
        brokers += _mesh_peers(node, announced, now_ms)
        partitions = sum(1 for _ in broker.logs.all_partitions())
        cluster_id, controller = broker.cluster_id, broker.node_id
    return {
        "cluster_id": cluster_id, "node_id": node.config.node_id,
        "roles": ", ".join(sorted(node.config.roles)), "rack": node.config.broker_rack or "",
        "clustered": cluster is not None, "controller_id": controller,
        "health": "ready" if not missing else "not ready",
        "checks": [{"check": name, "ok": why is None, "detail": why or ""}
                   for name, why in checks.items()],
        "brokers": brokers, "live_brokers": sum(1 for b in brokers if b["live"]),
        "partitions": partitions, "under_replicated": under, "offline": offline,
        "topics": len(_topic_names(broker)), "groups": len(broker.groups.coordinator.group_ids())
        if broker.groups.serving else None,
        "registry": node.registry.url if node.registry is not None else "",
        "time_ms": now_ms,
    }


def _announced_roles(node: Node) -> dict[int, tuple[str, ...]]:
    """The roles each node of the mesh announced in its Hello (none without a mesh)."""
    if node.mesh is None:
        return {}
    return {m.info.kafka_node_id: m.info.roles for m in node.mesh.directory.alive()}


def _roles(node: Node, node_id: int, announced: dict[int, tuple[str, ...]]) -> str:
    """What this node knows of another's roles: its own config for itself; else a
    registered broker, a controller when it is a voter of controller.quorum.voters, and
    what it announced on the mesh."""
    if node_id == node.config.node_id:
        roles = set(node.config.roles)
    else:
        roles = {"broker"} | set(announced.get(node_id, ()))
        if node_id in node.config.quorum_voters:
            roles.add("controller")
    if node_id == node.config.node_id and node.registry is not None:
        roles.add("registry")
    return ", ".join(sorted(roles))


def _mesh_peers(node: Node, announced: dict[int, tuple[str, ...]], now_ms: int
                ) -> list[dict[str, Any]]:
    """The other nodes of the mesh (brokers and gateways) of a node outside a cluster, as
    their Hellos describe them."""
    if node.mesh is None:
        return []
    rows = []
    for m in node.mesh.directory.alive()[:MAX_ROWS]:
        info = m.info
        if info.kafka_node_id == node.config.node_id:
            continue
        rows.append({
            "node_id": info.kafka_node_id, "rack": info.rack or "",
            "kafka_addr": info.kafka_addr,
            "roles": ", ".join(sorted(announced.get(info.kafka_node_id, info.roles))),
            "live": m.state == ALIVE, "epoch": None, "this_node": False,
            "heartbeat_age_s": round(max(0, now_ms - m.last_seen_ms) / 1000, 1)
            if m.last_seen_ms > 0 else None,
        })
    return sorted(rows, key=lambda r: r["node_id"])


def raft(node: Node) -> dict[str, Any]:
    cluster = node.cluster
    if cluster is None:
        return {"clustered": False, "groups": [], "voters": []}
    groups, voters = [], []
    for s in cluster.multi.status():
        groups.append({
            "group": s.group, "role": s.role, "leader": s.leader or None, "term": s.term,
            "commit_index": s.commit_index, "applied_index": s.applied_index,
            "apply_lag": max(0, s.commit_index - s.applied_index),
            "voters": ", ".join(str(v) for v in s.voters),
            "learners": ", ".join(str(v) for v in s.learners),
        })
        for peer in sorted(set(s.voters) | set(s.learners)):
            voters.append({
                "group": s.group, "node_id": peer,
                "kind": "voter" if peer in s.voters else "learner",
                # lag is known on the leader only (its view of each follower's log)
                "lag": s.lag.get(peer, 0 if peer == s.leader else None)
                if s.role == "leader" else None,
            })
    return {"clustered": True, "groups": groups[:MAX_ROWS], "voters": voters[:MAX_ROWS]}


def _topic_names(broker: Broker) -> list[str]:
    names = set(broker.logs.topics)
    if broker.cluster is not None:
        names.update(broker.cluster.state.topics)
    return sorted(names)


def _partition_count(broker: Broker, name: str) -> int:
    count = broker.partition_count(name)
    if count is None:
        local = broker.logs.get(name)
        count = len(local.partitions) if local is not None else 0
    return count


def topics(node: Node, sampler: Sampler) -> dict[str, Any]:
    broker = broker_of(node)
    names = _topic_names(broker)
    rows = []
    for name in names[:MAX_ROWS]:
        local = broker.logs.get(name)
        messages = size = held = 0
        for plog in local.partitions if local is not None else ():
            held += 1
            messages += max(0, plog.high_watermark - plog.log_start_offset)
            size += plog.size_bytes
        rf = 1
        if broker.cluster is not None:
            record = broker.cluster.state.topics.get(name)
            if record is not None and record.partitions:
                rf = len(record.partitions[0].replicas)
        rate = sampler.topic_rates.get(name, (0.0, 0.0))
        rows.append({
            "name": name, "internal": name in INTERNAL_TOPICS,
            "partitions": _partition_count(broker, name), "replication_factor": rf,
            "local_partitions": held, "messages": messages, "bytes": size,
            "rate_records": rate[0], "rate_bytes": rate[1],
        })
    return {"topics": rows, "count": len(names), "left_out": max(0, len(names) - MAX_ROWS)}


def topic(node: Node, name: str) -> dict[str, Any]:
    broker = broker_of(node)
    cluster = broker.cluster
    record = cluster.state.topics.get(name) if cluster is not None else None
    local = broker.logs.get(name)
    if record is None and local is None:
        raise ParamError("topic", f"topic {name!r} does not exist", 404)
    count = _partition_count(broker, name)
    parts = []
    for index in range(min(count, MAX_ROWS)):
        plog = broker.logs.partition(name, index)
        row: dict[str, Any] = {"topic": name, "partition": index, "browse": "messages"}
        if record is not None and index < len(record.partitions):
            p = record.partitions[index]
            row.update(leader=p.leader if p.leader != NO_LEADER else None,
                       leader_epoch=p.leader_epoch, replicas=_ids(p.replicas),
                       isr=_ids(p.isr), under_replicated=len(p.isr) < len(p.replicas))
        else:
            row.update(leader=broker.node_id, leader_epoch=plog.leader_epoch if plog else 0,
                       replicas=str(broker.node_id), isr=str(broker.node_id),
                       under_replicated=False)
        if plog is not None:
            row.update(local=True, log_start_offset=plog.log_start_offset,
                       high_watermark=plog.high_watermark, log_end_offset=plog.log_end_offset,
                       messages=max(0, plog.high_watermark - plog.log_start_offset),
                       bytes=plog.size_bytes, segments=len(plog.segments))
        else:
            row.update(local=False, log_start_offset=None, high_watermark=None,
                       log_end_offset=None, messages=None, bytes=None, segments=None)
        parts.append(row)
    config = _config(broker, name)
    configs = [{"name": key, "value": config.raw(key), "source": _source(config, key)}
               for key in sorted(TOPIC_CONFIGS)]
    topic_id = record.topic_id if record is not None else (
        local.topic_id.bytes if local is not None else b"")
    return {
        "name": name, "topic_id": str(uuid.UUID(bytes=topic_id)) if len(topic_id) == 16 else "",
        "internal": name in INTERNAL_TOPICS, "partition_count": count,
        "partitions": parts, "configs": configs,
        "messages": sum(p["messages"] or 0 for p in parts),
        "bytes": sum(p["bytes"] or 0 for p in parts),
    }


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in ids)


def _config(broker: Broker, name: str) -> TopicConfig:
    if broker.cluster is not None:
        resolved = broker.cluster.state.topic_config(name, broker.node_id,
                                                     broker.logs.defaults)
        if resolved is not None:
            return resolved
    local = broker.logs.get(name)
    if local is not None and local.partitions:
        return local.partitions[0].config
    return TopicConfig(local.configs if local is not None else {}, broker.logs.defaults)


def _source(config: TopicConfig, key: str) -> str:
    if key in config.overrides:
        return "topic"
    if key in config.defaults:
        return "broker"
    return "default"


def transactions(node: Node) -> dict[str, Any]:
    broker = broker_of(node)
    service = broker.transactions
    now_ms = broker.clock.now_ms()
    txns = list(service.coordinator.txns.values())
    counts: dict[str, int] = {}
    for meta in txns:
        counts[meta.state] = counts.get(meta.state, 0) + 1
    done = (COMPLETE_COMMIT, COMPLETE_ABORT, EMPTY)
    txns.sort(key=lambda m: (m.state in done, m.transactional_id))
    rows = []
    for meta in txns[:MAX_ROWS]:
        parts = sorted(meta.partitions)
        shown = ", ".join(f"{t}-{p}" for t, p in parts[:10])
        rows.append({
            "transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch, "state": meta.state,
            "ongoing": meta.state not in done, "partition_count": len(parts),
            "partitions": shown + (f" (+{len(parts) - 10})" if len(parts) > 10 else ""),
            "timeout_ms": meta.timeout_ms,
            "age_s": round((now_ms - meta.start_ms) / 1000, 1)
            if meta.start_ms > 0 and meta.state not in done else None,
        })
    counters = broker.metrics.counts
    return {
        "serving": service.serving, "count": len(txns),
        "ongoing": sum(1 for m in txns if m.state not in done),
        "states": [{"state": s, "count": n} for s, n in sorted(counts.items())],
        "committed": counters.txn_commits, "aborted": counters.txn_aborts,
        "transactions": rows, "left_out": max(0, len(txns) - MAX_ROWS),
    }


def pipelines(node: Node, view: PipelineSource | None) -> dict[str, Any]:
    """The pipelines' latest reports (``eddy connect run`` sends them to the topic
    _eddy_pipelines of the Eddy it reads or writes; this node shows what its replica of the
    topic holds: ``view``) and, on a cluster, the pipelines registered in the metadata."""
    now = view.now_ms() if view is not None else 0
    reports = [] if view is None else [
        {"name": s.name, "state": s.state, "up": s.up(now), "rows_per_s": s.rows_per_s,
         "rows_total": s.rows_total, "lag": s.lag_records, "dead_letters": s.dead_letters,
         "batch_id": s.batch_id, "updated": s.updated_ms, "where": f"{s.host} (pid {s.pid})",
         "error": s.error}
        for _, s in sorted(view.refresh().items())[:MAX_ROWS]]
    registered = []
    if node.cluster is not None:
        for p in node.cluster.state.pipeline_list()[:MAX_ROWS]:
            spec = p.spec[:400].decode("utf-8", "replace")
            registered.append({"name": p.name, "version": p.version, "spec": spec,
                               "spec_bytes": len(p.spec)})
    return {
        "reports": reports, "reporting": sum(1 for r in reports if r["up"]),
        "registered": registered, "clustered": node.cluster is not None,
        "message": "Each `eddy connect run` reports its pipeline here (topic "
                   f"{STATUS_TOPIC}) while it runs, and once more when it stops.",
    }


def metrics(sampler: Sampler) -> dict[str, Any]:
    times = [round(t, 3) for t in sampler.sample_times()]
    series = sampler.metric_series()
    latest = {name: (values[-1] if values else 0.0) for name, values in series.items()}
    return {"interval_s": sampler.interval_s, "times": times, "series": series,
            "latest": latest, "time": round(time.time(), 3)}
