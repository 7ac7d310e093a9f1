"""One mistake, one loss (issue #44, item 3): what each catalogue mutant costs outside its own cells.

For every mutant of a lab's catalogue that rewrites ONE answer cell, the notebook is run in this
process as grading runs it (``mlbook.mutation.inprocess``: the kernel's cells in order, each test
cell decided by the judge; seed 0), and three things are counted:
- the points of failing test cells that are not the answer's own (``test_<answer>`` and
  ``test_<answer>_hidden``, or, for an answer without such cells, the cells the catalogue says the
  mutant must fail),
- the given cells (code the student runs but did not write) that raised, and
- the misconceptions the class report would list for that one submission
  (``mlbook.outputs.report.misconceptions.evidence``, the report's own rule): the mutant's own
  should be listed, alone; every other one listed is wrong, and the own one missing is counted too.
Printed per lab: mutants, how many cost points elsewhere, the points lost elsewhere in all, the
given cells that raised, the wrong misconceptions listed and the own ones missed, then each
mutant with a cost or a wrong diagnosis. Run:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cascade.py lab01 lab03
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mlbook.labs import load_catalogue  # noqa: E402
from mlbook.labs import load_catalogue
from mlbook.authoring.notebooks import grade_id, is_answer, is_test, nbgrader_meta, read_authored, reference_answers  # noqa: E402
from mlbook.course import Course  # noqa: E402
from mlbook.judge.plan import lab_plan  # noqa: E402
from mlbook.mutation.inprocess import decide_test_cell, quiet, run_cell, seeded  # noqa: E402
from mlbook.outputs.report.misconceptions import evidence  # noqa: E402
from mlbook.outputs.results import CellResult, SubmissionResult  # noqa: E402

REPO = Course(Path(__file__).resolve().parents[1])


@dataclass
class Cost:
    """What one single-cell mutant costs beyond its own cells."""

    mutant: str
    answer: str
    lost: float  # points of failing test cells that are not the answer's own
    elsewhere: list[str]  # those cells
    broken: list[str]  # given cells that raised
    wrong: list[str]  # other mutants' misconceptions the report lists
    missed: bool  # the mutant's own misconception is not listed
    messages: dict[str, str]  # each cell of ``elsewhere`` -> its failure message


def run_notebook(nb, plan, answers: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(failing test cell -> its message, given cells that raised) of one run of the notebook with ``answers``."""
    namespace: dict = {"__name__": "__main__"}
    failing, broken = {}, []
    with seeded(0), quiet():
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            gid = grade_id(cell)
            if is_test(cell):
                if (message := decide_test_cell(plan, gid, namespace)) is not None:
                    failing[gid] = message
            elif is_answer(cell):
                run_cell(answers.get(gid, cell.source), namespace)
            elif run_cell(cell.source, namespace):
                broken.append(gid or "a given cell")
            plt.close("all")
    return failing, broken


def listed(lab: str, points: dict[str, float], failing: dict[str, str], mutants) -> list[str]:
    """The catalogue mutants whose misconception the report lists for a submission failing ``failing``."""
    result = SubmissionResult(lab, "mutant", "graded", cells={
        gid: CellResult(gid, "auto", 0.0 if gid in failing else pts, pts, failing.get(gid, ""))
        for gid, pts in points.items()})
    return [m.name for m in mutants if evidence(result, m)]


def costs(lab: str, answers: set[str] | None = None) -> list[Cost]:
    """What each single-cell mutant of ``lab`` (of the answer cells ``answers``, None: all) costs beyond its own cells."""
    nb = read_authored(REPO.authored(lab))
    plan = lab_plan(lab, REPO.source(lab))
    points = {grade_id(c): float(nbgrader_meta(c).get("points", 0)) for c in nb.cells if is_test(c)}
    reference = reference_answers(nb)
    mutants = load_catalogue(lab).mutants
    base_failing, base_broken = run_notebook(nb, plan, reference)
    assert not base_failing and not base_broken, f"{lab}: the reference fails {base_failing} / {base_broken}"
    found = []
    for mutant in mutants:
        if len(mutant.cells) != 1 or (answers is not None and next(iter(mutant.cells)) not in answers):
            continue
        (answer, code), = mutant.cells.items()
        own = {g for g in (f"test_{answer}", f"test_{answer}_hidden") if g in points} or set(mutant.must_fail)
        failing, broken = run_notebook(nb, plan, {**reference, answer: code})
        elsewhere = sorted(set(failing) - own)
        shown = listed(lab, points, failing, mutants)
        found.append(Cost(mutant.name, answer, sum(points[g] for g in elsewhere), elsewhere, broken,
                          [m for m in shown if m != mutant.name], mutant.name not in shown,
                          {g: failing[g] for g in elsewhere}))
    return found


def cascade(lab: str) -> tuple[int, float, int, int]:
    """Print the lab's cascade; return (single-cell mutants, points lost elsewhere, wrong listings, missed own)."""
    start = time.perf_counter()
    found = costs(lab)
    lost = sum(c.lost for c in found)
    wrong, missed = sum(len(c.wrong) for c in found), sum(c.missed for c in found)
    print(f"{lab}: {len(found)} single-cell mutants, {sum(1 for c in found if c.lost)} cost points outside their own "
          f"cells ({lost:g} points in all), {sum(len(c.broken) for c in found)} given cells raised; the report lists "
          f"{wrong} wrong misconceptions and misses {missed} own ({time.perf_counter() - start:.0f} s)")
    for c in found:
        if c.elsewhere or c.broken or c.wrong or c.missed:
            print(f"  {c.mutant} ({c.answer}): {c.lost:g} points in {', '.join(c.elsewhere) or '-'}"
                  + (f"; given cells raised: {', '.join(c.broken)}" if c.broken else "")
                  + (f"; listed wrongly: {', '.join(c.wrong)}" if c.wrong else "")
                  + ("; its own misconception not listed" if c.missed else ""))
    return len(found), lost, wrong, missed


if __name__ == "__main__":
    totals = [cascade(REPO.resolve_labs([name])[0]) for name in sys.argv[1:] or REPO.labs()]
    if len(totals) > 1:
        print(f"all: {sum(t[0] for t in totals)} single-cell mutants, {sum(t[1] for t in totals):g} points lost outside "
              f"their own cells, {sum(t[2] for t in totals)} wrong misconceptions listed, {sum(t[3] for t in totals)} own missed")
