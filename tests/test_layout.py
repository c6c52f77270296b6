"""The README's layout map matches the tree: a newcomer who reads it finds every room.

Every path the map names exists; every package under ``extender/`` and ``drivers/`` and
every module at the top of ``extender/`` is named by the map; no module is over the
400 lines a reader can hold, the compiled ones' C files included.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400
SOURCES = ("*.py", "*.c", "*.h")  # the scoring kernel and the codec's list reader are C


def layout_paths() -> set[str]:
    """The backticked paths in the first column of the README's layout table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    paths: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        paths.update(p.rstrip("/") for p in re.findall(r"`([^`]+)`", first))
    return paths


def packages() -> set[str]:
    """Every package (a folder with an ``__init__.py``) below the two top-level ones."""
    found = set()
    for top in ("extender", "drivers"):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).as_posix()
            if rel.count("/") == 1:  # rooms; folders inside a room belong to it
                found.add(rel)
    return found


def test_every_path_in_the_map_exists() -> None:
    missing = sorted(p for p in layout_paths() if not (ROOT / p).exists())
    assert not missing, f"README layout names paths that do not exist: {missing}"


def test_every_room_and_top_level_module_is_in_the_map() -> None:
    named = layout_paths()
    rooms = packages()
    top_modules = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "extender").glob("*.py")
        if p.name != "__init__.py"
    }
    unnamed = sorted((rooms | top_modules) - named)
    assert not unnamed, f"rooms or modules missing from README's layout map: {unnamed}"
    assert {"extender/http", "extender/scheduling", "extender/wire"} <= rooms


def test_no_module_is_over_the_limit() -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for top in ("extender", "drivers")
        for pattern in SOURCES
        for p in (ROOT / top).rglob(pattern)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
