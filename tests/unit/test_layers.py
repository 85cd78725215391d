"""The layers point one way: a test over the import graph of the production packages.

Every import between top-level packages (module level or inside functions, type-checking
blocks included) must go down this list; packages on one line may import each other
only where no cycle results. ARCHITECTURE.md draws the same picture.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]

# Top to bottom. Entry points first; the shared base (core) last and importing nothing of ours.
LAYERS: list[set[str]] = [
    {"app"},
    {"evals"},
    {"graph"},
    {"nodes"},
    {"memory", "knowledge", "llm"},
    {"offline_model"},
    {"prompts"},
    {"storage", "embeddings"},
    {"core"},
]
PACKAGES = set().union(*LAYERS)
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _edges() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the files that import it."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = parsed(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in PACKAGES and top != pkg:
                        edges[pkg][top].append(str(path.relative_to(ROOT)))
    return edges


def test_every_top_level_package_is_placed_in_a_layer():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert on_disk == PACKAGES, "add the new package to LAYERS here and to ARCHITECTURE.md"


def test_imports_only_go_down_the_layers():
    upward = [
        f"{pkg} -> {dep} ({files[0]})"
        for pkg, deps in _edges().items()
        for dep, files in deps.items()
        if LEVEL[dep] < LEVEL[pkg]
    ]
    assert upward == []


def test_there_are_no_import_cycles_between_packages():
    edges = {pkg: set(deps) for pkg, deps in _edges().items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert [p for p in sorted(PACKAGES) if reaches(p, p, {p})] == []


def _module_edges() -> dict[str, set[str]]:
    """module -> the modules of ours it imports (module level or inside functions)."""
    paths = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path

    def ours(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                found = [ours(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [ours(f"{node.module}.{a.name}") or ours(node.module) for a in node.names]
            else:
                continue
            edges[module] |= {f for f in found if f and f != module}
    return edges


def test_there_are_no_import_cycles_between_modules():
    """Two modules never import each other, directly or through others (a function-level import too)."""
    edges = _module_edges()
    cyclic = []
    for start in sorted(edges):
        seen, todo = set(), list(edges[start])
        while todo:
            m = todo.pop()
            if m == start:
                cyclic.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo.extend(edges.get(m, ()))
    assert cyclic == []


def test_no_production_package_imports_the_entry_points_or_the_evals():
    edges = _edges()
    for pkg in PACKAGES - {"app", "evals"}:
        assert "app" not in edges[pkg] and "evals" not in edges[pkg], pkg


def test_the_shared_base_imports_nothing_of_ours():
    assert dict(_edges()["core"]) == {}


# app/ is in rooms: the run engine (runs) below the entry points that serve it. The HTTP API, MCP
# and the LangGraph server hooks stand side by side and never import each other; the CLI and the
# local-model launcher dispatch to the others by command.
APP_ROOMS = {"cli", "http", "mcp", "studio", "local", "runs"}
ROOM_MAY_IMPORT = {
    "runs": set(),
    "http": {"runs"},
    "mcp": {"runs"},
    "studio": {"runs"},
    "cli": {"runs", "http", "mcp", "studio", "local"},
    "local": {"cli"},
}


def _room_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for room in APP_ROOMS:
        for path in sorted((ROOT / "app" / room).rglob("*.py")):
            for node in ast.walk(parsed(path)):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "app" and len(parts) > 1 and parts[1] != room:
                        edges[room].add(parts[1])
    return edges


def test_app_is_in_rooms_and_nothing_lies_loose_in_it():
    loose = sorted(p.name for p in (ROOT / "app").glob("*.py") if p.name != "__init__.py")
    rooms = {p.parent.name for p in (ROOT / "app").glob("*/__init__.py")}
    assert loose == [] and rooms == APP_ROOMS


def test_app_rooms_import_only_the_rooms_they_dispatch_to():
    wrong = {room: deps - ROOM_MAY_IMPORT[room] for room, deps in _room_edges().items() if deps - ROOM_MAY_IMPORT[room]}
    assert wrong == {}
