"""Every hidden check of labs 1-5 fails closed.

A student's kernel is hostile, so whatever one of their functions returns may be NaN, inf, of
another shape or dtype, empty, a string, None, a complex or boolean array, a ragged list, a
number where an array belongs (or the reverse), a huge array, or an object that is not data
at all. A check must answer every such value with a ``Misconception`` that says what came back:
never pass it (``abs(x - want) > tol`` is False for NaN), and never crash on it with another
exception.

Each hidden test cell's call ``hidden.check_x(f, g, ...)`` is made here in-process (no kernel,
as ``tests/draws.py`` runs cells), with the reference solution's functions, except one: it is
wrapped so that its answer is the reference's answer made hostile (``_poison``). A class (a
torch module) is wrapped so that its ``forward`` is, and a function that changes a model in
place (the answer a check reads is the model) leaves NaN or inf in the model's weights instead.
A control runs every check through the same harness unpoisoned: it must pass.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import io
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from draws import _authored, solutions
from harness import LABS
from mlbook.labs import kit
from mlbook.authoring.notebooks import BEGIN_HIDDEN, END_HIDDEN, grade_id, is_answer, is_test
from mlbook.judge.remote import RemoteError, RemoteObject
from mlbook_helpers import checks
from mlbook_helpers.checks import Misconception

CHECKED_LABS = [lab for lab in LABS if lab.startswith(("lab01", "lab02", "lab03", "lab04", "lab05"))]

# Answers a check only consults to explain another failure (check_mha asks split_heads and
# merge_heads only once the attention is already wrong): a hostile one changes no verdict.
DIAGNOSTIC_ONLY = {("check_mha", "split_heads"), ("check_mha", "merge_heads")}
# Functions whose answer is the model they change in place; the check reads the model, not
# what they return.
RETURN_IGNORED = {"scale_qk_init", "load_from_torch"}
# Functions that change a model in place AND return an answer the check reads.
STATEFUL = RETURN_IGNORED | {"train_copy_task"}


# --------------------------------------------------------------------------- the calls under test


@dataclass(frozen=True)
class Case:
    lab: str
    cell: str  # the hidden test cell's grade_id
    check: str  # the hidden module's function
    args: tuple[str, ...]  # the notebook names it is called with, in order
    target: str  # the one argument made hostile

    def __str__(self) -> str:
        return f"{self.lab[:5]}-{self.check}-{self.target}"


def _hidden_calls(lab: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(cell, check, argument names) of every ``hidden.check_*(...)`` call in the lab's hidden blocks."""
    calls = []
    for cell in _authored(lab).cells:
        if cell.cell_type != "code" or not is_test(cell) or BEGIN_HIDDEN not in cell.source:
            continue
        block = cell.source.split(BEGIN_HIDDEN, 1)[1].split(END_HIDDEN, 1)[0]
        for node in ast.walk(ast.parse(block)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "hidden"):
                assert not node.keywords and all(isinstance(a, ast.Name) for a in node.args), (
                    f"{lab} {grade_id(cell)}: hidden checks are called with the notebook's names only")
                calls.append((grade_id(cell), node.func.attr, tuple(a.id for a in node.args)))
    return calls


def _cases(kinds: str) -> list[pytest.param]:
    """Every (check, argument) pair that ``kinds`` ("return" or "state") of poison applies to."""
    params = []
    for lab in CHECKED_LABS:
        for cell, check, args in _hidden_calls(lab):
            for target in dict.fromkeys(args):
                if (check, target) in DIAGNOSTIC_ONLY:
                    continue
                if target in (RETURN_IGNORED if kinds == "return" else set(args) - STATEFUL):
                    continue
                case = Case(lab, cell, check, args, target)
                params.append(pytest.param(case, id=str(case)))
    return params


@functools.cache
def _reference(lab: str) -> dict:
    """The reference solution's namespace: the notebook's code cells up to its last answer cell
    (test cells without their hidden blocks: given cells may read what a visible test defines)."""
    import matplotlib

    matplotlib.use("Agg")
    nb = _authored(lab)
    answers = solutions(lab)["reference"]
    last = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and is_answer(c))
    namespace: dict = {"__name__": "__main__"}
    for cell in nb.cells[:last + 1]:
        if cell.cell_type != "code":
            continue
        source = answers.get(grade_id(cell), cell.source) if is_answer(cell) else cell.source
        if BEGIN_HIDDEN in source:
            source = source.split(BEGIN_HIDDEN, 1)[0] + source.split(END_HIDDEN, 1)[1]
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(source, f"<{lab} {grade_id(cell)}>", "exec"), namespace)  # noqa: S102 - the course's cells
    import matplotlib.pyplot as plt

    plt.close("all")
    return namespace


# --------------------------------------------------------------------------- hostile answers


class _KernelWithoutData:
    """A session in which the student's function returned an arbitrary object: every question
    about it fails as it would in the kernel (no attribute, no length, not callable)."""

    def request(self, op: str, target: Any = None, **fields: Any) -> Any:
        if op == "getattr":
            raise RemoteError("AttributeError", f"'Thing' object has no attribute {fields.get('name')!r}")
        raise RemoteError("TypeError", f"'Thing' object does not support {op}")


def _is_numeric_list(x: Any) -> bool:
    """A (nested) list or tuple of plain numbers: an answer in its own right, like an array."""
    return isinstance(x, (list, tuple)) and all(
        type(v) in (bool, int, float) or _is_numeric_list(v) for v in x) and checks.data_array(x) is not None


def _is_leaf(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, torch.Tensor, bool, int, float)) or _is_numeric_list(x)


def _leaves(x: Any) -> list:
    if _is_leaf(x):
        return [x]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return []


def _like(leaf: Any, arr: np.ndarray) -> Any:
    """``arr`` in the container ``leaf`` came in: a tensor, a list, a number or an array."""
    if isinstance(leaf, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(arr))
    if isinstance(leaf, (list, tuple)) or isinstance(leaf, (bool, int, float)):
        return arr.tolist()
    return arr


def _hostile_leaf(leaf: Any, kind: str, inject: bool) -> Any:
    """One number or array of the right answer, made hostile."""
    a = checks.data_array(leaf)
    flo = a.astype(np.float64)
    if kind in ("nan", "inf"):
        return _like(leaf, np.full(a.shape, np.nan if kind == "nan" else np.inf))
    if kind == "one_nan":
        if not inject:
            return leaf
        out = flo.copy()
        if out.size:
            out.flat[out.size // 2] = np.nan
        return _like(leaf, out)
    if kind == "shape":
        if a.ndim == 0:
            return _like(leaf, np.array([flo, flo]).astype(a.dtype)) if not isinstance(leaf, (bool, int, float)) else [leaf, leaf]
        cut = a[..., :-1] if a.shape[-1] > 1 else np.concatenate([a, a], axis=-1)
        return _like(leaf, cut)
    if kind == "empty":
        return _like(leaf, np.zeros((0,), dtype=a.dtype)) if a.ndim else []
    if kind == "strings":
        return a.astype(str).tolist()
    if kind == "bool":
        if a.dtype.kind == "b":  # a float (0.0 / 1.0) where a truth value belongs
            return _like(leaf, flo) if a.ndim else float(flo)
        flags = flo > np.median(flo) if a.size else flo.astype(bool)
        return _like(leaf, flags) if a.ndim or not isinstance(leaf, (bool, int, float)) else bool(flags)
    if kind == "complex":
        return _like(leaf, flo + 1e-3j) if a.ndim else complex(flo) + 1e-3j
    if kind == "scalar":  # a number for an array, an array for a number
        return float(flo.mean()) if a.ndim else np.array([flo])
    if kind == "ragged":
        flat = flo.ravel().tolist()
        return [flat[:1], flat + [0.0]]
    if kind == "huge":
        return np.zeros(4_000_000, dtype=a.dtype if a.dtype.kind in "biuf" else np.float64)
    raise ValueError(kind)


def _poison(answer: Any, kind: str) -> Any:
    """The right ``answer`` made hostile: every number or array in it (one NaN injected into each
    array, or into the last number when it holds no array, for "one_nan"), or the whole answer
    replaced ("none", "object")."""
    if kind == "none":
        return None
    if kind == "object":
        return RemoteObject(_KernelWithoutData(), 1)
    leaves = _leaves(answer)
    arrays = [leaf for leaf in leaves if checks.data_array(leaf).ndim]
    chosen = {id(leaf) for leaf in arrays} if arrays else ({id(leaves[-1])} if leaves else set())

    def walk(x: Any) -> Any:
        if _is_leaf(x):
            return _hostile_leaf(x, kind, inject=id(x) in chosen)
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v) for v in x)
        return x

    return walk(answer)


def _spoil_model(model: torch.nn.Module, kind: str) -> None:
    """Leave NaN or inf in a model's weights, as a training loop or an in-place edit gone wrong would."""
    with torch.no_grad():
        params = list(model.parameters())
        if kind == "state_one_nan":
            params[0].view(-1)[params[0].numel() // 2] = float("nan")
        else:
            for p in params:
                p.fill_(float("nan") if kind == "state_nan" else float("inf"))


def _hostile(obj: Any, kind: str) -> Any:
    """The student's function, class or answer data, made to answer with ``kind``."""
    if inspect.isclass(obj):
        assert issubclass(obj, torch.nn.Module), f"no way to poison the class {obj.__name__}"
        forward = obj.forward
        return type(obj.__name__, (obj,), {"forward": lambda self, *a, **k: _poison(forward(self, *a, **k), kind)})
    if not callable(obj):
        return _poison(obj, kind)
    if kind.startswith("state_"):
        def spoiling(*args: Any, **kwargs: Any) -> Any:
            result = obj(*args, **kwargs)
            _spoil_model(next(a for a in args if isinstance(a, torch.nn.Module)), kind)
            return result

        return spoiling

    @functools.wraps(obj)
    def hostile(*args: Any, **kwargs: Any) -> Any:
        return _poison(obj(*args, **kwargs), kind)

    return hostile


def _run(case: Case, kind: str | None) -> None:
    namespace = _reference(case.lab)
    hidden = importlib.import_module(f"mlbook.labs.{case.lab}.hidden")
    args = [_hostile(namespace[name], kind) if kind and name == case.target else namespace[name] for name in case.args]
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        getattr(hidden, case.check)(*args)


def _fails_closed(case: Case, kind: str, monkeypatch) -> None:
    monkeypatch.setenv("MLBOOK_SEED", "0")
    try:
        _run(case, kind)
    except Misconception as exc:
        message = str(exc)
        assert ": " in message and message.strip(), f"{case} on a {kind} answer: a message without what/observed: {message!r}"
        return
    except Exception as exc:  # noqa: BLE001 - the failure under test
        pytest.fail(f"{case.check} crashed on a {kind} answer from {case.target} instead of naming it: "
                    f"{type(exc).__name__}: {exc}", pytrace=False)
    pytest.fail(f"{case.check} PASSED a {kind} answer from {case.target} (cell {case.cell} of {case.lab})", pytrace=False)


RETURN_CASES, STATE_CASES = _cases("return"), _cases("state")


# --------------------------------------------------------------------------- the control


@pytest.mark.parametrize("case", RETURN_CASES + [c for c in STATE_CASES if c.values[0].target in RETURN_IGNORED])
def test_the_right_answer_passes_every_check_through_the_same_harness(case, monkeypatch):
    monkeypatch.setenv("MLBOOK_SEED", "0")
    _run(case, None)


def test_every_check_of_labs_1_to_5_is_called_by_a_hidden_cell():
    for lab in CHECKED_LABS:
        hidden = importlib.import_module(f"mlbook.labs.{lab}.hidden")
        public = {name for name, fn in vars(hidden).items()  # hidden.py, or hidden/ and its modules
                  if name.startswith("check_") and inspect.isfunction(fn)
                  and (fn.__module__ == hidden.__name__ or fn.__module__.startswith(hidden.__name__ + "."))}
        assert public, f"{lab}: no check_* function found in {hidden.__name__}"
        called = {check for _, check, _ in _hidden_calls(lab)}
        assert public <= called, f"{lab}: checks no hidden cell calls, so not tested here: {sorted(public - called)}"


# --------------------------------------------------------------------------- hostile answers fail


@pytest.mark.parametrize("case", RETURN_CASES)
def test_a_nan_answer_fails_every_check(case, monkeypatch):
    _fails_closed(case, "nan", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_an_infinite_answer_fails_every_check(case, monkeypatch):
    _fails_closed(case, "inf", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_the_right_answer_with_one_nan_injected_fails_every_check(case, monkeypatch):
    _fails_closed(case, "one_nan", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_an_answer_of_the_wrong_shape_fails_every_check(case, monkeypatch):
    _fails_closed(case, "shape", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_an_empty_answer_fails_every_check(case, monkeypatch):
    _fails_closed(case, "empty", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_an_answer_of_strings_fails_every_check(case, monkeypatch):
    _fails_closed(case, "strings", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_booleans_for_numbers_and_numbers_for_booleans_fail_every_check(case, monkeypatch):
    _fails_closed(case, "bool", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_a_complex_answer_fails_every_check(case, monkeypatch):
    _fails_closed(case, "complex", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_none_fails_every_check(case, monkeypatch):
    _fails_closed(case, "none", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_a_number_for_an_array_or_an_array_for_a_number_fails_every_check(case, monkeypatch):
    _fails_closed(case, "scalar", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_an_object_that_is_not_data_fails_every_check(case, monkeypatch):
    _fails_closed(case, "object", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_a_ragged_nested_list_fails_every_check(case, monkeypatch):
    _fails_closed(case, "ragged", monkeypatch)


@pytest.mark.parametrize("case", RETURN_CASES)
def test_a_huge_array_fails_every_check(case, monkeypatch):
    _fails_closed(case, "huge", monkeypatch)


@pytest.mark.parametrize("case", STATE_CASES)
def test_a_model_left_with_nan_weights_fails_every_check(case, monkeypatch):
    _fails_closed(case, "state_nan", monkeypatch)


@pytest.mark.parametrize("case", STATE_CASES)
def test_a_model_left_with_infinite_weights_fails_every_check(case, monkeypatch):
    _fails_closed(case, "state_inf", monkeypatch)


@pytest.mark.parametrize("case", STATE_CASES)
def test_a_model_with_one_nan_weight_fails_every_check(case, monkeypatch):
    _fails_closed(case, "state_one_nan", monkeypatch)


# --------------------------------------------------------------------------- the primitives


NOT_DATA = [None, "0.5", ["0.5", "0.25"], {"a": 1.0}, object(), [[1.0], [1.0, 2.0]], np.array([1 + 1j]),
            RemoteObject(_KernelWithoutData(), 1)]


def test_close_is_false_whenever_the_comparison_cannot_be_made():
    want = np.array([0.5, 0.25])
    assert kit.close(want.copy(), want)
    assert kit.close(torch.tensor([0.5, 0.25]), want)
    for got in NOT_DATA + [np.array([np.nan, 0.25]), np.array([np.inf, 0.25]), np.array([0.5]), 0.5,
                           np.array([True, False]), np.zeros((0,))]:
        assert not kit.close(got, want), f"close() accepted {got!r}"
    assert not kit.close(np.array([np.nan]), np.array([np.nan])), "a NaN reference matches nothing by default"
    assert kit.close(np.array([np.nan]), np.array([np.nan]), equal_nan=True), "unless the check means it"
    assert kit.close(np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0])), "the same infinity is equal"
    assert not kit.close(np.array([np.inf]), np.array([-np.inf]))
    assert kit.close(np.array([True, False]), np.array([True, False])), "masks compare as masks"


def test_number_boolean_and_array_accept_only_what_they_name():
    assert kit.number(np.float32(0.5), "x") == 0.5
    assert kit.number(torch.tensor(2), "x") == 2.0
    assert kit.number(10**20, "x") == 1e20
    for bad in NOT_DATA + [float("nan"), float("inf"), True, np.array([0.5]), torch.tensor([0.5]), 1 + 0j]:
        with pytest.raises(Misconception, match=r"^x: got "):
            kit.number(bad, "x")
    assert kit.boolean(np.bool_(True), "x") is True
    assert kit.boolean(torch.tensor(False), "x") is False
    for bad in NOT_DATA + [float("nan"), 1, 1.0, np.array([True]), "True"]:
        with pytest.raises(Misconception, match=r"^x: returned "):
            kit.boolean(bad, "x")
    assert kit.array([[1.0, 2.0]], "x", shape=(1, 2)).dtype == np.float64
    for bad in NOT_DATA + [np.array([1.0, np.nan]), np.zeros((0,)), np.array([True, False]), np.array([1, 2])]:
        with pytest.raises(Misconception, match=r"^x: "):
            kit.array(bad, "x")
    with pytest.raises(Misconception, match=r"shape is \(2,\), expected \(3,\)"):
        kit.array([1.0, 2.0], "x", shape=(3,))
    with pytest.raises(Misconception, match=r"got an array of shape \(2,\) with 1 NaN among its 2 entries"):
        kit.array([1.0, float("nan")], "the entropy")


def test_the_rows_check_names_the_axis_a_softmax_normalised_over_instead():
    scores = np.random.default_rng(0).normal(size=(2, 3, 5))  # (B, T_q, T_k)
    e = np.exp(scores)
    cases = {"its columns sum to 1 instead": e / e.sum(axis=-2, keepdims=True),
             "the whole matrix sums to 1 instead": e / e.sum(axis=(-2, -1), keepdims=True)}
    for said, weights in cases.items():
        with pytest.raises(Misconception, match=said):
            checks.expect_rows_sum_to_one(weights, "x", "the hint.")
    with pytest.raises(Misconception) as failure:  # rows that sum to less than 1 (a mask after the softmax)
        checks.expect_rows_sum_to_one(np.tril(e / e.sum(axis=-1, keepdims=True)), "x", "the hint.")
    assert "instead" not in str(failure.value) and str(failure.value).endswith("the hint.")
    checks.expect_rows_sum_to_one(e / e.sum(axis=-1, keepdims=True), "x", "the hint.")


def test_the_visible_checks_fail_closed_too():
    hint = "the hint."
    for got in NOT_DATA + [np.array([np.nan, 1.0]), np.array([1.0])]:
        with pytest.raises(Misconception):
            checks.expect_close(got, [0.5, 1.0], "x", hint)
    with pytest.raises(Misconception):  # an expected NaN is matched by nothing
        checks.expect_close([0.5, 1.0], [0.5, float("nan")], "x", hint)
    with pytest.raises(Misconception):
        checks.expect_close([True, False], [1.0, 0.0], "x", hint)
    checks.expect_close([True, False], [True, False], "x", hint)
    with pytest.raises(Misconception):  # a nan is not inside the range of the values
        checks.expect_in_convex_hull([[np.nan, 0.0]], [[0.0, 0.0], [1.0, 1.0]], "x", hint)
    with pytest.raises(Misconception):  # a nan where a weight must be 0 is not 0
        checks.expect_zero_where_masked([[0.5, np.nan]], [[True, False]], "x", hint)
    for condition in (float("nan"), 1.0, np.array([True, True]), "yes", None):
        with pytest.raises(Misconception):
            checks.expect(condition, "x", "observed", hint)
    checks.expect(np.float64(0.1) < 0.5, "x", "observed", hint)
    checks.expect(torch.tensor(0.1) < 0.5, "x", "observed", hint)
    for bad in NOT_DATA + [np.zeros((0,)), 0.5]:
        with pytest.raises(Misconception):
            checks.expect_rows_sum_to_one(bad, "x", hint)
    with pytest.raises(Misconception):
        checks.expect_finite(np.zeros((0,)), "x", hint)
    with pytest.raises(Misconception):
        checks.expect_shape("abcd", (4,), "x", hint)
    with pytest.raises(TypeError):  # as_array converts data only: never a string or a complex number
        checks.as_array(["0.5"])
    with pytest.raises(TypeError):
        checks.as_array(np.array([1 + 1j]))
