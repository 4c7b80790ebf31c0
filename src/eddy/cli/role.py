"""`eddy role grant|revoke|list`: roles (producer, consumer, admin, observer) given to a
principal on a topic prefix or one topic, kept as plain Kafka ACLs (see
``eddy.security.roles``: what each role allows, and how groups and transactional ids
default to the topics' name).

    eddy role grant producer alice --prefix orders.
    eddy role grant consumer User:billing --prefix orders. --group-prefix billing-
    eddy role list
    eddy role revoke producer alice --prefix orders.
"""

from __future__ import annotations

from typing import Annotated

import typer

from eddy.cli.acl import (
    client_filter,
    conn_of,
    create,
    delete,
    describe_all,
    exact_filter,
    show,
)
from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    CommandConfigOpt,
    Output,
    OutputOpt,
    handle_errors,
    print_json,
    render_table,
    resolve_output,
    usage_error,
)
from eddy.security.acl import WILDCARD, AclOperation, PatternType, Permission, ResourceType
from eddy.security.roles import ROLES, Grant, bindings_of, make_grant, principal_of, recognise
from eddy.security.roles import revocation as revocation_of

role_app = typer.Typer(
    help="Give principals roles on topics: " + "; ".join(
        f"{r.name}: {r.description}" for r in ROLES.values()) + ".",
    no_args_is_help=True)

RoleArg = Annotated[str, typer.Argument(help=f"one of {', '.join(ROLES)}")]
PrincipalArg = Annotated[str, typer.Argument(help="User:NAME, or a user name")]
PrefixOpt = Annotated[str | None, typer.Option(
    "--prefix", help="the topics whose names start with this")]
TopicOpt = Annotated[str | None, typer.Option("--topic", help="one topic")]
GroupOpt = Annotated[str | None, typer.Option(
    "--group", help="one consumer group (default: the topics' name and pattern)")]
GroupPrefixOpt = Annotated[str | None, typer.Option(
    "--group-prefix", help="the consumer groups whose names start with this")]
TxnOpt = Annotated[str | None, typer.Option(
    "--transactional-id", help="one transactional id (default: the topics' name and "
    "pattern)")]
TxnPrefixOpt = Annotated[str | None, typer.Option(
    "--transactional-id-prefix", help="the transactional ids starting with this")]
HostOpt = Annotated[str, typer.Option(
    "--host", help="client address the grant applies to (* : any host)")]

COLUMNS = ["ROLE", "PRINCIPAL", "HOST", "TOPICS", "GROUPS", "TRANSACTIONAL IDS"]


def _one(literal: str | None, prefix: str | None, what: str
         ) -> tuple[str | None, PatternType | None]:
    if literal is not None and prefix is not None:
        usage_error(f"give --{what} or --{what}-prefix, not both")
    if prefix is not None:
        return prefix, PatternType.PREFIXED
    if literal is not None:
        return literal, PatternType.LITERAL
    return None, None


def grant_of(role: str, principal: str, prefix: str | None, topic: str | None,
             group: str | None, group_prefix: str | None, txn: str | None,
             txn_prefix: str | None, host: str) -> Grant:
    """The grant the options name; a usage error when they do not name one."""
    if (prefix is None) == (topic is None):
        usage_error("give exactly one of --prefix and --topic")
    name, pattern = (prefix, PatternType.PREFIXED) if prefix is not None else (
        topic, PatternType.LITERAL)
    assert name is not None
    group_name, group_pattern = _one(group, group_prefix, "group")
    txn_name, txn_pattern = _one(txn, txn_prefix, "transactional-id")
    spec = ROLES.get(role.strip().lower())
    if spec is not None and not spec.group and group_name is not None:
        usage_error(f"the {spec.name} role uses no consumer groups")
    if spec is not None and not spec.transactional_id and txn_name is not None:
        usage_error(f"the {spec.name} role uses no transactional ids")
    try:
        return make_grant(role, principal, name, pattern, group=group_name,
                          group_pattern=group_pattern, transactional_id=txn_name,
                          transactional_id_pattern=txn_pattern, host=host)
    except ValueError as exc:
        usage_error(str(exc))


def _scope(scope: object) -> str:
    return "-" if scope is None else str(scope)


@role_app.command("grant")
@handle_errors
def grant(
    role: RoleArg,
    principal: PrincipalArg,
    prefix: PrefixOpt = None,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    group_prefix: GroupPrefixOpt = None,
    transactional_id: TxnOpt = None,
    transactional_id_prefix: TxnPrefixOpt = None,
    host: HostOpt = WILDCARD,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """Give a principal a role on a topic prefix (--prefix) or one topic (--topic)."""
    g = grant_of(role, principal, prefix, topic, group, group_prefix, transactional_id,
                 transactional_id_prefix, host)
    acls = bindings_of(g)
    create(conn_of(bootstrap, client_config, command_config), acls)
    show(acls, output, title=f"{g.principal} is now {g.role} of topics {g.topics}")


@role_app.command("revoke")
@handle_errors
def revoke(
    role: RoleArg,
    principal: PrincipalArg,
    prefix: PrefixOpt = None,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    group_prefix: GroupPrefixOpt = None,
    transactional_id: TxnOpt = None,
    transactional_id_prefix: TxnPrefixOpt = None,
    host: HostOpt = WILDCARD,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """Take a role back: its ACLs, except those another role of the principal needs."""
    g = grant_of(role, principal, prefix, topic, group, group_prefix, transactional_id,
                 transactional_id_prefix, host)
    conn = conn_of(bootstrap, client_config, command_config)
    theirs = describe_all(conn, client_filter(ResourceType.ANY, None, PatternType.ANY,
                                              g.principal, g.host, AclOperation.ANY,
                                              Permission.ALLOW))
    doomed = revocation_of(g, theirs)
    if not doomed:
        raise CliError(f"{g.principal} is not {g.role} of topics {g.topics} (or another "
                       "role still needs each of its ACLs); see eddy role list")
    removed = delete(conn, [exact_filter(a) for a in doomed])
    show(removed, output, title=f"{g.principal} is no longer {g.role} of topics {g.topics}")


@role_app.command("list")
@handle_errors
def list_roles(
    principal: Annotated[str | None, typer.Option(
        "--principal", help="only this principal's roles")] = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """The roles whose ACLs are all in place."""
    who = None
    if principal is not None:
        try:
            who = principal_of(principal)
        except ValueError as exc:
            usage_error(str(exc))
    conn = conn_of(bootstrap, client_config, command_config)
    acls = describe_all(conn, client_filter(ResourceType.ANY, None, PatternType.ANY, who,
                                            None, AclOperation.ANY, Permission.ALLOW))
    rows = [[g.role, g.principal, g.host, str(g.topics), _scope(g.groups),
             _scope(g.transactional_ids)] for g in recognise(acls)]
    out = resolve_output(output)
    if out is Output.json:
        print_json([dict(zip(["role", "principal", "host", "topics", "groups",
                              "transactional_ids"], r, strict=True)) for r in rows])
        return
    render_table(out, COLUMNS, rows)
