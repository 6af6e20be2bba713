"""The packages' import graph has no cycles: every ``import`` and ``from … import`` counts, also those
under ``TYPE_CHECKING`` and inside functions (a cycle held apart that way is still one idea leaning on
another both ways). Covers every module of roost/ (LAYERED)."""

from __future__ import annotations

import ast
from pathlib import Path

import roost

ROOT = Path(roost.__file__).parent
#: The packages whose modules may be in no import cycle.
LAYERED = ("roost",)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(("roost", *path.relative_to(ROOT).with_suffix("").parts))
        mods[name.removesuffix(".__init__")] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """Each roost module and the roost modules it imports (a package's ``from p import m`` names ``p.m``)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in mods:
                        deps.add(full)
                    elif node.module in mods:
                        deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names if alias.name in mods)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph.get(dep, ())))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_layered_packages() -> None:
    graph = import_graph()
    assert "roost.daemon.engine.core" in graph and "roost.daemon.engine.transitions" in graph["roost.daemon.engine.core"]
    bad = [c for c in cycles(graph) if any(m.startswith(LAYERED) for m in c)]
    assert not bad, "import cycles: " + "; ".join(" <-> ".join(c) for c in bad)


def test_the_engine_imports_nothing_of_hosts() -> None:
    """The engine core is given what it needs of hosts (``Engine.prepare_host``) instead of importing them."""
    graph = import_graph()
    engine = [m for m in graph if m.startswith("roost.daemon.engine")]
    assert not [(m, d) for m in engine for d in graph[m] if d.startswith("roost.hosts")]
