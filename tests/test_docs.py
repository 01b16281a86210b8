"""docs/architecture.md lists every module of `agent/` and `media/`, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def listed_modules() -> set[str]:
    """Paths from the one-line-per-module block: a line's indent says which package it is in."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("One line per module:", 1)[1].split("```", 2)[1]
    listed: set[str] = set()
    parents: list[tuple[int, str]] = []
    for line in block.splitlines():
        m = re.match(r"( *)(\S+)", line)
        if m is None or len(m.group(1)) >= 20:  # empty, or a description carried over
            continue
        indent, name = len(m.group(1)), m.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = "".join(p for _, p in parents) + name
        if name.endswith("/"):
            parents.append((indent, name))
        listed.add(path.rstrip("/"))
    return listed


def test_the_module_list_matches_the_tree():
    listed = listed_modules()
    modules = {
        str(p.relative_to(ROOT))
        for pkg in ("agent", "media")
        for p in (ROOT / pkg).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    folders = {m.rsplit("/", 1)[0] for m in modules}
    assert not modules - listed, f"modules docs/architecture.md does not list: {sorted(modules - listed)}"
    stale = {p for p in listed - modules - folders if not (ROOT / p).exists()}
    assert not stale, f"docs/architecture.md lists what is not there: {sorted(stale)}"
