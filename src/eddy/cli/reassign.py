"""`eddy topic reassign`, `eddy topic reassignments` and `eddy cluster rebalance`:
Kafka's partition reassignments (KIP-455, AlterPartitionReassignments and
ListPartitionReassignments; librdkafka's Python binding has neither, so they go raw).

A reassignment moves a partition's replicas: the new ones copy the log from the leader,
join the ISR, and then the old ones are dropped (their copies deleted). Clients keep
producing and consuming meanwhile. `eddy cluster rebalance` computes where the hash ring
(150 virtual nodes per broker, rack-aware: what topic creation uses) would put every
partition given the live brokers, and moves the ones that differ.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Annotated, Any

import typer
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i32, i32Timedelta
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from eddy.cli.common import (
    REQUEST_TIMEOUT_S,
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
    stderr_console,
)
from eddy.cli.raw_conn import raw_client
from eddy.client.raw import RawClient
from eddy.cluster.placement import HashRing, PlacementError

__all__ = ["plan_rebalance", "register_reassign_commands",
           "register_rebalance_command"]

#: (topic, partition, current replicas, proposed replicas)
Move = tuple[str, int, tuple[int, ...], tuple[int, ...]]
POLL_S = 0.25


@contextmanager
def _client(bootstrap: str, client_config: list[str] | None) -> Iterator[RawClient]:
    """A raw connection for one command; the connection failing under a request (e.g. a
    TLS or SASL listener spoken to without -X security.protocol) is a CliError."""
    conn = Conn.make(bootstrap, client_config)
    with raw_client(conn) as client:
        try:
            yield client
        except OSError as exc:  # MalformedResponse and a dropped connection included
            raise CliError(f"the broker at {conn.bootstrap} dropped the request ({exc}); "
                           "if its listener uses TLS or SASL, pass the settings with -X "
                           "(security.protocol, sasl.mechanism, sasl.username, ...)") from None


def _timeout() -> i32Timedelta:
    return i32Timedelta.parse(timedelta(seconds=REQUEST_TIMEOUT_S))


def alter(client: RawClient, moves: Mapping[str, Sequence[tuple[int, tuple[int, ...] | None]]]
          ) -> list[tuple[str, int, str, str]]:
    """AlterPartitionReassignments: (topic, partition, result, message) per partition."""
    topics = tuple(ReassignableTopic(name=t, partitions=tuple(
        ReassignablePartition(partition_index=i32(p),
                              replicas=None if r is None else tuple(i32(n) for n in r))
        for p, r in parts)) for t, parts in moves.items())
    resp = client.call(AlterPartitionReassignmentsRequest(timeout=_timeout(), topics=topics))
    if resp.error_code != 0:
        raise CliError(f"the cluster refused the reassignment: {resp.error_code.name}"
                       f"{': ' + resp.error_message if resp.error_message else ''}")
    return sorted((str(t.name), int(p.partition_index),
                   "ok" if p.error_code == 0 else p.error_code.name.upper(),
                   p.error_message or "")
                  for t in resp.responses for p in t.partitions)


def ongoing(client: RawClient, topic: str | None = None,
            partitions: Sequence[int] = ()) -> list[dict[str, Any]]:
    """ListPartitionReassignments, one dict per partition being moved."""
    topics = None
    if topic is not None:
        topics = (ListPartitionReassignmentsTopics(
            name=topic, partition_indexes=tuple(i32(p) for p in partitions)),)
    resp = client.call(ListPartitionReassignmentsRequest(timeout=_timeout(), topics=topics))
    if resp.error_code != 0:
        raise CliError(f"the cluster refused to list reassignments: {resp.error_code.name}")
    rows = [{"topic": str(t.name), "partition": int(p.partition_index),
             "replicas": [int(n) for n in p.replicas],
             "adding": [int(n) for n in p.adding_replicas],
             "removing": [int(n) for n in p.removing_replicas]}
            for t in resp.topics for p in t.partitions]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def wait_done(client: RawClient, asked: Sequence[tuple[str, int]], timeout_s: float) -> None:
    """Poll until none of ``asked`` is being moved (a spinner on a terminal)."""
    deadline = time.monotonic() + timeout_s
    pending = set(asked)
    progress: Progress | None = None
    task = None
    if sys.stderr.isatty():
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=stderr_console(), transient=True)
        progress.start()
        task = progress.add_task(f"waiting for {len(pending)} partitions to move")
    try:
        while True:
            moving = {(r["topic"], r["partition"]) for r in ongoing(client)}
            pending &= moving
            if not pending:
                return
            if progress is not None and task is not None:
                progress.update(task, description=f"waiting for {len(pending)} partitions "
                                "to catch up and move")
            if time.monotonic() > deadline:
                names = ", ".join(f"{t}-{p}" for t, p in sorted(pending)[:10])
                raise CliError(f"still moving after {timeout_s:.0f} s: {names} (see eddy "
                               "topic reassignments; it goes on in the background)")
            time.sleep(POLL_S)
    finally:
        if progress is not None:
            progress.stop()


def _parse_replicas(text: str) -> tuple[int, ...]:
    try:
        replicas = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CliError(f"--replicas {text!r}: expected broker ids like 2,3,1", 2) from None
    if not replicas:
        raise CliError("--replicas: name at least one broker id", 2)
    return replicas


def _render_results(out: Output, rows: list[tuple[str, int, str, str]], title: str) -> None:
    if out is Output.json:
        print_json([{"topic": t, "partition": p, "result": r, "message": m or None}
                    for t, p, r, m in rows])
    else:
        render_table(out, ["TOPIC", "PARTITION", "RESULT", "MESSAGE"], rows, title=title)
    failed = [r for r in rows if r[2] != "ok"]
    if failed:
        raise CliError(f"{len(failed)} of {len(rows)} partitions were refused: "
                       f"{failed[0][2]} ({failed[0][3]})")


def register_reassign_commands(app: typer.Typer) -> None:
    @app.command("reassign")
    @handle_errors
    def reassign(
        topic: Annotated[str, typer.Argument(help="topic name")],
        partition: Annotated[list[int], typer.Option(
            "--partition", "-p", min=0, help="the partition to move (repeatable)")],
        replicas: Annotated[str | None, typer.Option(
            "--replicas", "-r", metavar="IDS",
            help="the broker ids it moves to, preferred leader first: 2,3,1")] = None,
        cancel: Annotated[bool, typer.Option(
            "--cancel", help="cancel the move under way: back to the replicas before it")
        ] = False,
        wait: Annotated[bool, typer.Option(
            "--wait", help="return once the new replicas caught up and the move is done")
        ] = False,
        timeout: Annotated[float, typer.Option(
            "--timeout", min=1, help="with --wait: give up after this many seconds")] = 600,
        bootstrap: BootstrapOpt = "127.0.0.1:9092",
        output: OutputOpt = None,
        client_config: ClientConfigOpt = None,
    ) -> None:
        """Move partitions to other brokers (AlterPartitionReassignments). The new
        replicas copy the log from the leader and join the ISR; then the old ones leave
        and delete their copies. Producers and consumers carry on meanwhile."""
        out = resolve_output(output)
        if (replicas is None) == (not cancel):
            raise CliError("say where to: --replicas 2,3,1, or --cancel", 2)
        target = None if cancel else _parse_replicas(replicas or "")
        with _client(bootstrap, client_config) as client:
            rows = alter(client, {topic: [(p, target) for p in dict.fromkeys(partition)]})
            ok = [(t, p) for t, p, r, _ in rows if r == "ok"]
            if wait and ok and not cancel:
                wait_done(client, ok, timeout)
        _render_results(out, rows, "reassignment cancelled" if cancel else "reassignment")

    @app.command("reassignments")
    @handle_errors
    def reassignments(
        topic: Annotated[str | None, typer.Argument(help="only this topic")] = None,
        bootstrap: BootstrapOpt = "127.0.0.1:9092",
        output: OutputOpt = None,
        client_config: ClientConfigOpt = None,
    ) -> None:
        """The partition moves under way (ListPartitionReassignments): replicas now, the
        ones being added (catching up) and the ones to be removed."""
        out = resolve_output(output)
        with _client(bootstrap, client_config) as client:
            rows = ongoing(client)
        if topic is not None:
            rows = [r for r in rows if r["topic"] == topic]
        if out is Output.json:
            print_json(rows)
            return
        if not rows:
            typer.echo("no reassignment in progress")
            return
        render_table(out, ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                     [[r["topic"], r["partition"], r["replicas"], r["adding"], r["removing"]]
                      for r in rows], title="Reassignments in progress")


# -- rebalance --------------------------------------------------------------------------------
def plan_rebalance(topics: Mapping[str, Sequence[tuple[int, ...]]],
                   nodes: Mapping[int, str | None]
                   ) -> tuple[list[Move], list[str]]:
    """Where the hash ring puts each partition of ``topics`` (name -> replicas of each
    partition) on ``nodes`` (live broker -> rack), as topic creation would: the partitions
    whose replicas differ, and notes on the topics left as they are."""
    ring = HashRing()
    moves: list[Move] = []
    notes: list[str] = []
    for name in sorted(topics):
        parts = topics[name]
        if not parts:
            continue
        rf = max(len(r) for r in parts)
        try:
            placed = ring.place(name, len(parts), rf, nodes)
        except PlacementError as exc:
            notes.append(f"{name}: left as it is ({exc.message})")
            continue
        for index, (now, want) in enumerate(zip(parts, placed, strict=True)):
            if tuple(now) != tuple(want):
                moves.append((name, index, tuple(now), tuple(want)))
    return moves, notes


def _cluster_view(client: RawClient) -> tuple[dict[str, list[tuple[int, ...]]],
                                              dict[int, str | None]]:
    resp = client.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))
    nodes = {int(b.node_id): (b.rack or None) for b in resp.brokers}
    topics: dict[str, list[tuple[int, ...]]] = {}
    for t in resp.topics:
        if t.error_code != 0 or t.name is None or t.is_internal or t.name.startswith("__"):
            continue
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        topics[str(t.name)] = [tuple(int(n) for n in p.replica_nodes) for p in parts]
    return topics, nodes


def register_rebalance_command(app: typer.Typer) -> None:
    @app.command("rebalance")
    @handle_errors
    def rebalance(
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="only show the moves, change nothing")] = False,
        topic: Annotated[list[str] | None, typer.Option(
            "--topic", "-t", help="only this topic (repeatable)")] = None,
        wait: Annotated[bool, typer.Option(
            "--wait", help="return once every move is done")] = False,
        timeout: Annotated[float, typer.Option(
            "--timeout", min=1, help="with --wait: give up after this many seconds")] = 3600,
        bootstrap: BootstrapOpt = "127.0.0.1:9092",
        output: OutputOpt = None,
        client_config: ClientConfigOpt = None,
    ) -> None:
        """Move partitions to where the hash ring places them on the live brokers (150
        virtual nodes each, replicas spread over racks: what topic creation does).

        A broker that joins the cluster gets the partitions of topics created from then
        on, but, as in Kafka, no data of existing topics moves to it on its own: run this
        (after a --dry-run to see the moves) to give it its share. About 1/N of the
        replicas move when the N-th broker joins."""
        out = resolve_output(output)
        with _client(bootstrap, client_config) as client:
            topics, nodes = _cluster_view(client)
            if topic:
                missing = [t for t in topic if t not in topics]
                if missing:
                    raise CliError(f"unknown topic(s): {', '.join(missing)}")
                topics = {t: topics[t] for t in topic}
            moves, notes = plan_rebalance(topics, nodes)
            results: dict[tuple[str, int], tuple[str, str]] = {}
            if moves and not dry_run:
                by_topic: dict[str, list[tuple[int, tuple[int, ...] | None]]] = {}
                for name, index, _, want in moves:
                    by_topic.setdefault(name, []).append((index, want))
                for t, p, r, m in alter(client, by_topic):
                    results[(t, p)] = (r, m)
                ok = [k for k, (r, _) in results.items() if r == "ok"]
                if wait and ok:
                    wait_done(client, ok, timeout)
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        rows = [{"topic": t, "partition": p, "current": list(now), "proposed": list(want),
                 "result": results.get((t, p), ("planned", ""))[0],
                 "message": results.get((t, p), ("", ""))[1] or None}
                for t, p, now, want in moves]
        if out is Output.json:
            print_json({"brokers": sorted(nodes), "dry_run": dry_run, "moves": rows})
        elif not rows:
            typer.echo(f"balanced: every partition is where the ring puts it on brokers "
                       f"{sorted(nodes)}")
        else:
            render_table(out, ["TOPIC", "PARTITION", "CURRENT", "PROPOSED", "RESULT"],
                         [[r["topic"], r["partition"], r["current"], r["proposed"],
                           r["result"]] for r in rows],
                         title="Rebalance plan (dry run)" if dry_run else "Rebalance")
        refused = [r for r in rows if r["result"] not in ("ok", "planned")]
        if refused:
            raise CliError(f"{len(refused)} of {len(rows)} moves were refused: "
                           f"{refused[0]['result']} ({refused[0]['message']})")
