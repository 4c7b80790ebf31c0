"""`eddy acl add|list|remove`: Kafka ACLs through CreateAcls, DescribeAcls and DeleteAcls,
with kafka-acls' options (--allow-principal, --deny-principal, --operation, --topic,
--group, --transactional-id, --cluster, --resource-pattern-type, --host).

The broker needs an authorizer (authorizer.class.name) and the CLI's principal ALTER on the
cluster (DESCRIBE to list), e.g. a super user. A secured listener needs the client's
settings: -X KEY=VALUE or --command-config FILE, as `eddy user`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any

import typer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding as ClientBinding,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBindingFilter as ClientFilter,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation as ClientOperation,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclPermissionType as ClientPermission,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ResourcePatternType as ClientPattern,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ResourceType as ClientResourceType,
)

from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    CommandConfigOpt,
    Conn,
    Output,
    OutputOpt,
    handle_errors,
    kafka_error_text,
    print_json,
    read_properties,
    render_table,
    resolve_output,
    usage_error,
    wait,
)
from eddy.metadata.records import AclBinding
from eddy.security.acl import (
    CLUSTER_NAME,
    OPERATIONS_OF,
    WILDCARD,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)
from eddy.security.roles import principal_of

acl_app = typer.Typer(help="Manage ACLs (the broker needs authorizer.class.name set).",
                      no_args_is_help=True)

COLUMNS = ["PRINCIPAL", "PERMISSION", "OPERATION", "HOST", "RESOURCE", "NAME", "PATTERN"]

AllowOpt = Annotated[list[str] | None, typer.Option(
    "--allow-principal", help="principal to allow, e.g. User:alice (repeatable)")]
DenyOpt = Annotated[list[str] | None, typer.Option(
    "--deny-principal", help="principal to deny, e.g. User:mallory (repeatable)")]
OperationOpt = Annotated[list[str] | None, typer.Option(
    "--operation", help="read, write, create, delete, alter, describe, cluster-action, "
    "describe-configs, alter-configs, idempotent-write, all (repeatable)")]
TopicOpt = Annotated[list[str] | None, typer.Option(
    "--topic", help="topic name or prefix (repeatable; * for every topic)")]
GroupOpt = Annotated[list[str] | None, typer.Option(
    "--group", help="consumer group name or prefix (repeatable)")]
TxnOpt = Annotated[list[str] | None, typer.Option(
    "--transactional-id", help="transactional id or prefix (repeatable)")]
ClusterOpt = Annotated[bool, typer.Option("--cluster", help="the cluster resource")]
HostOpt = Annotated[str | None, typer.Option(
    "--host", help="client address the ACL applies to (default: * , any host)")]


# ---- conversions between Eddy's bindings and confluent-kafka's ----------------------------


def to_client(acl: AclBinding) -> ClientBinding:
    return ClientBinding(ClientResourceType(acl.resource_type), acl.resource_name,
                         ClientPattern(acl.pattern_type), acl.principal, acl.host,
                         ClientOperation(acl.operation), ClientPermission(acl.permission_type))


def from_client(b: Any) -> AclBinding:
    return AclBinding(int(b.restype.value), b.name, int(b.resource_pattern_type.value),
                      b.principal, b.host, int(b.operation.value), int(b.permission_type.value))


def client_filter(rtype: ResourceType, name: str | None, pattern: PatternType,
                  principal: str | None, host: str | None, op: AclOperation,
                  permission: Permission) -> ClientFilter:
    anything: Any = None  # confluent-kafka's None: any name, principal or host
    return ClientFilter(ClientResourceType(rtype), name or anything, ClientPattern(pattern),
                        principal or anything, host or anything, ClientOperation(op),
                        ClientPermission(permission))


def describe_all(conn: Conn, f: ClientFilter | None = None) -> list[AclBinding]:
    """The ACLs the filter selects (None: every ACL)."""
    if f is None:
        f = client_filter(ResourceType.ANY, None, PatternType.ANY, None, None,
                          AclOperation.ANY, Permission.ANY)
    try:
        found = wait(conn.admin().describe_acls(f), "listing ACLs")
    except CliError:
        raise
    except Exception as exc:
        raise CliError(f"cannot list ACLs: {kafka_error_text(exc)}") from None
    return [from_client(b) for b in found]


def create(conn: Conn, acls: Sequence[AclBinding]) -> None:
    """Create ``acls``; the first refusal becomes a CliError."""
    if not acls:
        return
    futures = conn.admin().create_acls([to_client(a) for a in acls])
    for binding, future in futures.items():
        try:
            wait(future, "creating ACLs")
        except CliError:
            raise
        except Exception as exc:
            raise CliError(f"cannot create {describe_binding(from_client(binding))}: "
                           f"{kafka_error_text(exc)}") from None


def delete(conn: Conn, filters: Sequence[ClientFilter]) -> list[AclBinding]:
    """Delete what ``filters`` select; the ACLs deleted (each once)."""
    if not filters:
        return []
    futures = conn.admin().delete_acls(list(filters))
    out: dict[AclBinding, None] = {}
    for future in futures.values():
        try:
            deleted = wait(future, "removing ACLs")
        except CliError:
            raise
        except Exception as exc:
            raise CliError(f"cannot remove ACLs: {kafka_error_text(exc)}") from None
        out.update(dict.fromkeys(from_client(b) for b in deleted))
    return list(out)


def exact_filter(acl: AclBinding) -> ClientFilter:
    """A filter selecting exactly ``acl``."""
    return client_filter(ResourceType(acl.resource_type), acl.resource_name,
                         PatternType(acl.pattern_type), acl.principal, acl.host,
                         AclOperation(acl.operation), Permission(acl.permission_type))


# ---- output -------------------------------------------------------------------------------


def _name(enum: type[Any], value: int) -> str:
    try:
        return str(enum(value).name.lower().replace("_", "-"))
    except ValueError:
        return str(value)


def row(acl: AclBinding) -> list[str]:
    return [acl.principal, _name(Permission, acl.permission_type),
            _name(AclOperation, acl.operation), acl.host,
            _name(ResourceType, acl.resource_type), acl.resource_name,
            _name(PatternType, acl.pattern_type)]


def describe_binding(acl: AclBinding) -> str:
    p, perm, op, host, rtype, name, pattern = row(acl)
    return f"{perm} {p} {op} on {rtype} {name} ({pattern}) from {host}"


def _order(acl: AclBinding) -> tuple[int, str, int, str, int, int, str]:
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal,
            acl.permission_type, acl.operation, acl.host)


def show(acls: Iterable[AclBinding], output: Output | None, title: str | None = None) -> None:
    rows = [row(a) for a in sorted(acls, key=_order)]
    out = resolve_output(output)
    if out is Output.json:
        print_json([dict(zip([c.lower() for c in COLUMNS], r, strict=True)) for r in rows])
        return
    render_table(out, COLUMNS, rows, title=title)


# ---- options to bindings ------------------------------------------------------------------


def conn_of(bootstrap: str, client_config: list[str] | None,
            command_config: Any) -> Conn:
    items = (read_properties(command_config) if command_config else []) + list(
        client_config or [])
    return Conn.make(bootstrap, items)


def resources(topics: list[str] | None, groups: list[str] | None, txns: list[str] | None,
              cluster: bool) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics or []]
    out += [(ResourceType.GROUP, g) for g in groups or []]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in txns or []]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    for rtype, name in out:
        if not name:
            usage_error(f"the {_name(ResourceType, rtype)} name must not be empty")
    return out


def parse_pattern(text: str, allowed: Sequence[PatternType]) -> PatternType:
    try:
        pattern = parse_enum(PatternType, text, "--resource-pattern-type")
    except ValueError:
        pattern = PatternType.UNKNOWN
    if pattern not in allowed:
        usage_error(f"--resource-pattern-type: {text!r} is not one of "
                    f"{', '.join(p.name.lower() for p in allowed)}")
    return pattern


def operations(texts: list[str] | None) -> list[AclOperation]:
    out = []
    for text in texts or []:
        try:
            op = parse_enum(AclOperation, text, "--operation")
        except ValueError as exc:
            usage_error(str(exc))
        if op in (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS):
            usage_error(f"--operation {text}: delegation tokens are not supported")
        out.append(op)
    return list(dict.fromkeys(out))


def check_operations(res: Sequence[tuple[ResourceType, str]], ops: Sequence[AclOperation]
                     ) -> None:
    """kafka-acls' check: each operation must be one the resource type has (or ALL)."""
    for rtype, _ in res:
        valid = OPERATIONS_OF[rtype]
        for op in ops:
            if op != AclOperation.ALL and op not in valid:
                names = ", ".join(_name(AclOperation, o) for o in (*valid, AclOperation.ALL))
                usage_error(f"a {_name(ResourceType, rtype)} has no operation "
                            f"{_name(AclOperation, op)}; its operations are {names}")


def principals(allow: list[str] | None, deny: list[str] | None
               ) -> list[tuple[str, Permission]]:
    out = []
    for texts, permission in ((allow, Permission.ALLOW), (deny, Permission.DENY)):
        for text in texts or []:
            try:
                out.append((principal_of(text), permission))
            except ValueError as exc:
                usage_error(str(exc))
    return out


# ---- commands -----------------------------------------------------------------------------


@acl_app.command("add")
@handle_errors
def add(
    allow_principal: AllowOpt = None,
    deny_principal: DenyOpt = None,
    operation: OperationOpt = None,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    transactional_id: TxnOpt = None,
    cluster: ClusterOpt = False,
    resource_pattern_type: Annotated[str, typer.Option(
        "--resource-pattern-type", help="literal (the name) or prefixed (names starting "
        "with it)")] = "literal",
    host: HostOpt = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """Allow (or deny) principals operations on resources."""
    who = principals(allow_principal, deny_principal)
    if not who:
        usage_error("give --allow-principal or --deny-principal")
    ops = operations(operation)
    if not ops:
        usage_error("give at least one --operation")
    res = resources(topic, group, transactional_id, cluster)
    if not res:
        usage_error("give a resource: --topic, --group, --transactional-id or --cluster")
    check_operations(res, ops)
    pattern = parse_pattern(resource_pattern_type, (PatternType.LITERAL, PatternType.PREFIXED))
    acls = [AclBinding(rtype, name, PatternType.LITERAL if rtype == ResourceType.CLUSTER
                       else pattern, principal, host or WILDCARD, op, permission)
            for rtype, name in res for principal, permission in who for op in ops]
    create(conn_of(bootstrap, client_config, command_config), acls)
    show(acls, output, title=f"added {len(acls)} ACL{'s' if len(acls) != 1 else ''}")


@acl_app.command("list")
@handle_errors
def list_acls(
    topic: TopicOpt = None,
    group: GroupOpt = None,
    transactional_id: TxnOpt = None,
    cluster: ClusterOpt = False,
    resource_pattern_type: Annotated[str, typer.Option(
        "--resource-pattern-type", help="any (default), match (every ACL that applies to "
        "the name: literal, * and prefixes), literal or prefixed")] = "any",
    principal: Annotated[str | None, typer.Option(
        "--principal", help="only this principal's ACLs")] = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """ACLs: every one, or those of the resources and principal given."""
    pattern = parse_pattern(resource_pattern_type, (PatternType.ANY, PatternType.MATCH,
                                                   PatternType.LITERAL, PatternType.PREFIXED))
    who = None
    if principal is not None:
        try:
            who = principal_of(principal)
        except ValueError as exc:
            usage_error(str(exc))
    res: list[tuple[ResourceType, str | None]] = list(
        resources(topic, group, transactional_id, cluster)) or [(ResourceType.ANY, None)]
    conn = conn_of(bootstrap, client_config, command_config)
    found: dict[AclBinding, None] = {}
    for rtype, name in res:
        f = client_filter(rtype, name, pattern, who, None, AclOperation.ANY, Permission.ANY)
        found.update(dict.fromkeys(describe_all(conn, f)))
    show(found, output)


@acl_app.command("remove")
@handle_errors
def remove(
    allow_principal: AllowOpt = None,
    deny_principal: DenyOpt = None,
    operation: OperationOpt = None,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    transactional_id: TxnOpt = None,
    cluster: ClusterOpt = False,
    resource_pattern_type: Annotated[str, typer.Option(
        "--resource-pattern-type", help="literal (default), prefixed, any, or match")
    ] = "literal",
    host: HostOpt = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """Remove the ACLs of the resources given (only the principals, operations and host
    given, when given)."""
    res = resources(topic, group, transactional_id, cluster)
    if not res:
        usage_error("give a resource: --topic, --group, --transactional-id or --cluster")
    pattern = parse_pattern(resource_pattern_type, (PatternType.LITERAL, PatternType.PREFIXED,
                                                   PatternType.ANY, PatternType.MATCH))
    who: list[tuple[str | None, Permission]] = list(
        principals(allow_principal, deny_principal)) or [(None, Permission.ANY)]
    ops = operations(operation) or [AclOperation.ANY]
    filters = [client_filter(rtype, name, pattern, principal, host, op, permission)
               for rtype, name in res for principal, permission in who for op in ops]
    removed = delete(conn_of(bootstrap, client_config, command_config), filters)
    if not removed:
        raise CliError("no ACL matched; list them with eddy acl list")
    show(removed, output,
         title=f"removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}")
