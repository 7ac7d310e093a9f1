"""``mlbook report``: what TAs and instructors see, as one self-contained HTML page.

One module per step:
    data.py            read the results (gradebook, status file, autograded notebooks) and the lab's cells
    misconceptions.py  match failing tests and their messages against each lab's mutant catalogue
    figures.py         matplotlib figures as inline SVG
    html.py            the page

The page has no script, no stylesheet or font to fetch and no URL: it opens offline, from
a file, and can be mailed as it is. It is TA-only (it quotes the written answers' rubrics).
"""

from __future__ import annotations

from pathlib import Path

from mlbook.course import Course
from mlbook.files import write_atomic
from mlbook.outputs.report import figures
from mlbook.outputs.report.data import LabData, collect_lab
from mlbook.outputs.report.html import page
from mlbook.outputs.report.misconceptions import diagnose

__all__ = ["write_report", "report_path", "LabData"]


def report_path(course: Course, labs: list[str]) -> Path:
    """``exports/report.html`` for the whole course, ``exports/report-<lab>.html`` for one lab."""
    name = f"report-{labs[0]}.html" if len(labs) == 1 and labs != course.labs() else "report.html"
    return course.exports_dir / name


def render(course: Course, labs: list[str], students: list[str] | None = None) -> str:
    """The report's HTML for ``labs`` of ``course`` (only ``students`` when given)."""
    data = [collect_lab(course, lab, students) for lab in labs]
    svgs = {"scores": figures.score_distribution(data), "pass-rates": figures.pass_rates(data),
            "grading-time": figures.grading_times(data)}
    svgs.update({f"students-{d.lab}": figures.student_cells(d) for d in data})
    title = f"Grading report: {labs[0] if len(labs) == 1 else f'{len(labs)} labs'}"
    diagnoses = {d.lab: diagnose(d) for d in data}
    return page(title, data, svgs, diagnoses, f"{course.root.name}/gradebook.db and autograded/")


def write_report(course: Course, labs: list[str], path: Path | None = None,
                 students: list[str] | None = None) -> Path:
    """Write the report for ``labs`` (atomically) and return its path.

    Args:
        course: the course to read.
        labs: lab names, in the order the report shows them.
        path: where to write (default: ``report_path``).
        students: only these students (default: everyone with a submission).
    Returns:
        The path written.
    """
    return write_atomic(path or report_path(course, labs), render(course, labs, students))
