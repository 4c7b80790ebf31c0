"""`eddy cluster status` and `eddy cluster ping` (the Raft commands: cluster_raft.py)."""

from __future__ import annotations

import os
import statistics
from typing import Annotated, Any

import typer

from eddy.cli.cluster.elect import register_elect_command
from eddy.cli.cluster.raft import raft_info, register_raft_commands, render_raft
from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    Conn,
    Output,
    OutputOpt,
    handle_errors,
    print_json,
    render_fields,
    render_table,
    resolve_output,
    stdout_console,
)
from eddy.cli.mesh_call import advertised_mesh, ask
from eddy.cli.reassign import register_rebalance_command
from eddy.cli.topic import is_internal
from eddy.mesh.control import (
    PingRequest,
    PingResponse,
    StatusRequest,
    StatusResponse,
)
from eddy.mesh.identity import to_base32

MeshOpt = Annotated[
    str | None,
    typer.Option("--mesh", "-m", envvar="EDDY_MESH",
                 help="a node's mesh listener HOST:PORT (its `mesh.listener`): show the mesh "
                 "as that node knows it. The tool dials with a throwaway key, or with the "
                 "key (and node.membership) in the directory EDDY_MESH_IDENTITY (for nodes "
                 "limited by mesh.allowed.nodes or mesh.cluster.public.key)"),
]

cluster_app = typer.Typer(help="Inspect the cluster.", no_args_is_help=True)


@cluster_app.command("status")
@handle_errors
def status(
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
    mesh: MeshOpt = None,
) -> None:
    """Cluster id, controller, brokers, topic and partition counts; and, when the node runs
    the mesh (or --mesh names one), every node it knows and its state (alive, suspect,
    dead)."""
    out = resolve_output(output)
    info: dict[str, Any] = {}
    if not mesh:
        conn = Conn.make(bootstrap, client_config)
        md = conn.metadata()
        info = _kafka_info(md, _moving(conn))
        info["controller"] = _controller(conn, info["controller"])
        mesh = advertised_mesh(conn, md)
    if mesh:
        info.update(_mesh_info(mesh))
    if out is Output.json:
        print_json(info)
        return
    console = stdout_console() if out is Output.table else None
    if "cluster_id" in info:
        brokers = info["brokers"]
        fields = [
            ("cluster id", info["cluster_id"]),
            ("controller", info["controller"]),
            ("brokers", len(brokers)),
            ("topics", f"{info['topics']} (+{info['internal_topics']} internal)"),
            ("partitions", info["partitions"]["total"]),
            ("under-replicated", info["partitions"]["under_replicated"]),
            ("offline", info["partitions"]["offline"]),
            ("reassigning", info["reassigning"]),
        ]
        render_fields(out, fields, console=console)
        if out is Output.plain:
            for b in brokers:
                typer.echo(f"broker: {b['id']} {b['host']}:{b['port']}")
        else:
            render_table(out, ["BROKER", "HOST", "PORT", "CONTROLLER"],
                         [[b["id"], b["host"], b["port"], b["id"] == info["controller"]]
                          for b in brokers], title="Brokers", console=console)
    if "nodes" in info:
        _render_nodes(info, out, console)
    if info.get("raft"):
        render_raft(info["raft"], out, console)


def _controller(conn: Conn, fallback: int | None) -> int | None:
    """The controller DescribeCluster names (Metadata's is any broker that forwards, as in
    KRaft; librdkafka's describe_cluster reports Metadata's, so it is asked directly)."""
    from kio.schema.describe_cluster.v0.request import DescribeClusterRequest

    from eddy.cli.raw_conn import raw_client

    try:
        with raw_client(conn) as raw:
            answer = raw.call(DescribeClusterRequest(
                include_cluster_authorized_operations=False))
    except Exception:  # an older node, or none there: Metadata's answer
        return fallback
    return int(answer.controller_id) if answer.error_code == 0 else fallback


def _moving(conn: Conn) -> dict[tuple[str, int], int] | None:
    """Partitions being reassigned and how many replicas each is losing (None: the node
    does not answer ListPartitionReassignments)."""
    from eddy.cli.raw_conn import raw_client
    from eddy.cli.reassign import ongoing

    try:
        with raw_client(conn) as raw:
            rows = ongoing(raw)
    except Exception:  # an older node, or none there
        return None
    return {(r["topic"], r["partition"]): len(r["removing"]) for r in rows}


def _kafka_info(md: Any, moving: dict[tuple[str, int], int] | None = None
                ) -> dict[str, Any]:
    """Counts as Kafka's metrics: under-replicated when the ISR is smaller than the
    replication factor (of a partition being reassigned: its target's, KIP-352), offline
    when it has no leader."""
    moving = moving or {}
    brokers = [{"id": b.id, "host": b.host, "port": b.port}
               for b in sorted(md.brokers.values(), key=lambda b: b.id)]
    internal = [t for t in md.topics if is_internal(t)]
    partitions = [(t.topic, p) for t in md.topics.values() for p in t.partitions.values()]
    return {
        "cluster_id": md.cluster_id,
        "controller": md.controller_id if md.controller_id >= 0 else None,
        "brokers": brokers,
        "topics": len(md.topics) - len(internal),
        "internal_topics": len(internal),
        "partitions": {
            "total": len(partitions),
            "under_replicated": sum(
                1 for t, p in partitions
                if len(p.isrs) < len(p.replicas) - moving.get((t, p.id), 0)),
            "offline": sum(1 for _, p in partitions if p.leader < 0),
        },
        "reassigning": len(moving),
    }


def _node_json(n: Any) -> dict[str, Any]:
    return {"node_id": n.kafka_node_id, "node_key": n.node_key.hex(),
            "node_key_base32": to_base32(n.node_key), "roles": list(n.roles),
            "kafka": n.kafka_addr, "mesh": n.mesh_addr, "rack": n.rack, "state": n.state,
            "last_seen_ms_ago": n.last_seen_ms_ago,
            "rtt_ms": None if n.rtt_us is None else n.rtt_us / 1000,
            "topics": n.topics, "groups": n.groups}


def _mesh_info(mesh: str) -> dict[str, Any]:
    timeout_s = float(os.environ.get("EDDY_MESH_TIMEOUT", "10"))
    answer = ask(mesh, StatusRequest(), timeout_s)
    if not isinstance(answer, StatusResponse):
        raise CliError(f"mesh node at {mesh} answered a status request with {answer!r}")
    return {"local": answer.local.hex(), "nodes": [_node_json(n) for n in answer.nodes],
            "active_view": [k.hex() for k in answer.active_view],
            "passive_view": [k.hex() for k in answer.passive_view],
            "frames_in": {f"{t:#04x}": c for t, c in answer.frames_in},
            "frames_out": {f"{t:#04x}": c for t, c in answer.frames_out},
            "bytes_in": answer.bytes_in, "bytes_out": answer.bytes_out,
            "raft": raft_info(answer, lambda addr: ask(addr, StatusRequest(), timeout_s))}


def _render_nodes(info: dict[str, Any], out: Output, console: Any) -> None:
    nodes = info["nodes"]
    rows = [[n["node_id"], n["node_key_base32"][:10], ",".join(n["roles"]), n["kafka"],
             n["mesh"], n["rack"] or "", n["state"],
             "" if n["rtt_ms"] is None else f"{n['rtt_ms']:.2f}"] for n in nodes]
    if out is Output.plain:
        for r in rows:
            typer.echo("node: " + "\t".join(str(c) for c in r))
        return
    headers = ["NODE", "KEY", "ROLES", "KAFKA", "MESH", "RACK", "STATE", "RTT MS"]
    local = to_base32(bytes.fromhex(info["local"]))[:10]
    render_table(out, headers, rows, title=f"Mesh nodes as {local} sees them", console=console)


@cluster_app.command("ping")
@handle_errors
def ping(
    node: Annotated[str, typer.Argument(help="the node to ping: its node.id or NodeId "
                                        "(hex or base32)")],
    mesh: MeshOpt = None,
    count: Annotated[int, typer.Option("--count", "-c", min=1, max=1000)] = 5,
    interval_ms: Annotated[int, typer.Option("--interval-ms", min=0, max=10000)] = 200,
    output: OutputOpt = None,
) -> None:
    """Round trips over the mesh from the node at --mesh to NODE (Ping/Pong, tag 0x10)."""
    out = resolve_output(output)
    if not mesh:
        raise CliError("say which node pings: --mesh HOST:PORT (or EDDY_MESH)", 2)
    answer = ask(mesh, PingRequest(target=node, count=count, interval_ms=interval_ms),
                  10.0 + count * (interval_ms / 1000 + 5))
    if not isinstance(answer, PingResponse):
        raise CliError(f"mesh node at {mesh} answered a ping request with {answer!r}")
    rtts = [us / 1000 for us in answer.rtts_us]
    if out is Output.json:
        print_json({"target": answer.target.hex(), "rtt_ms": rtts, "error": answer.error})
    else:
        for i, rtt in enumerate(rtts):
            typer.echo(f"pong from {node}: seq={i} time={rtt:.3f} ms")
        if rtts:
            typer.echo(f"{len(rtts)} pongs, min/median/max = {min(rtts):.3f}/"
                       f"{statistics.median(rtts):.3f}/{max(rtts):.3f} ms")
    if answer.error:
        raise CliError(answer.error)


register_raft_commands(cluster_app)
register_elect_command(cluster_app)
register_rebalance_command(cluster_app)
