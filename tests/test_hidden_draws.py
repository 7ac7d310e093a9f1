"""Hidden checks give the same verdict on every draw of their fresh inputs.

Grading draws new inputs on every run, so a tolerance that is wrong on one draw in a few
hundred fails a correct student now and then (it happened to lab 1's float32 alternative:
one draw in 300). Here every correct solution must pass every test cell, and every mutant
must fail the cells it names with a message that names its misconception, on many seeded
draws, run in-process (no sandbox; each cell decided by the judge over the wire, as in grading:
``draws``), so such a tolerance fails CI deterministically instead of grading unfairly at random.
This covers every entry of every catalogue (alternatives packed several to a solution, as the
sandboxed harness packs them; ``MLBOOK_CATALOGUE=full`` draws each alone); the sandboxed pipeline
(``test_lab_grading``) grades the reference and a sample that reaches every check. How many seeds
each cell runs on is fixed (``draws.draw_count``, from the costs frozen in ``draw_costs``), so
the same seeds run on every machine. To refresh the costs after a check changes its price: time
one draw of each test cell of the reference solution in-process and list those over 2 ms.
"""

from __future__ import annotations

import os

import pytest

from draws import failing_draws, members, solutions
from harness import LABS
from mlbook.labs import load_catalogue

# Per test cell, for cheap checks (a costly one, which trains a model, gets at least 10). A tolerance
# wrong on one draw in 300 fails a given cell here with probability 1 - (299/300)^120 = 0.33, and
# with 0.55 somewhere among a lab's alternatives when two of them share it; 250 draws cost CI about
# 10 more minutes (``MLBOOK_DRAWS=250`` draws more, and every grading run is a draw as well).
CORRECT_DRAWS = int(os.environ.get("MLBOOK_DRAWS", "120"))
MUTANT_DRAWS = 12


def _solution_params():
    return [pytest.param(lab, name, id=f"{lab}-{name}") for lab in LABS for name in solutions(lab)]


def _mutant_params():
    return [pytest.param(lab, m, id=f"{lab}-{m.name}") for lab in LABS for m in load_catalogue(lab).mutants]


@pytest.mark.parametrize(("lab", "solution"), _solution_params())
def test_correct_solutions_pass_every_check_on_every_draw(lab, solution):
    failures, ran = failing_draws(lab, solutions(lab)[solution], CORRECT_DRAWS)
    assert ran, f"{lab} has no test cells to draw for"
    assert not failures, (
        f"{solution} ({members(lab, solution)}) of {lab} failed {len(failures)} draws; first: "
        + "; ".join(map(str, failures[:3]))
        + ". Loosen that check's tolerance for this kind of correct answer, or fix the check.")


@pytest.mark.parametrize(("lab", "mutant"), _mutant_params())
def test_mutants_fail_their_cells_naming_the_misconception_on_every_draw(lab, mutant):
    answers = {**solutions(lab)["reference"], **mutant.cells}
    failures, ran = failing_draws(lab, answers, MUTANT_DRAWS, cells=mutant.must_fail, seconds_per_cell=0.25)
    assert set(ran) == set(mutant.must_fail), f"no test cells {set(mutant.must_fail) - set(ran)} in {lab}"
    failed = {(f.cell, f.seed) for f in failures}
    slipped = [(cell, seed) for cell, n in ran.items() for seed in range(n) if (cell, seed) not in failed]
    assert not slipped, (
        f"mutant {mutant.name} ({mutant.misconception}) passed {len(slipped)} (cell, MLBOOK_SEED) pairs it must "
        f"fail, e.g. {slipped[:3]}: a check this misconception can pass by luck of the draw.")
    unnamed = [f for f in failures if f.cell in mutant.must_fail and not mutant.matches(f.message)]
    assert not unnamed, (
        f"mutant {mutant.name} ({mutant.misconception}) fails without the message naming it (wanted "
        f"/{mutant.message}/) on {len(unnamed)} draws, e.g. {unnamed[0]}: feedback a student cannot act on.")
