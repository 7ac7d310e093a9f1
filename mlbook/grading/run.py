"""Autograde a class: prepare (here) -> execute (sandboxes, in parallel) -> record (here, one writer).

What mlbook adds to nbgrader's autograder: student code runs in a sandbox and every test's
verdict is decided outside it (``mlbook.sandbox``); submissions run in parallel or on a Dask
cluster while one process writes the gradebook; a submission that fails as a whole is recorded
as an error with its reason and never stops the batch; a rerun skips what is already graded
unless forced; a progress bar shows done/total, errors and an ETA.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import nbformat

from ..course import Course
from ..errors import MlbookError
from ..nbgrader_env import api_for, load_config
from ..sandbox import bwrap
from ..sandbox.limits import Limits
from ..status import ERROR, GRADED, Attempt, StatusStore
from .executors import DaskExecutor, LocalExecutor, Task
from .prepare import find_submission, sanitize
from .record import record, recording_api
from .register import assignment_registered, register_assignment


@dataclass
class GradingOptions:
    """How to grade. ``workers`` None means one per available core."""

    workers: int | None = None
    scheduler: str | None = None  # a Dask scheduler address, e.g. tcp://10.0.0.5:8786
    limits: Limits = field(default_factory=Limits)
    sandboxed: bool = True

    def worker_count(self) -> int:
        return self.workers or len(os.sched_getaffinity(0))


@dataclass
class GradingRun:
    """What one ``autograde`` call did."""

    attempts: list[Attempt] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

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
    options: GradingOptions | None = None,
) -> GradingRun:
    """Autograde ``students`` (default: every submission of ``lab``).

    Args:
        course: the course directory.
        lab: the lab (nbgrader assignment id).
        students: student ids; all with a ``submitted/<student>/<lab>`` folder when omitted.
        force: regrade students already graded.
        progress: show a progress bar on stderr.
        on_attempt: called after each student is recorded.
        options: workers, cluster, limits, sandbox (``GradingOptions``).

    Returns:
        The attempts made and the students skipped as already graded.
    """
    options = options or GradingOptions()
    start = time.perf_counter()
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
    if options.sandboxed and (problem := bwrap.problem()):
        raise MlbookError(f"cannot start the grading sandbox: {problem}")
    api = api_for(course)
    if not assignment_registered(course, lab):
        register_assignment(course, lab, api)

    bar = _progress(len(todo), f"autograde {lab}", progress)

    def finish(attempt: Attempt) -> None:
        if attempt.status == ERROR:
            shutil.rmtree(course.autograded(attempt.student, lab).parent, ignore_errors=True)
        store.record(attempt)
        run.attempts.append(attempt)
        if on_attempt:
            on_attempt(attempt)
        bar.update(1)
        bar.set_postfix(errors=len(run.errors))

    config = load_config(course)
    source_json = course.source(lab).read_text()
    tasks, warnings = [], {}
    for student in todo:
        path, warning = find_submission(course, lab, student)
        job = sanitize(course, config, lab, student, path) if path else None
        if job is None or job.error:
            finish(Attempt(lab, student, ERROR, reason=job.error if job else warning))
            continue
        warnings[student] = warning
        tasks.append(Task(lab, student, job.key, nbformat.writes(job.notebook), source_json, options.limits,
                          options.sandboxed))

    executor = DaskExecutor(options.scheduler) if options.scheduler else LocalExecutor(options.worker_count())
    recorder = recording_api(course)
    try:
        for task, result in executor.run(tasks):
            began = time.perf_counter()
            reason = result.error or record(course, recorder, lab, task.student, task.key, result)
            timings = {**result.timings, "recording": round(time.perf_counter() - began, 3)}
            finish(Attempt(lab, task.student, ERROR if reason else GRADED, reason=reason or "",
                           seconds=result.seconds, warning=warnings.get(task.student, ""), timings=timings))
    finally:
        if isinstance(executor, DaskExecutor):
            executor.close()
        bar.close()
    run.seconds = time.perf_counter() - start
    return run


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="nb", disable=not enabled, leave=False)
