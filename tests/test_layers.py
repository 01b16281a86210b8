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


def aiortc_private_names() -> set[str]:
    """Every private attribute or method name aiortc and aioice define or assign, name-mangled ones included."""
    import aioice
    import aiortc

    names: set[str] = set()
    for package in (aiortc, aioice):
        for path in Path(package.__file__).parent.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    for inner in ast.walk(node):
                        name = getattr(inner, "attr", None) or getattr(inner, "name", None)
                        if isinstance(name, str) and name.startswith("_") and not name.endswith("__"):
                            names.add(f"_{node.name.lstrip('_')}{name}" if name.startswith("__") else name)
    return names


def test_no_module_outside_media_rtc_touches_aiortcs_private_parts():
    """aiortc's private attributes are read and written in `media/rtc/private.py` alone, which checks them all
    at import (an upgrade that moves one fails at start, naming it)."""
    private = aiortc_private_names()
    assert "_RTCRtpReceiver__jitter_buffer" in private and "_handle_rtp_data" in private  # the scan sees them
    shim = ROOT / "media" / "rtc" / "private.py"
    touched = []
    for pkg in ("agent", "media", "benchmarks"):
        for path in (ROOT / pkg).rglob("*.py"):
            if path == shim:
                continue
            tree = ast.parse(path.read_text())
            own = {  # what the module's own classes keep (`_frame`: a name aiortc uses too)
                n.attr
                for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                if isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            for node in ast.walk(tree):
                if not isinstance(node, ast.Attribute) or node.attr not in private or node.attr in own:
                    continue
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue  # an object's own attribute (a subclass's are checked where it lives: media/rtc)
                touched.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not touched, "aiortc's private parts touched outside media/rtc/private.py:\n" + "\n".join(touched)


def test_the_modules_directly_in_media_are_sans_io():
    """No asyncio, aiortc or aioice in `media/*.py`: those edges live in `media/rtc/`."""
    for path in (ROOT / "media").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("asyncio", "aiortc", "aioice"), f"{path.name} imports {name}"
