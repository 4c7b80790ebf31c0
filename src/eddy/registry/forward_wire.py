"""What a registry follower sends the node leading ``_schemas`` over the mesh (tag 0x08,
``TAG_REGISTRY``), and what it answers: one postcard message each way.

A ``WriteRequest`` names one of the service's write operations with its arguments as the
service takes them: the subject (or config/mode scope), the version text, the query flags and
the JSON body (a register's schema request, a config's or mode's body). The leader parses the
body again with the same rules the HTTP layer applies, so a forwarded write is refused or
answered exactly as one made on the leader itself. A ``WriteAnswer`` carries either the
result as JSON or Confluent's status, error code and message, and the leader's ``_schemas``
position after the operation (the follower waits for its own reader to get there).

Everything decoded here is hostile: the postcard decoder checks every length against the
bytes present, and the sizes and values are checked again before anything is parsed; every
refusal is a ``WireError`` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eddy import postcard
from eddy.postcard import I32, I64, U8, U16, PostcardError
from eddy.registry.guid import parse_guid
from eddy.registry.requests import SchemaRequest

OP_REGISTER = 1
OP_DELETE_SUBJECT = 2
OP_DELETE_VERSION = 3
OP_SET_CONFIG = 4
OP_DELETE_CONFIG = 5
OP_SET_MODE = 6
OP_DELETE_MODE = 7
OP_NAMES = {OP_REGISTER: "register", OP_DELETE_SUBJECT: "delete subject",
            OP_DELETE_VERSION: "delete version", OP_SET_CONFIG: "set config",
            OP_DELETE_CONFIG: "delete config", OP_SET_MODE: "set mode",
            OP_DELETE_MODE: "delete mode"}
#: the operations that need a subject, a version, a body
_NEED_SUBJECT = frozenset({OP_REGISTER, OP_DELETE_SUBJECT, OP_DELETE_VERSION})
_NEED_BODY = frozenset({OP_REGISTER, OP_SET_CONFIG, OP_SET_MODE})

#: the largest JSON body forwarded (the HTTP layer reads at most 16 MiB; re-encoding a body
#: may lengthen it a little)
MAX_BODY_BYTES = 32 << 20
#: the longest subject name or version text forwarded (a URL path part)
MAX_NAME_CHARS = 16 << 10
#: the longest error message answered
MAX_MESSAGE_CHARS = 64 << 10


class WireError(ValueError):
    """A forwarded request or answer that does not hold together."""


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A write operation to run on the leader."""

    op: U8
    subject: str | None  # the subject, or a config/mode scope (None: global)
    version: str | None  # delete version: the version text as the path had it
    normalize: bool
    permanent: bool
    force: bool
    body: bytes  # JSON; empty when the operation has no body


@dataclass(frozen=True, slots=True)
class WriteAnswer:
    """The leader's answer: ``error_code`` 0 and the result as JSON, or Confluent's error."""

    status: U16
    error_code: I32
    message: str
    body: bytes
    #: the leader's ``_schemas`` position after the operation (-1: unknown)
    offset: I64


# -- JSON ----------------------------------------------------------------------------------------

def dump_json(data: Any) -> bytes:
    """``data`` as compact UTF-8 JSON (a lone surrogate escaped, as the HTTP layer does)."""
    try:
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        try:
            return text.encode()
        except UnicodeEncodeError:
            return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    except (ValueError, TypeError, RecursionError) as exc:
        raise WireError(f"cannot encode the JSON: {exc}") from None


def load_json(raw: bytes, what: str) -> Any:
    """Bytes read from the mesh as JSON (NaN and Infinity refused); a ``WireError`` naming
    ``what`` when they are not."""
    if len(raw) > MAX_BODY_BYTES:
        raise WireError(f"{what}: {len(raw)} bytes, more than {MAX_BODY_BYTES}")
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise WireError(f"{what}: invalid UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise WireError(f"{what}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError included
        raise WireError(f"{what}: not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-standard token '{name}'")


def schema_request_json(request: SchemaRequest) -> bytes:
    """A parsed schema request as the JSON body ``SchemaRequest.from_body`` reads back into
    the same request."""
    body: dict[str, Any] = {"schema": request.schema, "schemaType": request.schema_type}
    if request.references:
        body["references"] = [r.to_json() for r in request.references]
    if request.metadata is not None:
        body["metadata"] = request.metadata
    if request.rule_set is not None:
        body["ruleSet"] = request.rule_set
    if request.id is not None:
        body["id"] = request.id
    if request.version is not None:
        body["version"] = request.version
    return dump_json(body)


# -- requests ------------------------------------------------------------------------------------

def encode_request(request: WriteRequest) -> bytes:
    return postcard.encode(request)


def decode_request(payload: bytes) -> WriteRequest:
    """A forwarded request checked: a known operation with the arguments it needs, sizes
    within bounds. Raises ``WireError``."""
    try:
        request = postcard.decode(WriteRequest, payload)
    except PostcardError as exc:
        raise WireError(f"bad request: {exc}") from None
    name = OP_NAMES.get(request.op)
    if name is None:
        raise WireError(f"WriteRequest.op: unknown operation {request.op}")
    for field, value in (("subject", request.subject), ("version", request.version)):
        if value is not None and len(value) > MAX_NAME_CHARS:
            raise WireError(f"WriteRequest.{field}: {len(value)} characters, more than "
                            f"{MAX_NAME_CHARS}")
    if request.op in _NEED_SUBJECT and request.subject is None:
        raise WireError(f"WriteRequest.subject: missing ({name} needs one)")
    if request.op == OP_DELETE_VERSION and request.version is None:
        raise WireError("WriteRequest.version: missing (delete version needs one)")
    if request.op in _NEED_BODY and not request.body:
        raise WireError(f"WriteRequest.body: missing ({name} needs one)")
    if request.op not in _NEED_BODY and request.body:
        raise WireError(f"WriteRequest.body: {name} takes none")
    if len(request.body) > MAX_BODY_BYTES:
        raise WireError(f"WriteRequest.body: {len(request.body)} bytes, more than "
                        f"{MAX_BODY_BYTES}")
    return request


# -- answers -------------------------------------------------------------------------------------

def ok_answer(result: Any, offset: int) -> bytes:
    return postcard.encode(WriteAnswer(200, 0, "", dump_json(result), offset))


def error_answer(status: int, code: int, message: str, offset: int = -1) -> bytes:
    return postcard.encode(WriteAnswer(status, code, message[:MAX_MESSAGE_CHARS], b"", offset))


def decode_answer(payload: bytes) -> WriteAnswer:
    """The leader's answer checked (a status an HTTP answer may have, a success with a
    body, an error with a code). Raises ``WireError``."""
    try:
        answer = postcard.decode(WriteAnswer, payload)
    except PostcardError as exc:
        raise WireError(f"bad answer: {exc}") from None
    if not 200 <= answer.status <= 599:
        raise WireError(f"WriteAnswer.status: {answer.status} is not an HTTP status")
    if answer.error_code == 0 and (answer.status != 200 or not answer.body):
        raise WireError("WriteAnswer: a success needs status 200 and a body")
    if answer.error_code != 0 and answer.status < 400:
        raise WireError(f"WriteAnswer.status: {answer.status} with error code "
                        f"{answer.error_code}")
    if len(answer.message) > MAX_MESSAGE_CHARS:
        raise WireError(f"WriteAnswer.message: {len(answer.message)} characters, more than "
                        f"{MAX_MESSAGE_CHARS}")
    return answer


def check_result(op: int, result: Any) -> Any:
    """A success's JSON as the service's operation returns it: a register's ``{"id": n,
    "guid": g}`` (a GUID in its canonical form), a subject delete's version list, a version
    delete's version, a config or mode object."""
    if op == OP_REGISTER:
        ok = (isinstance(result, dict) and set(result) == {"id", "guid"}
              and _is_int(result["id"]) and isinstance(result["guid"], str)
              and parse_guid(result["guid"]) == result["guid"])
    elif op == OP_DELETE_SUBJECT:
        ok = isinstance(result, list) and all(_is_int(v) for v in result)
    elif op == OP_DELETE_VERSION:
        ok = _is_int(result)
    else:
        ok = isinstance(result, dict)
    if not ok:
        raise WireError(f"WriteAnswer.body: not what {OP_NAMES.get(op, op)} answers")
    return result


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
