"""One mistake, one loss (issue #44, item 3): what each catalogue mutant costs outside its own cells.

For every mutant of a lab's catalogue that rewrites ONE answer cell, the notebook is run in this
process as grading runs it (``mlbook.mutation.inprocess``: the kernel's cells in order, each test
cell decided by the judge; seed 0), and two things are counted:
- the points of failing test cells that are not the answer's own (``test_<answer>`` and
  ``test_<answer>_hidden``, or, for an answer without such cells, the cells the catalogue says the
  mutant must fail), and
- the given cells (code the student runs but did not write) that raised.
Printed per lab: mutants, how many cost points elsewhere, the points lost elsewhere in all, the
given cells that raised, then each mutant with a cost. Run:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cascade.py lab01 lab03
"""

from __future__ import annotations

import sys
import time
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

REPO = Course(Path(__file__).resolve().parents[1])


def run_notebook(nb, plan, answers: dict[str, str]) -> tuple[set[str], list[str]]:
    """(failing test cells, given cells that raised) of one run of the notebook with ``answers``."""
    namespace: dict = {"__name__": "__main__"}
    failing, broken = set(), []
    with seeded(0), quiet():
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            gid = grade_id(cell)
            if is_test(cell):
                if decide_test_cell(plan, gid, namespace):
                    failing.add(gid)
            elif is_answer(cell):
                run_cell(answers.get(gid, cell.source), namespace)
            elif run_cell(cell.source, namespace):
                broken.append(gid or "a given cell")
            plt.close("all")
    return failing, broken


def cascade(lab: str) -> None:
    nb = read_authored(REPO.authored(lab))
    plan = lab_plan(lab, REPO.source(lab))
    points = {grade_id(c): float(nbgrader_meta(c).get("points", 0)) for c in nb.cells if is_test(c)}
    reference = reference_answers(nb)
    start = time.perf_counter()
    base_failing, base_broken = run_notebook(nb, plan, reference)
    assert not base_failing and not base_broken, f"{lab}: the reference fails {base_failing} / {base_broken}"
    rows, single = [], 0
    for mutant in load_catalogue(lab).mutants:
        if len(mutant.cells) != 1:
            continue
        single += 1
        (answer, code), = mutant.cells.items()
        own = {g for g in (f"test_{answer}", f"test_{answer}_hidden") if g in points} or set(mutant.must_fail)
        failing, broken = run_notebook(nb, plan, {**reference, answer: code})
        elsewhere = sorted(failing - own)
        lost = sum(points[g] for g in elsewhere)
        if elsewhere or broken:
            rows.append((mutant.name, answer, lost, elsewhere, broken))
    lost_all = sum(r[2] for r in rows)
    print(f"{lab}: {single} single-cell mutants, {sum(1 for r in rows if r[2])} cost points outside their own "
          f"cells ({lost_all:g} points in all), {sum(len(r[4]) for r in rows)} given cells raised "
          f"({time.perf_counter() - start:.0f} s)")
    for name, answer, lost, elsewhere, broken in rows:
        print(f"  {name} ({answer}): {lost:g} points in {', '.join(elsewhere) or '-'}"
              + (f"; given cells raised: {', '.join(broken)}" if broken else ""))


if __name__ == "__main__":
    for name in sys.argv[1:] or REPO.labs():
        cascade(REPO.resolve_labs([name])[0])
