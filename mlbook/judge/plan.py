"""What the grader re-runs for each test cell, built from the lab's trusted source notebook.

The judge decides a test cell by running that cell's source (its visible tests and its hidden
block) in the grader's process. Names the cell reads resolve in this order:
1. names the cell itself assigns (ordinary Python scoping);
2. the trusted prelude: what the source notebook's given (non-answer) cells import from
   trusted modules (numpy, math, torch, scipy, and mlbook_helpers' checks and examples), the
   data constants they import from any mlbook_helpers module, and the functions they define
   with ``def``. These are the grader's own objects, so a student who redefines ``expect_close``,
   ``np`` or a given helper function changes nothing here;
3. the student's kernel: data comes back as data, anything else (the student's functions,
   classes and objects built by given cells) as a ``RemoteObject`` that runs there.
Builtins resolve as usual; ``print`` is silenced.

Each lab may declare in ``mlbook/labs/<lab>/__init__.py``:
- ``COVERED_BY``: test cell -> cells whose verdicts it also needs (default: ``<cell>_hidden``
  when that cell exists), so a visible test reading values that given cells computed in the
  kernel still needs the hidden checks of the functions behind them;
- ``NOT_REPLAYED``: test cells whose code cannot run outside the kernel (they hand a grader
  object to a student's function); they are decided by their covering cells alone;
- ``SANDBOX_PROFILE``: the sandbox its notebooks run in, by name (``mlbook.sandbox.profiles``;
  lab 6's ``"memory"``: its checks measure the kernel's memory from outside).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from mlbook import pyast
from mlbook.labs import settings
from mlbook.authoring.notebooks import HIDDEN, grade_id, is_answer, is_test, split_blocks

TRUSTED_MODULES = ("numpy", "math", "torch", "scipy", "mlbook_helpers.checks", "mlbook_helpers.examples")


@dataclass
class CellPlan:
    grade_id: str
    source: str  # the whole trusted cell source, hidden block included
    visible: str  # what the kernel runs at grading (the hidden block removed)
    covered_by: tuple[str, ...] = ()
    replayed: bool = True
    code: object = None  # ``source`` compiled once, when the plan is built (judges share plans)


@dataclass
class LabPlan:
    lab: str
    cells: dict[str, CellPlan]
    prelude: list[ast.stmt] = field(default_factory=list)  # trusted imports and defs, in order
    prelude_code: object = None  # compiled when the plan is built
    sandbox_profile: str = "standard"  # the lab's SANDBOX_PROFILE (mlbook.sandbox.profiles)

    def fresh_namespace(self, lookup) -> "KernelNamespace":
        ns = KernelNamespace(lookup)
        ns["print"] = lambda *args, **kwargs: None
        ns["__name__"] = "__grader__"
        exec(self.prelude_code, ns)
        return ns


class KernelNamespace(dict):
    """A cell's globals: unknown names are fetched from the student's kernel via ``lookup``."""

    def __init__(self, lookup):
        super().__init__()
        self._lookup = lookup

    def __missing__(self, name: str):
        if name.startswith("__") or hasattr(builtins, name):
            raise KeyError(name)  # fall through to builtins
        value = self._lookup(name)  # raises KeyError when the kernel has no such name
        self[name] = value
        return value


def split_hidden(source: str) -> tuple[str, str]:
    """(source without the hidden block, the hidden block's code)."""
    visible, hidden = split_blocks(source, HIDDEN)
    return visible, "".join(hidden)


def _prelude(nb) -> list[ast.stmt]:
    stmts: list[ast.stmt] = []
    for cell in nb.cells:
        if cell.cell_type != "code" or is_answer(cell) or is_test(cell):
            continue
        try:
            tree = pyast.parse(_strip_magics(cell.source))
        except SyntaxError:
            continue
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stmts.append(stmt)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                stmts.extend(_trusted_imports(stmt))
    return stmts


def _trusted_imports(stmt: ast.Import | ast.ImportFrom) -> list[ast.stmt]:
    if isinstance(stmt, ast.Import):
        kept = [a for a in stmt.names if _trusted(a.name)]
        return [ast.Import(names=kept)] if kept else []
    module = stmt.module or ""
    if stmt.level:
        return []
    if _trusted(module):
        return [stmt]
    if module.split(".")[0] != "mlbook_helpers":
        return []
    # Another helper module: keep only its data constants (classes and functions stay the kernel's).
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return []
    names = stmt.names
    if any(a.name == "*" for a in names):
        public = getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")])
        names = [ast.alias(name=n) for n in public]
    kept = [a for a in names if _is_data(getattr(mod, a.name, None))]
    return [ast.ImportFrom(module=module, names=kept, level=0)] if kept else []


def _trusted(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in TRUSTED_MODULES)


def _is_data(value) -> bool:
    return isinstance(value, (int, float, str, bytes, tuple, frozenset)) and not callable(value)


def _strip_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


_cache: dict[tuple[str, str], LabPlan] = {}
_lock = threading.Lock()


def lab_plan(lab: str, source_path: Path) -> LabPlan:
    """The plan for ``lab`` from its source notebook (cached by content)."""
    return plan_from_text(lab, source_path.read_text())


def plan_from_text(lab: str, source_json: str) -> LabPlan:
    """The plan for ``lab`` from the text of its source notebook (cached by content)."""
    key = (lab, hashlib.sha256(source_json.encode()).hexdigest())
    with _lock:
        if key not in _cache:
            _cache[key] = _build(lab, nbformat.reads(source_json, as_version=4))
        return _cache[key]


def _build(lab: str, nb) -> LabPlan:
    declared = settings(lab)
    covered, not_replayed = declared.covered_by, declared.not_replayed
    ids = [grade_id(c) for c in nb.cells if is_test(c)]
    cells = {}
    for cell in nb.cells:
        if not is_test(cell):
            continue
        gid = grade_id(cell)
        visible, _ = split_hidden(cell.source)
        default = (f"{gid}_hidden",) if f"{gid}_hidden" in ids else ()
        source = _strip_magics(cell.source)
        cells[gid] = CellPlan(gid, source, visible, tuple(covered.get(gid, default)), replayed=gid not in not_replayed,
                              code=pyast.compile_tree(source, f"<{gid}>"))
    # Compiled here, never in a judge, and through mlbook.pyast (CPython 3.11's AST is not thread-safe).
    prelude = _prelude(nb)
    module = ast.fix_missing_locations(ast.Module(body=list(prelude), type_ignores=[]))
    return LabPlan(lab, cells, prelude, pyast.compile_tree(module, f"<{lab} given cells>"),
                   sandbox_profile=declared.sandbox_profile)
