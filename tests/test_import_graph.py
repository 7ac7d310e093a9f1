"""The package's imports draw its pipeline: no circle, and at most two imports up a stage.

Read from the source by ``scripts/import_graph.py`` (nothing is imported). An import from a
lower stage of ``LAYERS`` to a higher one is allowed only where it stands with its reason.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("import_graph", Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py")
graph = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(graph)

ALLOWED_UP = {
    ("mlbook.labs.kit", "mlbook.sandbox.procmem"),
    ("mlbook.labs.kit.calls", "mlbook.judge.remote"),
}


def test_no_module_imports_itself_through_others():
    assert graph.circles(graph.imports(graph.modules())) == []


def test_every_module_belongs_to_a_stage():
    for name in graph.modules():
        graph.layer(name)  # raises for a module of no stage


def test_imports_run_down_the_pipeline_but_for_two_with_their_reasons():
    ups = set(graph.back_up(graph.imports(graph.modules())))
    assert ups <= ALLOWED_UP, f"imports from a lower stage to a higher one: {sorted(ups - ALLOWED_UP)}"
    for module, target in ups:
        path = graph.modules()[module]
        text = path.read_text()
        line = next(i for i, l in enumerate(text.splitlines()) if f"from {target} import" in l or f"import {target}" in l
                    or f"from {target.rpartition('.')[0]} import {target.rpartition('.')[2]}" in l)
        above = text.splitlines()[max(0, line - 2):line]
        assert any("Up a stage" in l for l in above), f"{path}: the import of {target} needs its reason above it"


def test_the_circle_finder_finds_a_circle():
    assert graph.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
