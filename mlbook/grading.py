"""Autograde submissions through nbgrader, one student at a time, recording how each ended.

The steps per student are nbgrader's own (sanitize, execute, record in the gradebook);
mlbook adds what nbgrader lacks: the assignment is registered from the committed source if
the gradebook lacks it, a failure of one submission is recorded with its reason and never
stops the batch, a rerun skips what is already graded unless forced, and a progress bar.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .course import Course
from .errors import MlbookError
from .nbgrader_env import api_for, failure_reason, in_course
from .status import ERROR, GRADED, Attempt, StatusStore


def assignment_registered(course: Course, lab: str) -> bool:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            return bool(gb.find_assignment(lab).notebooks)
        except MissingEntry:
            return False


def register_assignment(course: Course, lab: str, api) -> None:
    """Record the lab's cells in the gradebook (nbgrader generate_assignment), keeping the
    committed release folder (notebook and build manifest) byte for byte: nbgrader recreates
    the folder it writes."""
    if not course.source(lab).is_file():
        raise MlbookError(f"{lab}: no source notebook; run `mlbook build {lab}` first")
    folder = course.release(lab).parent
    kept = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}
    with in_course(course):
        result = api.generate_assignment(lab, force=True, create=True)
    if kept:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, data in kept.items():
            (folder / name).write_bytes(data)
    if not result["success"]:
        raise MlbookError(f"{lab}: cannot register the assignment: {failure_reason(result)}")


@dataclass
class GradingRun:
    """What one ``autograde`` call did."""

    attempts: list[Attempt] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def errors(self) -> list[Attempt]:
        return [a for a in self.attempts if a.status == ERROR]


def autograde(
    course: Course,
    lab: str,
    students: Iterable[str] | None = None,
    *,
    force: bool = False,
    progress: bool = True,
    on_attempt: Callable[[Attempt], None] | None = None,
) -> GradingRun:
    """Autograde ``students`` (default: every submission of ``lab``).

    Args:
        course: the course directory.
        lab: the lab (nbgrader assignment id).
        students: student ids; all with a ``submitted/<student>/<lab>`` folder when omitted.
        force: regrade students already graded.
        progress: show a progress bar on stderr.
        on_attempt: called after each student (for callers that report as they go).

    Returns:
        The attempts made and the students skipped as already graded.
    """
    students = list(students) if students is not None else course.students(lab)
    store = StatusStore(course.status_file)
    run = GradingRun()
    todo = []
    for student in students:
        if not course.submitted(student, lab).is_dir():
            raise MlbookError(f"{lab}: no submission for student {student!r} in {course.submitted_dir}")
        if not force and store.get(lab, student).status == GRADED and course.autograded(student, lab).is_file():
            run.skipped.append((lab, student))
        else:
            todo.append(student)
    if not todo:
        return run
    api = api_for(course)
    if not assignment_registered(course, lab):
        register_assignment(course, lab, api)
    bar = _progress(len(todo), f"autograde {lab}", progress)
    for student in todo:
        attempt = grade_one(course, api, lab, student)
        store.record(attempt)
        run.attempts.append(attempt)
        if on_attempt:
            on_attempt(attempt)
        bar.update(1)
        bar.set_postfix(errors=len(run.errors))
    bar.close()
    return run


def grade_one(course: Course, api, lab: str, student: str) -> Attempt:
    """Autograde one submission; any failure becomes an ``error`` attempt with its reason."""
    start = time.perf_counter()
    target = course.autograded(student, lab)
    try:
        with in_course(course):
            result = api.autograde(lab, student, force=True, create=True)
    except Exception as exc:  # nbgrader raised instead of reporting: still only this student
        result = {"success": False, "error": f"{type(exc).__name__}: {exc}"}
    seconds = time.perf_counter() - start
    if result.get("success") and target.is_file():
        return Attempt(lab, student, GRADED, seconds=seconds)
    if target.parent.is_dir():  # half-written output must not pass for a graded notebook
        shutil.rmtree(target.parent, ignore_errors=True)
    return Attempt(lab, student, ERROR, reason=failure_reason(result), seconds=seconds)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="nb", disable=not enabled, leave=False)
