"""Late work: hours late and the penalty, computed by one function wherever a score is shown.

Conventions:
- A submission's time is nbgrader's: ``timestamp.txt`` in its folder (``mlbook collect`` writes
  the LMS's submission time there), recorded by nbgrader's autograder as
  ``SubmittedAssignment.timestamp``. Its due date is the schedule's (``course.toml``), or the
  student's extension (``extensions.toml``) when there is one.
- The penalty is a share of the *score earned* (``penalty``): nbgrader's ``zero`` method is
  the 100% case. It is applied in two places with the same function: nbgrader's late-submission
  plugin (``SchedulePenalty``, configured in ``nbgrader_config.py``) stores it in the gradebook
  when a submission is autograded, and ``mlbook.outputs.results`` computes it again from the
  score as it stands, so written answers graded after autograding are penalised too; the
  gradebook's stored value is brought up to date by ``refresh_gradebook`` (``mlbook export``
  and ``mlbook feedback`` call it), so ``nbgrader export`` agrees.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path

from nbgrader.plugins import LateSubmissionPlugin

from mlbook.course import Course
from mlbook.calendar.schedule import LatePolicy, Schedule, read_schedule


@dataclass(frozen=True)
class Lateness:
    """How late one submission is."""

    submitted_at: dt.datetime | None
    due: dt.datetime | None  # the student's due date (the extension's when there is one)
    extended: bool = False
    seconds_late: float = 0.0

    @property
    def hours_late(self) -> float:
        return self.seconds_late / 3600.0


def share(policy: LatePolicy, seconds_late: float) -> float:
    """The share (0..1) of the score a submission ``seconds_late`` loses."""
    if seconds_late <= 0 or seconds_late <= policy.grace_minutes * 60:
        return 0.0
    if policy.zero_after_hours is not None and seconds_late > policy.zero_after_hours * 3600:
        return 1.0
    if policy.policy == "zero":
        return 1.0
    if policy.policy in ("per_hour", "per_day"):
        units = math.ceil(seconds_late / (3600 if policy.policy == "per_hour" else 86400))
        return min(policy.cap_percent, policy.percent * units) / 100.0
    return 0.0


def penalty(policy: LatePolicy, score: float, seconds_late: float) -> float:
    """Points taken from ``score`` (never more than it)."""
    return round(max(0.0, score) * share(policy, seconds_late), 6)


def lateness(schedule: Schedule | None, lab: str, submitted_at: dt.datetime | None,
             extended_until: dt.datetime | None = None) -> Lateness:
    due = schedule.due(lab) if schedule else None
    extended = bool(extended_until and due and extended_until > due)
    if extended:
        due = extended_until
    if submitted_at is None or due is None:
        return Lateness(submitted_at, due, extended)
    return Lateness(submitted_at, due, extended, max(0.0, (submitted_at - due).total_seconds()))


class SchedulePenalty(LateSubmissionPlugin):
    """nbgrader's late-submission plugin, with the course's policy (``course.toml``).

    nbgrader's ``AssignLatePenalties`` calls it for each late notebook with nbgrader's own
    seconds late (counted from the gradebook's due date plus the student's extension, both
    written by mlbook from the schedule). Without a schedule it assigns nothing."""

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float):
        root = self.config.CourseDirectory.get("root") or "."
        schedule = read_schedule(Course(Path(str(root))))
        if schedule is None or schedule.problems:
            return None
        points = penalty(schedule.late, score, total_seconds_late)
        self.log.info("late by %.0f s: penalty %g of %g (%s)", total_seconds_late, points, score,
                      schedule.late.describe())
        return points or None


def refresh_gradebook(course: Course, lab: str) -> None:
    """Bring nbgrader's stored penalties up to date with the scores as they stand now (a
    written answer graded after autograding changes the score the share is taken of)."""
    schedule = read_schedule(course)
    if schedule is None or schedule.problems:
        return
    from nbgrader.api import MissingEntry

    from mlbook.nbgrader_env import gradebook

    with gradebook(course) as gb:
        try:
            assignment = gb.find_assignment(lab)
        except MissingEntry:
            return
        changed = False
        for submission in assignment.submissions:
            seconds = submission.total_seconds_late
            for notebook in submission.notebooks:
                wanted = penalty(schedule.late, notebook.score, seconds) if seconds > 0 else 0.0
                if (notebook.late_submission_penalty or 0.0) != wanted:
                    notebook.late_submission_penalty = wanted or None
                    changed = True
        if changed:
            gb.db.commit()
