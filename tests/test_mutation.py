"""``mlbook mutate``: the engine's operators, its classification, and one graded function per lab.

The full analysis (every answer cell of every lab) is a documented command (docs/mutation.md);
here one cheap answer cell per lab must have no survivor, so a check that stops telling a wrong
answer from the reference fails CI.
"""

from __future__ import annotations

import pytest

from harness import REPO
from mlbook.mutation.engine import Raised, analyse_lab, difference, float32_rounding
from mlbook.mutation.operators import cell_mutants

TINY = '''import torch
def f(x, t, mask):
    """Doc."""
    ### BEGIN SOLUTION
    w = torch.softmax(x, dim=-1)  # (T, T)
    w = w.masked_fill(mask, 0.0)  # (T, T)
    y = w[:, :t] * 2 + 1  # (T, t)
    return y if t > 0 else torch.matmul(w, x)
    ### END SOLUTION
'''


def test_the_engine_makes_every_operator_class_the_issue_names():
    made = {m.operator for m in cell_mutants("f", TINY)}
    # mutmut's: arithmetic/comparison swaps, constants, arguments dropped, assignments, ternaries
    assert {"swap_op", "number", "arg_removal", "assignment", "if_exp"} <= made
    # the four labelled additions
    assert {"dim_changed", "slice_bound_shifted", "statement_removed", "call_arguments_swapped"} <= made


def test_only_the_solution_region_is_mutated():
    lines = {m.line for m in cell_mutants("f", TINY)}
    assert lines and min(lines) >= 5 and max(lines) <= 8


def test_difference_sees_a_changed_output_and_not_an_equal_one():
    import torch

    x = torch.arange(6.0).reshape(2, 3)
    assert difference(x, x.clone()) is None
    assert difference(x, x + 1e-3) is not None
    assert difference(x, x.double()) is not None  # the dtype is part of the output
    assert difference(Raised("ValueError"), Raised("ValueError")) is None
    assert difference(Raised("ValueError"), x) is not None


def test_a_stated_tolerance_admits_what_the_check_accepts_and_no_more():
    import torch

    from mlbook.labs.lab02_scaling.hidden.temperature import TAU_RTOL
    from mlbook.labs.lab02_scaling.probes import TOLERANCES

    assert TOLERANCES["learn_temperature"] == TAU_RTOL  # the check's own constant, not a second number
    tau = 0.8783701322853983
    assert difference(tau, tau * (1 + 1e-8)) is not None  # a float32 learner's tau: a difference by default
    assert difference(tau, tau * (1 + 1e-8), rtol=TAU_RTOL) is None  # ... and none at the lab's tolerance
    assert difference(tau, tau * (1 + 3 * TAU_RTOL), rtol=TAU_RTOL) is not None
    x = torch.ones(3, dtype=torch.float64)
    assert difference([x], [x * (1 + 1e-7)]) is not None and difference([x], [x * (1 + 1e-7)], rtol=1e-5) is None
    # measured counts (lab 6's memory_sweep peaks, in bytes): exact by default, within a stated tolerance
    from mlbook.labs.lab06_chunked_attention.hidden.sweep import PEAK_RTOL, PEAK_SLACK
    from mlbook.labs.lab06_chunked_attention.probes import TOLERANCES as LAB06

    assert LAB06["memory_sweep"] == (PEAK_RTOL, PEAK_SLACK)  # the check's own constants
    assert difference([161546, 641543], [161412, 641476]) is not None
    assert difference([161546, 641543], [161412, 641476], rtol=PEAK_RTOL) is None
    assert difference([2277], [2780], rtol=PEAK_RTOL) is not None  # a few hundred bytes of noise on a small peak
    assert difference([2277], [2780], rtol=PEAK_RTOL, atol=PEAK_SLACK) is None
    assert difference([161546], [2 * 161546], rtol=PEAK_RTOL, atol=PEAK_SLACK) is not None
    assert difference(True, 1, rtol=PEAK_RTOL) is None and difference(True, False, rtol=PEAK_RTOL) is not None


def test_an_answer_cell_no_graded_cell_follows_is_left_out():
    # lab 6's timing_answers (an extension without points) is followed by no graded test cell
    assert analyse_lab(REPO, "lab06_chunked_attention", functions=["timing_answers"]) == []


def test_an_answer_the_lab_lets_compute_in_float32_is_compared_at_float32_rounding():
    import numpy as np

    x = np.linspace(0.0, 1.0, 6).reshape(2, 3)  # (2, 3) float64
    rounded = x.astype(np.float32)  # (2, 3): the same values in float32
    assert difference(x, rounded) is not None  # by default the dtype is part of the output
    assert difference(x, rounded, float32_atol=1e-5) is None
    assert difference((x, x), (rounded, x + 1e-9), float32_atol=1e-5) is None
    assert difference(x, x + 1e-3, float32_atol=1e-5) is not None  # a real change still shows
    assert difference(x, x[:1], float32_atol=1e-5) is not None  # and so does another shape
    assert float32_rounding((np.full(3, 3000.0),), {}) > float32_rounding((np.ones(3),), {}) >= 1e-5


# one cheap answer cell per lab, analysed in full by its own checks
ONE_PER_LAB = [("lab01_hand_attention", "project_qkv"), ("lab02_scaling", "effective_keys"),
               ("lab03_masks", "causal_mask"), ("lab04_transformer_block", "split_heads"),
               ("lab05_entropy_collapse", "attention_entropy"), ("lab06_chunked_attention", "attention_matrix_bytes")]


@pytest.mark.parametrize(("lab", "cell"), ONE_PER_LAB, ids=[c for _, c in ONE_PER_LAB])
def test_one_graded_function_per_lab_has_no_survivor(lab, cell):
    (report,) = analyse_lab(REPO, lab, functions=[cell], seeds=2)
    assert report.mutants > 0 and report.killed > 0
    assert report.killed + report.equivalent + report.survived == report.mutants
    survivors = [v for v in report.verdicts if v.status == "survived"]
    assert not survivors, "\n".join(f"{v.mutant}\n{v.diff}\n{v.reason}\n{v.distinguishing_input}" for v in survivors)
