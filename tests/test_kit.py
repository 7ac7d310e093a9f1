"""The lab kit's whole steps of a check (``ask_*``, ``compare``, ``reproducible``) and its catalogue rows.

Each is called here in-process with plain functions standing in for a student's (in grading they
are kernel objects; the kit treats both alike), and must pass a right answer, fail a wrong one
with a message that names the mistake and quotes only the student's values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from mlbook.authoring.catalogue import resolve_cells
from mlbook.errors import MlbookError
from mlbook.labs import kit


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(kit.Misconception) as caught:
        fn(*args, **kwargs)
    return str(caught.value)


# ----------------------------------------------------------------------------- ask_*


def test_ask_array_reads_a_result_quietly_and_names_the_call_that_failed():
    def noisy(x):
        warnings.warn("a correct answer that warns")
        np.seterr(divide="warn")
        np.log(np.zeros(1))  # NumPy's divide-by-zero warning, as in w * np.log(w)
        return x

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = kit.ask_array(noisy, np.arange(3.0), what="noisy(x)")
    assert got.dtype == np.float64 and got.tolist() == [0.0, 1.0, 2.0]
    assert not seen, f"a student's warning reached the grader's stderr: {seen}"

    def unwritten(x):
        raise NotImplementedError()

    assert "unwritten(x): not implemented yet" in _message(kit.ask_array, unwritten, 1.0, what="unwritten(x)")
    assert "got the string" in _message(kit.ask_array, lambda x: "0.5", 1.0, what="f(x)")
    assert "shape is (2,), expected (3,)" in _message(kit.ask_array, lambda: np.zeros(2), what="f()", shape=(3,))


def test_ask_number_and_ask_boolean_pass_keyword_arguments_on_and_fail_closed():
    assert kit.ask_number(lambda a, scale=1.0: a * scale, 2.0, scale=3.0, what="f") == 6.0
    assert "got nan" in _message(kit.ask_number, lambda: float("nan"), what="f()").lower()
    assert kit.ask_boolean(lambda x: bool(x > 0), 1.0, what="g") is True
    assert "not True or False" in _message(kit.ask_boolean, lambda: 0.5, what="g()")


def test_ask_items_returns_exactly_n_items_and_fails_closed_on_any_other_count():
    assert kit.ask_items(lambda a, b=0: (a, b), 1, b=2, n=2, what="f", names="the pair (a, b)") == (1, 2)
    assert "returned a tuple of 3 items, not 2 items. Return the pair (a, b)." in _message(
        kit.ask_items, lambda: (1, 2, 3), n=2, what="f()", names="the pair (a, b)")
    assert "not 2 items" in _message(kit.ask_items, lambda: np.zeros(2), n=2, what="f()", names="(a, b)")
    assert "f(): not implemented yet" in _message(kit.ask_items, _unwritten, n=2, what="f()", names="(a, b)")


def _unwritten():
    raise NotImplementedError()


# ----------------------------------------------------------------------------- compare


def test_compare_passes_a_close_answer_and_diagnoses_a_known_mistake():
    want = np.array([[0.2, 0.8], [0.5, 0.5]])
    kit.compare(want + 1e-9, want, "f(S)", "Each row is a softmax.")
    message = _message(kit.compare, want.T.copy(), want, "f(S)", "Each row is a softmax.",
                       mistakes={"the rows were not mixed up": want * 2, "the softmax ran over axis 0": lambda: want.T})
    assert message.startswith("f(S): ") and message.endswith("The softmax ran over axis 0."), message
    assert "2 of 4 entries are off, e.g. 0.5 at index (0, 1)" in message, "it quotes the student's value"
    assert "0.8" not in message, "it never quotes the reference"


def test_compare_reports_shape_then_non_finite_entries_then_the_default_hint():
    want = np.ones((2, 3))
    assert "shape is (3, 2), expected (2, 3). Transposed." in _message(
        kit.compare, np.ones((3, 2)), want, "f", "hint", shape_hint=lambda shape: "transposed" if shape == (3, 2) else "")
    got = want.copy()
    got[1, 2] = np.nan
    assert "f: overflow. Subtract the max." in _message(kit.compare, got, want, "f", "hint",
                                                        nonfinite=("overflow", "subtract the max"))
    message = _message(kit.compare, want * 3, want, "f", "every entry is 1", observed=lambda g: f"sum {g.sum():g}")
    assert message == "f: sum 18. Every entry is 1.", message
    wider = _message(kit.compare, want * 1.01, want, "f", "hint", mistakes={"one percent too big": want * 1.02},
                     mistake_tol=(0.05, 0))
    assert wider.endswith("One percent too big."), "a mistake is recognised with its own tolerance"


# ----------------------------------------------------------------------------- reproducible


def test_reproducible_needs_every_random_number_from_the_generator_given():
    rng = np.random.default_rng(0)
    kit.reproducible(lambda g: float(g.standard_normal(3).sum()), "f(rng)", rng)
    assert "seeded alike returned" in _message(kit.reproducible, lambda g: float(np.random.standard_normal()),
                                               "f(rng)", rng)
    assert "rng argument seems to be ignored" in _message(kit.reproducible, lambda g: 1.5, "f(rng)", rng)


# ----------------------------------------------------------------------------- catalogue rows


def test_mutants_of_one_cell_share_its_tests_and_name_the_demo_ones():
    rows = [("a-mistake", "one idea", kit.patch("x", "y"), r"idea"), ("b-mistake", "another", kit.patch("z", "w"), r"w")]
    a, b = kit.mutants_of("cell", "test_cell", rows, also=("test_later",), demo={"b-mistake"})
    assert a.must_fail == b.must_fail == ("test_cell", "test_cell_hidden", "test_later")
    assert (a.name, a.cells, a.demo, b.demo) == ("a-mistake", {"cell": kit.patch("x", "y")}, False, True)
    with pytest.raises(ValueError, match="c-mistake"):
        kit.mutants_of("cell", "test_cell", rows, demo={"c-mistake"})



def test_mutants_of_an_exact_tuple_of_cells_fail_those_cells_only():
    rows = [("hidden-only", "a mistake the visible test cannot see", kit.patch("x", "y"), r"see")]
    (m,) = kit.mutants_of("cell", ("test_cell_hidden",), rows)
    assert m.must_fail == ("test_cell_hidden",)
    (m,) = kit.mutants_of("cell", ("test_cell_memory", "test_growth"), rows, also=("test_later",))
    assert m.must_fail == ("test_cell_memory", "test_growth", "test_later")

def test_a_patch_the_reference_no_longer_holds_fails_loudly():
    answers = {"cell": "scores = Q @ K.T / np.sqrt(d_k)\n"}
    assert resolve_cells({"cell": kit.patch("np.sqrt(d_k)", "d_k")}, answers, "m") == {"cell": "scores = Q @ K.T / d_k\n"}
    with pytest.raises(MlbookError, match="expects 1 occurrence.*finds 0"):
        resolve_cells({"cell": kit.patch("math.sqrt(d_k)", "d_k")}, answers, "m")
    with pytest.raises(MlbookError, match="expects 2 occurrence.*finds 1"):
        resolve_cells({"cell": kit.patch("K.T", "K", count=2)}, answers, "m")
