"""The package's import graph, measured: import circles and imports that run back up the pipeline.

Every ``import`` and ``from ... import`` of ``mlbook``, ``mlbook_kernel`` and ``mlbook_helpers``
(at module level or inside a function: both are dependencies) is read from the source, without
importing anything. Printed: the circles among modules (strongly connected components of more
than one module), and each import from a lower stage to a higher one in ``LAYERS`` (the pipeline
``mlbook/__init__.py`` states, from the ground floor up). Exit status 0 always; the test suite
holds the figures (``tests/test_import_graph.py``). Run:

    .venv/bin/python scripts/import_graph.py
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mlbook", "mlbook_kernel", "mlbook_helpers")

# Stages from the ground floor up: a module may import its own stage and the ones below it.
LAYERS = (
    ("ground", ("mlbook", "mlbook.errors", "mlbook.files", "mlbook.pyast", "mlbook.course", "mlbook.nbgrader_env",
                "mlbook_helpers", "mlbook_kernel")),
    ("calendar", ("mlbook.calendar",)),
    ("authoring", ("mlbook.authoring",)),
    ("labs", ("mlbook.labs",)),
    ("judge", ("mlbook.judge",)),
    ("sandbox", ("mlbook.sandbox",)),
    ("grading", ("mlbook.grading",)),
    ("lms", ("mlbook.lms",)),
    ("outputs", ("mlbook.outputs",)),
    ("tools", ("mlbook.student", "mlbook.mutation", "mlbook.similarity", "mlbook.lint", "mlbook.hub")),
    ("top", ("mlbook.demo", "mlbook.cli")),
)


def modules() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``known`` it imports (``from a import b`` counts ``a.b`` when it is a
    module, else ``a``)."""
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int:
    """The index in ``LAYERS`` of the longest prefix naming ``module``'s stage."""
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = i, prefix.count(".")
    if best is None:
        raise ValueError(f"{module} is in no stage of LAYERS")
    return best


def back_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import from a module to one of a higher stage."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def main() -> int:
    graph = imports(modules())
    found = circles(graph)
    ups = back_up(graph)
    print(f"modules: {len(modules())}, imports between them: {sum(map(len, graph.values()))}")
    print(f"import circles: {len(found)}")
    for component in found:
        print("  " + " <-> ".join(component))
    print(f"imports from a lower stage to a higher one: {len(ups)}")
    for a, b in ups:
        print(f"  {a} ({LAYERS[layer(a)][0]}) -> {b} ({LAYERS[layer(b)][0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
