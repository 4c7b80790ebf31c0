"""The registry's ``/config`` and ``/mode`` operations, with Confluent's semantics:

- compatibility levels and modes are global (subject None) or per subject; reads without
  ``defaultToGlobal`` answer a subject's own setting or 40408 / 40409;
- READONLY (and a global READONLY_OVERRIDE, which beats every subject's mode) refuses writes
  with 42205; mode changes stay allowed so a registry can leave read-only;
- IMPORT may only be entered while no (non-deleted) subject exists in its scope, unless
  ``force``; entering it writes a CLEAR_SUBJECT record that drops soft-deleted versions.

Mixed into ``RegistryService``: the attributes declared below are the service's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from eddy.registry import records as rec
from eddy.registry.contract import (
    INVALID_COMPATIBILITY_LEVEL,
    OPERATION_NOT_PERMITTED,
    SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
    SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
    SUBJECT_NOT_FOUND,
    RegistryError,
    SchemaLog,
    SchemaRecord,
)
from eddy.registry.requests import INVALID_LEVEL_MESSAGE, READONLY_MODES, parse_level, parse_mode
from eddy.registry.state import SchemaState

#: the config fields a PUT /config may set besides the level (Confluent's names)
_CONFIG_EXTRAS = tuple(f for f in rec.CONFIG_FIELDS if f != "compatibilityLevel")


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def read_only(subject: str | None) -> RegistryError:
    # Confluent prints a global (null) subject as "null"
    name = "null" if subject is None else subject
    return RegistryError(422, OPERATION_NOT_PERMITTED, f"Subject {name} is in read-only mode")


class ConfigModeOps:
    """Config and mode operations of the registry service."""

    state: SchemaState
    _log: SchemaLog
    _lock: asyncio.Lock
    default_level: str
    default_mode: str

    # -- scope rules -----------------------------------------------------------------------------

    def mode_in_scope(self, subject: str | None) -> str:
        """The mode in force for a subject: a global READONLY_OVERRIDE, else the subject's,
        else the global one, else the default."""
        global_mode = self.state.mode(None) or self.default_mode
        if global_mode == "READONLY_OVERRIDE" or subject is None:
            return global_mode
        return self.state.mode(subject) or global_mode

    def is_read_only(self, subject: str | None) -> bool:
        return self.mode_in_scope(subject) in READONLY_MODES

    def level_in_scope(self, subject: str | None) -> str:
        """The compatibility level in force: the subject's, else the global one."""
        for scope in ((subject, None) if subject is not None else (None,)):
            config = self.state.config(scope)
            if config is not None and config.compatibility_level:
                return config.compatibility_level.upper()
        return self.default_level

    def normalize_in_scope(self, subject: str | None) -> bool:
        for scope in ((subject, None) if subject is not None else (None,)):
            config = self.state.config(scope)
            if config is not None and config.fields.get("normalize") is not None:
                return config.fields.get("normalize") is True
        return False

    def _config_json(self, config: rec.ConfigValue | None) -> dict[str, Any]:
        fields = dict(config.fields) if config is not None else {}
        level = fields.get("compatibilityLevel")
        fields["compatibilityLevel"] = level.upper() if isinstance(level, str) else (
            self.default_level)
        return {name: fields[name] for name in rec.CONFIG_FIELDS if name in fields}

    async def _append(self, records: list[SchemaRecord]) -> None:
        if records:
            await self._log.append(records)

    # -- /config ---------------------------------------------------------------------------------

    async def get_config(self, subject: str | None = None,
                         default_to_global: bool = False) -> dict[str, Any]:
        """GET /config and /config/{subject}."""
        if subject is None:
            return self._config_json(self.state.config(None))
        config = self.state.config(subject)
        if config is None:
            if not default_to_global:
                raise RegistryError(404, SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level "
                                    "compatibility configured")
            config = self.state.config(None)
        return self._config_json(config)

    async def set_config(self, subject: str | None, body: object) -> dict[str, Any]:
        """PUT /config and /config/{subject}: echoes the request, as Confluent does."""
        if not isinstance(body, dict):
            raise RegistryError(422, INVALID_COMPATIBILITY_LEVEL, INVALID_LEVEL_MESSAGE)
        extras = {name: body[name] for name in _CONFIG_EXTRAS if body.get(name) is not None}
        raw_level = body.get("compatibility", body.get("compatibilityLevel"))
        level = parse_level(raw_level) if raw_level is not None or not extras else None
        if "normalize" in extras and not isinstance(extras["normalize"], bool):
            raise RegistryError(422, INVALID_COMPATIBILITY_LEVEL,
                                "Invalid config: field 'normalize' is not a boolean")
        if any(rec.json_depth_exceeds(v) for v in extras.values()):
            raise RegistryError(422, INVALID_COMPATIBILITY_LEVEL,
                                f"Invalid config: nested deeper than {rec.MAX_JSON_DEPTH}")
        async with self._lock:
            await self._log.sync()
            if self.is_read_only(subject):
                raise read_only(subject)
            old = self.state.config(subject)
            fields = {**(dict(old.fields) if old is not None else {}), **extras}
            if level is not None:
                fields["compatibilityLevel"] = level
            value = rec.ConfigValue(subject, fields)
            await self._append([(self.state.config_key_bytes(subject), rec.encode_value(value))])
        echo: dict[str, Any] = {}
        if raw_level is not None:
            echo["compatibility"] = raw_level
        echo.update(extras)
        return echo

    async def delete_config(self, subject: str | None = None) -> dict[str, Any]:
        """DELETE /config and /config/{subject}: answers the config that was in force."""
        async with self._lock:
            await self._log.sync()
            old = self.state.config(subject)
            if subject is not None and old is None:
                raise subject_not_found(subject)
            if self.is_read_only(subject):
                raise read_only(subject)
            answer = self._config_json(old)
            if old is not None:
                await self._append([(self.state.config_key_bytes(subject), None)])
        return answer

    # -- /mode -----------------------------------------------------------------------------------

    async def get_mode(self, subject: str | None = None,
                       default_to_global: bool = False) -> dict[str, Any]:
        """GET /mode and /mode/{subject}."""
        if subject is None or default_to_global:
            return {"mode": self.mode_in_scope(subject)}
        global_mode = self.state.mode(None) or self.default_mode
        mode = global_mode if global_mode == "READONLY_OVERRIDE" else self.state.mode(subject)
        if mode is None:
            raise RegistryError(404, SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
                                f"Subject '{subject}' does not have subject-level mode "
                                "configured")
        return {"mode": mode}

    async def set_mode(self, subject: str | None, body: object,
                       force: bool = False) -> dict[str, Any]:
        """PUT /mode and /mode/{subject}: echoes the request."""
        raw = body.get("mode") if isinstance(body, dict) else None
        mode = parse_mode(raw)
        async with self._lock:
            await self._log.sync()
            records: list[SchemaRecord] = []
            if mode == "IMPORT" and self.mode_in_scope(subject) != "IMPORT" and not force:
                occupied = (self.state.has_subject(subject) if subject is not None
                            else bool(self.state.subject_names()))
                if occupied:
                    raise RegistryError(422, OPERATION_NOT_PERMITTED,
                                        "Cannot import since found existing subjects")
                records.append((rec.encode_key(rec.ClearSubjectKey(subject)),
                                rec.encode_value(rec.ClearSubjectValue(subject))))
            records.append((self.state.mode_key_bytes(subject),
                            rec.encode_value(rec.ModeValue(mode, subject))))
            await self._append(records)
        return {"mode": raw}

    async def delete_mode(self, subject: str | None = None) -> dict[str, Any]:
        """DELETE /mode/{subject} (and /mode): answers the mode that was set."""
        async with self._lock:
            await self._log.sync()
            old = self.state.mode(subject)
            if old is None:
                if subject is not None:
                    raise subject_not_found(subject)
                return {"mode": self.default_mode}
            await self._append([(self.state.mode_key_bytes(subject), None)])
        return {"mode": old}

    def _scope_cleanup(self, subject: str) -> list[SchemaRecord]:
        """Tombstones for a subject's own config and mode (a subject soft-deleted entirely
        loses them, as in Confluent)."""
        records: list[SchemaRecord] = []
        if self.state.mode(subject) is not None:
            records.append((self.state.mode_key_bytes(subject), None))
        if self.state.config(subject) is not None:
            records.append((self.state.config_key_bytes(subject), None))
        return records
