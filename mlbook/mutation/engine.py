"""Grade every first-order mutant of a lab's reference answers, then classify it.

For each graded answer cell (in notebook order; an answer cell no graded test cell follows, an
extension without points, is named and left out: no mutant of it can lose points) the lab's notebook is run in this process up to
that cell (the reference's code, test cells decided by the judge: ``inprocess``); then each mutant
of the cell's solution region runs in a forked child with a time limit (a mutant can loop
forever), which runs the mutated cell and every cell after it as grading does (``MLBOOK_SEED=0``),
then the cell's own test cells (those before the next answer cell) on seeds 1 .. ``seeds``-1.

- **killed**: some test cell fails (the mutant loses points), or the child runs out of time
  (grading's cell timeout would fail it too) or dies.
- **equivalent**: full marks, and differential testing finds no output that differs from the
  reference's: every call the checks made of the cell's functions on fresh seeds (1000, 1001, ...),
  each again with its floating tensors in the other precision (float32 <-> float64), and the lab's
  own probes (``mlbook/labs/<lab>/probes.py``: T = 1, T = 0, fully masked rows, ...), each run on
  the reference and on the mutant from the same torch seed. Outputs agree within a few units in the
  last place, or within the relative tolerance the lab states for that answer (probes.py ``TOLERANCES``).
  An answer the lab lets compute in float32 (``FLOAT32_ACCEPTED`` in its probes) is compared at
  float32's precision, float32 and float64 results alike (``difference``'s ``float32_atol``).
- **survived**: full marks, yet some of those inputs tells it from the reference; reported with its
  diff and that input.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import json
import os
import select
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from mlbook.authoring.notebooks import grade_id, is_answer, is_test, read_authored, without_delimiters
from mlbook.course import Course
from mlbook.judge.plan import lab_plan
from mlbook.mutation.inprocess import decide_test_cell, quiet, run_cell, seeded
from mlbook.mutation.operators import Mutant, cell_mutants

FRESH_SEEDS = (1000, 1001, 1002)  # the checks' draws re-recorded on seeds grading's analysis did not use
RECORDED_CALLS = 12  # per function and seed, the first calls the checks make are kept


@dataclass
class Verdict:
    mutant: str
    function: str
    operator: str
    status: str  # killed | equivalent | survived
    reason: str = ""  # killed: the failing cell and its message; survived: what differs
    diff: str = ""
    distinguishing_input: str = ""
    seconds: float = 0.0


@dataclass
class FunctionReport:
    lab: str
    cell: str
    function: str
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    survived: int = 0
    seconds: float = 0.0
    verdicts: list[Verdict] = field(default_factory=list)


# --- comparing outputs -------------------------------------------------------------------------

def _describe(value, limit: int = 400) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        text = f"tensor{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
        if value.numel() <= 64:
            text += " " + repr(value.detach().tolist())
        return text[:limit]
    if type(value).__name__ == "ndarray":
        return f"array{value.shape} {value.dtype} " + repr(value.tolist())[:limit]
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe(v, limit // max(len(value), 1) + 20) for v in value)
        return (f"({inner})" if isinstance(value, tuple) else f"[{inner}]")[:limit]
    if isinstance(value, dict):
        return ("{" + ", ".join(f"{k!r}: {_describe(v, 80)}" for k, v in value.items()) + "}")[:limit]
    if isinstance(value, Raised):
        return f"raises {value.kind}"
    return repr(value)[:limit]


@dataclass(frozen=True)
class Raised:
    kind: str


def difference(a, b, path: str = "output", rtol: float = 0.0, float32_atol: float | None = None,
               atol: float = 0.0) -> str | None:
    """Where two outputs differ (None when no grader could tell them apart).

    Tensors must agree in shape and dtype, and in value within a few float32 (or float64) units
    in the last place, NaN matching NaN; modules are compared by their state and parameters;
    an exception matches an exception of the same type (not its message). ``rtol``: the relative
    tolerance the lab states for this answer (probes.py ``TOLERANCES``), when it is looser; ``atol``:
    the absolute one it may state with it (a measurement's noise floor). With either, integers (bytes
    measured, say) are compared within them too, and exactly without.

    ``float32_atol``: the answer may compute in float32 (the lab says so, ``FLOAT32_ACCEPTED``):
    float32 and float64 tensors then count as one dtype and values agree within ``float32_atol``
    (and a relative 1e-5), the rounding float32 arithmetic makes on these inputs.
    """
    import torch

    if float32_atol is not None:
        return _difference_at_float32(a, b, path, float32_atol)

    def within(x, y, where):
        return difference(x, y, where, rtol, atol=atol)

    if isinstance(a, Raised) or isinstance(b, Raised):
        return None if a == b else f"{path}: {_describe(a)} vs {_describe(b)}"
    if isinstance(a, torch.nn.Module) and isinstance(b, torch.nn.Module):
        return within(dict(a.state_dict()), dict(b.state_dict()), f"{path}.state_dict()")
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {_describe(a, 120)} vs {_describe(b, 120)}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{path}: {_describe(a, 60)} vs {_describe(b, 60)}"
        a, b = a.detach(), b.detach()
        if a.is_floating_point() or a.is_complex():
            tol = 1e-12 if a.dtype == torch.float64 else 1e-5
            if not torch.allclose(a, b, rtol=max(tol, rtol), atol=max(tol, atol), equal_nan=True):
                gap = (a - b).abs().nan_to_num(float("inf")).max().item()
                return f"{path}: values differ (largest gap {gap:.3g}): {_describe(a, 150)} vs {_describe(b, 150)}"
            return None
        return None if torch.equal(a, b) else f"{path}: {_describe(a, 150)} vs {_describe(b, 150)}"
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape or a.dtype != b.dtype:
            return f"{path}: {_describe(a, 150)} vs {_describe(b, 150)}"
        return within(torch.from_numpy(np.ascontiguousarray(a)) if a.dtype != object else a.tolist(),
                      torch.from_numpy(np.ascontiguousarray(b)) if b.dtype != object else b.tolist(), path)
    if isinstance(a, np.generic) and isinstance(b, np.generic):
        a, b = a.item(), b.item()
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        return next((d for k in a if (d := within(a[k], b[k], f"{path}[{k!r}]"))), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {_describe(a, 150)} vs {_describe(b, 150)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := within(x, y, f"{path}[{i}]"))), None)
    if (rtol or atol) and _integer(a) and _integer(b):  # a count the lab states a tolerance for (bytes measured): as a float
        a, b = float(a), float(b)
    if isinstance(a, float) and isinstance(b, float):
        if a != a and b != b:
            return None
        return None if abs(a - b) <= max(1e-9, rtol) * max(1.0, abs(a)) + atol else f"{path}: {a!r} vs {b!r}"
    if callable(a) and callable(b):
        return None  # a function returned: its calls are not probed here
    if type(a) is type(b) and type(a).__eq__ is object.__eq__:
        return None  # an object without its own equality (a model, a random generator): not compared
    try:
        same = bool(a == b)
    except Exception:  # noqa: BLE001 - an object without equality: its text
        same = repr(a) == repr(b)
    return None if same else f"{path}: {_describe(a, 150)} vs {_describe(b, 150)}"


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _difference_at_float32(a, b, path: str, atol: float) -> str | None:
    """``difference`` for an answer the lab lets compute in float32 (see its ``float32_atol``)."""
    import numpy as np
    import torch

    def widened(v):
        if isinstance(v, np.ndarray) and v.dtype in (np.float32, np.float64):
            v = torch.from_numpy(np.ascontiguousarray(v))
        if isinstance(v, torch.Tensor) and v.dtype in (torch.float32, torch.float64):
            return v.detach().to(torch.float64)
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            return type(v)(widened(x) for x in v)
        if isinstance(v, dict):
            return {k: widened(x) for k, x in v.items()}
        return v

    a, b = widened(a), widened(b)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype == torch.float64:
        if a.shape != b.shape:
            return f"{path}: {_describe(a, 60)} vs {_describe(b, 60)}"
        if not torch.allclose(a, b, rtol=1e-5, atol=atol, equal_nan=True):
            gap = (a - b).abs().nan_to_num(float("inf")).max().item()
            return f"{path}: values differ beyond float32 rounding (largest gap {gap:.3g}): {_describe(a, 150)} vs {_describe(b, 150)}"
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _difference_at_float32(x, y, f"{path}[{i}]", atol))),
                    None)
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return next((d for k in a if (d := _difference_at_float32(a[k], b[k], f"{path}[{k!r}]", atol))), None)
    return difference(a, b, path)


def float32_rounding(args, kwargs) -> float:
    """The absolute error float32 arithmetic may make on these inputs: 1e-5, plus 8 float32 units
    (eps = 1.2e-7) of the largest float among them (a score of 3000 is rounded by ~2e-4)."""
    import numpy as np
    import torch

    largest = 0.0

    def visit(v):
        nonlocal largest
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
            v = v.detach().to(torch.float64).numpy()
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
            finite = v[np.isfinite(v)]
            if finite.size:
                largest = max(largest, float(np.abs(finite).max()))
        elif isinstance(v, float) and np.isfinite(v):
            largest = max(largest, abs(v))
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)

    visit((args, kwargs))
    return 1e-5 + 8 * float(np.finfo(np.float32).eps) * largest


def _call(function: Callable, args: tuple, kwargs: dict, seed: int):
    """``function`` called on deep copies of its arguments from torch seed ``seed``: its result, or ``Raised``."""
    import torch

    args, kwargs = copy.deepcopy((args, kwargs))
    torch.manual_seed(seed)
    try:
        with quiet():
            out = function(*args, **kwargs)
        return out, args, kwargs  # the arguments too: an answer may be asked to modify one in place
    except Exception as exc:  # noqa: BLE001 - an error is an output to compare
        return Raised(type(exc).__name__), args, kwargs


def _other_precision(value):
    """``value`` with every float32 tensor made float64 and every float64 one float32 (None: none to change)."""
    import numpy as np
    import torch

    changed = False

    def swap(v):
        nonlocal changed
        if isinstance(v, np.ndarray) and v.dtype in (np.float32, np.float64):
            changed = True
            return v.astype(np.float64 if v.dtype == np.float32 else np.float32)
        if isinstance(v, torch.Tensor) and v.dtype in (torch.float32, torch.float64):
            changed = True
            return v.detach().to(torch.float64 if v.dtype == torch.float32 else torch.float32)
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            return type(v)(swap(x) for x in v)
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        return v

    out = swap(value)
    return out if changed else None


# --- recording the checks' calls ---------------------------------------------------------------

class _Recorder:
    """Wraps a cell's functions so that the first calls the checks make are kept (deep copies)."""

    def __init__(self):
        self.calls: dict[str, list[tuple[tuple, dict]]] = {}
        self.on = True

    def wrap(self, name: str, function: Callable) -> Callable:
        recorder = self

        @functools.wraps(function)
        def recorded(*args, **kwargs):
            calls = recorder.calls.setdefault(name, [])
            if recorder.on and len(calls) < RECORDED_CALLS:
                try:
                    calls.append(copy.deepcopy((args, kwargs)))
                except Exception:  # noqa: BLE001 - an argument that cannot be copied is not replayed
                    pass
            return function(*args, **kwargs)

        return recorded


def _defined_names(source: str) -> list[str]:
    """The names a cell binds at its top level (functions, classes, assigned values)."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.append(sub.id)
    return list(dict.fromkeys(names))


# --- the lab ---------------------------------------------------------------------------------

@dataclass
class _Cell:
    index: int
    gid: str | None
    kind: str  # answer | test | code
    source: str  # what a kernel runs: an answer cell's reference without its delimiters
    authored: str  # the answer cell with its delimiters


class LabRun:
    """One lab's notebook and plan, and its probes (``mlbook/labs/<lab>/probes.py``, if any)."""

    def __init__(self, course: Course, lab: str):
        self.lab = lab
        self.plan = lab_plan(lab, course.source(lab))
        nb = read_authored(course.authored(lab))
        self.cells: list[_Cell] = []
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            kind = "answer" if is_answer(cell) else "test" if is_test(cell) else "code"
            source = without_delimiters(cell.source) if kind == "answer" else cell.source
            self.cells.append(_Cell(i, grade_id(cell), kind, source, cell.source))
        try:
            self.probes = importlib.import_module(f"mlbook.labs.{lab}.probes")
        except ModuleNotFoundError:
            self.probes = None

    def answer_cells(self) -> list[_Cell]:
        return [c for c in self.cells if c.kind == "answer"]

    def own_tests(self, cell: _Cell) -> list[str]:
        """The test cells between an answer cell and the next one: the checks written for it."""
        out, started = [], False
        for c in self.cells:
            if c is cell:
                started = True
            elif started and c.kind == "answer":
                break
            elif started and c.kind == "test":
                out.append(c.gid)
        return out

    def probe_inputs(self, name: str, seed: int) -> list[tuple[tuple, dict]]:
        if self.probes is None:
            return []
        make = getattr(self.probes, "PROBES", {}).get(name)
        return list(make(seed)) if make else []

    def tolerance(self, name: str) -> tuple[float, float]:
        """(relative, absolute) tolerance the lab states for answer ``name`` (probes.py ``TOLERANCES``: a relative
        one, or the pair; 0: none)."""
        stated = getattr(self.probes, "TOLERANCES", {}).get(name, 0.0) if self.probes is not None else 0.0
        rtol, atol = stated if isinstance(stated, (tuple, list)) else (stated, 0.0)
        return float(rtol), float(atol)

    def float32_accepted(self) -> set[str]:
        """The answers the lab lets compute in float32 (``FLOAT32_ACCEPTED`` in its probes)."""
        return set(getattr(self.probes, "FLOAT32_ACCEPTED", ()) if self.probes is not None else ())

    def probe_drivers(self, name: str) -> list[Callable]:
        if self.probes is None:
            return []
        return list(getattr(self.probes, "DRIVERS", {}).get(name, ()))

    def run_cell(self, cell: _Cell, namespace: dict, source: str | None = None) -> str | None:
        if cell.kind == "test":
            return decide_test_cell(self.plan, cell.gid, namespace)
        return run_cell(source if source is not None else cell.source, namespace)


def _close_figures():
    import matplotlib.pyplot as plt

    plt.close("all")


def _grade_in_child(run: LabRun, target: _Cell, namespace: dict, answer: str, seeds: int,
                    reference: str) -> dict:
    """In the forked child: the cell ``answer`` and the rest of the notebook graded; when it keeps
    full marks, the differential test against ``reference``. Returns the verdict's fields."""
    names = _defined_names(reference)
    recorder = _Recorder()
    reference_objects: dict = {}
    if answer != reference:
        scratch = dict(namespace)
        run_cell(reference, scratch)
        reference_objects = {n: scratch[n] for n in names if n in scratch}
    start = run.cells.index(target)
    own = set(run.own_tests(target))
    mutant_objects: dict = {}
    with seeded(0):
        for cell in run.cells[start:]:
            error = run.run_cell(cell, namespace, answer if cell is target else None)
            if cell is target:
                mutant_objects = {n: namespace[n] for n in names if n in namespace}
                for n, obj in mutant_objects.items():
                    if inspect.isfunction(obj):
                        namespace[n] = recorder.wrap(n, obj)
            _close_figures()
            if error and cell.kind == "test":
                return {"status": "killed", "reason": f"{cell.gid} (MLBOOK_SEED=0): {error.splitlines()[0][:300]}"}
    for seed in range(1, seeds):
        for cell in run.cells[start:]:
            if cell.gid in own:
                with seeded(seed):
                    error = run.run_cell(cell, namespace)
                _close_figures()
                if error:
                    return {"status": "killed", "reason": f"{cell.gid} (MLBOOK_SEED={seed}): {error.splitlines()[0][:300]}"}
    if answer == reference:
        return {"status": "reference"}
    # full marks: record the checks' calls on fresh seeds too, then replay every input on both
    for seed in FRESH_SEEDS:
        for cell in run.cells[start:]:
            if cell.gid in own:
                with seeded(seed):
                    run.run_cell(cell, namespace)
                _close_figures()
    recorder.on = False
    for name in names:
        ref, mut = reference_objects.get(name), mutant_objects.get(name)
        if ref is None and mut is None:
            continue
        rtol, atol = run.tolerance(name)
        differ = functools.partial(difference, rtol=rtol, atol=atol)  # the answer's stated tolerance
        if not callable(ref) or inspect.isclass(ref):
            found = None
            if not callable(ref):
                found = differ(ref, mut, name)
                if found:
                    return {"status": "survived", "reason": found, "distinguishing_input": f"the value {name}"}
            for driver in run.probe_drivers(name):
                for seed in (0, 1):
                    a = _drive(driver, ref, seed)
                    b = _drive(driver, mut, seed)
                    if found := differ(a, b, f"{driver.__name__}({name})"):
                        return {"status": "survived", "reason": found,
                                "distinguishing_input": f"probe {driver.__name__}, seed {seed}"}
            continue
        inputs: list[tuple[str, tuple, dict]] = []
        for args, kwargs in recorder.calls.get(name, []):
            inputs.append(("a call the checks made", args, kwargs))
            swapped = _other_precision((args, kwargs))
            if swapped is not None:
                inputs.append(("a call the checks made, in the other float precision", *swapped))
        for seed in (0, 1, 2):
            for args, kwargs in run.probe_inputs(name, seed):
                inputs.append((f"probe (seed {seed})", args, kwargs))
        float32_ok = name in run.float32_accepted()
        for k, (origin, args, kwargs) in enumerate(inputs):
            a, a_args, a_kwargs = _call(ref, args, kwargs, k)
            b, b_args, b_kwargs = _call(mut, args, kwargs, k)
            atol = float32_rounding(args, kwargs) if float32_ok else None
            found = differ(a, b, f"{name}(...)", float32_atol=atol) or differ((a_args, a_kwargs), (b_args, b_kwargs),
                                                                              f"{name}'s arguments after the call")
            if found:
                return {"status": "survived", "reason": found,
                        "distinguishing_input": f"{origin}: args={_describe(args, 600)} kwargs={_describe(kwargs, 200)}"}
        for driver in run.probe_drivers(name):
            for seed in (0, 1):
                if found := differ(_drive(driver, ref, seed), _drive(driver, mut, seed), f"{driver.__name__}({name})"):
                    return {"status": "survived", "reason": found,
                            "distinguishing_input": f"probe {driver.__name__}, seed {seed}"}
    return {"status": "equivalent"}


def _drive(driver: Callable, impl, seed: int):
    import torch

    torch.manual_seed(seed)
    try:
        with quiet():
            return driver(impl, seed)
    except Exception as exc:  # noqa: BLE001
        return Raised(type(exc).__name__)


def _forked(work: Callable[[], dict], timeout: float) -> dict:
    """``work()`` in a forked child, its dict sent back over a pipe; killed after ``timeout`` seconds."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        try:
            result = work()
        except BaseException as exc:  # noqa: BLE001
            result = {"status": "killed", "reason": f"the run died: {type(exc).__name__}: {exc}",
                      "trace": traceback.format_exc()[-2000:]}
        data = json.dumps(result).encode()
        with os.fdopen(write_end, "wb") as out:
            out.write(data)
        os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"status": "killed", "reason": f"timeout: still running after {timeout:.0f} s"}
            ready, _, _ = select.select([pipe], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return {"status": "killed", "reason": f"the run died (wait status {status})"}
    return json.loads(b"".join(chunks))


def analyse_lab(course: Course, lab: str, functions: Iterable[str] | None = None, limit: int | None = None,
                seeds: int = 3, timeout: float | None = None,
                progress: Callable[[str], None] | None = None) -> list[FunctionReport]:
    """Every first-order mutant of the lab's graded answers (or of those named), graded and classified.

    Args:
        functions: answer cells (grade_id) or functions defined in them to analyse; all when None.
        limit: at most this many mutants per answer cell, spread evenly over its mutants.
        seeds: the cell's own test cells run on MLBOOK_SEED 0 .. seeds-1 (the rest of the notebook on 0).
        timeout: seconds a mutant may run; by default 5 x the reference's run from that cell plus 20.
    Returns:
        one report per analysed answer cell, with each mutant's verdict.
    """
    import matplotlib
    import torch

    matplotlib.use("Agg")
    torch.set_num_threads(1)
    run = LabRun(course, lab)
    wanted = set(functions) if functions else None
    say = progress or (lambda _text: None)
    chosen = [c for c in run.answer_cells()
              if wanted is None or c.gid in wanted or set(_defined_names(c.source)) & wanted]
    if wanted is not None and not chosen:
        from mlbook.errors import MlbookError

        names = ", ".join(c.gid for c in run.answer_cells())
        raise MlbookError(f"{lab} has no answer cell or function {sorted(wanted)}; its answer cells: {names}")
    # An answer cell no graded test cell follows (an extension without points) costs no points whatever it
    # holds: its mutants would all "survive". It is named and left out.
    for c in [c for c in chosen if not any(t.kind == "test" for t in run.cells[run.cells.index(c) + 1:])]:
        say(f"{run.lab} {c.gid}: ungraded (no graded test cell follows it): not analysed")
        chosen.remove(c)
    if not chosen:
        return []
    last = max(run.cells.index(c) for c in chosen)
    namespace: dict = {"__name__": "__main__"}
    reports: list[FunctionReport] = []
    with seeded(0):
        for cell in run.cells[:last + 1]:
            if cell in chosen:
                reports.append(_analyse_cell(run, cell, namespace, limit, seeds, timeout, say))
            run.run_cell(cell, namespace)
            _close_figures()
    return reports


def _analyse_cell(run: LabRun, cell: _Cell, namespace: dict, limit, seeds, timeout, say) -> FunctionReport:
    # the child gets the parent's namespace as it is before this cell, by fork
    mutants = cell_mutants(cell.gid, cell.authored)
    if limit is not None and len(mutants) > limit:
        step = len(mutants) / limit
        mutants = [mutants[int(i * step)] for i in range(limit)]
    functions = sorted({m.function for m in mutants}) or [cell.gid]
    report = FunctionReport(run.lab, cell.gid, ", ".join(functions), mutants=len(mutants))
    started = time.monotonic()
    base = _forked(lambda: _grade_in_child(run, cell, namespace, cell.source, seeds, cell.source), 3600)
    reference_seconds = time.monotonic() - started
    if base["status"] != "reference":
        from mlbook.errors import MlbookError

        raise MlbookError(f"{run.lab}: the reference loses points in-process from {cell.gid} on: {base.get('reason')}"
                          f"{base.get('trace', '')}")
    limit_seconds = timeout or 5 * reference_seconds + 20
    say(f"{run.lab} {cell.gid}: {len(mutants)} mutants (reference from here {reference_seconds:.1f} s)")
    for mutant in mutants:
        t0 = time.monotonic()
        answer = without_delimiters(mutant.source)
        result = _forked(lambda: _grade_in_child(run, cell, namespace, answer, seeds, cell.source), limit_seconds)
        verdict = Verdict(mutant.name, mutant.function, mutant.operator, result["status"], result.get("reason", ""),
                          mutant.diff(cell.authored), result.get("distinguishing_input", ""), time.monotonic() - t0)
        report.verdicts.append(verdict)
        setattr(report, verdict.status, getattr(report, verdict.status) + 1)
        if verdict.status != "killed":
            say(f"  {verdict.status}: {mutant.name}\n    {verdict.diff.replace(chr(10), chr(10) + '    ')}"
                + (f"\n    {verdict.reason}\n    input: {verdict.distinguishing_input}" if verdict.status == "survived" else ""))
    report.seconds = time.monotonic() - started
    return report


def as_json(reports: list[FunctionReport]) -> list[dict]:
    return [asdict(r) for r in reports]
