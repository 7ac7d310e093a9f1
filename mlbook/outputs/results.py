"""Read grading results back: scores from nbgrader's gradebook, messages from the notebooks.

Conventions:
- ``auto`` cells are autograded test cells; ``manual`` cells are written answers a TA grades
  (their score is None until graded). Totals count both, like nbgrader's.
- A cell's message is the one-line error its test raised (``Misconception: ...``), read from
  the autograded notebook; an empty message means the cell passed.
- Status comes from ``mlbook.grading.status``: graded, error (with its reason) or missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlbook.course import Course
from mlbook.authoring.notebooks import grade_id, is_test, read_nb
from mlbook.outputs.preprocessors import cell_failure
from mlbook.grading.status import GRADED, MISSING, StatusStore


@dataclass
class CellResult:
    grade_id: str
    kind: str  # "auto" or "manual"
    score: float | None
    max_score: float
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score >= self.max_score


@dataclass
class SubmissionResult:
    lab: str
    student: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    cells: dict[str, CellResult] = field(default_factory=dict)
    warning: str = ""  # graded, but a TA should know (e.g. a renamed notebook)

    @property
    def score(self) -> float:
        return sum(c.score or 0.0 for c in self.cells.values())

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cells.values())

    @property
    def auto_cells(self) -> dict[str, CellResult]:
        return {k: c for k, c in self.cells.items() if c.kind == "auto"}


def cell_messages(course: Course, lab: str, student: str) -> dict[str, str]:
    """Test cell grade_id -> its one-line failure message (only failing cells)."""
    path = course.autograded(student, lab)
    if not path.is_file():
        return {}
    return {grade_id(cell): message for cell in read_nb(path).cells
            if is_test(cell) and (message := cell_failure(cell)) is not None}


def collect(course: Course, lab: str, students: list[str] | None = None) -> list[SubmissionResult]:
    """One result per student with a submission (or per given student) for ``lab``."""
    from nbgrader.api import MissingEntry

    from mlbook.nbgrader_env import gradebook

    students = students if students is not None else course.students(lab)
    store = StatusStore(course.status_file)
    results = []
    with gradebook(course) as gb:
        for student in students:
            attempt = store.get(lab, student)
            result = SubmissionResult(lab, student, attempt.status, attempt.reason, attempt.seconds,
                                      warning=attempt.warning)
            if attempt.status == GRADED:
                try:
                    submission = gb.find_submission(lab, student)
                except MissingEntry:
                    result.status, result.reason = MISSING, "no gradebook entry"
                else:
                    messages = cell_messages(course, lab, student)
                    for notebook in submission.notebooks:
                        for grade in notebook.grades:
                            if grade.cell_type == "markdown":  # a written answer: pending until a TA grades it
                                # (an answer left untouched gets 0 from nbgrader and needs no TA)
                                score = grade.manual_score if grade.needs_manual_grade else grade.score
                                cell = CellResult(grade.name, "manual", score, float(grade.max_score))
                            else:
                                cell = CellResult(grade.name, "auto", float(grade.score), float(grade.max_score),
                                                  messages.get(grade.name, ""))
                            result.cells[grade.name] = cell
            results.append(result)
    return results

