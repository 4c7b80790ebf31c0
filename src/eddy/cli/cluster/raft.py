"""The Raft side of `eddy cluster`: the groups in `cluster status`, and
`eddy cluster transfer-leader GROUP NODE`, `add-voter NODE`, `remove-voter NODE`.

The tool asks the node it reaches (--mesh, or the mesh of the -b node) for its status, then
the leader of the group for the leader's view (lag is known there) or to make the change."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import typer

from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    Conn,
    Output,
    OutputOpt,
    handle_errors,
    print_json,
    render_table,
    resolve_output,
)
from eddy.cli.mesh_call import advertised_mesh, ask
from eddy.mesh.control import (
    ControlResponse,
    RaftChangeRequest,
    RaftChangeResponse,
    RaftGroupInfo,
    StatusRequest,
    StatusResponse,
)

GroupOpt = Annotated[str, typer.Option("--group", "-g", help="the Raft group")]
MeshOpt = Annotated[
    str | None,
    typer.Option("--mesh", "-m", envvar="EDDY_MESH",
                 help="a node's mesh listener HOST:PORT (default: found through -b)"),
]


def _group_json(g: RaftGroupInfo) -> dict[str, Any]:
    return {"group": g.group, "leader": g.leader or None, "term": g.term,
            "commit_index": g.commit_index, "applied_index": g.applied_index,
            "voters": list(g.voters), "learners": list(g.learners),
            "lag": {str(node): entries for node, entries in g.lag}}


def _meshes(answer: StatusResponse) -> dict[int, str]:
    return {n.kafka_node_id: n.mesh_addr for n in answer.nodes if n.mesh_addr}


def raft_info(answer: StatusResponse, status_of: Callable[[str], ControlResponse]
              ) -> list[dict[str, Any]]:
    """Each group the asked node runs, as its leader sees it when the leader answers."""
    meshes = _meshes(answer)
    out = []
    for group in answer.raft:
        view = group
        if group.leader not in (0, group.node_id) and group.leader in meshes:
            try:
                leader = status_of(meshes[group.leader])
            except CliError:
                leader = None  # the leader's view is a nicety; the asked node's still shows
            if isinstance(leader, StatusResponse):
                view = next((g for g in leader.raft if g.group == group.group), group)
        out.append(_group_json(view))
    return out


def render_raft(groups: list[dict[str, Any]], out: Output, console: Any) -> None:
    rows = [[g["group"], g["leader"] or "", g["term"], g["commit_index"], g["applied_index"],
             ",".join(map(str, g["voters"])), ",".join(map(str, g["learners"])),
             " ".join(f"{n}:{e}" for n, e in g["lag"].items())] for g in groups]
    if out is Output.plain:
        for r in rows:
            typer.echo("raft: " + "\t".join(str(c) for c in r))
        return
    render_table(out, ["GROUP", "LEADER", "TERM", "COMMIT", "APPLIED", "VOTERS", "LEARNERS",
                       "LAG"], rows, title="Raft groups", console=console)


def _timeout() -> float:
    return float(os.environ.get("EDDY_MESH_TIMEOUT", "10"))


def _find_mesh(mesh: str | None, bootstrap: str, client_config: list[str] | None) -> str:
    if mesh:
        return mesh
    conn = Conn.make(bootstrap, client_config)
    found = advertised_mesh(conn, conn.metadata())
    if not found:
        raise CliError(f"the node at {bootstrap} runs no mesh: say --mesh HOST:PORT", 2)
    return found


def _change(request: RaftChangeRequest, mesh: str | None, bootstrap: str,
            client_config: list[str] | None, output: Output | None) -> None:
    out = resolve_output(output)
    start = _find_mesh(mesh, bootstrap, client_config)
    status = ask(start, StatusRequest(), _timeout())
    if not isinstance(status, StatusResponse):
        raise CliError(f"mesh node at {start} answered a status request with {status!r}")
    meshes = _meshes(status)
    group = next((g for g in status.raft if g.group == request.group), None)
    if group is None:
        raise CliError(f"the node at {start} runs no Raft group {request.group!r}", 2)
    target = meshes.get(group.leader, start)
    answer: ControlResponse | None = None
    for _ in range(2):  # the leader may have moved: follow its hint once
        answer = ask(target, request, _timeout() + 10)
        if not isinstance(answer, RaftChangeResponse):
            raise CliError(f"mesh node at {target} answered with {answer!r}")
        hinted = meshes.get(answer.leader)
        if answer.error is None or hinted in (None, target):
            break
        target = hinted
    assert isinstance(answer, RaftChangeResponse)
    if answer.error is not None:
        raise CliError(answer.error)
    result = {"group": request.group, "action": request.action, "node": request.node,
              "leader": answer.leader or None}
    if out is Output.json:
        print_json(result)
    else:
        typer.echo(f"{request.action} {request.node} in {request.group}: done "
                   f"(leader now {answer.leader or 'unknown'})")


def register_raft_commands(app: typer.Typer) -> None:
    @app.command("transfer-leader")
    @handle_errors
    def transfer_leader(
        group: Annotated[str, typer.Argument(help="the Raft group, e.g. metadata")],
        node: Annotated[int, typer.Argument(help="the voter (node.id) to lead it")],
        mesh: MeshOpt = None, bootstrap: BootstrapOpt = "127.0.0.1:9092",
        client_config: ClientConfigOpt = None, output: OutputOpt = None,
    ) -> None:
        """Move a Raft group's leadership to another voter (the metadata group's leader is
        the controller)."""
        _change(RaftChangeRequest(group, "transfer-leader", node), mesh, bootstrap,
                client_config, output)

    @app.command("add-voter")
    @handle_errors
    def add_voter(
        node: Annotated[int, typer.Argument(help="the node (node.id) to make a voter")],
        group: GroupOpt = "metadata", mesh: MeshOpt = None,
        bootstrap: BootstrapOpt = "127.0.0.1:9092", client_config: ClientConfigOpt = None,
        output: OutputOpt = None,
    ) -> None:
        """Make a node a voter of a Raft group (a learner, e.g. a broker outside the quorum,
        is promoted; one change at a time)."""
        _change(RaftChangeRequest(group, "add-voter", node), mesh, bootstrap, client_config,
                output)

    @app.command("remove-voter")
    @handle_errors
    def remove_voter(
        node: Annotated[int, typer.Argument(help="the node (node.id) to remove")],
        group: GroupOpt = "metadata", mesh: MeshOpt = None,
        bootstrap: BootstrapOpt = "127.0.0.1:9092", client_config: ClientConfigOpt = None,
        output: OutputOpt = None,
    ) -> None:
        """Remove a node from a Raft group (the last voter cannot be removed)."""
        _change(RaftChangeRequest(group, "remove", node), mesh, bootstrap, client_config,
                output)
