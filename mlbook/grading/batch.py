"""Autograde a class: prepare (here) -> execute (sandboxes, in parallel) -> record (here, one writer).

What mlbook adds to nbgrader's autograder: student code runs in a sandbox and every test's
verdict is decided outside it (``mlbook.sandbox``); submissions run in parallel or on a Dask
cluster while one process writes the gradebook; a submission that fails as a whole is recorded
as an error with its reason and never stops the batch; a rerun skips what is already graded
unless forced (``mlbook collect`` clears the status of a submission it changed, so that one is
graded again); each lab's due date is written into the gradebook from ``course.toml`` first, so
nbgrader's late penalty counts from it; a progress bar shows done/total, errors and an ETA.
"""

from __future__ import annotations

import copy
import math
import shutil
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

import nbformat

from mlbook.course import Course, student_id_problem
from mlbook.errors import MlbookError
from mlbook.nbgrader_env import api_with, gradebook, load_config
from mlbook.sandbox import bwrap, forkserver, profiles
from mlbook.sandbox.limits import Limits
from mlbook.judge.plan import plan_from_text
from mlbook.labs import settings
from mlbook.grading.status import ERROR, GRADED, Attempt, StatusStore
from mlbook.grading.executors import Task, executor_for
from mlbook.grading.intake import discard
from mlbook.grading.policy import shortcuts
from mlbook.grading.prepare import find_submission, sanitize
from mlbook.grading.record import Recorder
from mlbook.grading.register import assignment_registered, register_assignment
from mlbook.calendar.schedule import load_schedule, write_due_dates


@dataclass
class GradingOptions:
    """How to grade. ``workers`` None: one sandbox per available core, and more while cores
    are idle (``mlbook.grading.admission``)."""

    workers: int | None = None
    scheduler: str | None = None  # a Dask scheduler address, e.g. tcp://10.0.0.5:8786
    limits: Limits = field(default_factory=Limits)
    sandboxed: bool = True


@dataclass
class GradingRun:
    """What one ``autograde`` call did."""

    attempts: list[Attempt] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    at_once: int = 0  # the most sandboxes that ran at once on this machine (0 on a Dask cluster)

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
    """Autograde ``students`` (default: every submission of ``lab``); see ``autograde_labs``."""
    return autograde_labs(course, [lab], students, force=force, progress=progress, on_attempt=on_attempt,
                          options=options)[lab]


def autograde_labs(
    course: Course,
    labs: list[str],
    students: Iterable[str] | Mapping[str, Iterable[str]] | None = None,
    *,
    force: bool = False,
    progress: bool = True,
    on_attempt: Callable[[Attempt], None] | None = None,
    options: GradingOptions | None = None,
) -> dict[str, GradingRun]:
    """Autograde several labs as one batch: every submission of every lab shares the workers,
    so a slow notebook of one lab never leaves a core idle while the next lab waits.

    The steps, each a method of ``_Batch``: ``select`` (who is graded, who is skipped as graded
    already), ``set_up`` (the sandbox checked and warmed; nbgrader's config, API and gradebook
    opened once for the batch; each lab registered and its due dates written), then ``run``
    (``tasks`` prepared as workers free up, executed, each result recorded and ``finish``ed).

    Args:
        course: the course directory.
        labs: the labs (nbgrader assignment ids).
        students: student ids (the same for every lab, or per lab in a mapping); when omitted,
            per lab every student with a ``submitted/<student>/<lab>`` folder.
        force: regrade students already graded.
        progress: show a progress bar on stderr.
        on_attempt: called after each student is recorded.
        options: workers, cluster, limits, sandbox (``GradingOptions``).

    Returns:
        Per lab, the attempts made and the students skipped as already graded.
    """
    batch = _Batch(course, labs, options or GradingOptions())
    batch.select(students, force)
    if batch.todo:
        batch.set_up()
        batch.run(progress, on_attempt)
    return batch.runs


class _Batch:
    """One ``autograde_labs`` call: its course, its options, what it has done so far."""

    def __init__(self, course: Course, labs: list[str], options: GradingOptions):
        self.course, self.labs, self.options = course, labs, options
        self.began = time.perf_counter()
        self.store = StatusStore(course.status_file)
        self.runs = {lab: GradingRun() for lab in labs}
        self.todo: list[tuple[str, str]] = []
        self.warnings: dict[tuple[str, str], str] = {}  # (lab, student) -> what a TA should look at
        self.sources: dict[str, str] = {}  # lab -> its source notebook, read once
        self.config = None  # nbgrader's config of the course, loaded once by ``set_up``
        self.recorder: Recorder | None = None  # the one writer of the gradebook, made by ``set_up``
        self.schedule: _Schedule | None = None
        self.on_attempt: Callable[[Attempt], None] | None = None
        self.bar = None

    def select(self, students, force: bool) -> None:
        """Who is graded (``todo``) and who is skipped as graded already; refuses a bad id."""
        course, labs = self.course, self.labs
        if students is not None and not isinstance(students, Mapping):
            students = dict.fromkeys(labs, list(students))
        for lab in labs:
            for student in (list(students.get(lab, [])) if students is not None else course.students(lab)):
                if problem := student_id_problem(student):
                    raise MlbookError(f"{lab}: refused: {problem}")
                if not course.has_submission(student, lab):  # a link is there too: the intake refuses it
                    raise MlbookError(f"{lab}: no submission for student {student!r} in {course.submitted_dir}")
                if not force and self.store.get(lab, student).status == GRADED \
                        and course.autograded(student, lab).is_file():
                    self.runs[lab].skipped.append((lab, student))
                else:
                    self.todo.append((lab, student))

    def set_up(self) -> None:
        """The sandbox checked and warmed, nbgrader's config, API and gradebook opened once, each
        lab of the batch registered in the gradebook with its due dates from ``course.toml``."""
        course, options = self.course, self.options
        if options.sandboxed and (problem := bwrap.problem()):
            raise MlbookError(f"cannot start the grading sandbox: {problem}")
        if options.sandboxed and not options.scheduler:
            for name in {settings(lab).sandbox_profile for lab, _ in self.todo}:
                forkserver.warm_up(profiles.profile(name))  # preloads while the first submissions are prepared
        self.config = load_config(course)
        self.recorder = Recorder(course, self.config)
        labs = list(dict.fromkeys(lab for lab, _ in self.todo))
        schedule = load_schedule(course)
        with gradebook(course) as gb:  # the batch's one session before recording starts
            new = [lab for lab in labs if not assignment_registered(gb, lab)]
            write_due_dates(gb, schedule, [lab for lab in labs if lab not in new])
        for lab in new:  # a lab's first batch: nbgrader records its cells, then it gets its due date
            register_assignment(course, lab, api_with(copy.deepcopy(self.config)))
        if new and schedule is not None:
            with gradebook(course) as gb:
                write_due_dates(gb, schedule, new)
        self.schedule = _Schedule(self.todo, self.store)

    def tasks(self) -> Iterator[Task]:
        """Check and sanitize submissions one at a time, as workers free up, in the schedule's
        order. A refused submission folder (``intake``) is an error with its reason."""
        course, options = self.course, self.options
        for lab, student in self.schedule:
            intake = find_submission(course, lab, student, options.limits.submission_bytes)
            job = sanitize(course, self.config, lab, student, intake.notebook) if intake.notebook else None
            if job is None or job.error:
                self.finish(Attempt(lab, student, ERROR, reason=job.error if job else intake.error))
                continue
            self.warnings[(lab, student)] = "; ".join(filter(None, (intake.warning, shortcuts(lab, job.notebook))))
            self.schedule.submitted(lab)
            if lab not in self.sources:
                self.sources[lab] = course.source(lab).read_text()
            yield Task(lab, student, job.key, nbformat.writes(job.notebook), self.sources[lab], options.limits,
                       options.sandboxed)

    def finish(self, attempt: Attempt) -> None:
        """An attempt is over: its private copy gone, an error's partial output removed, its status
        recorded, the caller told, the progress bar moved."""
        self.schedule.done(attempt)
        discard(self.course, attempt.student, attempt.lab)  # the private copy of the submission
        if attempt.status == ERROR:
            shutil.rmtree(self.course.autograded(attempt.student, attempt.lab).parent, ignore_errors=True)
        self.store.record(attempt)
        self.runs[attempt.lab].attempts.append(attempt)
        if self.on_attempt:
            self.on_attempt(attempt)
        self.bar.update(1)
        self.bar.set_postfix(errors=sum(len(r.errors) for r in self.runs.values()))

    def run(self, progress: bool, on_attempt: Callable[[Attempt], None] | None) -> None:
        """Every task executed (``executors``), each result recorded by the one writer."""
        labs = self.labs
        self.on_attempt = on_attempt
        self.bar = _progress(len(self.todo), f"autograde {labs[0]}" if len(labs) == 1 else f"autograde {len(labs)} labs",
                             progress)
        executor = executor_for(self.options.workers, self.options.scheduler)
        try:
            for task, result in executor.run(self.tasks()):
                began = time.perf_counter()
                plan = plan_from_text(task.lab, task.source_json)
                reason = result.error or self.recorder.record(task.lab, task.student, task.key, result, plan)
                timings = {**result.timings, "recording": round(time.perf_counter() - began, 3)}
                self.finish(Attempt(task.lab, task.student, ERROR if reason else GRADED, reason=reason or "",
                                    seconds=result.seconds, warning=self.warnings.get((task.lab, task.student), ""),
                                    timings=timings))
        finally:
            executor.close()
            self.bar.close()
        seconds = time.perf_counter() - self.began
        for run in self.runs.values():
            run.seconds = seconds
            run.at_once = executor.peak


class _Schedule:
    """Which submission to prepare next, so the batch does not end with one long notebook
    running alone: the lab expected to take longest first (its median time in earlier runs,
    then in this one), and a lab not timed yet before any other, so its cost is learned early."""

    def __init__(self, todo: list[tuple[str, str]], store: StatusStore):
        self.queues: dict[str, deque[str]] = {}
        for lab, student in todo:
            self.queues.setdefault(lab, deque()).append(student)
        self.seconds = {lab: [a.seconds for a in store.attempts(lab) if a.status == GRADED and a.seconds]
                        for lab in self.queues}
        self.started: set[str] = set()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        while any(self.queues.values()):
            lab = max((lab for lab, queue in self.queues.items() if queue), key=self._expected)
            yield lab, self.queues[lab].popleft()

    def submitted(self, lab: str) -> None:
        """A notebook of ``lab`` went to a worker (a file that failed to prepare teaches nothing)."""
        self.started.add(lab)

    def done(self, attempt: Attempt) -> None:
        if attempt.status == GRADED and attempt.seconds:
            self.seconds[attempt.lab].append(attempt.seconds)

    def _expected(self, lab: str) -> float:
        if self.seconds[lab]:
            return statistics.median(self.seconds[lab])
        if lab not in self.started:
            return math.inf
        known = [statistics.median(s) for s in self.seconds.values() if s]
        return statistics.mean(known) if known else 0.0


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="nb", disable=not enabled, leave=False)
