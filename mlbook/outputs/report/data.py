"""What the report shows, read once: per lab, every submission's result and the lab's cells.

Results come from ``mlbook.outputs.results.collect`` (the gradebook for scores, the status file for
errors and grading time, the autograded notebooks for failure messages); the order of test
cells and the written answers' rubrics come from the lab's source notebook.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlbook.authoring.catalogue import Catalogue
from mlbook.labs import load_catalogue
from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.authoring.notebooks import SOLUTION, is_answer, is_test, iter_nbgrader_cells, nbgrader_meta, read_nb, split_blocks
from mlbook.outputs.results import SubmissionResult, collect
from mlbook.grading.status import ERROR, GRADED, MISSING

RUBRIC_MARK = "**Rubric (TA only):**"


@dataclass
class WrittenAnswer:
    """A manually graded markdown cell: its points, its rubric and how many await a TA."""

    grade_id: str
    points: float
    rubric: str
    pending: list[str] = field(default_factory=list)  # students whose answer has no score yet


@dataclass
class LabData:
    """Everything the report knows about one lab."""

    lab: str
    test_cells: list[str]
    written: list[WrittenAnswer]
    results: list[SubmissionResult]
    catalogue: Catalogue | None

    def with_status(self, status: str) -> list[SubmissionResult]:
        return [r for r in self.results if r.status == status]

    @property
    def graded(self) -> list[SubmissionResult]:
        return self.with_status(GRADED)

    @property
    def errors(self) -> list[SubmissionResult]:
        return self.with_status(ERROR)

    @property
    def not_graded(self) -> list[SubmissionResult]:
        return self.with_status(MISSING)

    @property
    def max_score(self) -> float:
        """The lab's total points (autograded and written), as the gradebook counts them."""
        return max((r.max_score for r in self.graded), default=0.0)


def rubric_of(markdown: str) -> str:
    """The rubric paragraph of a written answer's solution block ('' when there is none)."""
    blocks = split_blocks(markdown, SOLUTION)[1]
    inside = blocks[0] if blocks else markdown
    if RUBRIC_MARK not in inside:
        return ""
    text = inside.split(RUBRIC_MARK, 1)[1]
    return re.sub(r"\s+", " ", text).strip()


def lab_cells(course: Course, lab: str) -> tuple[list[str], list[WrittenAnswer]]:
    """The lab's autograded test cells in notebook order, and its written answers."""
    path = course.source(lab)
    if not path.is_file():
        raise MlbookError(f"{path.relative_to(course.root)} does not exist; run `mlbook build {lab}`")
    tests, written = [], []
    for gid, cell in iter_nbgrader_cells(read_nb(path)):
        if is_test(cell):
            tests.append(gid)
        elif cell.cell_type == "markdown" and is_answer(cell) and nbgrader_meta(cell).get("grade"):
            written.append(WrittenAnswer(gid, float(nbgrader_meta(cell).get("points", 0)), rubric_of(cell.source)))
    return tests, written


def collect_lab(course: Course, lab: str, students: list[str] | None = None) -> LabData:
    """Read one lab's results, cells and catalogue (no catalogue is fine: nothing is matched).

    Args:
        course: the course.
        lab: the lab.
        students: only these students (default: everyone with a submission).
    Returns:
        The lab's data.
    """
    results = collect(course, lab, [s for s in students if course.submitted(s, lab).is_dir()] if students else None)
    tests, written = lab_cells(course, lab)
    for answer in written:
        answer.pending = [r.student for r in results if r.status == GRADED and answer.grade_id in r.cells
                          and r.cells[answer.grade_id].score is None]
    try:
        catalogue = load_catalogue(lab, course.source(lab))
    except MlbookError:
        catalogue = None
    return LabData(lab, tests, written, results, catalogue)
