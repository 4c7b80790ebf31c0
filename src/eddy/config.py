"""Eddy's one typed config: defaults < config file < EDDY_* env < flags (later wins).

``BrokerConfig`` composes each area's settings model (the broker's, which inherits those of
the areas below it, the registry's and the admin listener's) and checks what spans them; no
area imports this module: each receives its own settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ConfigDict,
    ValidationError,
    field_validator,
    model_validator,
)

from eddy.broker.settings import (
    ROLES,
    TOPIC_DEFAULT_FIELDS,
    BrokerSettings,
    parse_connection_overrides,
)
from eddy.cluster.settings import parse_quorum_voters
from eddy.config_parse import ConfigError, http_host_port, parse_host_port, split_list
from eddy.observe.settings import ADMIN_PORT, AdminSettings
from eddy.registry.settings import REGISTRY_PORT, RegistrySettings

__all__ = [
    "ADMIN_PORT", "ENV_PREFIX", "REGISTRY_PORT", "ROLES", "TOPIC_DEFAULT_FIELDS",
    "BrokerConfig", "ConfigError", "kafka_name", "load_config",
    "parse_connection_overrides", "parse_host_port", "parse_quorum_voters", "split_list",
]

ENV_PREFIX = "EDDY_"


class BrokerConfig(BrokerSettings, AdminSettings, RegistrySettings):
    """Every setting a user can set. Kafka's dotted names are accepted as aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    @field_validator("admin_listener")
    @classmethod
    def _admin_host_port(cls, v: str | None) -> str | None:
        return http_host_port(v, "admin.listener")

    @model_validator(mode="after")
    def _registry_role(self) -> BrokerConfig:
        if self.registry_listener and "registry" not in self.roles and "broker" in self.roles:
            # a registry.listener set asks for the registry: the role follows
            object.__setattr__(self, "process_roles", f"{self.process_roles},registry")
        if "registry" in self.roles and "broker" not in self.roles:
            raise ValueError("process.roles registry needs broker on the same node (the "
                             "registry reads and writes _schemas through its broker)")
        return self

    @model_validator(mode="after")
    def _security_settings(self) -> BrokerConfig:
        from eddy.security.settings import check_security

        check_security(self, {  # ValueErrors name the setting
            "registry": (self.registry_ssl_enabled, self.registry_authentication_method),
            "admin": (self.admin_ssl_enabled, self.admin_authentication_method)})
        return self

    @property
    def registry_address(self) -> tuple[str, int] | None:
        """Where the schema registry listens (None: not served)."""
        if "registry" not in self.roles:
            return None
        return self.http_address(self.registry_listener, REGISTRY_PORT, "registry.listener")

    @property
    def admin_address(self) -> tuple[str, int] | None:
        """Where the HTTP admin listener listens (None: off)."""
        return self.http_address(self.admin_listener, ADMIN_PORT, "admin.listener")


def kafka_name(field: str) -> str:
    """The name a Kafka user knows a setting by (its alias, else dotted)."""
    alias = BrokerConfig.model_fields[field].alias
    return alias or field.replace("_", ".")


def _field_names() -> dict[str, str]:
    """Every accepted spelling (snake, dotted alias, dashed) -> field name."""
    names: dict[str, str] = {}
    for name, f in BrokerConfig.model_fields.items():
        names[name] = name
        names[name.replace("_", "-")] = name
        names[name.replace("_", ".")] = name
        if f.alias:
            names[f.alias] = name
    return names


def _normalise(source: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    names = _field_names()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        field = names.get(str(key).lower())
        if field is None:
            raise ConfigError(f"{source}: unknown setting {key!r}")
        out[field] = value
    return out


def load_config(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> BrokerConfig:
    """Merge the layers and validate once; errors name the source and the field."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if config_file:
        path = Path(config_file)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {config_file} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{config_file}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{config_file}: expected a mapping of settings")
        layers.append((config_file, _normalise(config_file, data)))
    env = os.environ if env is None else env
    env_values = {
        k[len(ENV_PREFIX):].lower(): v
        for k, v in env.items()
        if k.startswith(ENV_PREFIX) and k not in ("EDDY_BOOTSTRAP",)
    }
    if env_values:
        layers.append(("environment (EDDY_*)", _normalise("environment (EDDY_*)", env_values)))
    if overrides:
        layers.append(("command line", _normalise("command line", overrides)))
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        merged.update(values)
        origin.update(dict.fromkeys(values, source))
    try:
        return BrokerConfig(**merged)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if err["loc"]:
                field = str(err["loc"][0])
                info = BrokerConfig.model_fields.get(field)
                name = info.alias if info is not None and info.alias else field
                problems.append(f"{origin.get(field, 'config')}: {name}: {err['msg']}")
            else:
                problems.append(str(err["msg"]).removeprefix("Value error, "))
        raise ConfigError("; ".join(problems)) from None
