"""The packages only point down, and no module imports itself back through others.

cli -> server -> transport -> session -> engines -> config, wire -> profiles -> media (docs/architecture.md).
Every import counts, also one inside a function or under TYPE_CHECKING: a
lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# lowest first; a module belongs to the longest prefix that names it
LAYERS: list[tuple[str, ...]] = [
    ("media",),
    ("agent", "agent.logs"),  # the version, the event log's format
    ("agent.profiles",),
    ("agent.config", "agent.wire"),
    ("agent.engines",),
    ("agent.session",),
    ("agent.transport",),
    ("agent.server",),
    ("agent.cli", "agent.bench", "agent.client", "agent.replay", "agent.machine"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(packages: tuple[str, ...] = ("agent", "media")) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in its body)."""
    files = {module_name(p): p for pkg in packages for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package
                    anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:  # `import agent.engines.base as x` names a module; strip attributes
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def rank(module: str) -> int:
    best, found = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    assert found >= 0, f"{module} is in no layer: add it to LAYERS"
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} ({'/'.join(LAYERS[rank(m)])}) imports {d} ({'/'.join(LAYERS[rank(d)])})"
        for m, deps in graph.items()
        for d in deps
        if rank(d) > rank(m)
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_a_higher_layer():
    graph = import_graph()
    assert len(graph) > 50 and graph["agent.server.app"], "the walk found the modules and their imports"
    assert upward(graph) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checks_catch_what_they_are_for():
    """The two checks on a made-up tree: media importing agent, profiles importing engines, and a circle."""
    graph = {
        "media.aligner": {"agent.config"},
        "agent.profiles.in_car": {"agent.engines.cascade.engine"},
        "agent.engines.cascade.engine": {"agent.profiles.in_car"},
        "agent.server.app": {"agent.transport.peer"},
        "agent.transport.peer": set(),
        "agent.config": set(),
    }
    assert upward(graph) == [
        "agent.profiles.in_car (agent.profiles) imports agent.engines.cascade.engine (agent.engines)",
        "media.aligner (media) imports agent.config (agent.config/agent.wire)",
    ]
    assert cycles(graph) == [["agent.engines.cascade.engine", "agent.profiles.in_car"]]


def test_benchmarks_never_import_the_tests():
    """What a benchmark shares with the tests lives in `benchmarks/harness.py` (or the package)."""
    for path in (ROOT / "benchmarks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not any(n == "tests" or n.startswith("tests.") for n in names), path
