"""One mistake, one loss (issue #44, item 3), pinned on lab 1 (benchmarks/cascade.py measures every lab).

Each catalogue mutant of an answer that another answer calls (softmax_rows, attention) is run as
grading runs it. Its mistake may cost points outside its own cells only in a visible test that calls
the student's own function by the lab's design, and that cell's message must then say which
function to fix first; no hidden cell of another answer fails (its check lends the grader's version),
no given cell raises, and the class report lists the mutant's own misconception and none of another
answer's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from mlbook.labs import load_catalogue

LAB = "lab01_hand_attention"
CALLED = {"softmax_rows", "attention"}  # the answers of lab 1 that other answers call


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cascade.py"
    spec = importlib.util.spec_from_file_location("cascade_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def costs():
    return _bench().costs(LAB, CALLED)


def test_a_called_answers_mistake_fails_no_other_answers_hidden_cell_and_no_given_cell(costs):
    assert costs, "lab 1 has no mutant of softmax_rows or attention"
    for cost in costs:
        assert not [g for g in cost.elsewhere if g.endswith("_hidden")], (cost.mutant, cost.elsewhere)
        assert not cost.broken, (cost.mutant, cost.broken)


def test_a_visible_cell_failing_for_another_answers_mistake_names_that_answer_to_fix_first(costs):
    for cost in costs:
        for gid, message in cost.messages.items():
            assert f"if {cost.answer} fails its own test, fix it first" in message, (cost.mutant, gid, message)


def test_the_report_lists_the_mutants_own_misconception_and_no_other_answers(costs):
    answer_of = {m.name: next(iter(m.cells)) for m in load_catalogue(LAB).mutants}
    for cost in costs:
        assert not cost.missed, cost.mutant
        assert all(answer_of[m] == cost.answer for m in cost.wrong), (cost.mutant, cost.wrong)
