"""Two courses graded by threads of one process stay apart, and nothing moves the process.

A grader's threads share one working directory: a grading step that changed it (nbgrader's
converters do, around each conversion, unless ``nbgrader_env.CourseAPI`` keeps them in place)
would make another thread's relative paths land in the wrong course. Here two courses with
different students grade the same lab at once, each in its own thread of this process, while
an audit hook records every ``os.chdir`` and ``os.fchdir`` the process makes. Each course's
gradebook, ``autograded/`` and feedback must hold its own students only.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from harness import scratch_course
from mlbook.authoring import submissions
from mlbook.grading import GradingOptions, autograde
from mlbook.grading.status import GRADED
from mlbook.nbgrader_env import gradebook
from mlbook.outputs.feedback import generate_feedback
from mlbook.outputs.results import collect

LAB = "lab02_scaling"
STUDENTS = {"a": ("ann", "abe"), "b": ("bea",)}
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("two-courses")]

_chdirs: list[str] = []
_watching = threading.Event()


def _watch_chdir(event: str, args: tuple) -> None:
    if event == "os.chdir" and _watching.is_set():
        _chdirs.append(f"{threading.current_thread().name}: os.chdir{args!r} from "
                       f"{sys._getframe(1).f_code.co_filename}:{sys._getframe(1).f_lineno}")


sys.addaudithook(_watch_chdir)  # hooks cannot be removed; it does nothing unless watching


def _grade(course, errors: list) -> None:
    try:
        run = autograde(course, LAB, force=True, progress=False, options=GradingOptions(workers=1))
        generate_feedback(course, LAB)
        errors.extend(f"{a.student}: {a.reason}" for a in run.errors)
    except BaseException as exc:  # a thread's failure must reach the test
        errors.append(f"{type(exc).__name__}: {exc}")


def test_two_courses_graded_in_threads_of_one_process_never_write_into_each_other(tmp_path):
    courses = {name: scratch_course(LAB, tmp_path / f"course-{name}") for name in STUDENTS}
    for name, course in courses.items():
        for student in STUDENTS[name]:
            submissions.submit(course, student, LAB, submissions.reference(course, LAB))
    cwd = os.getcwd()
    errors: list[str] = []
    threads = [threading.Thread(target=_grade, args=(course, errors), name=f"grader-{name}")
               for name, course in courses.items()]
    _watching.set()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        _watching.clear()
    assert not errors, errors
    assert not _chdirs, f"the grader changed the process's working directory: {_chdirs[:3]}"
    assert os.getcwd() == cwd
    for name, course in courses.items():
        own = set(STUDENTS[name])
        with gradebook(course) as gb:
            assert {s.id for s in gb.students} == own, f"course {name}'s gradebook"
        assert {p.name for p in (course.root / "autograded").iterdir() if not p.name.startswith(".")} == own
        assert {p.name for p in (course.root / "feedback").iterdir()} == own
        results = {r.student: r for r in collect(course, LAB)}
        assert set(results) == own
        assert all(r.status == GRADED and r.auto_cells and all(c.passed for c in r.auto_cells.values())
                   for r in results.values()), {s: (r.status, r.reason) for s, r in results.items()}
