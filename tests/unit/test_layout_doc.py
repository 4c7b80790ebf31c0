"""docs/layout.md names every package of the tree once, and only packages that exist (the
layers themselves are held by the import-linter contracts that scripts/test runs)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import eddy

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(eddy.__file__).resolve().parent


def packages_in_tree() -> set[str]:
    found = set()
    for init in PACKAGE_ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(PACKAGE_ROOT.parent)
        if "__pycache__" not in rel.parts:
            found.add(".".join(rel.parts))
    return found - {"eddy"}


def packages_in_doc() -> list[str]:
    """The first cell of every table row: the packages (rows marked "(module)" name
    modules, not packages)."""
    names = []
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        cell = line.split("|")[1].strip() if line.startswith("| `") else ""
        if cell and "(module" not in cell:
            names += re.findall(r"`(eddy(?:\.\w+)*)`", cell)
    return names


def test_the_layout_page_names_each_package_of_the_tree_once() -> None:
    documented = packages_in_doc()
    assert sorted(documented) == sorted(set(documented)), "a package listed twice"
    tree = packages_in_tree()
    assert not tree - set(documented), f"packages missing from docs/layout.md: " \
                                       f"{sorted(tree - set(documented))}"
    assert not set(documented) - tree, f"docs/layout.md lists packages that do not exist: " \
                                       f"{sorted(set(documented) - tree)}"


def test_the_layout_page_names_the_modules_it_marks_as_modules() -> None:
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        if line.startswith("| `") and "(module" in line.split("|")[1]:
            for name in re.findall(r"`(eddy(?:\.\w+)*)`", line.split("|")[1]):
                path = PACKAGE_ROOT.parent / (name.replace(".", "/") + ".py")
                assert path.is_file(), f"docs/layout.md: {name} is not a module"


def test_the_layout_page_shows_the_layers_of_the_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers")
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("The layers, top to bottom")[1].split("```")[1].strip().splitlines()
    assert [line.strip() for line in block] == contract["layers"]
