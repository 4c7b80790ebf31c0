"""`eddy topic create|list|describe|alter|delete`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from eddy.cli.common import (
    REQUEST_TIMEOUT_S,
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    Conn,
    Output,
    OutputOpt,
    earliest,
    error_code,
    handle_errors,
    is_unsupported,
    kafka_error_text,
    latest,
    list_offsets,
    parse_kv,
    print_json,
    render_fields,
    render_table,
    resolve_output,
    stdout_console,
    unknown_topic,
    usage_error,
)
from eddy.cli.raw_conn import raw_client
from eddy.cli.reassign import ongoing, register_reassign_commands

topic_app = typer.Typer(
    help="Create, list, describe, alter and delete topics.", no_args_is_help=True
)

ConfigOpt = Annotated[
    list[str] | None,
    typer.Option("--config", "-c", metavar="KEY=VALUE",
                 help="topic config, e.g. retention.ms=86400000 (repeatable)"),
]


def is_internal(name: str, flagged: bool = False) -> bool:
    return flagged or name.startswith("__")


def _topic_failure(exc: BaseException, topic: str, conn: Conn, action: str) -> CliError:
    code = error_code(exc)
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return unknown_topic(topic)
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return CliError(
            f"topic '{topic}' already exists; see it with eddy topic describe {topic} "
            f"(or pass --if-not-exists)"
        )
    if code == KafkaError.INVALID_CONFIG:
        return CliError(f"cannot {action} topic '{topic}': {kafka_error_text(exc)}")
    if code in (KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_REPLICATION_FACTOR,
                KafkaError.INVALID_REPLICA_ASSIGNMENT, KafkaError.TOPIC_EXCEPTION,
                KafkaError.POLICY_VIOLATION, KafkaError.INVALID_REQUEST):
        return CliError(f"cannot {action} topic '{topic}': {kafka_error_text(exc)}")
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return CliError(f"not allowed to {action} topic '{topic}': {kafka_error_text(exc)}")
    if isinstance(exc, KafkaException):
        return CliError(f"cannot {action} topic '{topic}': {kafka_error_text(exc)}")
    return CliError(f"cannot {action} topic '{topic}': {exc}")


def _describe(conn: Conn, names: list[str]) -> dict[str, Any]:
    """TopicDescription per name (Metadata with topic ids)."""
    futures = conn.admin().describe_topics(
        TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S
    )
    out: dict[str, Any] = {}
    for name, fut in futures.items():
        try:
            out[name] = fut.result()
        except KafkaException as exc:
            raise _topic_failure(exc, name, conn, "describe") from None
    return out


def _watermarks(conn: Conn, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """(low, high) watermark per partition, via ListOffsets (earliest and latest); -1 where
    the broker could not answer (e.g. a partition without a leader right now)."""
    tps = [(topic, p) for p in partitions]
    lows, highs = list_offsets(conn, tps, earliest()), list_offsets(conn, tps, latest())
    return {p: (_or_minus_one(lows.get((topic, p))), _or_minus_one(highs.get((topic, p))))
            for p in partitions}


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


def _describe_configs(conn: Conn, topic: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(configs, note). configs is None with a note when the broker cannot describe them."""
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        fut = conn.admin().describe_configs([res], request_timeout=REQUEST_TIMEOUT_S)[res]
        entries = fut.result()
    except KafkaException as exc:
        if is_unsupported(exc):
            return None, (
                f"configs not shown: the broker at {conn.bootstrap} does not support "
                f"DescribeConfigs"
            )
        return None, f"configs not shown: {kafka_error_text(exc)}"
    configs = []
    for name in sorted(entries):
        e = entries[name]
        source = _source_name(e.source)
        configs.append({
            "name": name,
            "value": e.value,
            "source": source,
            "default": bool(e.is_default) or source == "DEFAULT_CONFIG",
            "read_only": bool(e.is_read_only),
            "sensitive": bool(e.is_sensitive),
        })
    return configs, None


SOURCE_LABELS = {
    "DYNAMIC_TOPIC_CONFIG": "topic override",
    "DEFAULT_CONFIG": "default",
    "STATIC_BROKER_CONFIG": "broker config",
    "DYNAMIC_BROKER_CONFIG": "broker (dynamic)",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "cluster default (dynamic)",
}


def _source_name(source: Any) -> str:
    if isinstance(source, ConfigSource):
        return source.name
    try:
        return ConfigSource(int(source)).name
    except (TypeError, ValueError):
        return str(source)


def _reassigning(conn: Conn, topic: str, partitions: list[int]
                 ) -> dict[int, tuple[list[int], list[int]]]:
    """(adding, removing) replicas of each partition of ``topic`` being reassigned, from
    ListPartitionReassignments (librdkafka's binding lacks the call: a raw request to the
    first bootstrap broker, with the -X security settings). Empty when the broker cannot
    tell, as kafka-topics does: a broker without the API, a principal without DESCRIBE on
    the cluster, or a connection the raw client cannot make."""
    if not partitions:
        return {}
    try:
        with raw_client(conn) as client:
            rows = ongoing(client, topic, partitions)
    except (OSError, CliError):  # MalformedResponse is a ConnectionError
        return {}
    return {r["partition"]: (r["adding"], r["removing"]) for r in rows
            if r["topic"] == topic}


def partition_line(topic: str, p: dict[str, Any]) -> str:
    """One partition of `eddy topic describe -o plain`, in kafka-topics' layout (Adding
    Replicas and Removing Replicas only while the partition is being reassigned)."""
    def ids(key: str) -> str:
        return ",".join(map(str, p[key]))

    line = (f"\tTopic: {topic}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
            f"Replicas: {ids('replicas')}\tIsr: {ids('isr')}\t")
    if p.get("adding") or p.get("removing"):
        line += f"Adding Replicas: {ids('adding')}\tRemoving Replicas: {ids('removing')}\t"
    if p["offline"]:
        line += f"Offline: {ids('offline')}\t"
    return line + f"LowWatermark: {p['low_watermark']}\tHighWatermark: {p['high_watermark']}"


def _node_id(node: Any) -> int:
    return int(node.id) if node is not None else -1


@topic_app.command("create")
@handle_errors
def create(
    name: Annotated[str, typer.Argument(help="topic name")],
    partitions: Annotated[
        int | None, typer.Option("--partitions", "-p", min=1,
                                 help="number of partitions (default: the broker's)")
    ] = None,
    replication_factor: Annotated[
        int | None, typer.Option("--replication-factor", "-r", min=1,
                                 help="copies of each partition (default: the broker's)")
    ] = None,
    config: ConfigOpt = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="succeed when the topic already exists")
    ] = False,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Create a topic."""
    out = resolve_output(output)
    configs = dict(parse_kv(config, "--config"))
    conn = Conn.make(bootstrap, client_config)
    new = NewTopic(name, num_partitions=partitions or -1,
                   replication_factor=replication_factor or -1, config=configs)
    fut = conn.admin().create_topics([new], request_timeout=REQUEST_TIMEOUT_S)[name]
    existed = False
    try:
        fut.result()
    except KafkaException as exc:
        if not (if_not_exists and error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS):
            raise _topic_failure(exc, name, conn, "create") from None
        existed = True
    desc = _describe(conn, [name])[name]
    n = len(desc.partitions)
    rf = len(desc.partitions[0].replicas) if desc.partitions else 0
    shape = f"{n} partition{'s' if n != 1 else ''}, replication factor {rf}"
    if out is Output.json:
        print_json({"topic": name, "created": not existed, "partitions": n,
                    "replication_factor": rf, "topic_id": str(desc.topic_id),
                    "config": configs})
    elif existed:
        typer.echo(f"topic '{name}' already exists ({shape})")
    else:
        typer.echo(f"created topic '{name}' ({shape})")


@topic_app.command("list")
@handle_errors
def list_(
    all_: Annotated[
        bool, typer.Option("--all", "-a", help="include internal topics (__consumer_offsets...)")
    ] = False,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """List topics (internal ones only with --all)."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    md = conn.metadata()
    names = sorted(md.topics)
    descs = _describe(conn, names) if names and out is not Output.plain else {}
    rows: list[dict[str, Any]] = []
    for name in names:
        d = descs.get(name)
        internal = is_internal(name, bool(d.is_internal) if d is not None else False)
        if internal and not all_:
            continue
        parts = md.topics[name].partitions
        first = parts.get(0)
        rows.append({
            "name": name,
            "partitions": len(parts),
            "replication_factor": len(first.replicas) if first is not None else 0,
            "internal": internal,
            "topic_id": str(d.topic_id) if d is not None else None,
        })
    if out is Output.json:
        print_json(rows)
    elif out is Output.plain:
        for r in rows:
            typer.echo(r["name"])
    else:
        columns = ["TOPIC", "PARTITIONS", "REPLICATION", "TOPIC ID"]
        table_rows = [[r["name"], r["partitions"], r["replication_factor"], r["topic_id"]]
                      for r in rows]
        if all_:
            columns.append("INTERNAL")
            for tr, r in zip(table_rows, rows, strict=True):
                tr.append(r["internal"])
        if rows:
            render_table(out, columns, table_rows)
        else:
            typer.echo("no topics; create one with eddy topic create NAME")


@topic_app.command("describe")
@handle_errors
def describe(
    name: Annotated[str, typer.Argument(help="topic name")],
    all_configs: Annotated[
        bool, typer.Option("--all-configs", help="show every config, not only overrides")
    ] = False,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Partitions (leader, replicas, ISR, watermarks), topic id and configs of a topic."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    desc = _describe(conn, [name])[name]
    parts = sorted(desc.partitions, key=lambda p: p.id)
    marks = _watermarks(conn, name, [p.id for p in parts])
    configs, note = _describe_configs(conn, name)
    shown = configs
    if configs is not None and not all_configs:
        shown = [c for c in configs if not c["default"]]
    live = set(conn.metadata().brokers)  # replicas on other brokers are offline
    moving = _reassigning(conn, name, [p.id for p in parts])
    partitions = [{
        "partition": p.id,
        "leader": _node_id(p.leader),
        "replicas": [_node_id(n) for n in p.replicas],
        "isr": [_node_id(n) for n in p.isr],
        "adding": moving.get(p.id, ([], []))[0],
        "removing": moving.get(p.id, ([], []))[1],
        "offline": [_node_id(n) for n in p.replicas if _node_id(n) not in live],
        "low_watermark": marks.get(p.id, (-1, -1))[0],
        "high_watermark": marks.get(p.id, (-1, -1))[1],
    } for p in parts]
    rf = len(parts[0].replicas) if parts else 0
    if out is Output.json:
        obj: dict[str, Any] = {
            "topic": name, "topic_id": str(desc.topic_id),
            "internal": is_internal(name, bool(desc.is_internal)),
            "partition_count": len(parts), "replication_factor": rf,
            "partitions": partitions, "configs": shown,
        }
        if note:
            obj["note"] = note
        print_json(obj)
        return
    if out is Output.plain:
        overrides = ",".join(f"{c['name']}={c['value']}" for c in shown or [])
        typer.echo(f"Topic: {name}\tTopicId: {desc.topic_id}\tPartitionCount: {len(parts)}\t"
                   f"ReplicationFactor: {rf}\tConfigs: {overrides}")
        for p in partitions:
            typer.echo(partition_line(name, p))
        if note:
            typer.echo(f"note: {note}", err=True)
        return
    console = stdout_console()
    render_fields(out, [("topic", name), ("topic id", desc.topic_id),
                        ("partitions", len(parts)), ("replication factor", rf)],
                  console=console)
    columns = ["PARTITION", "LEADER", "REPLICAS", "ISR"]
    if moving:
        columns += ["ADDING", "REMOVING"]
    render_table(out, [*columns, "OFFLINE", "LOW", "HIGH", "RECORDS"],
                 [[p["partition"], p["leader"], p["replicas"], p["isr"],
                   *([p["adding"], p["removing"]] if moving else []), p["offline"],
                   p["low_watermark"],
                   p["high_watermark"],
                   max(0, p["high_watermark"] - p["low_watermark"])
                   if p["low_watermark"] >= 0 else None]
                  for p in partitions], title="Partitions", console=console)
    if note:
        console.print(f"[yellow]note:[/yellow] {note}")
    elif shown:
        render_table(out, ["CONFIG", "VALUE", "SOURCE"],
                     [[c["name"], c["value"], SOURCE_LABELS.get(c["source"], c["source"])]
                      for c in shown],
                     title="Configs" if all_configs else "Configs (overrides)", console=console)
    else:
        console.print("Configs: all defaults (see them with --all-configs)")


@topic_app.command("alter")
@handle_errors
def alter(
    name: Annotated[str, typer.Argument(help="topic name")],
    partitions: Annotated[
        int | None, typer.Option("--partitions", "-p", min=1,
                                 help="new total number of partitions (can only grow)")
    ] = None,
    config: ConfigOpt = None,
    delete_config: Annotated[
        list[str] | None, typer.Option("--delete-config", metavar="KEY",
                                       help="remove an override: back to the default")
    ] = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Add partitions, set configs (--config k=v) or remove overrides (--delete-config k)."""
    out = resolve_output(output)
    sets = parse_kv(config, "--config")
    deletes = [d.strip() for d in delete_config or []]
    if partitions is None and not sets and not deletes:
        usage_error("nothing to change: give --partitions, --config or --delete-config")
    clash = {k for k, _ in sets} & set(deletes)
    if clash:
        usage_error(f"--config and --delete-config both name {sorted(clash)[0]}")
    conn = Conn.make(bootstrap, client_config)
    conn.topic_partitions(name)  # unknown topic: say so before trying anything
    admin = conn.admin()
    changes: list[str] = []
    if sets or deletes:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in sets]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in deletes]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        try:
            admin.incremental_alter_configs([res], request_timeout=REQUEST_TIMEOUT_S)[
                res].result()
        except KafkaException as exc:
            if is_unsupported(exc):
                raise CliError(
                    f"the broker at {conn.bootstrap} does not support "
                    f"IncrementalAlterConfigs, so topic configs cannot be changed there"
                ) from None
            raise _topic_failure(exc, name, conn, "alter") from None
        changes += [f"set {k}={v}" for k, v in sets] + [f"deleted {k}" for k in deletes]
    if partitions is not None:
        fut = admin.create_partitions([NewPartitions(name, partitions)],
                                      request_timeout=REQUEST_TIMEOUT_S)[name]
        try:
            fut.result()
        except KafkaException as exc:
            raise _topic_failure(exc, name, conn, "alter") from None
        changes.append(f"partitions now {partitions}")
    if out is Output.json:
        print_json({"topic": name, "partitions": partitions, "set": dict(sets),
                    "deleted": deletes})
    else:
        typer.echo(f"altered topic '{name}': " + "; ".join(changes))


@topic_app.command("delete")
@handle_errors
def delete(
    names: Annotated[list[str], typer.Argument(help="topic names")],
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="succeed when a topic does not exist")
    ] = False,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Delete topics and all their records."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    unique = list(dict.fromkeys(names))
    futs = conn.admin().delete_topics(unique, request_timeout=REQUEST_TIMEOUT_S)
    deleted: list[str] = []
    missing: list[str] = []
    failures: list[CliError] = []
    for name in unique:
        try:
            futs[name].result()
            deleted.append(name)
        except KafkaException as exc:
            if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                missing.append(name)
                if not if_exists:
                    failures.append(CliError(
                        f"topic '{name}' does not exist; list topics with eddy topic list "
                        f"(or pass --if-exists)"
                    ))
            else:
                failures.append(_topic_failure(exc, name, conn, "delete"))
    if out is Output.json:
        print_json({"deleted": deleted, "missing": missing})
    else:
        for name in deleted:
            typer.echo(f"deleted topic '{name}'")
        for name in missing:
            if if_exists:
                typer.echo(f"topic '{name}' does not exist; nothing to delete")
    if failures:
        for f in failures[:-1]:
            typer.echo(f"error: {f.message}", err=True)
        raise failures[-1]


register_reassign_commands(topic_app)
