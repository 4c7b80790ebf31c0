"""The HTTP side of `eddy registry`: one schema registry's REST API (Confluent's paths)
called through aiohttp's ClientSession, with bounded answers and a timeout.

``RegistryClient(url)`` is a context manager; ``call(method, path, params=..., body=...)``
answers the decoded JSON. An error answer in Confluent's shape (``{"error_code", "message"}``)
raises ``RegistryApiError``; anything else that goes wrong (no server, a timeout, an answer
that is too large or not JSON) raises ``CliError`` with a sentence saying so.

A secured registry (HTTPS, basic auth): ``EDDY_REGISTRY_USER=NAME:PASSWORD`` (Confluent's
``basic.auth.user.info``; from the environment, so the password is in no command line and
no message) and ``EDDY_REGISTRY_CA=FILE`` (PEM CA certificates the server's certificate is
checked against; the system's by default).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from yarl import URL

from eddy.cli.common import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, CliError

if TYPE_CHECKING:  # imported when a request is made: every other command starts faster
    import aiohttp

DEFAULT_REGISTRY_URL = "http://127.0.0.1:8081"
USER_ENV = "EDDY_REGISTRY_USER"
CA_ENV = "EDDY_REGISTRY_CA"
#: the largest answer read; a larger one is refused before (or while) it is read
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: what requests are sent as and what answers are accepted as (Confluent's media types)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPT = ("application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json; q=0.9, "
          "application/json; q=0.5")
_CHUNK = 64 * 1024

ParamValue = str | int | bool | None


class RegistryApiError(Exception):
    """An error answered by the registry: Confluent's ``error_code`` and ``message`` (for an
    answer without them, the HTTP status and reason)."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(f"error {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def check_url(url: str) -> URL:
    """``url`` parsed; not an http(s) URL with a host is a user error naming the option."""
    try:
        parsed = URL(url.strip())
        host = parsed.host
    except ValueError:
        host = None
        parsed = URL()
    if parsed.scheme not in ("http", "https") or not host:
        raise CliError(f"bad --url {url!r}: expected http://HOST:PORT, e.g. --url "
                       f"{DEFAULT_REGISTRY_URL}")
    return parsed


def path_of(parts: Sequence[str | int]) -> str:
    """Path segments joined, each percent-encoded (a subject ``a/b`` becomes ``a%2Fb``)."""
    return "".join("/" + quote(str(p), safe="") for p in parts)


def query_of(params: Mapping[str, ParamValue] | None) -> str:
    """``?k=v&...`` for the parameters that are set (booleans as ``true``/``false``)."""
    pairs = [(k, ("true" if v else "false") if isinstance(v, bool) else str(v))
             for k, v in (params or {}).items() if v is not None]
    return "?" + urlencode(pairs) if pairs else ""


def _error_of(status: int, reason: str, raw: bytes) -> RegistryApiError:
    """Confluent's error body when there is one; else the status with the start of the body."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict):
        code, message = body.get("error_code"), body.get("message")
        if isinstance(code, int) and not isinstance(code, bool) and isinstance(message, str):
            return RegistryApiError(status, code, message)
    text = raw[:200].decode("utf-8", "replace").strip()
    detail = f" ({text})" if text else ""
    return RegistryApiError(status, status, f"HTTP {status} {reason}{detail}")


def _user_info(value: str | None) -> tuple[str, str] | None:
    """EDDY_REGISTRY_USER as (name, password); the message never holds the value."""
    if not value:
        return None
    name, sep, password = value.partition(":")
    if not sep or not name:
        raise CliError(f"{USER_ENV}: expected NAME:PASSWORD")
    return name, password


def _ssl_context(ca_file: str | None) -> ssl.SSLContext | None:
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"{CA_ENV}: cannot load CA certificates from {ca_file}: {exc}") from None


class RegistryClient:
    """Calls to one registry, on one event loop and one connection pool."""

    def __init__(self, url: str, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.base = check_url(url)
        self.url = str(self.base).rstrip("/")
        self.timeout = timeout
        self._runner: asyncio.Runner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._user = _user_info(os.environ.get(USER_ENV))
        self._ssl = _ssl_context(os.environ.get(CA_ENV))

    def __enter__(self) -> RegistryClient:
        self._runner = asyncio.Runner()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        runner, session = self._runner, self._session
        self._runner = self._session = None
        if runner is None:
            return
        try:
            if session is not None:
                runner.run(session.close())
        finally:
            runner.close()

    def call(self, method: str, path: Sequence[str | int],
             params: Mapping[str, ParamValue] | None = None, body: Any = None,
             expect: type | tuple[type, ...] = object) -> Any:
        """One request; the answer's JSON, which must be an ``expect`` (e.g. ``list``)."""
        if self._runner is None:
            raise RuntimeError("RegistryClient is used outside its `with` block")
        answer = self._runner.run(self._call(method, path, params, body))
        if not isinstance(answer, expect) or (isinstance(answer, bool) and expect is not object):
            raise CliError(f"the server at {self.url} answered {method} {path_of(path)} with "
                           f"JSON of the wrong shape ({type(answer).__name__}: "
                           f"{json.dumps(answer)[:100]}); is this the schema registry?")
        return answer

    def _unreachable(self, reason: str) -> CliError:
        return CliError(f"cannot reach the schema registry at {self.url} ({reason}). Is it "
                        f"running? Point eddy at it with --url URL or the EDDY_REGISTRY_URL "
                        f"variable.")

    async def _call(self, method: str, path: Sequence[str | int],
                    params: Mapping[str, ParamValue] | None, body: Any) -> Any:
        import aiohttp

        if self._session is None:
            auth = None if self._user is None else aiohttp.BasicAuth(*self._user)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout,
                                              sock_connect=CONNECT_TIMEOUT_S),
                auth=auth, connector=aiohttp.TCPConnector(ssl=self._ssl or True))
        target = URL(self.url + path_of(path) + query_of(params), encoded=True)
        headers = {"Accept": ACCEPT}
        data = None
        if body is not None:
            headers["Content-Type"] = CONTENT_TYPE
            data = json.dumps(body, ensure_ascii=False).encode()
        try:
            async with self._session.request(method, target, data=data,
                                             headers=headers) as resp:
                raw = await self._read(resp)
                status, reason = resp.status, resp.reason or ""
        except aiohttp.ClientConnectorError as exc:
            os_error = exc.os_error
            errno = os_error.errno or 0  # a resolver's error is negative: its own words
            reason = os.strerror(errno) if errno > 0 else os_error.strerror or str(os_error)
            raise self._unreachable(reason) from None
        except TimeoutError:
            raise CliError(f"no answer from the schema registry at {self.url} within "
                           f"{self.timeout:g} s; is it overloaded or unreachable?") from None
        except aiohttp.ClientError as exc:
            raise CliError(f"talking to {self.url} failed ({type(exc).__name__}: {exc}); is "
                           f"this the schema registry's address?") from None
        if status >= 400:
            raise _error_of(status, reason, raw)
        try:
            return json.loads(raw)
        except ValueError:
            raise CliError(f"the server at {self.url} answered {method} {path_of(path)} "
                           f"with a body that is not JSON; is this the schema registry's "
                           f"address?") from None

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The body, refused once it passes MAX_RESPONSE_BYTES (declared or as read)."""
        declared = resp.content_length
        if declared is not None and declared > MAX_RESPONSE_BYTES:
            raise self._too_large(f"it declares {declared} bytes")
        raw = bytearray()
        async for chunk in resp.content.iter_chunked(_CHUNK):
            raw += chunk
            if len(raw) > MAX_RESPONSE_BYTES:
                raise self._too_large("more than that arrived")
        return bytes(raw)

    def _too_large(self, why: str) -> CliError:
        return CliError(f"the answer from {self.url} is larger than "
                        f"{MAX_RESPONSE_BYTES // (1024 * 1024)} MiB ({why}); refused")
