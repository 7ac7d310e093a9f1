"""One mistake, one loss (issue #44, item 3), pinned on labs 1 and 2 (benchmarks/cascade.py measures every lab).

Each catalogue mutant of an answer that another answer calls (lab 1's softmax_rows and attention,
lab 2's row_entropy, attention_scores and effective_keys), of the answers that call them, and of an
answer with two mistakes whose failures were once alike (lab 1's property checks, lab 2's collapse
experiment) is run as grading runs it. Its mistake costs no point outside its own cells (a visible
test of a function that calls it waits for it, ``mlbook_helpers.checks.works_first``, and the hidden
check lends the grader's version), no given cell raises, and the class report lists the mutant's own
misconception and no other.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from mlbook_helpers.checks import expect, works_first

# lab -> the answers whose single-cell mutants are run
ANSWERS = {
    "lab01_hand_attention": {"softmax_rows", "attention", "property_checks"},
    "lab02_scaling": {"row_entropy", "attention_scores", "effective_keys", "mean_effective_keys"},
}


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cascade.py"
    spec = importlib.util.spec_from_file_location("cascade_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=sorted(ANSWERS))
def costs(request):
    found = _bench().costs(request.param, ANSWERS[request.param])
    assert {c.answer for c in found} == ANSWERS[request.param], f"{request.param}: an answer has no single-cell mutant"
    return found


def test_a_mistake_costs_no_point_outside_its_own_cells_and_no_given_cell_raises(costs):
    for cost in costs:
        assert not cost.elsewhere, (cost.mutant, cost.messages)
        assert not cost.broken, (cost.mutant, cost.broken)


def test_the_report_lists_the_mutants_own_misconception_and_no_other(costs):
    for cost in costs:
        assert not cost.missed, cost.mutant
        assert not cost.wrong, (cost.mutant, cost.wrong)


def _softmax_rows_over_queries(S):
    return S / S.sum(axis=0)


def test_works_first_waits_for_a_wrong_answer_and_names_it_to_fix_first(capsys):
    import numpy as np

    S = np.array([[1.0, 2.0], [3.0, 4.0]])  # (2, 2)
    wrong = works_first("softmax_rows", lambda: expect(bool(np.allclose(_softmax_rows_over_queries(S).sum(axis=-1), 1)),
                                                       "rows of softmax_rows", "do not sum to 1"))
    assert wrong is False
    assert "if softmax_rows fails its own test, fix it first" in capsys.readouterr().out


def test_works_first_waits_for_an_answer_that_raises_and_passes_a_right_one(capsys):
    def raises():
        raise ValueError("shapes do not match")

    assert works_first("attention_scores", lambda: None, raises) is False
    assert "shapes do not match" in capsys.readouterr().out
    assert works_first("attention_scores", lambda: None, lambda: None) is True
    assert capsys.readouterr().out == ""
