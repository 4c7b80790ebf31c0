"""What applying a command gives back, and the rejection the handlers raise."""

from __future__ import annotations

from dataclasses import dataclass

from eddy.protocol.errors import ErrorCode


class Rejected(Exception):
    """A command the state refuses: ``code`` is the Kafka error to answer with. Raised by
    the handlers before they change anything."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """``code`` NONE: applied; anything else: rejected, and the state is unchanged.
    ``value``: the producer-id block's first id, a pipeline's version, the number of
    ACLs deleted... (None when the command has nothing to say)."""

    code: ErrorCode = ErrorCode.none
    message: str = ""
    value: int | None = None

    @property
    def ok(self) -> bool:
        return bool(self.code == ErrorCode.none)
