"""Step 3 of grading, in one process only: record a sandbox result in nbgrader's gradebook.

Recording is nbgrader's own autograder with one part swapped: ``SandboxedExecute`` takes the
place of nbgrader's ``Execute``. It does not start a kernel; it takes the result the sandbox
already produced for this exact notebook (``Job.key``), handed to it by the ``Recorder`` that
called nbgrader, with the lab's plan, and copies its outputs in, with the test cells' outputs
set from the judge's verdicts (``verdicts.apply``). nbgrader then scores the cells, writes the
gradebook and the autograded notebook as usual.

Writes are atomic per submission: nbgrader writes into ``autograded/.staging``; only a complete
result is moved into ``autograded/<student>/<lab>``, and the status file says ``graded`` after
that. A run killed at any point leaves either the old result or the new one, and a rerun
grades whatever is not marked graded.

nbgrader never reads ``submitted/``: its submitted folder is the grader's private copy of each
submission (``intake.INTAKE``, the notebook only, checked without following links), so no
other file of a student's folder is copied into ``autograded/`` (nor, from there, ``feedback/``).
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from mlbook.course import Course
from traitlets.config import Config

from mlbook.nbgrader_env import api_with, failure_reason, load_config
from mlbook.judge.plan import LabPlan
from mlbook.sandbox.notebook import SandboxResult
from mlbook.judge import verdicts
from mlbook.grading.intake import INTAKE, TIMESTAMP
from mlbook.grading.prepare import job_key
from mlbook.calendar.extensions import ensure_submission

STAGING = "autograded/.staging"


class SubmissionFailed(Exception):
    """The submission failed as a whole; the message is the reason."""


class SandboxedExecute(NbGraderPreprocessor):
    """nbgrader's Execute, replaced: the outputs come from the sandbox, the verdicts from the judge.
    Each ``Recorder`` makes its own subclass whose ``recorder`` is itself (nbgrader instantiates
    the classes its configuration names; a class is how an object reaches the instance)."""

    recorder: "Recorder"

    def preprocess(self, nb, resources):
        result, plan = self.recorder.expected(nb)
        nb = verdicts.apply(nb, result.notebook, plan, result.verdicts)
        return nb, resources


@dataclass
class _Pending:
    key: str
    result: SandboxResult
    plan: LabPlan


class Recorder:
    """Records sandbox results in nbgrader's gradebook, one at a time (the one writer).

    Args:
        course: the course whose gradebook and ``autograded/`` folder receive the results.
        config: the course's nbgrader config (``load_config``), when the caller has it already.
    """

    def __init__(self, course: Course, config: Config | None = None):
        self.course = course
        self._pending: _Pending | None = None
        self.api = _recording_api(config if config is not None else load_config(course),
                                  type("SandboxedExecute", (SandboxedExecute,), {"recorder": self}))

    def record(self, lab: str, student: str, key: str, result: SandboxResult, plan: LabPlan) -> str | None:
        """Record one result; returns None on success, else the reason it failed.

        Args:
            key: ``prepare.job_key`` of the notebook the sandbox ran; nbgrader's sanitized copy
                must have the same, or the result is not this notebook's.
            result: what the sandbox and the judge produced.
            plan: the lab's plan the judge used (which cells each verdict covers).
        """
        course = self.course
        self._pending = _Pending(key, result, plan)
        staged = course.root / STAGING / student / lab
        try:
            ensure_submission(course, lab, student)  # the student's extension, for nbgrader's late penalty
            outcome = self.api.autograde(lab, student, force=True, create=True)
        except Exception as exc:  # nbgrader raised instead of reporting: still only this student
            outcome = {"success": False, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            self._pending = None
        if not outcome.get("success") or not (staged / f"{lab}.ipynb").is_file():
            shutil.rmtree(staged, ignore_errors=True)
            return result.error or _reason(outcome)
        publish(staged, course.autograded(student, lab).parent)
        return None

    def expected(self, nb) -> tuple[SandboxResult, LabPlan]:
        """The result being recorded, for nbgrader's sanitized copy ``nb`` of its notebook."""
        pending = self._pending
        if pending is None or pending.key != job_key(nb):
            raise SubmissionFailed("no sandbox result for this notebook (it changed after it was prepared)")
        if pending.result.error:
            raise SubmissionFailed(pending.result.error)
        return pending.result, pending.plan


def _recording_api(course_config: Config, execute: type[SandboxedExecute]):
    """An nbgrader API (on a copy of ``course_config``) whose autograder reads the private intake
    copies, runs ``execute`` in place of a kernel and writes into the staging folder."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput, SaveAutoGrades

    from nbgrader.coursedir import CourseDirectory

    config = copy.deepcopy(course_config)
    ignored = CourseDirectory(config=config).ignore
    config.CourseDirectory.autograded_directory = STAGING
    config.CourseDirectory.submitted_directory = INTAKE
    # nbgrader reads timestamp.txt for late penalties; it is not a file of the graded notebook
    config.CourseDirectory.ignore = [*ignored, TIMESTAMP]
    config.Autograde.autograde_preprocessors = [execute, IgnorePattern, ClearMetadataPreprocessor,
                                                LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    return api_with(config)


def _reason(outcome: dict) -> str:
    text = outcome.get("log", "") + "\n" + outcome.get("error", "")
    for line in reversed(text.splitlines()):
        if "SubmissionFailed" in line:
            return line.split("SubmissionFailed:", 1)[-1].strip()[:300]
    return failure_reason(outcome)


def publish(staged: Path, final: Path) -> None:
    """Move a complete autograded folder into place (rename: never half there)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)
