"""The weekly schedule: ``course.toml`` at the course root, committed, written by the instructor.

Conventions (stated here once; ``mlbook check`` enforces them):
- ``timezone`` (an IANA name, e.g. ``"Europe/London"``) is the zone of every date written
  without an offset. Dates are TOML datetimes (``2027-01-18T23:59:00``, or with an offset
  ``2027-01-18T23:59:00+01:00``) or the same as strings; a date without a time is refused.
- ``[labs.<lab>]`` has ``release`` and ``due`` for every lab of the course, ``due`` after
  ``release``; a lab named here must exist in ``notebooks/``.
- ``[late]`` is the late policy of every lab: ``policy`` is ``"none"`` (late work keeps its
  score; hours late are still shown), ``"per_hour"`` or ``"per_day"`` (``percent`` of the score
  earned per started hour or day late, at most ``cap_percent``) or ``"zero"`` (a late
  submission scores 0). ``grace_minutes`` after the due date count as on time;
  ``zero_after_hours`` (optional, any policy) is the cutoff: later than that after the due date
  scores 0, and ``mlbook collect`` prefers an earlier attempt.
- Internally every instant is an aware ``datetime`` in UTC; nbgrader's gradebook holds naive
  UTC (``utc_naive``).

A course without ``course.toml`` has no schedule: no due dates, nothing is late.

    timezone = "Europe/London"

    [late]
    policy = "per_day"
    percent = 10
    cap_percent = 50
    zero_after_hours = 168

    [labs.lab01_hand_attention]
    release = 2027-01-11T09:00:00
    due = 2027-01-18T23:59:00
"""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mlbook.course import Course
from mlbook.errors import MlbookError

SCHEDULE_NAME = "course.toml"
POLICIES = ("none", "per_hour", "per_day", "zero")
UTC = dt.timezone.utc


@dataclass(frozen=True)
class LatePolicy:
    policy: str = "none"
    percent: float = 0.0
    cap_percent: float = 100.0
    grace_minutes: float = 0.0
    zero_after_hours: float | None = None

    def describe(self) -> str:
        """The policy in one line, for students and TAs."""
        if self.policy == "none":
            text = "late work keeps its score"
        elif self.policy == "zero":
            text = "late work scores 0"
        else:
            unit = "hour" if self.policy == "per_hour" else "day"
            text = f"{self.percent:g}% of the score per started {unit} late, at most {self.cap_percent:g}%"
        if self.grace_minutes:
            text += f" (after {self.grace_minutes:g} minutes' grace)"
        if self.zero_after_hours is not None and self.policy != "zero":
            text += f"; more than {self.zero_after_hours:g} hours late scores 0"
        return text


@dataclass(frozen=True)
class LabDates:
    lab: str
    release: dt.datetime | None
    due: dt.datetime | None


@dataclass
class Schedule:
    """``course.toml`` as read; ``problems`` lists what is wrong with it (empty when fine)."""

    path: Path
    timezone: ZoneInfo | None
    late: LatePolicy
    labs: dict[str, LabDates] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def due(self, lab: str) -> dt.datetime | None:
        dates = self.labs.get(lab)
        return dates.due if dates else None

    def cutoff(self, lab: str, due: dt.datetime | None = None) -> dt.datetime | None:
        """When a submission stops counting at all (due date, or ``due``, plus the cutoff)."""
        due = due or self.due(lab)
        if due is None or self.late.zero_after_hours is None:
            return None
        return due + dt.timedelta(hours=self.late.zero_after_hours)

    def local(self, when: dt.datetime) -> str:
        """An instant as the course reads it: ``2027-01-18 23:59 GMT``."""
        zone = self.timezone or UTC
        return when.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")


def schedule_path(course: Course) -> Path:
    return course.root / SCHEDULE_NAME


def read_schedule(course: Course) -> Schedule | None:
    """The course's schedule, or None when it has no ``course.toml``. Never raises for a wrong
    entry: each is a line of ``Schedule.problems`` naming the key (``mlbook check`` prints them)."""
    path = schedule_path(course)
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return Schedule(path, None, LatePolicy(), problems=[f"{SCHEDULE_NAME} is not valid TOML: {exc}"])
    problems: list[str] = []
    zone = None
    name = data.get("timezone")
    if not isinstance(name, str) or not name:
        problems.append(f'{SCHEDULE_NAME}: `timezone` is missing (an IANA name such as "Europe/London")')
    else:
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(f"{SCHEDULE_NAME}: timezone {name!r} is not a known IANA time zone")
    late = _late_policy(data.get("late", {}), problems)
    labs: dict[str, LabDates] = {}
    table = data.get("labs", {})
    if not isinstance(table, dict):
        problems.append(f"{SCHEDULE_NAME}: `labs` must be a table of [labs.<lab>] entries")
        table = {}
    for lab, entry in table.items():
        if not isinstance(entry, dict):
            problems.append(f"{SCHEDULE_NAME}: labs.{lab} must be a table with `release` and `due`")
            continue
        release = _instant(entry.get("release"), zone, f"labs.{lab}.release", problems)
        due = _instant(entry.get("due"), zone, f"labs.{lab}.due", problems)
        labs[lab] = LabDates(lab, release, due)
    for key in sorted(set(data) - {"timezone", "late", "labs"}):
        problems.append(f"{SCHEDULE_NAME}: unknown key `{key}` (known: timezone, late, labs)")
    return Schedule(path, zone, late, labs, problems)


def load_schedule(course: Course) -> Schedule | None:
    """The schedule for grading: None without ``course.toml``; a broken one raises with its problems."""
    schedule = read_schedule(course)
    if schedule is not None and schedule.problems:
        raise MlbookError(f"{SCHEDULE_NAME} has {len(schedule.problems)} problem(s); run `mlbook check`: "
                          + "; ".join(schedule.problems[:3]))
    return schedule


def lab_problems(schedule: Schedule, lab: str) -> list[str]:
    """What is wrong with one lab's dates."""
    dates = schedule.labs.get(lab)
    if dates is None:
        return [f"{lab} has no entry in {SCHEDULE_NAME} ([labs.{lab}] with `release` and `due`)"]
    problems = []
    if dates.release is None:
        problems.append(f"{SCHEDULE_NAME}: labs.{lab} has no valid release date")
    if dates.due is None:
        problems.append(f"{SCHEDULE_NAME}: labs.{lab} has no valid due date")
    if dates.release and dates.due and dates.due <= dates.release:
        problems.append(f"{SCHEDULE_NAME}: labs.{lab} is due ({schedule.local(dates.due)}) before it is released "
                        f"({schedule.local(dates.release)})")
    return problems


def _late_policy(table, problems: list[str]) -> LatePolicy:
    if not isinstance(table, dict):
        problems.append(f"{SCHEDULE_NAME}: `late` must be a table")
        return LatePolicy()
    known = {"policy", "percent", "cap_percent", "grace_minutes", "zero_after_hours"}
    for key in sorted(set(table) - known):
        problems.append(f"{SCHEDULE_NAME}: late.{key} is not a setting (known: {', '.join(sorted(known))})")
    policy = table.get("policy", "none")
    if policy not in POLICIES:
        problems.append(f"{SCHEDULE_NAME}: late.policy {policy!r} is not one of {', '.join(POLICIES)}")
        policy = "none"

    def number(key: str, default, low: float = 0.0, high: float | None = None):
        value = table.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or (high is not None and value > high):
            bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
            problems.append(f"{SCHEDULE_NAME}: late.{key} is {value!r}; it must be a number {bound}")
            return default
        return float(value)

    percent = number("percent", 0.0, 0.0, 100.0)
    if policy in ("per_hour", "per_day") and not percent:
        problems.append(f"{SCHEDULE_NAME}: late.policy {policy!r} needs late.percent (the share of the score lost "
                        "per started hour or day)")
    return LatePolicy(policy, percent, number("cap_percent", 100.0, 0.0, 100.0), number("grace_minutes", 0.0),
                      number("zero_after_hours", None))


def _instant(value, zone: ZoneInfo | None, key: str, problems: list[str]) -> dt.datetime | None:
    """A schedule date as an aware UTC datetime (None, with a problem, when it is not one)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            problems.append(f"{SCHEDULE_NAME}: {key} = {value!r} is not a date and time (write 2027-01-18T23:59:00)")
            return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        problems.append(f"{SCHEDULE_NAME}: {key} = {value} has no time of day (write {value}T23:59:00)")
        return None
    if not isinstance(value, dt.datetime):
        problems.append(f"{SCHEDULE_NAME}: {key} = {value!r} is not a date and time")
        return None
    if value.tzinfo is None:
        if zone is None:
            return None  # the missing time zone is already a problem
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def utc_naive(when: dt.datetime) -> dt.datetime:
    """An aware instant as nbgrader's gradebook stores it (naive, UTC)."""
    return when.astimezone(UTC).replace(tzinfo=None)


def from_gradebook(when: dt.datetime | None) -> dt.datetime | None:
    """A gradebook instant (naive UTC) as an aware one."""
    return None if when is None else when.replace(tzinfo=UTC)


def sync_gradebook(course: Course, labs: list[str]) -> None:
    """Write each scheduled lab's due date into nbgrader's gradebook (``Assignment.duedate``),
    so nbgrader's own late computation (``SubmittedAssignment.total_seconds_late``, its
    late-submission plugin, ``nbgrader db assignment list``, the formgrader) agrees with the
    schedule. Labs not yet in the gradebook are left to their registration."""
    schedule = load_schedule(course)
    if schedule is None:
        return
    from mlbook.nbgrader_env import gradebook

    with gradebook(course) as gb:
        write_due_dates(gb, schedule, labs)


def write_due_dates(gb, schedule: Schedule | None, labs: list[str]) -> None:
    """``sync_gradebook`` on a gradebook the caller has open (``gb``), with its schedule."""
    if schedule is None:
        return
    from nbgrader.api import MissingEntry

    for lab in labs:
        due = schedule.due(lab)
        try:
            assignment = gb.find_assignment(lab)
        except MissingEntry:
            continue
        wanted = utc_naive(due) if due else None
        if assignment.duedate != wanted:
            assignment.duedate = wanted
            gb.db.commit()


def release_gate(course: Course, lab: str, early: bool = False, now: dt.datetime | None = None) -> str | None:
    """May ``lab`` be released now? The rule of ``mlbook release`` and ``mlbook hub release``.

    A course without ``course.toml`` releases at once. Otherwise the schedule must be one that
    ``mlbook check`` accepts (it reads, it names only real labs, this lab has a release and a
    due date, due after release), and the lab's release date must have passed.

    Args:
        course: the course.
        lab: the lab to release.
        early: ``--now``: release before the release date (a warning instead of a refusal).
        now: the current instant (aware); the clock's when None.
    Returns:
        None when the release is on schedule, or the warning to print when ``early`` overrides it.
    Raises:
        MlbookError: the schedule is refused, or the lab is not yet due for release and not ``early``.
    """
    schedule = read_schedule(course)
    if schedule is None:
        return None
    known = set(course.labs())
    problems = list(schedule.problems) + lab_problems(schedule, lab)
    problems += [f"{SCHEDULE_NAME} schedules {other!r}, which is not a lab of this course"
                 for other in schedule.labs if other not in known]
    if problems:
        raise MlbookError(f"{lab} is not released: {SCHEDULE_NAME} has {len(problems)} problem(s) that "
                          f"`mlbook check` reports; fix them first: " + "; ".join(problems[:3]))
    release = schedule.labs[lab].release
    now = (now or dt.datetime.now(UTC)).astimezone(UTC)
    if now >= release:
        return None
    when = schedule.local(release)
    if not early:
        raise MlbookError(f"{lab} is scheduled for release on {when} ({SCHEDULE_NAME}), not before: it is not "
                          f"released now. Run again then, or add --now to release it early")
    return f"warning: {lab} is scheduled for release on {when} ({SCHEDULE_NAME}); releasing it early (--now)"
