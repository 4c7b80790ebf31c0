"""`eddy group list|describe|reset-offsets|delete`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import typer
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import ClusterMetadata  # type: ignore[attr-defined]

from eddy.cli.common import (
    REQUEST_TIMEOUT_S,
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    Conn,
    Output,
    OutputOpt,
    at_time,
    check_partitions,
    earliest,
    err,
    error_code,
    handle_errors,
    kafka_error_text,
    latest,
    list_offsets,
    print_json,
    render_fields,
    render_table,
    resolve_output,
    stdout_console,
    unknown_group,
    usage_error,
    wait,
)

group_app = typer.Typer(
    help="List, describe, reset the offsets of, and delete consumer groups.",
    no_args_is_help=True,
)

STATE_NAMES = {
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "UNKNOWN": "Unknown",
}

TP = tuple[str, int]


def state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return STATE_NAMES.get(name, name)


def _group_failure(exc: BaseException, group: str, action: str) -> CliError:
    code = error_code(exc)
    if code == KafkaError.GROUP_ID_NOT_FOUND:
        return unknown_group(group)
    if code == KafkaError.NON_EMPTY_GROUP:
        return CliError(f"group '{group}' still has active members; stop its consumers "
                        f"before you {action} it")
    if code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
                KafkaError.ILLEGAL_GENERATION):
        return CliError(f"group '{group}' is active; stop its consumers before you {action} "
                        f"it ({kafka_error_text(exc)})")
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return CliError(f"not allowed to {action} group '{group}': {kafka_error_text(exc)}")
    return CliError(f"cannot {action} group '{group}': {kafka_error_text(exc)}")


def _describe_group(conn: Conn, group: str) -> Any:
    fut = conn.admin().describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group]
    try:
        return wait(fut, f"describing group '{group}'")
    except KafkaException as exc:
        raise _group_failure(exc, group, "describe") from None


def _committed(conn: Conn, group: str) -> dict[TP, int]:
    """Committed offsets of every partition the group has one for."""
    fut = conn.admin().list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=REQUEST_TIMEOUT_S)[group]
    try:
        res = wait(fut, f"fetching the offsets of group '{group}'")
    except KafkaException as exc:
        raise _group_failure(exc, group, "read the offsets of") from None
    out: dict[TP, int] = {}
    for tp in res.topic_partitions or []:
        if tp.error is None and tp.offset >= 0:
            out[(tp.topic, tp.partition)] = tp.offset
    return out


@group_app.command("list")
@handle_errors
def list_(
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """List consumer groups."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    conn.probe()
    res = wait(conn.admin().list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S),
               "listing groups")
    for e in res.errors or []:
        err(f"warning: {kafka_error_text(e)}")
    groups = sorted(
        ({"group": g.group_id, "state": state_name(g.state),
          "simple": bool(g.is_simple_consumer_group)} for g in res.valid),
        key=lambda g: str(g["group"]),
    )
    if out is Output.json:
        print_json(groups)
    elif out is Output.plain:
        for g in groups:
            typer.echo(g["group"])
    elif groups:
        render_table(out, ["GROUP", "STATE", "TYPE"],
                     [[g["group"], g["state"], "simple" if g["simple"] else "consumer"]
                      for g in groups])
    else:
        typer.echo("no consumer groups")


@group_app.command("describe")
@handle_errors
def describe(
    group: Annotated[str, typer.Argument(help="group id")],
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Members, assigned partitions, committed offsets, log end offsets and lag."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    desc = _describe_group(conn, group)
    committed = _committed(conn, group)
    state = state_name(desc.state)
    if state == "Dead" and not committed and not desc.members:
        raise unknown_group(group)
    owner: dict[TP, Any] = {}
    for m in desc.members:
        for tp in m.assignment.topic_partitions if m.assignment else []:
            owner[(tp.topic, tp.partition)] = m
    tps = sorted(set(committed) | set(owner))
    ends = list_offsets(conn, tps, latest())
    rows: list[dict[str, Any]] = []
    for t, p in tps:
        cur, end = committed.get((t, p)), ends.get((t, p))
        m = owner.get((t, p))
        rows.append({
            "topic": t, "partition": p, "committed": cur, "log_end": end,
            "lag": max(0, end - cur) if cur is not None and end is not None else None,
            "member_id": m.member_id if m else None,
            "client_id": m.client_id if m else None,
            "host": m.host if m else None,
        })
    members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                "group_instance_id": m.group_instance_id,
                "partitions": [{"topic": tp.topic, "partition": tp.partition}
                               for tp in (m.assignment.topic_partitions if m.assignment else [])]}
               for m in desc.members]
    coordinator = desc.coordinator
    total_lag = sum(r["lag"] for r in rows if r["lag"] is not None)
    if out is Output.json:
        print_json({
            "group": group, "state": state,
            "coordinator": coordinator.id if coordinator is not None else None,
            "assignor": desc.partition_assignor or None,
            "members": members, "partitions": rows, "total_lag": total_lag,
        })
        return
    columns = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
               "CONSUMER-ID", "HOST", "CLIENT-ID"]
    table_rows = [[r["topic"], r["partition"], r["committed"], r["log_end"], r["lag"],
                   r["member_id"], r["host"], r["client_id"]] for r in rows]
    if out is Output.plain:
        render_table(out, columns, table_rows)
        return
    console = stdout_console()
    coord = (f"{coordinator.id} ({coordinator.host}:{coordinator.port})"
             if coordinator is not None else None)
    render_fields(out, [("group", group), ("state", state), ("coordinator", coord),
                        ("assignor", desc.partition_assignor or None),
                        ("members", len(desc.members)), ("total lag", total_lag)],
                  console=console)
    if rows:
        render_table(out, columns, table_rows, title="Partitions", console=console)
    else:
        console.print("no committed offsets and no assigned partitions")


@dataclass
class Strategy:
    kind: str
    value: int | None = None


def _parse_datetime(text: str) -> int:
    """ISO 8601 (local time when no zone is given) -> epoch milliseconds."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 date-time, e.g. 2024-05-01T12:00:00 or "
            f"2024-05-01T12:00:00+00:00", param_hint="'--to-datetime'") from None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1000)


def _topic_specs(specs: list[str]) -> list[tuple[str, list[int] | None]]:
    """`--topic T` (all partitions) or `--topic T:0,1,2`."""
    out: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        name, sep, parts = spec.partition(":")
        if not name:
            usage_error(f"--topic expects TOPIC or TOPIC:P1,P2, got {spec!r}")
        if not sep:
            out.append((name, None))
            continue
        try:
            out.append((name, sorted({int(p) for p in parts.split(",")})))
        except ValueError:
            usage_error(f"--topic expects TOPIC or TOPIC:P1,P2, got {spec!r}")
    return out


def _targets(conn: Conn, md: ClusterMetadata, specs: list[tuple[str, list[int] | None]],
             all_topics: bool, committed: dict[TP, int], group: str) -> list[TP]:
    if all_topics:
        if not committed:
            raise CliError(f"group '{group}' has no committed offsets; name the topics to "
                           f"reset with --topic")
        return sorted(committed)
    out: set[TP] = set()
    for topic, parts in specs:
        existing = conn.topic_partitions(topic, md)
        if parts is not None:
            check_partitions(topic, parts, existing)
        out.update((topic, p) for p in (parts if parts is not None else existing))
    return sorted(out)


@group_app.command("reset-offsets")
@handle_errors
def reset_offsets(
    group: Annotated[str, typer.Argument(help="group id")],
    topic: Annotated[
        list[str] | None, typer.Option("--topic", "-t", metavar="TOPIC[:P1,P2]",
                                       help="topic (optionally some partitions) to reset; "
                                            "repeatable")
    ] = None,
    all_topics: Annotated[
        bool, typer.Option("--all-topics", help="every topic the group has offsets for")
    ] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", min=0)] = None,
    to_datetime: Annotated[
        str | None, typer.Option("--to-datetime", metavar="ISO",
                                 help="first offset at or after this time, "
                                      "e.g. 2024-05-01T12:00:00")
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="move the committed offset by N "
                                                    "(negative: back)")
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="apply the plan (default: only print it)")
    ] = False,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Plan (and with --execute apply) new committed offsets for an inactive group."""
    out = resolve_output(output)
    chosen = [s for s in (
        Strategy("earliest") if to_earliest else None,
        Strategy("latest") if to_latest else None,
        Strategy("offset", to_offset) if to_offset is not None else None,
        Strategy("datetime", _parse_datetime(to_datetime)) if to_datetime is not None else None,
        Strategy("shift", shift_by) if shift_by is not None else None,
    ) if s is not None]
    if len(chosen) != 1:
        usage_error("give exactly one of --to-earliest, --to-latest, --to-offset, "
                    "--to-datetime, --shift-by")
    strategy = chosen[0]
    if bool(topic) == all_topics:
        usage_error("give --topic TOPIC (repeatable) or --all-topics")
    specs = _topic_specs(topic or [])

    conn = Conn.make(bootstrap, client_config)
    md = conn.metadata()
    desc = _describe_group(conn, group)
    state = state_name(desc.state)
    active = bool(desc.members) or state not in ("Empty", "Dead")
    if active and execute:
        raise CliError(
            f"group '{group}' is {state} with {len(desc.members)} member(s); offsets can only "
            f"be reset while it is inactive: stop its consumers and run this again"
        )
    committed = _committed(conn, group)
    tps = _targets(conn, md, specs, all_topics, committed, group)
    lows = list_offsets(conn, tps, earliest())
    highs = list_offsets(conn, tps, latest())
    by_time = (list_offsets(conn, tps, at_time(strategy.value or 0))
               if strategy.kind == "datetime" else {})
    plan: list[dict[str, Any]] = []
    for tp in tps:
        lo, hi = lows.get(tp), highs.get(tp)
        if lo is None or hi is None:
            raise CliError(f"cannot read the offsets of {tp[0]}-{tp[1]}: the broker did not "
                           f"answer for that partition; try again")
        cur = committed.get(tp)
        if strategy.kind == "earliest":
            new = lo
        elif strategy.kind == "latest":
            new = hi
        elif strategy.kind == "offset":
            new = strategy.value or 0
        elif strategy.kind == "datetime":
            found = by_time.get(tp)
            new = found if found is not None and found >= 0 else hi
        else:
            if cur is None:
                raise CliError(f"cannot shift {tp[0]}-{tp[1]}: group '{group}' has no "
                               f"committed offset there; use --to-earliest/--to-offset first")
            new = cur + (strategy.value or 0)
        new = min(max(new, lo), hi)  # as Kafka does: clamp into the log
        plan.append({"topic": tp[0], "partition": tp[1], "current": cur, "new": new})

    if execute and plan:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(r["topic"], r["partition"], r["new"]) for r in plan])
        fut = conn.admin().alter_consumer_group_offsets(
            [request], request_timeout=REQUEST_TIMEOUT_S)[group]
        try:
            res = wait(fut, f"committing offsets for group '{group}'")
        except KafkaException as exc:
            raise _group_failure(exc, group, "reset the offsets of") from None
        bad = [tp for tp in res.topic_partitions or [] if tp.error is not None]
        if bad:
            raise CliError(f"cannot reset {bad[0].topic}-{bad[0].partition} for group "
                           f"'{group}': {bad[0].error.str()}")

    if out is Output.json:
        print_json({"group": group, "executed": execute, "partitions": plan})
    else:
        render_table(out, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                     [[group, r["topic"], r["partition"], r["current"], r["new"]]
                      for r in plan])
    if not execute:
        note = "dry run: nothing changed; add --execute to apply this plan"
        if active:
            note += (f" (group '{group}' is {state} with {len(desc.members)} member(s): "
                     f"stop them first)")
        err(note)
    elif out is not Output.json:
        err(f"reset the offsets of group '{group}' on {len(plan)} partition(s)")


@group_app.command("delete")
@handle_errors
def delete(
    groups: Annotated[list[str], typer.Argument(help="group ids")],
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Delete inactive consumer groups and their committed offsets."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    unique = list(dict.fromkeys(groups))
    conn.probe()
    futs = conn.admin().delete_consumer_groups(unique, request_timeout=REQUEST_TIMEOUT_S)
    deleted: list[str] = []
    failures: list[CliError] = []
    for g in unique:
        try:
            wait(futs[g], f"deleting group '{g}'")
            deleted.append(g)
        except KafkaException as exc:
            failures.append(_group_failure(exc, g, "delete"))
    if out is Output.json:
        print_json({"deleted": deleted})
    else:
        for g in deleted:
            typer.echo(f"deleted group '{g}'")
    if failures:
        for f in failures[:-1]:
            err(f"error: {f.message}")
        raise failures[-1]
