"""Query parameters of the console's JSON endpoints, checked and clamped.

Every parameter is text from the network: it is refused (``ParamError``, answered 400 with
a JSON body naming the parameter) when it is too long, not a number where one is needed or
out of its range; a limit above its maximum is clamped, never trusted.
"""

from __future__ import annotations

from collections.abc import Mapping

from eddy.log.manager import TOPIC_NAME_RE

#: no parameter the console takes is longer than this
MAX_PARAM_CHARS = 256
INT64_MAX = (1 << 63) - 1
#: records one message-browser request returns at most
MAX_MESSAGES = 100
DEFAULT_MESSAGES = 20


class ParamError(ValueError):
    """A bad query parameter: ``status`` 400 (malformed) or 404 (names nothing here)."""

    def __init__(self, parameter: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.status = status

    def to_json(self) -> dict[str, str]:
        return {"error": str(self), "parameter": self.parameter}


def text(query: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """The parameter's text (None or ``default`` when absent or empty)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if len(raw) > MAX_PARAM_CHARS:
        raise ParamError(name, f"{name}: longer than {MAX_PARAM_CHARS} characters")
    return raw


def integer(query: Mapping[str, str], name: str, *, low: int, high: int = INT64_MAX,
            default: int | None = None, clamp_high: bool = False) -> int | None:
    """An integer parameter in ``[low, high]`` (above ``high``: clamped when ``clamp_high``,
    else refused); None or ``default`` when absent."""
    raw = text(query, name)
    if raw is None:
        return default
    raw = raw.strip()
    digits = raw[1:] if raw[:1] in "+-" else raw
    if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        raise ParamError(name, f"{name}: {raw[:40]!r} is not an integer of at most 19 digits")
    value = int(raw)
    if value < low:
        raise ParamError(name, f"{name}: {value} is below {low}")
    if value > high:
        if not clamp_high:
            raise ParamError(name, f"{name}: {value} is above {high}")
        value = high
    return value


def topic_name(query: Mapping[str, str], name: str = "topic") -> str:
    """A required topic name, in Kafka's alphabet."""
    raw = text(query, name)
    if raw is None:
        raise ParamError(name, f"{name}: missing")
    return check_topic(raw, name)


def check_topic(raw: str, name: str = "topic") -> str:
    if len(raw) > 249 or not TOPIC_NAME_RE.fullmatch(raw):
        raise ParamError(name, f"{name}: {raw[:60]!r} is not a topic name (ASCII letters, "
                               "digits, '.', '_' and '-', at most 249)")
    return raw
