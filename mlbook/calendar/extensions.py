"""Extensions: ``extensions.toml`` at the course root, written by ``mlbook extend``.

One table per lab, one entry per student: the new due date (UTC, ISO 8601) and when it was
granted. It sits beside ``course.toml`` and is committed with the course (it names students:
keep the course repository private). A student with an extension is late only after it, and
nbgrader's gradebook carries the same extension (``SubmittedAssignment.extension``), so
nbgrader's own hours late agree.

    [lab01_hand_attention]
    "ada" = { until = "2027-01-20T23:59:00+00:00", granted = "2027-01-17T10:02:11+00:00" }
"""

from __future__ import annotations

import datetime as dt
import json
import tomllib

from mlbook.course import Course, student_id_problem
from mlbook.errors import MlbookError
from mlbook.files import write_atomic
from mlbook.calendar.schedule import UTC, from_gradebook, load_schedule, utc_naive

EXTENSIONS_NAME = "extensions.toml"


def read_extensions(course: Course) -> dict[str, dict[str, dt.datetime]]:
    """lab -> student -> extended due date (aware, UTC)."""
    path = course.root / EXTENSIONS_NAME
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MlbookError(f"{EXTENSIONS_NAME} is not valid TOML: {exc}") from None
    out: dict[str, dict[str, dt.datetime]] = {}
    for lab, entries in data.items():
        for student, entry in (entries or {}).items():
            try:
                until = dt.datetime.fromisoformat(entry["until"]).astimezone(UTC)
            except (KeyError, TypeError, ValueError):
                raise MlbookError(f"{EXTENSIONS_NAME}: {lab}.{student} has no valid `until`") from None
            out.setdefault(lab, {})[student] = until
    return out


def extension(course: Course, lab: str, student: str) -> dt.datetime | None:
    return read_extensions(course).get(lab, {}).get(student)


def grant(course: Course, lab: str, student: str, until: dt.datetime) -> dt.datetime:
    """Record an extension (replacing an earlier one) and mirror it into the gradebook."""
    if problem := student_id_problem(student):
        raise MlbookError(f"refused: {problem}")
    until = until.astimezone(UTC)
    path = course.root / EXTENSIONS_NAME
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.setdefault(lab, {})[student] = {"until": until.isoformat(),
                                         "granted": dt.datetime.now(UTC).replace(microsecond=0).isoformat()}
    write_atomic(path, _toml(data))
    mirror(course, lab, student)
    return until


def mirror(course: Course, lab: str, student: str) -> None:
    """Set nbgrader's ``SubmittedAssignment.extension`` from ``extensions.toml`` (when the
    gradebook has the submission; recording a submission calls this again)."""
    from nbgrader.api import MissingEntry

    from mlbook.nbgrader_env import gradebook

    schedule = load_schedule(course)
    due = schedule.due(lab) if schedule else None
    until = extension(course, lab, student)
    with gradebook(course) as gb:
        try:
            submission = gb.find_submission(lab, student)
        except MissingEntry:
            return
        base = from_gradebook(submission.assignment.duedate) or due
        wanted = (utc_naive(until) - utc_naive(base)) if until and base and until > base else None
        if submission.extension != wanted:
            submission.extension = wanted
            gb.db.commit()


def ensure_submission(course: Course, lab: str, student: str) -> None:
    """Before nbgrader records a submission: the student and the submission exist in the
    gradebook with the student's extension, so nbgrader's late penalty counts from it."""
    if extension(course, lab, student) is None:
        return
    from nbgrader.api import MissingEntry

    from mlbook.nbgrader_env import gradebook

    with gradebook(course) as gb:
        try:
            gb.find_student(student)
        except MissingEntry:
            gb.add_student(student)
        gb.update_or_create_submission(lab, student)
    mirror(course, lab, student)


def _toml(data: dict[str, dict[str, dict[str, str]]]) -> str:
    """``extensions.toml`` text: JSON string escapes are valid TOML basic strings."""
    lines = ["# Written by `mlbook extend LAB STUDENT --until ...`; one table per lab.", ""]
    for lab in sorted(data):
        lines.append(f"[{json.dumps(lab)}]")
        for student in sorted(data[lab]):
            entry = ", ".join(f"{k} = {json.dumps(str(v), ensure_ascii=False)}" for k, v in data[lab][student].items())
            lines.append(f"{json.dumps(student, ensure_ascii=False)} = {{ {entry} }}")
        lines.append("")
    return "\n".join(lines)
