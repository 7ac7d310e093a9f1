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

import ast
import itertools
import os
import shutil
import sys
import threading

import pytest

from harness import REPO
from mlbook import pyast
from mlbook.authoring import submissions
from mlbook.labs import load_catalogue
from mlbook.grading import GradingOptions, autograde_labs
from mlbook.outputs.results import collect
from mlbook.grading.status import GRADED

LABS = ("lab01_hand_attention", "lab02_scaling", "lab04_transformer_block")
NOTEBOOKS = int(os.environ.get("MLBOOK_CONCURRENCY_NOTEBOOKS", "60"))
pytestmark = [pytest.mark.xdist_group("concurrency"), pytest.mark.slow]

_unlocked_trees: list[str] = []  # what built a syntax tree outside pyast's lock, off the main thread
_watching = threading.Event()


def _watch_tree_building(event: str, args: tuple) -> None:
    """Audit hook: a tree turned into code, or source parsed by ``ast``, without pyast's lock."""
    if event != "compile" or not _watching.is_set() or threading.current_thread() is threading.main_thread():
        return
    caller = sys._getframe(1)
    by_ast = os.path.basename(caller.f_code.co_filename) == "ast.py"
    if (isinstance(args[0], ast.AST) or by_ast) and not pyast.LOCK._is_owned():
        _unlocked_trees.append(f"{threading.current_thread().name}: {caller.f_code.co_filename}:{caller.f_lineno}")


sys.addaudithook(_watch_tree_building)  # hooks cannot be removed; it does nothing unless watching


def test_correct_notebooks_graded_four_at_once_all_earn_full_marks(tmp_path):
    course = REPO.scratch_copy(tmp_path / "class", list(LABS))
    for lab in LABS:
        course.release(lab).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO.release(lab), course.release(lab))
    correct = {lab: itertools.cycle([{}] + [a.cells for a in load_catalogue(lab).alternatives]) for lab in LABS}
    for i in range(NOTEBOOKS):
        lab = LABS[i % len(LABS)]
        submissions.submit(course, f"student-{i:03d}", lab, submissions.reference(course, lab, next(correct[lab])))

    _watching.set()
    try:
        runs = autograde_labs(course, list(LABS), progress=False, options=GradingOptions(workers=4))
    finally:
        _watching.clear()

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
    assert not _unlocked_trees, (
        "syntax trees built in grading threads outside mlbook.pyast's lock (CPython 3.11 races on "
        f"them, cpython#106905): {sorted(set(_unlocked_trees))}")
    assert graded == NOTEBOOKS
    assert runs[LABS[0]].at_once == 4, "the batch never ran four sandboxes at once: no concurrency shown"
