"""The consumer groups page's data: each group's state and members with their assignment
(decoded from the consumer protocol's bytes, checked against their length), the lag of
each partition the group committed an offset for (this node's high watermark minus the
committed offset) with an indicator, and the group's total lag over time (the sampler's
ring buffer).

Groups live on the node that coordinates them: another node says so and lists none.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from eddy.observe.console.gather import MAX_ROWS, broker_of
from eddy.observe.console.sampler import MAX_LAG_PARTITIONS, Sampler, group_lags

if TYPE_CHECKING:
    from eddy.node.parts import Node

#: lag (records) from which a partition's indicator turns from "behind" to "far behind"
FAR_BEHIND = 1000
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def indicator(lag: int) -> str:
    """ok (caught up), behind, or far (``FAR_BEHIND`` records or more)."""
    if lag <= 0:
        return "ok"
    return "behind" if lag < FAR_BEHIND else "far"


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]] | None:
    """The (topic, partitions) of a consumer protocol assignment (None: not one). Every
    count and length is checked against the bytes left before it is used."""
    try:
        pos = _I16.size  # the version
        if len(data) < pos + _I32.size:
            return None
        (topics,) = _I32.unpack_from(data, pos)
        pos += _I32.size
        if topics < 0 or topics > (len(data) - pos) // (_I16.size + _I32.size):
            return None
        out = []
        for _ in range(topics):
            (name_len,) = _I16.unpack_from(data, pos)
            pos += _I16.size
            if name_len < 0 or name_len > len(data) - pos:
                return None
            name = data[pos:pos + name_len].decode("utf-8", "replace")
            pos += name_len
            (count,) = _I32.unpack_from(data, pos)
            pos += _I32.size
            if count < 0 or count > (len(data) - pos) // _I32.size:
                return None
            parts = list(struct.unpack_from(f">{count}i", data, pos))
            pos += count * _I32.size
            out.append((name, parts))
        return out
    except struct.error:
        return None


def _assignment_text(protocol_type: str | None, data: bytes) -> str:
    if not data:
        return ""
    if protocol_type != "consumer":
        return f"{len(data)} bytes ({protocol_type or 'unknown'} protocol)"
    decoded = decode_assignment(data)
    if decoded is None:
        return f"{len(data)} bytes (not a consumer assignment)"
    return "; ".join(f"{t}: {', '.join(str(p) for p in sorted(ps))}" for t, ps in decoded)


def groups(node: Node, sampler: Sampler) -> dict[str, Any]:
    broker = broker_of(node)
    service = broker.groups
    if not service.serving:
        coordinator = node.cluster.offsets_leader() if node.cluster is not None else -1
        return {"serving": False, "coordinator": coordinator, "groups": [], "members": [],
                "partitions": [], "count": 0,
                "message": f"groups are coordinated by node {coordinator}: see its console"}
    coord = service.coordinator
    ids = sorted(coord.group_ids())
    rows: list[dict[str, Any]] = []
    members: list[dict[str, Any]] = []
    partitions: list[dict[str, Any]] = []
    budget = MAX_LAG_PARTITIONS
    for group_id in ids[:MAX_ROWS]:
        snap = coord.snapshot(group_id)
        if snap is None:
            continue
        lags = group_lags(broker, group_id, max(0, budget))
        budget -= len(lags)
        total = sum(p.lag for p in lags)
        owners: dict[tuple[str, int], str] = {}
        for m in snap.members:
            decoded = decode_assignment(m.assignment) \
                if snap.protocol_type == "consumer" and m.assignment else None
            for topic, assigned in decoded or ():
                for index in assigned:
                    owners[(topic, index)] = m.client_id or m.member_id
            if len(members) < MAX_ROWS:
                members.append({
                    "group": group_id, "member_id": m.member_id, "client_id": m.client_id,
                    "host": m.client_host, "instance_id": m.group_instance_id or "",
                    "assignment": _assignment_text(snap.protocol_type, m.assignment),
                })
        for p in lags:
            if len(partitions) >= MAX_ROWS:
                break
            partitions.append({
                "group": group_id, "topic": p.topic, "partition": p.partition,
                "committed": p.committed, "high_watermark": p.high_watermark, "lag": p.lag,
                "indicator": indicator(p.lag), "owner": owners.get((p.topic, p.partition), ""),
            })
        rows.append({
            "group": group_id, "state": snap.state.value, "protocol_type":
            snap.protocol_type or "", "protocol": snap.protocol_name or "",
            "generation": snap.generation, "members": len(snap.members), "lag": total,
            "indicator": indicator(total), "lag_history": sampler.lag_history(group_id),
        })
    return {"serving": True, "groups": rows, "members": members, "partitions": partitions,
            "count": len(ids), "left_out": max(0, len(ids) - MAX_ROWS), "message": ""}
