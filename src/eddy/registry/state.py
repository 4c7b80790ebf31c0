"""The registry's state, built by replaying the ``_schemas`` topic (pure: no I/O, no clock).

``SchemaState.apply(key, value)`` is the contract's ``OnRecord``: every record read back from
the topic, in order. It keeps, as Confluent's lookup cache does:

- subjects -> versions (id, schema text, type, references, metadata, ruleSet, deleted flag);
- ids -> the subject versions that use them, and (type, schema text, references) -> id, so
  that the same schema under another subject reuses its id; ids are never handed out again
  (``next_id`` is one more than the largest id ever seen, hard-deleted ones included);
- who references what (non-deleted referrers only: a soft delete releases its references);
- configs and modes, global (subject None) and per subject.

Record semantics are Confluent's: a SCHEMA value adds or replaces a version (``deleted``: a
soft delete); a SCHEMA tombstone removes it (a hard delete); DELETE_SUBJECT marks every
version up to the given one deleted; CLEAR_SUBJECT drops the soft-deleted versions of a
subject (of all subjects when global); CONFIG and MODE set or (tombstone) remove a setting.
A record that cannot be read is skipped with a logged reason, never raised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from eddy.registry import records as rec
from eddy.registry.guid import schema_guid
from eddy.registry.records import Reference

log = logging.getLogger(__name__)

#: (schema type, schema text, references): what makes two schemas the same schema (one id)
ContentKey = tuple[str, str, tuple[Reference, ...]]
SubjectVersion = tuple[str, int]


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """One version of a subject, as the topic has it."""

    subject: str
    version: int
    id: int
    schema: str
    schema_type: str
    references: tuple[Reference, ...]
    metadata: rec.Json
    rule_set: rec.Json
    deleted: bool
    #: Confluent's GUID of the content (schema, references, metadata, rule set)
    guid: str = ""

    @property
    def content(self) -> ContentKey:
        return (self.schema_type, self.schema, self.references)


class SchemaState:
    """Everything the registry knows, replayed from ``_schemas``."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, VersionEntry]] = {}
        #: raw key bytes of each stored version, config and mode (tombstones reuse them so
        #: that compaction matches whatever format wrote the record)
        self._schema_keys: dict[SubjectVersion, bytes] = {}
        self._config_keys: dict[str | None, bytes] = {}
        self._mode_keys: dict[str | None, bytes] = {}
        self._by_id: dict[int, dict[SubjectVersion, None]] = {}
        self._by_content: dict[ContentKey, int] = {}
        #: GUID -> the subject versions (deleted ones included) whose content has it
        self._by_guid: dict[str, dict[SubjectVersion, None]] = {}
        self._referenced_by: dict[SubjectVersion, set[SubjectVersion]] = {}
        self.configs: dict[str | None, rec.ConfigValue] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        #: records applied and records skipped as unreadable
        self.applied = 0
        self.skipped = 0

    # -- applying records ----------------------------------------------------------------------

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Applies one ``_schemas`` record; an unreadable one is logged and skipped."""
        try:
            record_key = rec.decode_key(key)
            record_value = None if value is None else rec.decode_value(record_key, value)
            self._apply(key, record_key, record_value, value is None)
        except rec.RecordError as exc:
            self.skipped += 1
            log.warning("skipping an unreadable _schemas record: %s", exc)
            return
        self.applied += 1

    def _apply(self, raw_key: bytes, key: rec.RecordKey, value: rec.RecordValue | None,
               tombstone: bool) -> None:
        if isinstance(key, rec.SchemaKey):
            if tombstone:
                self._remove_version(key.subject, key.version)
            elif isinstance(value, rec.SchemaValue):
                self._put_version(raw_key, key, value)
        elif isinstance(key, rec.ConfigKey):
            if isinstance(value, rec.ConfigValue):
                self.configs[key.subject] = value
                self._config_keys[key.subject] = raw_key
            elif tombstone:
                self.configs.pop(key.subject, None)
        elif isinstance(key, rec.ModeKey):
            if isinstance(value, rec.ModeValue):
                self.modes[key.subject] = value.mode.upper()
                self._mode_keys[key.subject] = raw_key
            elif tombstone:
                self.modes.pop(key.subject, None)
        elif isinstance(value, rec.DeleteSubjectValue):
            self._delete_subject(value.subject, value.version)
        elif isinstance(value, rec.ClearSubjectValue) and isinstance(key, rec.ClearSubjectKey):
            self._clear_deleted(value.subject if value.subject is not None else key.subject)
        elif isinstance(key, rec.OtherKey):
            log.debug("ignoring a _schemas record of key type %s", key.keytype)

    def _put_version(self, raw_key: bytes, key: rec.SchemaKey, value: rec.SchemaValue) -> None:
        if value.id < 0:
            raise rec.RecordError(f"SCHEMA value field 'id' is negative: {value.id}")
        if (value.subject, value.version) != (key.subject, key.version):
            log.warning("SCHEMA value for %r version %d says %r version %d; the key wins",
                        key.subject, key.version, value.subject, value.version)
        guid = schema_guid(value.schema, value.references, value.metadata, value.rule_set)
        entry = VersionEntry(key.subject, key.version, value.id, value.schema,
                             value.schema_type.upper(), value.references, value.metadata,
                             value.rule_set, value.deleted, guid)
        self._remove_version(key.subject, key.version)
        self.subjects.setdefault(key.subject, {})[key.version] = entry
        self._schema_keys[(key.subject, key.version)] = raw_key
        self._by_id.setdefault(entry.id, {})[(key.subject, key.version)] = None
        self._by_guid.setdefault(guid, {})[(key.subject, key.version)] = None
        self._by_content.setdefault(entry.content, entry.id)
        self.max_id = max(self.max_id, entry.id)
        if not entry.deleted:
            self._add_references(entry)

    def _remove_version(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        entry = versions.pop(version, None) if versions is not None else None
        if entry is None:
            return
        if not versions:
            del self.subjects[subject]
        self._schema_keys.pop((subject, version), None)
        users = self._by_id.get(entry.id)
        if users is not None:
            users.pop((subject, version), None)
            if not users:
                del self._by_id[entry.id]
        same = self._by_guid.get(entry.guid)
        if same is not None:
            same.pop((subject, version), None)
            if not same:
                del self._by_guid[entry.guid]
        if not entry.deleted:
            self._drop_references(entry)

    def _mark_deleted(self, entry: VersionEntry) -> None:
        if entry.deleted:
            return
        self._drop_references(entry)
        self.subjects[entry.subject][entry.version] = replace(entry, deleted=True)

    def _delete_subject(self, subject: str, up_to: int) -> None:
        for entry in list(self.subjects.get(subject, {}).values()):
            if entry.version <= up_to:
                self._mark_deleted(entry)

    def _clear_deleted(self, subject: str | None) -> None:
        names = list(self.subjects) if subject is None else [subject]
        for name in names:
            for entry in list(self.subjects.get(name, {}).values()):
                if entry.deleted:
                    self._remove_version(name, entry.version)

    def _add_references(self, entry: VersionEntry) -> None:
        for ref in entry.references:
            referrers = self._referenced_by.setdefault((ref.subject, ref.version), set())
            referrers.add((entry.subject, entry.version))

    def _drop_references(self, entry: VersionEntry) -> None:
        for ref in entry.references:
            target = (ref.subject, ref.version)
            referrers = self._referenced_by.get(target)
            if referrers is not None:
                referrers.discard((entry.subject, entry.version))
                if not referrers:
                    del self._referenced_by[target]

    # -- reading -------------------------------------------------------------------------------

    @property
    def next_id(self) -> int:
        """The id the next new schema gets: ids grow from 1 and are never reused."""
        return self.max_id + 1

    def version(self, subject: str, version: int) -> VersionEntry | None:
        """A version of a subject, deleted or not."""
        return self.subjects.get(subject, {}).get(version)

    def versions(self, subject: str, include_deleted: bool = False) -> list[VersionEntry]:
        """A subject's versions in order (soft-deleted ones only when asked)."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if include_deleted or not found[v].deleted]

    def latest(self, subject: str) -> VersionEntry | None:
        """A subject's latest non-deleted version."""
        live = self.versions(subject)
        return live[-1] if live else None

    def has_subject(self, subject: str, include_deleted: bool = False) -> bool:
        return any(include_deleted or not e.deleted
                   for e in self.subjects.get(subject, {}).values())

    def subject_names(self, include_deleted: bool = False) -> list[str]:
        """Subjects with a version (a non-deleted one unless asked), sorted."""
        return sorted(s for s in self.subjects if self.has_subject(s, include_deleted))

    def id_for(self, content: ContentKey) -> int | None:
        """The id a schema already has (kept after its versions are hard deleted, so the
        same schema gets the same id back)."""
        return self._by_content.get(content)

    def users_of_id(self, schema_id: int) -> list[VersionEntry]:
        """Every subject version (deleted ones included) registered with this id, by subject
        then version."""
        found = [self.subjects[s][v] for s, v in self._by_id.get(schema_id, {})]
        return sorted(found, key=lambda e: (e.subject, e.version))

    def schema_by_id(self, schema_id: int) -> VersionEntry | None:
        """A version carrying this id (a non-deleted one if any); None once hard deleted."""
        users = self.users_of_id(schema_id)
        live = [e for e in users if not e.deleted]
        candidates = live or users
        return candidates[0] if candidates else None

    def ids_for_guid(self, guid: str) -> list[int]:
        """The ids of the subject versions (deleted ones included) whose content has this
        GUID, ascending."""
        return sorted({self.subjects[s][v].id for s, v in self._by_guid.get(guid, {})})

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """The ids of the non-deleted schemas that reference this subject version, sorted."""
        referrers = self._referenced_by.get((subject, version), set())
        return sorted({self.subjects[s][v].id for s, v in referrers})

    def config(self, subject: str | None) -> rec.ConfigValue | None:
        return self.configs.get(subject)

    def mode(self, subject: str | None) -> str | None:
        return self.modes.get(subject)

    # -- key bytes for writes ------------------------------------------------------------------

    def schema_key_bytes(self, subject: str, version: int) -> bytes:
        """The key bytes of a version as the topic has them (Confluent's form for a new one)."""
        raw = self._schema_keys.get((subject, version))
        return raw if raw is not None else rec.encode_key(rec.SchemaKey(subject, version))

    def config_key_bytes(self, subject: str | None) -> bytes:
        raw = self._config_keys.get(subject)
        return raw if raw is not None else rec.encode_key(rec.ConfigKey(subject))

    def mode_key_bytes(self, subject: str | None) -> bytes:
        raw = self._mode_keys.get(subject)
        return raw if raw is not None else rec.encode_key(rec.ModeKey(subject))
