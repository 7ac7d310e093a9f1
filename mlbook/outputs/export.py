"""``mlbook export``: the grades as CSV, in three layouts.

- ``exports/grades.csv`` (mlbook's own): one row per (student, lab). Columns: student, lab,
  status (graded | error | missing), score, max_score, auto_score, auto_max_score,
  manual_pending (written answers not yet graded by a TA), reason, seconds, raw_score,
  late_penalty, hours_late, submitted_at, due (the student's, after any extension). ``score``
  is after the late penalty (``mlbook.calendar.late``); ``raw_score`` before it. An errored
  submission is never a silent 0: its status says ``error`` and ``reason`` says why.
- ``exports/nbgrader.csv``: nbgrader's own export (``nbgrader export``, its CsvExportPlugin),
  unchanged (its ``late_submission_penalty`` is brought up to date first,
  ``late.refresh_gradebook``). Note that nbgrader writes 0 for an errored or missing submission.
- ``exports/canvas.csv``: the layout Canvas's gradebook import reads (``CANVAS_*`` below).

Canvas layout, as Canvas's importer reads it (canvas-lms ``app/models/gradebook_importer.rb``):
  header   Student, ID, SIS User ID, SIS Login ID, Section, one column per lab, one status column per lab
  row 2    ``Points Possible``: each lab's total points; ``(read only)`` under each status column,
           which makes Canvas skip that column, as it skips its own Current Score columns
  rows     one per student in the gradebook or with a submission
Mapping: Student = "last, first" from nbgrader's student record (its id when it has no name);
ID = nbgrader's ``lms_user_id`` (Canvas's numeric user id, blank when unknown); SIS User ID =
nbgrader's student id; SIS Login ID = the student's email; Section = blank. Canvas matches a row
by ID, then SIS User ID, then SIS Login ID, then name. A lab column is ``<lab> (<canvas id>)``
when the Canvas assignment id is given (``--canvas-id lab01=1234``), else ``<lab>``, which
Canvas matches by assignment title (or offers to create). A lab cell holds nbgrader's score
(autograded plus any written answers graded so far) when graded, and is blank when the
submission errored, is not graded yet, or was never handed in: a blank cell leaves Canvas's
grade unchanged. The status column says which: ``graded``, ``graded, N written answer(s) to
grade``, ``error: <reason>``, or ``missing`` (no grade: not submitted, or not graded yet); a
late submission's status adds ``late <h> h, raw <raw>, penalty <points>`` (the lab cell holds the
score after the penalty).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from mlbook.course import Course
from mlbook.files import replacing, write_atomic
from mlbook.nbgrader_env import gradebook
from mlbook.outputs.results import SubmissionResult, collect
from mlbook.grading.status import ERROR, GRADED

COLUMNS = ["student", "lab", "status", "score", "max_score", "auto_score", "auto_max_score",
           "manual_pending", "reason", "seconds", "raw_score", "late_penalty", "hours_late", "submitted_at", "due"]
CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
CANVAS_READ_ONLY = "(read only)"


def rows(results: list[SubmissionResult]) -> list[dict]:
    out = []
    for r in results:
        auto = r.auto_cells.values()
        out.append({
            "student": r.student, "lab": r.lab, "status": r.status,
            "score": f"{r.score:g}" if r.cells else "", "max_score": f"{r.max_score:g}" if r.cells else "",
            "auto_score": f"{sum(c.score or 0 for c in auto):g}" if r.cells else "",
            "auto_max_score": f"{sum(c.max_score for c in auto):g}" if r.cells else "",
            "manual_pending": _pending(r),
            "reason": r.reason, "seconds": f"{r.seconds:.1f}",
            "raw_score": f"{r.raw_score:g}" if r.cells else "",
            "late_penalty": f"{r.late_penalty:g}" if r.cells else "",
            "hours_late": f"{r.hours_late:.2f}" if r.cells else "",
            "submitted_at": r.submitted_at.isoformat() if r.submitted_at else "",
            "due": r.due.isoformat() if r.due else "",
        })
    return out


def _pending(r: SubmissionResult) -> int:
    return sum(1 for c in r.cells.values() if c.kind == "manual" and c.score is None)


def _write_atomic(path: Path, table: list[list]) -> Path:
    """Write rows of cells as CSV so that readers see the old file or the new one."""
    text = io.StringIO(newline="")
    csv.writer(text).writerows(table)
    return write_atomic(path, text.getvalue())


def export_csv(course: Course, labs: list[str], path: Path | None = None) -> Path:
    """Write mlbook's grades CSV (default ``exports/grades.csv``); returns its path."""
    body = [[row[c] for c in COLUMNS] for lab in labs for row in rows(collect(course, lab))]
    return _write_atomic(path or course.exports_dir / "grades.csv", [COLUMNS] + body)


def export_nbgrader_csv(course: Course, labs: list[str], path: Path | None = None) -> Path:
    """Write nbgrader's own CSV export of ``labs`` (default ``exports/nbgrader.csv``); returns its path."""
    from nbgrader.plugins import CsvExportPlugin

    from mlbook.calendar.late import refresh_gradebook

    path = path or course.exports_dir / "nbgrader.csv"
    for lab in labs:
        refresh_gradebook(course, lab)
    with replacing(path) as tmp, gradebook(course) as gb:
        CsvExportPlugin(to=str(tmp), assignment=list(labs)).export(gb)
    return path


def canvas_status(r: SubmissionResult | None) -> str:
    """The status cell of one (student, lab) in the Canvas CSV."""
    if r is None or r.status not in (GRADED, ERROR):
        return "missing"
    if r.status == ERROR:
        return f"error: {r.reason or 'no reason recorded'}"
    pending = _pending(r)
    text = f"graded, {pending} written answer(s) to grade" if pending else "graded"
    if r.late:
        text += f", late {r.hours_late:.1f} h, raw {r.raw_score:g}, penalty {r.late_penalty:g}"
        if r.extended:
            text += " (after the extension)"
    return text


def canvas_table(course: Course, labs: list[str], canvas_ids: dict[str, str] | None = None) -> list[list[str]]:
    """The Canvas CSV as rows (header, Points Possible, one row per student); see the module docstring."""
    from nbgrader.api import MissingEntry

    canvas_ids = canvas_ids or {}
    results = {lab: {r.student: r for r in collect(course, lab)} for lab in labs}
    with gradebook(course) as gb:
        people = {s.id: (s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students}
        points = []
        for lab in labs:
            try:
                points.append(f"{gb.find_assignment(lab).max_score:g}")
            except MissingEntry:
                points.append(next((f"{r.max_score:g}" for r in results[lab].values() if r.cells), ""))
    students = sorted(set(people) | {s for by_student in results.values() for s in by_student})
    header = CANVAS_STUDENT_COLUMNS + [f"{lab} ({canvas_ids[lab]})" if lab in canvas_ids else lab for lab in labs] \
        + [f"{lab} status" for lab in labs]
    table = [header, [CANVAS_POINTS_ROW, "", "", "", ""] + points + [CANVAS_READ_ONLY] * len(labs)]
    for student in students:
        first, last, email, lms_id = people.get(student, (None, None, None, None))
        name = ", ".join(part for part in (last, first) if part) or student
        found = [results[lab].get(student) for lab in labs]
        scores = [f"{r.score:g}" if r is not None and r.status == GRADED else "" for r in found]
        table.append([name, lms_id or "", student, email or "", ""] + scores + [canvas_status(r) for r in found])
    return table


def export_canvas_csv(course: Course, labs: list[str], path: Path | None = None,
                      canvas_ids: dict[str, str] | None = None) -> Path:
    """Write the Canvas gradebook CSV (default ``exports/canvas.csv``); returns its path.

    Args:
        course: the course.
        labs: the labs, one column each.
        path: the CSV path.
        canvas_ids: lab -> Canvas assignment id, for ``<lab> (<id>)`` headers.
    Returns:
        The path written.
    """
    return _write_atomic(path or course.exports_dir / "canvas.csv", canvas_table(course, labs, canvas_ids))
