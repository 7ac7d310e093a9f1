"""Step 1 of grading, in the grader's process: find each submission and sanitize it.

Finding it is ``intake.take``: the submission folder is checked without following any link and
the notebook copied into the grader's private folder, which is what is sanitized and recorded.

Sanitizing is nbgrader's own (its autograder's first half, the same preprocessors in the same
order): outputs cleared, duplicate cells dropped, the kernelspec reset, every locked cell
(given code and tests) restored from the gradebook, deleted test cells put back, metadata
checked. What comes out is a ``Job``: the exact notebook the sandbox will run, keyed by its
content so the recording step (nbgrader again) finds the result that belongs to it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from mlbook.course import Course
from mlbook.authoring.notebooks import grade_id
from mlbook.sandbox.limits import Limits
from mlbook.grading.intake import Intake, take

UNREADABLE = "the notebook file is not valid JSON (truncated or edited outside Jupyter)"


@dataclass
class Job:
    """One submission ready to run.

    Attributes:
        notebook: the sanitized notebook (None when ``error`` is set).
        key: ``job_key(notebook)``.
        error: why the submission cannot be run at all (it is recorded as an error).
    """

    lab: str
    student: str
    notebook: NotebookNode | None
    key: str = ""
    error: str = ""


def job_key(nb: NotebookNode) -> str:
    """What identifies a sanitized notebook: its cells' types, grade ids and sources, in order.
    (Not the cell ids: nbgrader gives the test cells it restores fresh random ids.)"""
    cells = [(c.cell_type, grade_id(c), c.source) for c in nb.cells]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def find_submission(course: Course, lab: str, student: str, max_bytes: int = Limits().submission_bytes) -> Intake:
    """The submitted notebook of ``lab``, checked and copied into the grader's private folder.

    The submission folder is hostile (``intake.take``): a link, a special file, a hard link or a
    file over ``max_bytes`` refuses the submission with its reason (``Intake.error``). A student
    who hands in ``lab01_hand_attention-Copy1.ipynb`` is graded: the notebook whose grade ids
    overlap the lab's most (at least half of them) is copied to the expected name in the
    private copy, never in ``submitted/``.
    """
    return take(course, lab, student, max_bytes)


def sanitize(course: Course, config, lab: str, student: str, path: Path) -> Job:
    """Run nbgrader's sanitizing preprocessors on one submitted notebook."""
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:
        return Job(lab, student, None, error=UNREADABLE)
    resources = {"nbgrader": {"student": student, "assignment": lab, "notebook": path.stem, "db_url": course.db_url},
                 "unique_key": path.stem}
    try:
        for cls in (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata):
            nb, resources = cls(config=config).preprocess(nb, resources)
    except Exception as exc:  # nbgrader rejected the notebook's structure
        return Job(lab, student, None, error=(f"nbgrader could not match the notebook's graded cells with the lab's "
                                              f"({type(exc).__name__}: {exc}); were graded cells copied, or their "
                                              f"nbgrader metadata edited?")[:300])
    return Job(lab, student, nb, key=job_key(nb))
