"""Request and response encoding on top of kio's generated message types."""

from __future__ import annotations

import io
import struct
from collections.abc import Sized
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from eddy.protocol.apis import SUPPORTED, ApiKey, is_flexible, response_header_version
from eddy.protocol.bounds import BoundsError, is_panic, skip_tagged_fields, walker

_PREFIX = struct.Struct(">hhi")
_I16 = struct.Struct(">h")


class MalformedRequest(Exception):
    """A frame whose header or body cannot be decoded: the connection is closed."""


@dataclass(frozen=True, slots=True)
class RawHeader:
    """The fixed prefix every request shares, readable whatever the version."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class Request:
    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    client_host: str = ""
    session: Any = None  # the connection's eddy.security.session.Session (who the client is)


@dataclass(frozen=True, slots=True)
class Encoded:
    """A response a handler encoded itself (header included), as buffers to write."""

    chunks: list[Sized]  # bytes, or file ranges (anything with fd/position/length)


def peek_header(frame: bytes) -> RawHeader:
    if len(frame) < _PREFIX.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    key, version, corr = _PREFIX.unpack_from(frame, 0)
    return RawHeader(key, version, corr)


@cache
def _request_reader(api_key: ApiKey, version: int) -> Any:
    return entity_reader(load_request_schema(api_key, version))


@cache
def _request_walker(api_key: ApiKey, version: int) -> Any:
    return walker(load_request_schema(api_key, version))


@cache
def _response_writer(api_key: ApiKey, version: int) -> Any:
    return entity_writer(load_response_schema(api_key, version))


_resp_header_v0_writer = entity_writer(ResponseHeaderV0)
_resp_header_v1_writer = entity_writer(ResponseHeaderV1)


def _read_header(frame: bytes, flexible: bool) -> tuple[str | None, int]:
    """client_id and the body's start. Unknown header tags are skipped (KIP-482)."""
    pos = _PREFIX.size
    if len(frame) < pos + 2:
        raise MalformedRequest("request header truncated before client_id")
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id = None
    if n >= 0:
        if len(frame) < pos + n:
            raise MalformedRequest("request header truncated inside client_id")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    if flexible:
        try:
            pos = skip_tagged_fields(frame, pos, "request header")
        except BoundsError as exc:
            raise MalformedRequest(str(exc)) from None
    return client_id, pos


def decode_request(
    frame: bytes, api_key: ApiKey, version: int, client_host: str = "", session: Any = None
) -> Request:
    """Decode a request of a supported API and version (checked by the caller)."""
    raw = peek_header(frame)
    client_id, used = _read_header(frame, is_flexible(api_key, version))
    # every length and count is checked against the bytes present before kio allocates
    try:
        _request_walker(api_key, version)(frame, used, len(frame))
    except BoundsError as exc:
        raise MalformedRequest(f"{api_key.name} v{version}: {exc}") from None
    try:
        body, _ = _request_reader(api_key, version)(frame, used)
    except BaseException as exc:  # kio raises a variety of errors on garbage input
        if not isinstance(exc, Exception) and not is_panic(exc):
            raise
        raise MalformedRequest(
            f"cannot decode {api_key.name} v{version}: {type(exc).__name__}: {exc}"
        ) from None
    # Bytes after the body are ignored, as Kafka does: librdkafka 2.x sends a 4-byte
    # null where Metadata v12 has a 1-byte one (its issue #5049).
    return Request(api_key, version, raw.correlation_id, client_id, body, client_host, session)


def response_class(api_key: ApiKey, version: int) -> Any:
    return load_response_schema(api_key, version)


@cache
def response_module(api_key: ApiKey, version: int) -> Any:
    """The kio module holding every nested response type of this API version."""
    import sys

    return sys.modules[response_class(api_key, version).__module__]


@cache
def request_module(api_key: ApiKey, version: int) -> Any:
    import sys

    return sys.modules[load_request_schema(api_key, version).__module__]


def encode_response(api_key: ApiKey, version: int, correlation_id: int, body: Any) -> bytes:
    """Encode header and body, without the size prefix."""
    buf = io.BytesIO()
    if response_header_version(api_key, version) == 0:
        _resp_header_v0_writer(buf, ResponseHeaderV0(correlation_id=correlation_id))
    else:
        _resp_header_v1_writer(buf, ResponseHeaderV1(correlation_id=correlation_id))
    _response_writer(api_key, version)(buf, body)
    return buf.getvalue()


def build(cls: type[Any], **fields: Any) -> Any:
    """Instantiate a kio type with the fields this version has, ignoring the others."""
    known = cls.__dataclass_fields__
    return cls(**{k: v for k, v in fields.items() if k in known})


def supported_version(api_key: int, version: int) -> ApiKey | None:
    try:
        key = ApiKey(api_key)
    except ValueError:
        return None
    return key if version in SUPPORTED[key] else None
