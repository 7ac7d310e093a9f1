"""One mistake, one loss: lab 5's training cells grade the loop, not attention_entropy again.

train_copy_task logs attention_entropy. Its hidden check runs the loop with the grader's entropy in
place of the student's (``kit.given``, through ``mlbook_helpers.checks.called_given``), and its
visible test compares the step-0 log with the student's own attention_entropy, so each catalogue
mutant of attention_entropy keeps the training cells' points (issue #38).
"""

from __future__ import annotations

import pytest

from draws import failing_draws, solutions
from mlbook.labs import load_catalogue
from mlbook_helpers.checks import called_given

LAB = "lab05_entropy_collapse"
TRAINING_CELLS = ("test_train_copy_task", "test_train_copy_task_hidden")

seen = "the student's"


def _reads_a_global(x):
    return seen, x


def test_called_given_binds_the_name_for_the_call_only():
    assert called_given(_reads_a_global, {"seen": "the grader's"}, 1) == ("the grader's", 1)
    assert seen == "the student's"
    assert called_given(_reads_a_global, {"absent": 0}, 2) == ("the student's", 2)
    assert "absent" not in globals()


def test_called_given_restores_the_name_when_the_call_raises():
    def boom():
        raise ValueError(seen)

    with pytest.raises(ValueError, match="the grader's"):
        called_given(boom, {"seen": "the grader's"})
    assert seen == "the student's"


@pytest.mark.parametrize("name", [m.name for m in load_catalogue(LAB).mutants if "attention_entropy" in m.cells])
def test_a_wrong_attention_entropy_keeps_the_training_cells(name):
    mutant = next(m for m in load_catalogue(LAB).mutants if m.name == name)
    assert not set(TRAINING_CELLS) & set(mutant.must_fail)
    failures, ran = failing_draws(LAB, {**solutions(LAB)["reference"], **mutant.cells}, 2, cells=TRAINING_CELLS)
    assert set(ran) == set(TRAINING_CELLS)
    lost = [(f.cell, f.seed, f.message) for f in failures if f.cell in TRAINING_CELLS]  # the first pass reports every cell
    assert not lost, f"{name} ({mutant.misconception}) also loses {lost}"
    assert any(f.cell == "test_attention_entropy_hidden" for f in failures), f"{name} keeps its own cell"
