"""Correct work keeps its points under load: 60 correct notebooks of three labs graded in one
batch, four sandboxes (and so four judges, threads of one grader process) at once on two cores
whatever the load, every one at full marks. ``MLBOOK_CONCURRENCY_NOTEBOOKS=200`` grades more (a
race that loses one notebook in a few hundred needs that many; 200 took 20 min of a CI worker).

The notebooks are each lab's reference and every catalogued alternative correct solution, in
turn. A judge that shares process-wide state with another (an AST built by two threads at
once, a global random generator, a lock held across a kernel call) shows up here as a correct
student losing a point, or as a grader error.
"""

from __future__ import annotations

import itertools
import os
import shutil

import pytest

from harness import REPO
from mlbook.authoring import submissions
from mlbook.authoring.catalogue import load_catalogue
from mlbook.grading import GradingOptions, autograde_labs
from mlbook.outputs.results import collect
from mlbook.grading.status import GRADED

LABS = ("lab01_hand_attention", "lab02_scaling", "lab04_transformer_block")
NOTEBOOKS = int(os.environ.get("MLBOOK_CONCURRENCY_NOTEBOOKS", "60"))
pytestmark = [pytest.mark.xdist_group("concurrency"), pytest.mark.slow]


def test_correct_notebooks_graded_four_at_once_all_earn_full_marks(tmp_path):
    course = REPO.scratch_copy(tmp_path / "class", list(LABS))
    for lab in LABS:
        course.release(lab).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO.release(lab), course.release(lab))
    correct = {lab: itertools.cycle([{}] + [a.cells for a in load_catalogue(lab).alternatives]) for lab in LABS}
    for i in range(NOTEBOOKS):
        lab = LABS[i % len(LABS)]
        submissions.submit(course, f"student-{i:03d}", lab, submissions.reference(course, lab, next(correct[lab])))

    runs = autograde_labs(course, list(LABS), progress=False, options=GradingOptions(workers=4))

    graded, lost = 0, {}
    for lab in LABS:
        for result in collect(course, lab):
            if result.status != GRADED:
                lost[(lab, result.student)] = result.reason
                continue
            graded += 1
            failed = {gid: cell.message for gid, cell in result.auto_cells.items() if not cell.passed}
            if failed:
                lost[(lab, result.student)] = failed
    print(f"\n{graded} notebooks graded in {runs[LABS[0]].seconds:.0f} s, up to {runs[LABS[0]].at_once} at once")
    assert not lost, f"correct notebooks that lost points or failed: {lost}"
    assert graded == NOTEBOOKS
    assert runs[LABS[0]].at_once == 4, "the batch never ran four sandboxes at once: no concurrency shown"
