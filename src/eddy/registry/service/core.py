"""The schema registry's operations with Confluent Schema Registry's semantics.

``RegistryService(log, state)`` answers every operation of Confluent's REST API with the
plain data the HTTP layer serializes (Confluent's response shapes, nothing more), or raises a
``RegistryError`` with Confluent's status, code and message. Writes go through one
``asyncio.Lock`` (one writer), each first waiting for the log to be applied up to its end
(``log.sync()``: a write sees every write before it) and returning once its records are
applied to the state. Reads answer from the state as it is (Confluent's reads are eventually
consistent), except that a miss is retried once after a ``sync`` so that an id registered
through another node a moment ago is found.

The rules (Confluent's "Schema Deletion Guidelines", "Schema Evolution and Compatibility"):
an identical schema under the same subject returns the existing id; the same schema under
another subject reuses its id; new ids grow from 1 and are never reused; compatibility is
checked against non-deleted versions only (the latest one, or all for _TRANSITIVE levels);
a version or subject is soft-deleted before it can be deleted permanently; a version that a
live schema references cannot be deleted (42206).

Schema texts longer than ``max_schema_chars`` (1 Mi characters by default) are refused with
42201 before any parsing; large ones are parsed, and checked for compatibility, in a worker
thread (``service_parse``), so that the event loop keeps answering meanwhile. A schema's GUID
(``/schemas/guids/{guid}``) is Confluent's MD5 of its content, derived when a record is
applied (``guid``), not stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from eddy.formats.base import MAX_SCHEMA_CHARS, ParsedSchema
from eddy.registry import records as rec
from eddy.registry.contract import (
    OPERATION_NOT_PERMITTED,
    OPERATION_TIMEOUT,
    REFERENCE_EXISTS,
    SCHEMA_NOT_FOUND,
    SCHEMA_VERSION_NOT_SOFT_DELETED,
    SCHEMA_VERSION_SOFT_DELETED,
    STORE_ERROR,
    SUBJECT_NOT_SOFT_DELETED,
    SUBJECT_SOFT_DELETED,
    RegistryError,
    SchemaLog,
    SchemaRecord,
)
from eddy.registry.guid import parse_guid
from eddy.registry.requests import SchemaRequest, parse_version
from eddy.registry.schema_ops import (
    SCHEMA_TYPES,
    SchemaParser,
    entity,
    incompatible_error,
    schema_string,
)
from eddy.registry.service.compat import CompatibilityOps, version_not_found
from eddy.registry.service.config_mode import read_only, subject_not_found
from eddy.registry.state import SchemaState, VersionEntry

log = logging.getLogger("eddy.registry")

#: the prefix Confluent clients send to mean "every context" (only the default one exists)
_ALL_CONTEXTS = ":*:"


def _not_permitted(message: str) -> RegistryError:
    return RegistryError(422, OPERATION_NOT_PERMITTED, message)


def _schema_not_found(schema_id: int | None = None) -> RegistryError:
    message = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(404, SCHEMA_NOT_FOUND, message)


def _reference_exists(entry: VersionEntry) -> RegistryError:
    return RegistryError(422, REFERENCE_EXISTS, "One or more references exist to the schema "
                         f"{{magic=1,keytype=SCHEMA,subject={entry.subject},"
                         f"version={entry.version}}}.")


def _registered(entry: VersionEntry) -> dict[str, Any]:
    """The answer to a registration: the id, and (Confluent 8's, which its clients' header
    serializers need) the content's GUID."""
    return {"id": entry.id, "guid": entry.guid}


@contextlib.contextmanager
def write_failures(store_message: str, timeout_message: str) -> Iterator[None]:
    """A write's 50001 / 50002 from the ``_schemas`` log answered with Confluent's message
    for the operation (its REST resources name the operation, not Kafka's cause; the cause
    is logged)."""
    try:
        yield
    except RegistryError as exc:
        if exc.code not in (STORE_ERROR, OPERATION_TIMEOUT):
            raise
        message = store_message if exc.code == STORE_ERROR else timeout_message
        log.warning("registry: %s: %s", message, exc.message)
        raise RegistryError(exc.status, exc.code, message) from None


class RegistryService(CompatibilityOps):
    """Confluent Schema Registry's operations over a SchemaLog and the state it feeds."""

    def __init__(self, log: SchemaLog, state: SchemaState, *, default_level: str = "BACKWARD",
                 default_mode: str = "READWRITE",
                 max_schema_chars: int = MAX_SCHEMA_CHARS) -> None:
        self._log = log
        #: the longest schema text a request may carry (42201 beyond)
        self.max_schema_chars = max_schema_chars
        self.state = state
        self.default_level = default_level
        self.default_mode = default_mode
        self._lock = asyncio.Lock()
        self.parser = SchemaParser(state)

    # -- helpers ---------------------------------------------------------------------------------

    def _matching(self, subject: str, content: tuple[str, str, tuple[rec.Reference, ...]],
                  request: SchemaRequest, include_deleted: bool) -> VersionEntry | None:
        """The latest version of a subject holding this schema (and, when the request
        carries them, this metadata and rule set)."""
        for entry in reversed(self.state.versions(subject, include_deleted)):
            if entry.content != content:
                continue
            if request.metadata is not None and request.metadata != entry.metadata:
                continue
            if request.rule_set is not None and request.rule_set != entry.rule_set:
                continue
            return entry
        return None

    def _resolve(self, subject: str, version_text: str | int,
                 include_deleted: bool = False) -> VersionEntry:
        """A subject version named by a version id (``latest``: the latest non-deleted),
        or 40401 / 40402."""
        version = parse_version(version_text)
        if version is None:
            entry = self.state.latest(subject)
        else:
            entry = self.state.version(subject, version)
            if entry is not None and entry.deleted and not include_deleted:
                entry = None
        if entry is None:
            if not self.state.has_subject(subject, include_deleted):
                raise subject_not_found(subject)
            raise version_not_found(version)
        return entry

    async def _resolve_synced(self, subject: str, version_text: str | int,
                              include_deleted: bool = False) -> VersionEntry:
        try:
            return self._resolve(subject, version_text, include_deleted)
        except RegistryError as exc:
            if exc.status != 404:
                raise
        await self._log.sync()
        return self._resolve(subject, version_text, include_deleted)

    # -- register and look up --------------------------------------------------------------------

    async def register(self, subject: str, request: SchemaRequest, *,
                       normalize: bool = False) -> dict[str, Any]:
        """POST /subjects/{subject}/versions: ``{"id": id}``."""
        normalize = normalize or self.normalize_in_scope(subject)
        parsed, text, refs = await self._prepare(request, normalize,
                                                 is_new=request.id is None)
        content = (request.schema_type, text, refs)
        existing = self._matching(subject, content, request, include_deleted=False)
        if existing is not None and request.id in (None, existing.id):
            return _registered(existing)
        with write_failures("Register schema operation failed while writing to the Kafka "
                            "store", "Register operation timed out"):
            async with self._lock:
                await self._log.sync()
                return _registered(await self._register(subject, request, parsed, content))

    async def _register(self, subject: str, request: SchemaRequest, parsed: ParsedSchema,
                        content: tuple[str, str, tuple[rec.Reference, ...]]) -> VersionEntry:
        """The version registered (or the one that already had the content)."""
        existing = self._matching(subject, content, request, include_deleted=False)
        if existing is not None and request.id in (None, existing.id):
            return existing
        mode = self.mode_in_scope(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise read_only(subject)
        if request.id is not None or request.version is not None:
            if mode != "IMPORT":
                raise _not_permitted(f"Subject {subject} is not in import mode")
        elif mode != "READWRITE":
            raise _not_permitted(f"Subject {subject} is not in read-write mode")
        schema_id = request.id
        known_id = self.state.id_for(content)
        if known_id is not None and schema_id in (None, known_id):
            schema_id = known_id
        every = self.state.versions(subject, include_deleted=True)
        live = [e for e in every if not e.deleted]
        if mode != "IMPORT":
            messages = await self._incompatibilities(self.level_in_scope(subject), parsed,
                                                     len(content[1]), live)
            if messages:
                raise incompatible_error(subject, messages)
        version = request.version or (every[-1].version + 1 if every else 1)
        if schema_id is None:
            schema_id = self.state.next_id
        elif schema_id != known_id:
            holder = self.state.schema_by_id(schema_id)
            if holder is not None and holder.schema != content[1]:
                raise _not_permitted(f"Overwrite new schema with id {schema_id} is not "
                                     "permitted.")
        value = rec.SchemaValue(subject, version, schema_id, content[1], content[0], content[2],
                                request.metadata, request.rule_set, False)
        records: list[SchemaRecord] = [(self.state.schema_key_bytes(subject, version),
                                        rec.encode_value(value))]
        # an earlier soft-deleted version with the same id goes (Confluent tombstones it)
        records += [(self.state.schema_key_bytes(subject, e.version), None) for e in every
                    if e.deleted and e.id == schema_id and e.version < version]
        await self._append(records)
        entry = self.state.version(subject, version)  # applied: the append read it back
        if entry is None:
            raise RegistryError(500, STORE_ERROR, "the registered version was not read back")
        return entry

    async def lookup(self, subject: str, request: SchemaRequest, *, normalize: bool = False,
                     deleted: bool = False) -> dict[str, Any]:
        """POST /subjects/{subject}: the version holding this schema, or 40401 / 40403."""
        normalize = normalize or self.normalize_in_scope(subject)
        _, text, refs = await self._prepare(request, normalize, is_new=False)
        content = (request.schema_type, text, refs)
        for attempt in range(2):
            found = self._matching(subject, content, request, include_deleted=deleted)
            if found is not None:
                return entity(found)
            if attempt == 0:
                await self._log.sync()
        if not self.state.has_subject(subject, deleted):
            raise subject_not_found(subject)
        raise _schema_not_found()

    # -- schemas by id ---------------------------------------------------------------------------

    async def _by_id(self, schema_id: int) -> VersionEntry:
        entry = self.state.schema_by_id(schema_id)
        if entry is None:
            await self._log.sync()
            entry = self.state.schema_by_id(schema_id)
        if entry is None:
            raise _schema_not_found(schema_id)
        return entry

    async def schema_by_id(self, schema_id: int, subject: str | None = None,
                           fmt: str | None = None) -> dict[str, Any]:
        """GET /schemas/ids/{id} (``subject`` names a context in Confluent; there is one)."""
        entry = await self._by_id(schema_id)
        return schema_string(entry, await self._formatted(entry, fmt))

    async def schema_text_by_id(self, schema_id: int, subject: str | None = None,
                                fmt: str | None = None) -> str:
        """GET /schemas/ids/{id}/schema: the schema text itself."""
        entry = await self._by_id(schema_id)
        text = await self._formatted(entry, fmt)
        return entry.schema if text is None else text

    async def _by_guid(self, guid_text: str) -> VersionEntry:
        """The schema with this GUID: of the ids whose versions (deleted ones included) have
        it, the highest, as Redpanda and Confluent choose; 40403 when none."""
        guid = parse_guid(guid_text)
        ids = self.state.ids_for_guid(guid) if guid is not None else []
        if guid is not None and not ids:
            await self._log.sync()
            ids = self.state.ids_for_guid(guid)
        for schema_id in reversed(ids):
            for entry in self.state.users_of_id(schema_id):
                if entry.guid == guid:
                    return entry
        raise _schema_not_found()

    async def schema_by_guid(self, guid: str, fmt: str | None = None) -> dict[str, Any]:
        """GET /schemas/guids/{guid}: the SchemaString of the content with this GUID, with
        its ``guid``."""
        entry = await self._by_guid(guid)
        return {**schema_string(entry, await self._formatted(entry, fmt)), "guid": entry.guid}

    async def ids_for_guid(self, guid_text: str) -> list[dict[str, Any]]:
        """GET /schemas/guids/{guid}/ids: the highest id with this GUID per context (one
        context here), ``[]`` when the GUID is unknown or not a GUID."""
        guid = parse_guid(guid_text)
        ids = self.state.ids_for_guid(guid) if guid is not None else []
        return [{"context": ".", "id": ids[-1]}] if ids else []

    async def _users(self, schema_id: int, deleted: bool) -> list[VersionEntry]:
        await self._by_id(schema_id)
        return [e for e in self.state.users_of_id(schema_id) if deleted or not e.deleted]

    async def subjects_for_id(self, schema_id: int, deleted: bool = False) -> list[str]:
        """GET /schemas/ids/{id}/subjects."""
        return list(dict.fromkeys(e.subject for e in await self._users(schema_id, deleted)))

    async def versions_for_id(self, schema_id: int, deleted: bool = False
                              ) -> list[dict[str, Any]]:
        """GET /schemas/ids/{id}/versions."""
        return [{"subject": e.subject, "version": e.version}
                for e in await self._users(schema_id, deleted)]

    async def list_schemas(self, subject_prefix: str | None = None, deleted: bool = False,
                           latest_only: bool = False, offset: int = 0,
                           limit: int = -1) -> list[dict[str, Any]]:
        """GET /schemas: every version (of subjects with the prefix), by subject, version."""
        found: list[dict[str, Any]] = []
        prefix = "" if subject_prefix in (None, _ALL_CONTEXTS) else subject_prefix
        for subject in sorted(self.state.subjects):
            if not subject.startswith(prefix or ""):
                continue
            entries = self.state.versions(subject, include_deleted=deleted)
            found += [entity(e) for e in (entries[-1:] if latest_only else entries)]
        found = found[max(offset, 0):]
        return found if limit is None or limit < 0 else found[:limit]

    @staticmethod
    def schema_types() -> list[str]:
        """GET /schemas/types."""
        return list(SCHEMA_TYPES)

    @staticmethod
    def contexts() -> list[str]:
        """GET /contexts: the default context only."""
        return ["."]

    # -- subjects and versions -------------------------------------------------------------------

    async def list_subjects(self, subject_prefix: str | None = None, deleted: bool = False,
                            deleted_only: bool = False) -> list[str]:
        """GET /subjects."""
        prefix = "" if subject_prefix in (None, _ALL_CONTEXTS) else subject_prefix
        names = []
        for subject in sorted(self.state.subjects):
            if not subject.startswith(prefix or ""):
                continue
            entries = self.state.versions(subject, include_deleted=True)
            if deleted_only:
                keep = any(e.deleted for e in entries)
            else:
                keep = any(deleted or not e.deleted for e in entries)
            if keep:
                names.append(subject)
        return names

    async def list_versions(self, subject: str, deleted: bool = False,
                            deleted_only: bool = False) -> list[int]:
        """GET /subjects/{subject}/versions."""
        if not self.state.has_subject(subject, deleted or deleted_only):
            await self._log.sync()
            if not self.state.has_subject(subject, deleted or deleted_only):
                raise subject_not_found(subject)
        entries = self.state.versions(subject, include_deleted=True)
        if deleted_only:
            return [e.version for e in entries if e.deleted]
        return [e.version for e in entries if deleted or not e.deleted]

    async def get_version(self, subject: str, version: str | int, deleted: bool = False,
                          fmt: str | None = None) -> dict[str, Any]:
        """GET /subjects/{subject}/versions/{version}."""
        entry = await self._resolve_synced(subject, version, deleted)
        return entity(entry, await self._formatted(entry, fmt))

    async def get_version_schema(self, subject: str, version: str | int,
                                 deleted: bool = False, fmt: str | None = None) -> str:
        """GET /subjects/{subject}/versions/{version}/schema: the schema text itself."""
        entry = await self._resolve_synced(subject, version, deleted)
        text = await self._formatted(entry, fmt)
        return entry.schema if text is None else text

    async def latest_with_metadata(self, subject: str, wanted: dict[str, str],
                                   deleted: bool = False, fmt: str | None = None
                                   ) -> dict[str, Any]:
        """GET /subjects/{subject}/metadata?key=..&value=..: the latest version whose
        metadata properties hold every wanted key with its value (deleted versions too when
        asked; a version without metadata properties never matches); 40401 for an unknown
        subject, 40403 when no version matches."""
        if not self.state.has_subject(subject, deleted):
            await self._log.sync()
            if not self.state.has_subject(subject, deleted):
                raise subject_not_found(subject)
        for entry in reversed(self.state.versions(subject, include_deleted=deleted)):
            metadata = entry.metadata if isinstance(entry.metadata, dict) else {}
            properties = metadata.get("properties")
            if not isinstance(properties, dict):
                continue  # a version without metadata properties never matches
            if all(properties.get(k) == v for k, v in wanted.items()):
                return entity(entry, await self._formatted(entry, fmt))
        raise _schema_not_found()

    async def referenced_by(self, subject: str, version: str | int) -> list[int]:
        """GET /subjects/{subject}/versions/{version}/referencedby: ids, sorted; a
        soft-deleted version too (Confluent reads it with ``deleted=true``)."""
        entry = await self._resolve_synced(subject, version, include_deleted=True)
        return self.state.referenced_by(entry.subject, entry.version)

    # -- deletes ---------------------------------------------------------------------------------

    async def delete_version(self, subject: str, version: str | int,
                             permanent: bool = False) -> int:
        """DELETE /subjects/{subject}/versions/{version}[?permanent=true]: the version."""
        with write_failures("Delete Schema Version operation failed while writing to the "
                            "Kafka store",
                            "Delete Schema Version operation timed out"):
            async with self._lock:
                await self._log.sync()
                entry = self._resolve(subject, version, include_deleted=True)
                if not permanent and entry.deleted:
                    raise RegistryError(404, SCHEMA_VERSION_SOFT_DELETED,
                                        f"Subject '{subject}' Version {entry.version} was soft "
                                        "deleted.Set permanent=true to delete permanently")
                if self.is_read_only(subject):
                    raise read_only(subject)
                if self.state.referenced_by(subject, entry.version):
                    raise _reference_exists(entry)
                if permanent and not entry.deleted:
                    raise RegistryError(404, SCHEMA_VERSION_NOT_SOFT_DELETED,
                                        f"Subject '{subject}' Version {entry.version} was not "
                                        "deleted first before being permanently deleted")
                key = self.state.schema_key_bytes(subject, entry.version)
                records: list[SchemaRecord]
                if permanent:
                    records = [(key, None)]
                else:
                    value = rec.SchemaValue(entry.subject, entry.version, entry.id, entry.schema,
                                            entry.schema_type, entry.references, entry.metadata,
                                            entry.rule_set, True)
                    records = [(key, rec.encode_value(value))]
                    if not [e for e in self.state.versions(subject) if e.version != entry.version]:
                        records += self._scope_cleanup(subject)
                await self._append(records)
                return entry.version

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """DELETE /subjects/{subject}[?permanent=true]: the versions deleted."""
        with write_failures(f"Error while deleting the subject {subject}",
                            "Delete subject operation timed out"):
            async with self._lock:
                await self._log.sync()
                if not self.state.has_subject(subject, include_deleted=True):
                    raise subject_not_found(subject)
                if not permanent and not self.state.has_subject(subject):
                    raise RegistryError(404, SUBJECT_SOFT_DELETED,
                                        f"Subject '{subject}' was soft deleted.Set permanent=true "
                                        "to delete permanently")
                if self.is_read_only(subject):
                    raise read_only(subject)
                entries = self.state.versions(subject, include_deleted=permanent)
                for entry in entries:
                    if self.state.referenced_by(subject, entry.version):
                        raise _reference_exists(entry)
                    if permanent and not entry.deleted:
                        raise RegistryError(404, SUBJECT_NOT_SOFT_DELETED,
                                            f"Subject '{subject}' was not deleted first before "
                                            "being permanently deleted")
                records: list[SchemaRecord]
                if permanent:
                    records = [(self.state.schema_key_bytes(subject, e.version), None)
                               for e in entries]
                else:
                    value = rec.DeleteSubjectValue(subject, entries[-1].version)
                    records = [(rec.encode_key(rec.DeleteSubjectKey(subject)),
                                rec.encode_value(value))]
                    records += self._scope_cleanup(subject)
                await self._append(records)
                return [e.version for e in entries]
