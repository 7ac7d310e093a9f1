"""Hidden checks give the same verdict on every draw of their fresh inputs.

Grading draws new inputs on every run, so a tolerance that is wrong on one draw in a few
hundred fails a correct student now and then (it happened to lab 1's float32 alternative:
one draw in 300). Here every correct solution must pass every test cell, and every mutant
must fail the cells it names, on many seeded draws, run in-process (no kernel), so such a
tolerance fails CI deterministically instead of grading unfairly at random. How many seeds
each cell runs on is fixed (``draws.draw_count``, from the costs frozen in ``draw_costs``), so
the same seeds run on every machine. To refresh the costs after a check changes its price: time
one draw of each test cell of the reference solution in-process and list those over 2 ms.
"""

from __future__ import annotations

import pytest

from draws import failing_draws, solutions
from harness import LABS
from mlbook.authoring.catalogue import load_catalogue

CORRECT_DRAWS = 250  # per test cell for cheap checks; a costly one (it trains a model) gets at least 10
MUTANT_DRAWS = 25


def _solution_params():
    return [pytest.param(lab, name, id=f"{lab}-{name}") for lab in LABS for name in solutions(lab)]


def _mutant_params():
    return [pytest.param(lab, m, id=f"{lab}-{m.name}") for lab in LABS for m in load_catalogue(lab).mutants]


@pytest.mark.parametrize(("lab", "solution"), _solution_params())
def test_correct_solutions_pass_every_check_on_every_draw(lab, solution):
    failures, ran = failing_draws(lab, solutions(lab)[solution], CORRECT_DRAWS)
    assert ran, f"{lab} has no test cells to draw for"
    assert not failures, (
        f"{solution} of {lab} failed {len(failures)} draws; first: "
        + "; ".join(f"{f.cell} with MLBOOK_SEED={f.seed}: {f.message}" for f in failures[:3])
        + ". Loosen that check's tolerance for this kind of correct answer, or fix the check.")


@pytest.mark.parametrize(("lab", "mutant"), _mutant_params())
def test_mutants_fail_their_cells_on_every_draw(lab, mutant):
    answers = {**solutions(lab)["reference"], **mutant.cells}
    failures, ran = failing_draws(lab, answers, MUTANT_DRAWS, cells=mutant.must_fail, seconds_per_cell=0.25)
    assert set(ran) == set(mutant.must_fail), f"no test cells {set(mutant.must_fail) - set(ran)} in {lab}"
    failed = {(f.cell, f.seed) for f in failures}
    slipped = [(cell, seed) for cell, n in ran.items() for seed in range(n) if (cell, seed) not in failed]
    assert not slipped, (
        f"mutant {mutant.name} ({mutant.misconception}) passed {len(slipped)} (cell, MLBOOK_SEED) pairs it must "
        f"fail, e.g. {slipped[:3]}: a check this misconception can pass by luck of the draw.")
