"""Run a lab's test cells in-process on many seeded draws (no sandbox, no nbgrader).

Hidden checks draw fresh inputs on every grading run (``MLBOOK_SEED`` unset). A tolerance
that is right on most draws and wrong on a few shows up in real grading as a rare, unfair
failure. This module runs every test cell of a solution (the reference, or an alternative
from the lab's catalogue) once per seed, so such a tolerance fails a test deterministically.

It executes the notebook's code cells in one plain dict namespace, in order, in this process
(the kernel's part), and decides each test cell as grading does: the kernel runs the cell's
visible part, and the judge (``mlbook.judge.server.judge_cell``) runs the cell's trusted
source from the course's source notebook, reaching the namespace only through the wire
(``mlbook_kernel.wire``), over a socket pair, with the kernel's side answering from a thread.
So a result the wire changes, an argument the student's code modifies in place, an object the
check can only call: each behaves here as it does in grading. The cell passes when the kernel's
run raised nothing and the judge passed it. The seeds are fixed (0, 1, 2, ...), so a failure
here names the ``MLBOOK_SEED`` that reproduces it in real grading.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass

from mlbook.labs import load_catalogue
from mlbook.authoring.notebooks import grade_id, is_answer, is_test, read_authored, reference_answers
from mlbook.judge.plan import lab_plan
from mlbook.mutation.inprocess import DIRECT, decide_test_cell, judged, quiet, run_cell, seeded  # noqa: F401

from draw_costs import COSTS
from harness import REPO, packed


@dataclass(frozen=True)
class DrawFailure:
    cell: str  # the test cell's grade_id
    seed: int
    message: str  # the whole error, as the feedback would show it

    def __str__(self) -> str:
        return f"{self.cell} with MLBOOK_SEED={self.seed}: {self.message.splitlines()[0][:300]}"


@functools.cache
def _authored(lab: str):
    """The lab's source notebook, read once per process (callers do not modify it)."""
    return read_authored(REPO.authored(lab))


@functools.cache
def solutions(lab: str) -> dict[str, dict[str, str]]:
    """Solution name -> answer cell grade_id -> code: the reference, and every alternative.

    Alternatives are packed several to a solution as the sandboxed harness packs them
    (``harness.packed``: those rewriting different answer cells share one, named ``pack-<n>``),
    so that one run of the notebook and one set of draws serve them all; correct answers side by
    side are still correct, and a failure names the pack's members. ``MLBOOK_CATALOGUE=full``
    draws each alternative on its own.
    """
    reference = reference_answers(_authored(lab))
    out = {"reference": reference}
    alternatives = load_catalogue(lab).alternatives
    for alt in (alternatives if os.environ.get("MLBOOK_CATALOGUE") == "full" else packed(alternatives)):
        name = alt.name if alt.name.startswith("pack-") else f"alt-{alt.name}"
        out[name] = {**reference, **alt.cells}
    return out


def members(lab: str, solution: str) -> str:
    """The catalogue alternatives a solution of ``solutions(lab)`` holds, for a message."""
    for alt in packed(load_catalogue(lab).alternatives):
        if alt.name == solution:
            return alt.description
    return solution


# The in-process grading machinery lives in the package (``mlbook mutate`` grades mutants with it).
_seed, _quiet, _run, _judged, _test_cell = seeded, quiet, run_cell, judged, decide_test_cell


def draw_count(lab: str, cell: str, most: int, seconds_per_cell: float, least: int = 10) -> int:
    """How many seeds a test cell runs on: ``most`` for a cheap check (where tolerances bite),
    fewer for a costly one (a check that trains a model), from its cost frozen in
    ``draw_costs.COSTS``, never fewer than ``least``. The same on every machine."""
    cost = COSTS.get(lab, {}).get(cell)
    if cost is None:
        return most
    return max(least, min(most, int(seconds_per_cell / cost)))


def failing_draws(lab: str, answers: dict[str, str], draws: int, cells: Iterable[str] | None = None,
                  seconds_per_cell: float = 0.4) -> tuple[list[DrawFailure], dict[str, int]]:
    """Run a solution's notebook once, then its test cells on seeded draws.

    The first pass (``MLBOOK_SEED=0``) builds the namespace as a kernel would, up to the last test
    cell drawn (a cell after it cannot change a verdict). Then each test
    cell (or only those named in ``cells``) is re-run with seeds 1, 2, ... up to ``draw_count``
    seeds in all (at most ``draws``; fewer for a costly cell, about ``seconds_per_cell`` of its
    frozen cost). A solution that differs from the reference in some answer cells is drawn from
    the first of them on: the test cells above it run the reference's code on the reference's
    namespace (a cell reads what the cells above it define), which the reference's own draws
    cover, and run here in the first pass only.

    Returns:
        (the failing (cell, seed) pairs with their messages, cell -> how many seeds it ran on).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nb = _authored(lab)
    plan = lab_plan(lab, REPO.source(lab))
    namespace: dict = {"__name__": "__main__"}
    tests: list[str] = []
    failures: list[DrawFailure] = []
    wanted = None if cells is None else set(cells)
    # The last test cell drawn: the cells after it (given demos, ungraded timings) cannot change a verdict.
    last = max((i for i, c in enumerate(nb.cells) if is_test(c) and (wanted is None or grade_id(c) in wanted)),
               default=-1)
    reference = solutions(lab)["reference"]
    changed = [i for i, c in enumerate(nb.cells)
               if is_answer(c) and answers.get(grade_id(c), reference.get(grade_id(c))) != reference.get(grade_id(c))]
    first_changed = min(changed, default=0)  # the reference (nothing changed): every cell is drawn
    drawn: set[str] = set()
    with _seed(0):
        for i, cell in enumerate(nb.cells[:last + 1]):
            if cell.cell_type != "code":
                continue
            if is_test(cell):
                error = _test_cell(plan, grade_id(cell), namespace)
            else:
                error = _run(answers.get(grade_id(cell), cell.source) if is_answer(cell) else cell.source, namespace)
            plt.close("all")
            if is_test(cell):
                tests.append(grade_id(cell))
                if i >= first_changed:
                    drawn.add(grade_id(cell))
                if error:
                    failures.append(DrawFailure(grade_id(cell), 0, error))
    ran: dict[str, int] = {}
    for gid in tests:
        if (wanted is not None and gid not in wanted) or gid not in drawn:
            continue
        count = draw_count(lab, gid, draws, seconds_per_cell)  # seeds 0 (the first pass) to count - 1
        for seed in range(1, count):
            with _seed(seed):
                error = _test_cell(plan, gid, namespace)
            plt.close("all")
            if error:
                failures.append(DrawFailure(gid, seed, error))
        ran[gid] = count
    return failures, ran
