"""The library's imports run one way (issue "The suite as a researcher meets it", item 5): no module of ``opsft``
imports, at any level (function-level imports included), a module that imports it back, directly or through
others. A static check over the source: nothing is imported."""

import ast
from pathlib import Path

import opsft

ROOT = Path(opsft.__file__).parent


def module_name(path: Path) -> str:
    """``opsft.x.y`` for ``ROOT/x/y.py`` (the package itself for an ``__init__.py``)."""
    parts = ("opsft", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``opsft`` modules it imports; ``from opsft.pkg import sub`` counts as importing ``sub``
    alone when ``sub`` is a module."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "opsft":
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                graph[name] |= subs if subs else ({node.module} & modules.keys())
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & modules.keys()
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_library_imports_itself_back():
    assert cycles(import_graph()) == []


def test_a_config_does_not_import_the_thing_it_configures():
    graph = import_graph()
    assert not {m for m in graph["opsft.config"] if m.startswith(("opsft.pretraining", "opsft.runs"))}


TRAINER = ("opsft.train", "opsft.objectives", "opsft.sources", "opsft.trajectories", "opsft.pretraining",
           "opsft.runs", "opsft.claims")


def test_the_organism_package_sits_below_the_trainer():
    graph = import_graph()
    upward = {(m, i) for m, imported in graph.items() if m.startswith("opsft.organism")
              for i in imported if i.startswith(TRAINER)}
    assert upward == set()


def test_the_trainer_does_not_import_runs_or_claims():
    graph = import_graph()
    trainer = ("opsft.train", "opsft.objectives", "opsft.sources")
    upward = {(m, i) for m, imported in graph.items() if m in trainer
              for i in imported if i.startswith(("opsft.pretraining", "opsft.runs", "opsft.claims"))}
    assert upward == set()
