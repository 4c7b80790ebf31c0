"""The small parsers every settings group shares (``eddy.config`` and the settings modules
of mesh, registry and cluster): kept here, importing nothing of Eddy, so that no settings
module imports ``eddy.config`` (which imports them)."""

from __future__ import annotations

__all__ = ["ConfigError", "http_host_port", "parse_host_port", "split_list"]


class ConfigError(ValueError):
    """A config problem, worded for a person: which source, which field, what is wrong."""


def parse_host_port(value: str, field: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{field}: expected HOST:PORT, got {value!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def split_list(value: str) -> list[str]:
    """A comma-separated setting as its non-empty, stripped items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def http_host_port(value: str | None, field: str) -> str | None:
    """An HTTP listener setting (registry.listener, admin.listener): None stays unset (next
    to the Kafka listener), blank is off, anything else must be HOST:PORT."""
    if value is None:
        return None
    if value.strip():
        parse_host_port(value.strip(), field)
    return value.strip()
