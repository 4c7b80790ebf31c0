"""Parsing Spark data source options (always strings) with errors naming the option."""

from __future__ import annotations

from collections.abc import Mapping


class OptionError(ValueError):
    """A bad data source option; the message names the option."""


def int_option(options: Mapping[str, str], name: str, default: int | None = None,
               minimum: int | None = None, label: str = "") -> int | None:
    """`options[name]` (or its lower-case spelling) as an integer; unset or empty gives
    `default`. Errors read `<label>option <name>: ...`."""
    raw = options.get(name)
    if raw is None:
        raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"{label}option {name}: expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"{label}option {name}: must be at least {minimum}, got {value}")
    return value


#: the formats schema-aware keys and values take, the fields that take them, and the
#: option naming the schema registry
FORMATS = ("avro", "json", "protobuf")
FIELDS = ("key", "value")
URL_OPTION = "schema.registry.url"


def requested_format(lower: Mapping[str, str], fld: str) -> str | None:
    """The format option ``<fld>.format`` asks for (None: raw bytes), checked, with the
    registry URL it needs present."""
    fmt = lower.get(f"{fld}.format", "").strip().lower()
    if not fmt or fmt in ("binary", "bytes", "raw"):
        return None
    if fmt not in FORMATS:
        raise OptionError(f"option {fld}.format: expected one of {', '.join(FORMATS)}, "
                          f"got {fmt!r}")
    if not lower.get(URL_OPTION, "").strip():
        raise OptionError(f"option {fld}.format={fmt} needs the option {URL_OPTION}")
    return fmt
