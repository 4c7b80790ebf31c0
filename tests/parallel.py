"""Running the suite in parallel (scripts/test: `pytest -n 4 --dist loadgroup`).

Each xdist group runs on one worker, one test after another. Every test starts its servers
on free loopback ports with data in its own tmp dir, so tests run side by side unless they
share something:

- a module-scoped fixture (a server the module's tests share): the module is one group, so
  the server starts once;
- a session-scoped fixture of ours (the connect tests' SparkSession): one group per fixture,
  so one worker starts it once;
- anything a file marks with `pytest.mark.xdist_group(NAME)` (mDNS, ...).

(The replication clusters, with their own loopback addresses, Unix groups and iptables
rules, take them from a block of the worker's own: tests/system/replication_cluster.py.)

A module with one such test is kept whole, in file order (its tests may count on the state
the earlier ones left on their shared server). The rest is distributed test by test. Long
groups are handed out first (HEAVY_FIRST), the unit tests last: their many short tests fill
the workers' gaps at the end.

xdist's own loadgroup passes a test's group to the scheduler as a suffix of its node id,
which pytest 9.2's structured node ids no longer take (pytest-xdist issue 1386: every test
then runs wherever, groups ignored, silently). Here each worker writes the groups it
collected to a file the controller named (its `workerinput`), and the scheduler, a
LoadScopeScheduling, reads them: node ids are left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: groups (or path prefixes) in the order they start; anything else after them, unit last
HEAVY_FIRST = ("spark", "tests/system/", "tests/connect/", "tests/integration/")
_INPUT_KEY = "eddy_xdist_groups_dir"


def _shared_by(item: pytest.Item) -> str | None:
    """What `item` shares with other tests: the group that says so, or None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    shared = None
    for name in item.fixturenames:  # type: ignore[attr-defined]
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if not fixturedef.baseid:  # pytest's and plugins' own (tmp_path_factory, ...)
                continue
            if fixturedef.scope == "session":
                return str(name)
            if fixturedef.scope in ("package", "module", "class"):
                shared = item.nodeid.split("::")[0]
    return shared


def _marked_group(item: pytest.Item) -> str | None:
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


def assign_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Mark every test of a module that shares something with the module's group (a
    session fixture's name rather than the module's own); node id -> group of every
    grouped test."""
    module_group: dict[str, str] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        group = _shared_by(item)
        if group is not None and module_group.get(path, path) == path:
            module_group[path] = group
    groups: dict[str, str] = {}
    for item in items:
        group = _marked_group(item)
        if group is None:
            group = module_group.get(item.nodeid.split("::")[0])
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
        if group is not None:
            groups[item.nodeid] = group
    return groups


def start_rank(nodeid: str, groups: dict[str, str]) -> int:
    group = groups.get(nodeid, nodeid)
    for i, key in enumerate(HEAVY_FIRST):
        if group == key or (key.endswith("/") and group.startswith(key)):
            return i
    return len(HEAVY_FIRST)


# ---- the controller ----------------------------------------------------------------------


def groups_dir(config: pytest.Config) -> Path:
    """The controller's folder where workers leave their groups (made once)."""
    found: Path | None = getattr(config, "_eddy_groups_dir", None)
    if found is None:
        found = Path(tempfile.mkdtemp(prefix="eddy-xdist-groups-"))
        config._eddy_groups_dir = found  # type: ignore[attr-defined]
    return found


def read_groups(config: pytest.Config) -> dict[str, str]:
    for path in sorted(groups_dir(config).glob("*.json")):
        groups: dict[str, str] = json.loads(path.read_text())
        return groups
    return {}


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScopeScheduling with our groups for scopes (a test of no group: its own)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # every worker has collected by now
                self._groups = read_groups(config)
            return self._groups.get(nodeid, nodeid)

    config.option.loadscopereorder = False  # the workers' collection order is ours
    return GroupScheduling(config, log)


# ---- a worker ----------------------------------------------------------------------------


def write_groups(config: pytest.Config, groups: dict[str, str]) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or _INPUT_KEY not in workerinput:
        return
    folder = Path(workerinput[_INPUT_KEY])
    worker = workerinput.get("workerid", str(os.getpid()))
    tmp = folder / f".{worker}.tmp"
    tmp.write_text(json.dumps(groups))
    tmp.replace(folder / f"{worker}.json")


def collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = assign_groups(items)
    if getattr(config, "workerinput", None) is not None:
        items.sort(key=lambda item: start_rank(item.nodeid, groups))  # stable
        write_groups(config, groups)


def configure_node(node: Any) -> None:
    node.workerinput[_INPUT_KEY] = str(groups_dir(node.config))


def cleanup(config: pytest.Config) -> None:
    found: Path | None = getattr(config, "_eddy_groups_dir", None)
    if found is not None:
        shutil.rmtree(found, ignore_errors=True)
