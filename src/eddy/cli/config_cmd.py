"""`eddy config show`: the merged broker config (defaults < file < EDDY_* env < --set)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from eddy.cli.common import CliError, Output, OutputOpt, handle_errors, parse_kv

config_app = typer.Typer(help="Show the broker configuration.", no_args_is_help=True)


@config_app.command("show")
@handle_errors
def show(
    config_file: Annotated[
        str | None, typer.Option("--config", "-c", help="YAML config file, as eddy serve takes")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE",
                     help="any setting, as eddy serve --set takes (repeatable)"),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Print the config `eddy serve` would run with: YAML, or JSON with --output json."""
    from eddy.config import ConfigError, load_config

    overrides = {k: v.strip() for k, v in parse_kv(set_, "--set")}
    try:
        config = load_config(config_file, overrides=overrides)
    except (ConfigError, ValueError) as exc:
        raise CliError(f"{exc}; fix the setting (see eddy serve --help)") from None
    import yaml

    data = config.model_dump(mode="json", by_alias=True)
    if output is Output.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
