"""Read grading results back: scores from nbgrader's gradebook, messages from the notebooks.

Conventions:
- ``auto`` cells are autograded test cells; ``manual`` cells are written answers a TA grades
  (their score is None until graded). Totals count both, like nbgrader's.
- A cell's message is the one-line error its test raised (``Misconception: ...``), read from
  the autograded notebook; an empty message means the cell passed.
- Status comes from ``mlbook.grading.status``: graded, error (with its reason) or missing.
- ``raw_score`` is the cells' sum; ``score`` is after the late penalty (``mlbook.calendar.late``),
  computed from the submission time nbgrader recorded and the course's schedule and extensions.
"""

from __future__ import annotations

import datetime as dt
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
    submitted_at: dt.datetime | None = None  # nbgrader's timestamp (aware, UTC), when it has one
    due: dt.datetime | None = None  # the student's due date (with an extension)
    extended: bool = False
    hours_late: float = 0.0
    late_share: float = 0.0  # the share of the score the late policy takes (0..1)

    @property
    def raw_score(self) -> float:
        return sum(c.score or 0.0 for c in self.cells.values())

    @property
    def late_penalty(self) -> float:
        return round(self.raw_score * self.late_share, 6)

    @property
    def score(self) -> float:
        return self.raw_score - self.late_penalty

    @property
    def late(self) -> bool:
        return self.hours_late > 0

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

    from mlbook.calendar.extensions import read_extensions
    from mlbook.calendar.late import lateness, share
    from mlbook.calendar.schedule import from_gradebook, load_schedule

    students = students if students is not None else course.students(lab)
    store = StatusStore(course.status_file)
    schedule = load_schedule(course)
    extended = read_extensions(course).get(lab, {})
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
                    late = lateness(schedule, lab, from_gradebook(submission.timestamp), extended.get(student))
                    result.submitted_at, result.due, result.extended = late.submitted_at, late.due, late.extended
                    result.hours_late = late.hours_late
                    result.late_share = share(schedule.late, late.seconds_late) if schedule else 0.0
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

