"""The registry's compatibility checks, ``POST /compatibility/subjects/{subject}/versions``
and ``.../versions/{version}``, as Confluent's ``CompatibilityResource`` answers them:

- the version id is read first (42202), then the version itself among the live ones: a
  missing one is 40402 whether or not the subject exists (Confluent never asks for the
  subject there); ``latest`` of a subject without live versions checks against nothing;
- then the schema: an invalid one is 42201, or with ``verbose=true`` the answer
  ``is_compatible: false`` with the refusal's message;
- the answer carries ``messages`` only with ``verbose=true``.

Mixed into ``RegistryService``.
"""

from __future__ import annotations

from typing import Any

from eddy.registry.contract import INVALID_SCHEMA, VERSION_NOT_FOUND, RegistryError
from eddy.registry.requests import SchemaRequest, parse_version
from eddy.registry.service.config_mode import ConfigModeOps
from eddy.registry.service.parsing import SchemaParsing
from eddy.registry.state import VersionEntry


def version_not_found(version: int | None) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND,
                         f"Version {-1 if version is None else version} not found.")


class CompatibilityOps(ConfigModeOps, SchemaParsing):
    """Compatibility checks of the registry service."""

    async def _live_version(self, subject: str, version: int) -> VersionEntry:
        """A live version of a subject (read again after a sync when missing), or 40402."""
        for attempt in range(2):
            entry = self.state.version(subject, version)
            if entry is not None and not entry.deleted:
                return entry
            if attempt == 0:
                await self._log.sync()
        raise version_not_found(version)

    async def _previous(self, subject: str, version: str | int | None) -> list[VersionEntry]:
        if version is None:  # every live version, as a registration would check
            return self.state.versions(subject)
        number = parse_version(version)
        if number is None:  # latest: none yet is compatible
            latest = self.state.latest(subject)
            return [latest] if latest is not None else []
        return [await self._live_version(subject, number)]

    async def check_compatibility(self, subject: str, version: str | int | None,
                                  request: SchemaRequest, *, verbose: bool = False,
                                  normalize: bool = False) -> dict[str, Any]:
        """POST /compatibility/subjects/{subject}/versions[/{version}]: against one version
        (``latest``: none yet is compatible) or, without a version, as a registration would
        be checked. With one version, a transitive level checks just it, and its message
        names the level as configured (as Confluent's does)."""
        previous = await self._previous(subject, version)
        try:
            parsed, text, _ = await self._prepare(request, normalize, is_new=True)
        except RegistryError as exc:
            if exc.code != INVALID_SCHEMA or not verbose:
                raise
            return {"is_compatible": False, "messages": [exc.message]}
        level = self.level_in_scope(subject)
        messages = await self._incompatibilities(level, parsed, len(text), previous)
        answer: dict[str, Any] = {"is_compatible": not messages}
        if verbose:
            answer["messages"] = messages
        return answer
