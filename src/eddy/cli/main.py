"""`eddy`: one command, many roles. `eddy serve` runs the broker."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="eddy",
    help="Eddy: an event-streaming platform that speaks the Kafka protocol.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """Eddy: an event-streaming platform that speaks the Kafka protocol."""


@app.command()
def serve(
    config_file: Annotated[
        str | None, typer.Option("--config", "-c", help="YAML config file")
    ] = None,
    listen: Annotated[
        str | None, typer.Option(help="Kafka listener HOST:PORT (port 0 picks a free one)")
    ] = None,
    advertised: Annotated[
        str | None, typer.Option(help="HOST:PORT clients are told to connect to")
    ] = None,
    data_dir: Annotated[str | None, typer.Option(help="data directory")] = None,
    node_id: Annotated[int | None, typer.Option(help="node id")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="any setting as KEY=VALUE, e.g. num.partitions=3"),
    ] = None,
) -> None:
    """Run a broker: every role in one process, on 127.0.0.1:9092 with data in ./eddy-data."""
    # imported here, not at the top: client commands start faster without pydantic
    from eddy.config import ConfigError, load_config

    overrides: dict[str, object] = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            typer.echo(f"error: --set expects KEY=VALUE, got {item!r}", err=True)
            raise typer.Exit(2)
        overrides[key.strip()] = value.strip()
    flags: dict[str, object] = {"listen": listen, "advertised": advertised,
                                "data_dir": data_dir, "node_id": node_id}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    try:
        config = load_config(config_file, overrides=overrides)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    from eddy.mesh.identity import IdentityError
    from eddy.mesh.membership import MembershipError
    from eddy.node.serve import run
    from eddy.security.tls import TlsError

    try:
        run(config)
    except (TlsError, IdentityError, MembershipError) as exc:  # they name the setting
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        typer.echo(f"error: cannot start: {exc}", err=True)
        raise typer.Exit(1) from None
    except (ValueError, KeyError) as exc:
        typer.echo(f"error: data directory {config.data_dir} is unreadable: {exc}", err=True)
        raise typer.Exit(1) from None


def _register() -> None:
    """The client command groups (each in its own module)."""
    from eddy.cli.acl import acl_app
    from eddy.cli.cluster.status import cluster_app
    from eddy.cli.config_cmd import config_app
    from eddy.cli.connect import connect_app
    from eddy.cli.consume import consume
    from eddy.cli.group import group_app
    from eddy.cli.mesh_keys import mesh_app
    from eddy.cli.produce import produce
    from eddy.cli.registry import registry_app
    from eddy.cli.role import role_app
    from eddy.cli.topic import topic_app
    from eddy.cli.txn import txn_app
    from eddy.cli.user import user_app

    app.add_typer(topic_app, name="topic")
    app.command("produce")(produce)
    app.command("consume")(consume)
    app.add_typer(group_app, name="group")
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(config_app, name="config")
    app.add_typer(txn_app, name="txn")
    app.add_typer(connect_app, name="connect")
    app.add_typer(registry_app, name="registry")
    app.add_typer(user_app, name="user")
    app.add_typer(mesh_app, name="mesh")
    app.add_typer(acl_app, name="acl")
    app.add_typer(role_app, name="role")


_register()
