"""``mlbook export``: one CSV row per (student, lab), with a status nbgrader's export lacks.

Columns: student, lab, status (graded | error | missing), score, max_score, auto_score,
auto_max_score, manual_pending (written answers not yet graded by a TA), reason, seconds.
An errored submission is never a silent 0: its status says ``error`` and ``reason`` says why.
"""

from __future__ import annotations

import csv
from pathlib import Path

from .course import Course
from .results import SubmissionResult, collect

COLUMNS = ["student", "lab", "status", "score", "max_score", "auto_score", "auto_max_score",
           "manual_pending", "reason", "seconds"]


def rows(results: list[SubmissionResult]) -> list[dict]:
    out = []
    for r in results:
        auto = r.auto_cells.values()
        out.append({
            "student": r.student, "lab": r.lab, "status": r.status,
            "score": f"{r.score:g}" if r.cells else "", "max_score": f"{r.max_score:g}" if r.cells else "",
            "auto_score": f"{sum(c.score or 0 for c in auto):g}" if r.cells else "",
            "auto_max_score": f"{sum(c.max_score for c in auto):g}" if r.cells else "",
            "manual_pending": sum(1 for c in r.cells.values() if c.kind == "manual" and c.score is None),
            "reason": r.reason, "seconds": f"{r.seconds:.1f}",
        })
    return out


def export_csv(course: Course, labs: list[str], path: Path | None = None) -> Path:
    path = path or course.exports_dir / "grades.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for lab in labs:
            writer.writerows(rows(collect(course, lab)))
    tmp.replace(path)
    return path
