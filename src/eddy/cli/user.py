"""`eddy user create|list|delete`: SCRAM users (KIP-554) through AlterUserScramCredentials and
DescribeUserScramCredentials. Only salted keys reach the cluster, never the password.

A secured listener needs the client's settings: `-X KEY=VALUE` (librdkafka properties,
repeatable) or `--command-config FILE` (a properties file, as Kafka's tools take), e.g.
security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-256, sasl.username, sasl.password,
ssl.ca.location.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from eddy.cli.common import (
    REQUEST_TIMEOUT_S,
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    CommandConfigOpt,
    Conn,
    OutputOpt,
    handle_errors,
    read_properties,
    render_table,
    resolve_output,
    usage_error,
)

user_app = typer.Typer(help="Manage SASL/SCRAM users.", no_args_is_help=True)

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
NAMES = {v: k for k, v in MECHANISMS.items()}
DEFAULT_ITERATIONS = 8192

def _conn(bootstrap: str, client_config: list[str] | None, command_config: Path | None
          ) -> Conn:
    items = (read_properties(command_config) if command_config else []) + list(
        client_config or [])
    return Conn.make(bootstrap, items)


def _wait(futures: dict[str, object]) -> None:
    for user, future in futures.items():
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)  # type: ignore[attr-defined]
        except Exception as exc:
            reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
            raise CliError(f"user {user}: {reason}") from None


@user_app.command("create")
@handle_errors
def create(
    name: Annotated[str, typer.Argument(help="user name")],
    password: Annotated[str | None, typer.Option(
        "--password", help="the password (visible in the process list: prefer "
        "--password-stdin)")] = None,
    password_stdin: Annotated[bool, typer.Option(
        "--password-stdin", help="read the password from stdin (its first line)")] = False,
    mechanism: Annotated[list[str] | None, typer.Option(
        "--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default both)")
    ] = None,
    iterations: Annotated[int, typer.Option(help="PBKDF2 iterations (4096 to 16384)")
                          ] = DEFAULT_ITERATIONS,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """Create a user, or set a new password for one."""
    if (password is None) == (not password_stdin):
        usage_error("give exactly one of --password and --password-stdin")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        usage_error("the password is empty")
    mechs = [m.upper() for m in (mechanism or list(MECHANISMS))]
    unknown = [m for m in mechs if m not in MECHANISMS]
    if unknown:
        usage_error(f"unknown mechanism {unknown[0]}: use SCRAM-SHA-256 or SCRAM-SHA-512")
    admin = _conn(bootstrap, client_config, command_config).admin()
    assert password is not None
    # one request per mechanism: Kafka refuses a user altered twice in one request
    for m in dict.fromkeys(mechs):
        info = ScramCredentialInfo(MECHANISMS[m], iterations)
        upsert = UserScramCredentialUpsertion(name, info, password.encode())
        _wait(admin.alter_user_scram_credentials([upsert]))  # type: ignore[arg-type]
    typer.echo(f"user {name}: {', '.join(dict.fromkeys(mechs))} set")


@user_app.command("list")
@handle_errors
def list_users(
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """Every user with its SCRAM mechanisms and iterations."""
    admin = _conn(bootstrap, client_config, command_config).admin()
    future: Any = admin.describe_user_scram_credentials()
    try:
        described = future.result(timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
        raise CliError(f"cannot list users: {reason}") from None
    rows = []
    for user in sorted(described):
        for info in described[user].scram_credential_infos:
            rows.append((user, NAMES.get(info.mechanism, str(info.mechanism)),
                         info.iterations))
    render_table(resolve_output(output), ["USER", "MECHANISM", "ITERATIONS"], rows)


@user_app.command("delete")
@handle_errors
def delete(
    name: Annotated[str, typer.Argument(help="user name")],
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """Delete a user (every SCRAM credential it has)."""
    admin = _conn(bootstrap, client_config, command_config).admin()
    try:
        futures: Any = admin.describe_user_scram_credentials([name])
        described = futures[name].result(timeout=REQUEST_TIMEOUT_S)
    except Exception:
        raise CliError(f"no user {name}") from None
    infos = described.scram_credential_infos
    if not infos:
        raise CliError(f"no user {name}")
    for info in infos:  # one request each, as for create
        deletion = UserScramCredentialDeletion(name, info.mechanism)
        _wait(admin.alter_user_scram_credentials([deletion]))  # type: ignore[arg-type]
    typer.echo(f"user {name} deleted")
