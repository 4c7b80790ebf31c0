"""`eddy cluster status`."""

from __future__ import annotations

from typing import Any

import typer

from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
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
from eddy.cli.topic import is_internal

cluster_app = typer.Typer(help="Inspect the cluster.", no_args_is_help=True)


@cluster_app.command("status")
@handle_errors
def status(
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Cluster id, controller, brokers, topic and partition counts."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    md = conn.metadata()
    brokers = [{"id": b.id, "host": b.host, "port": b.port}
               for b in sorted(md.brokers.values(), key=lambda b: b.id)]
    internal = [t for t in md.topics if is_internal(t)]
    partitions = [p for t in md.topics.values() for p in t.partitions.values()]
    under = sum(1 for p in partitions if len(p.isrs) < len(p.replicas))
    offline = sum(1 for p in partitions if p.leader < 0)
    info: dict[str, Any] = {
        "cluster_id": md.cluster_id,
        "controller": md.controller_id if md.controller_id >= 0 else None,
        "brokers": brokers,
        "topics": len(md.topics) - len(internal),
        "internal_topics": len(internal),
        "partitions": len(partitions),
        "under_replicated_partitions": under,
        "offline_partitions": offline,
    }
    if out is Output.json:
        print_json(info)
        return
    fields = [
        ("cluster id", info["cluster_id"]),
        ("controller", info["controller"]),
        ("brokers", len(brokers)),
        ("topics", f"{info['topics']} (+{len(internal)} internal)"),
        ("partitions", len(partitions)),
        ("under-replicated", under),
        ("offline", offline),
    ]
    if out is Output.plain:
        render_fields(out, fields)
        for b in brokers:
            typer.echo(f"broker: {b['id']} {b['host']}:{b['port']}")
        return
    console = stdout_console()
    render_fields(out, fields, console=console)
    render_table(out, ["BROKER", "HOST", "PORT", "CONTROLLER"],
                 [[b["id"], b["host"], b["port"], b["id"] == info["controller"]]
                  for b in brokers], title="Brokers", console=console)
