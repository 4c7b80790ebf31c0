"""A small synchronous client of a Confluent-compatible schema registry (eddy's own or
Confluent's), for pipelines: it runs inside Spark's Python workers, so plain urllib with a
timeout and a bounded body, and a cache of schemas by id (ids are immutable in a
registry, so the cache never goes stale).

Reading: the schema with an id (GET /schemas/ids/{id}) or a GUID (GET
/schemas/guids/{guid}, confluent-kafka's magic byte 1 framing), and a subject's version
(GET /subjects/{subject}/versions/{version|latest}); writing: registering a schema
(POST /subjects/{subject}/versions) and looking one up (POST /subjects/{subject}).
Errors are RegistryError with the registry's own message and error code, or what went
wrong on the way.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 10.0
#: a schema document larger than this is refused (the registry's own default limit is
#: far below it)
MAX_BODY = 8 << 20
#: how deep schema references may nest
MAX_REFERENCE_DEPTH = 16
#: Confluent's error codes for "no such schema / subject / version"
NOT_FOUND_CODES = (40401, 40402, 40403)
#: schemas by id or GUID kept, found or not found (ids and GUIDs come from records: a
#: hostile producer must not grow the cache without bound); past it the oldest go
MAX_CACHED = 4096


class RegistryError(RuntimeError):
    """A registry call that failed; `code` is Confluent's error code when it sent one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def not_found(self) -> bool:
        return self.code in NOT_FOUND_CODES


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry returns it; `schema_type` is AVRO, JSON or PROTOBUF."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    id: int | None = None
    subject: str | None = None
    version: int | None = None


def _parse_schema_doc(body: Any, where: str) -> RegisteredSchema:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryError(f"{where}: the answer has no `schema` text")
    kind = body.get("schemaType", "AVRO")
    if not isinstance(kind, str):
        raise RegistryError(f"{where}: `schemaType` is not a string")
    refs: list[Reference] = []
    raw_refs = body.get("references") or []
    if not isinstance(raw_refs, list):
        raise RegistryError(f"{where}: `references` is not a list")
    for ref in raw_refs:
        if not (isinstance(ref, dict) and isinstance(ref.get("name"), str)
                and isinstance(ref.get("subject"), str) and isinstance(ref.get("version"), int)):
            raise RegistryError(f"{where}: a reference lacks name, subject or version")
        refs.append(Reference(ref["name"], ref["subject"], ref["version"]))

    def as_int(name: str) -> int | None:
        value = body.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    subject = body.get("subject")
    return RegisteredSchema(body["schema"], kind.upper(), tuple(refs), as_int("id"),
                            subject if isinstance(subject, str) else None, as_int("version"))


def _schema_body(schema: RegisteredSchema) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": schema.schema, "schemaType": schema.schema_type}
    if schema.references:
        body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                              for r in schema.references]
    return body


class RegistryClient:
    """GETs against one registry (the first of a comma-separated URL list that answers);
    thread-safe; schemas by id are cached, failures that say "not found" too."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_body: int = MAX_BODY) -> None:
        self.urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not self.urls:
            raise ValueError("no schema registry URL")
        for u in self.urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"schema registry URL {u!r}: expected http:// or https://")
        self.timeout_s = timeout_s
        self.max_body = max_body
        self._lock = threading.Lock()
        self._by_id: dict[int | str, RegisteredSchema | RegistryError] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema] = {}

    def get_json(self, path: str) -> Any:
        """GET `path` from the first registry that answers; RegistryError otherwise."""
        return self.post_json(path, None)

    def post_json(self, path: str, body: Any) -> Any:
        """POST `body` as JSON to `path` (GET when `body` is None) at the first registry
        that answers; RegistryError otherwise."""
        last: RegistryError | None = None
        data = None if body is None else json.dumps(body).encode()
        for base in self.urls:
            try:
                return self._get(base + path, data)
            except RegistryError as exc:
                if exc.code is not None:  # the registry answered: do not ask another
                    raise
                last = exc
        assert last is not None
        raise last

    def _get(self, url: str, data: bytes | None = None) -> Any:
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if data is not None:
            headers["Content-Type"] = "application/vnd.schemaregistry.v1+json"
        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                body = resp.read(self.max_body + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(64 << 10)
            code: int | None = exc.code
            message = f"HTTP {exc.code}"
            try:
                doc = json.loads(detail)
                if isinstance(doc, dict):
                    code = int(doc.get("error_code", exc.code))
                    message = f"{message} (error {code}): {doc.get('message', '')}"
            except (ValueError, TypeError):
                pass
            raise RegistryError(f"schema registry {url}: {message}", code) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryError(f"schema registry {url}: {reason}") from None
        if len(body) > self.max_body:
            raise RegistryError(f"schema registry {url}: answer larger than "
                                f"{self.max_body} bytes")
        try:
            return json.loads(body)
        except ValueError:
            raise RegistryError(f"schema registry {url}: the answer is not JSON") from None

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        return self.schema(schema_id)

    def schema_by_guid(self, guid: str) -> RegisteredSchema:
        """The schema with a GUID (canonical UUID text, as confluent_wire gives it)."""
        return self.schema(guid)

    def schema(self, key: int | str) -> RegisteredSchema:
        """The schema with an id (int) or a GUID (str); cached, "not found" too."""
        with self._lock:
            cached = self._by_id.get(key)
        if isinstance(cached, RegistryError):
            # a new exception each time: raising the cached one again would extend its
            # traceback with every raise, keeping each caller's frames (and their batches)
            raise RegistryError(str(cached), cached.code)
        if cached is not None:
            return cached
        if isinstance(key, int):
            what, path = f"schema id {key}", f"/schemas/ids/{key}"
        else:
            what = f"schema guid {key}"
            path = f"/schemas/guids/{urllib.parse.quote(key, safe='')}"
        try:
            found = _parse_schema_doc(self.get_json(path), what)
        except RegistryError as exc:
            if exc.not_found:
                message = f"unknown {what} (the registry has no such schema)"
                # the cached one is never raised: a raised exception keeps its traceback,
                # and with it the frames (and batches) of the call that raised it
                self._remember(key, RegistryError(message, exc.code))
                raise RegistryError(message, exc.code) from None
            raise
        found = RegisteredSchema(found.schema, found.schema_type, found.references,
                                 key if isinstance(key, int) else found.id)
        self._remember(key, found)
        return found

    def _remember(self, key: int | str, found: RegisteredSchema | RegistryError) -> None:
        with self._lock:
            if key not in self._by_id and len(self._by_id) >= MAX_CACHED:
                del self._by_id[next(iter(self._by_id))]
            self._by_id[key] = found

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        """A subject's version (a number, or "latest", which is never cached)."""
        if isinstance(version, int):
            with self._lock:
                hit = self._versions.get((subject, version))
            if hit is not None:
                return hit
        path = (f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/"
                f"{urllib.parse.quote(str(version), safe='')}")
        try:
            found = _parse_schema_doc(self.get_json(path), f"subject {subject!r}")
        except RegistryError as exc:
            if exc.not_found:
                raise RegistryError(f"subject {subject!r} has no version {version} in the "
                                    f"schema registry ({exc})", exc.code) from None
            raise
        if found.version is not None:
            with self._lock:
                self._versions[(subject, found.version)] = found
        return found

    def register(self, subject: str, schema: RegisteredSchema) -> int:
        """POST /subjects/{subject}/versions: the id of `schema` under `subject`,
        registered as a new version unless the subject already has it."""
        answer = self.post_json(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions",
                                _schema_body(schema))
        schema_id = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(schema_id, int) or isinstance(schema_id, bool):
            raise RegistryError(f"registering under subject {subject!r}: the answer has "
                                "no integer `id`")
        return schema_id

    def lookup(self, subject: str, schema: RegisteredSchema) -> RegisteredSchema:
        """POST /subjects/{subject}: the version of `subject` holding `schema`."""
        try:
            answer = self.post_json(f"/subjects/{urllib.parse.quote(subject, safe='')}",
                                    _schema_body(schema))
        except RegistryError as exc:
            if exc.not_found:
                raise RegistryError(f"subject {subject!r} does not have the schema ({exc})",
                                    exc.code) from None
            raise
        found = _parse_schema_doc(answer, f"subject {subject!r}")
        if found.id is None:
            raise RegistryError(f"subject {subject!r}: the lookup answer has no `id`")
        return found

    def resolve_references(self, schema: RegisteredSchema, depth: int = 0
                           ) -> list[tuple[str, RegisteredSchema]]:
        """The schemas `schema` references, depth first (each before what uses it), as
        (reference name, schema); repeated references appear once."""
        if depth > MAX_REFERENCE_DEPTH:
            raise RegistryError(f"schema references nest deeper than {MAX_REFERENCE_DEPTH}")
        out: list[tuple[str, RegisteredSchema]] = []
        for ref in schema.references:
            target = self.version(ref.subject, ref.version)
            for item in self.resolve_references(target, depth + 1):
                if item[0] not in {name for name, _ in out}:
                    out.append(item)
            if ref.name not in {name for name, _ in out}:
                out.append((ref.name, target))
        return out
