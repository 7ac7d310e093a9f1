"""``mlbook collect LAB ZIP``: an LMS's bulk download placed in nbgrader's layout.

For each student of the roster (nbgrader's student table, ``mlbook roster import``) the
download's notebooks are matched to the lab by their cells' grade ids (a renamed notebook is
found; a notebook of another lab is not taken), and one is chosen: the latest attempt
(``records.Entry.order``) submitted before the cutoff (``course.toml``'s
``zero_after_hours``, from the student's due date), else the latest. It is written to
``submitted/<student>/<lab>/<lab>.ipynb`` with nbgrader's ``timestamp.txt`` holding the
submission time, both atomically, through folders opened without following links.

Submission times, in order: ``--times FILE`` (CSV with ``submitted_at``, ISO 8601, and one of
``file_id`` (Canvas's attachment id: one row per attempt), ``lms_id`` or ``student``; e.g. from
Canvas's submissions API, ``submission_history``); else for Canvas, whose zip
entries carry the time the zip was made, the ``LATE`` marker decides: a file Canvas does not
mark late counts as handed in at the due date at the latest, a file it marks late as one second
after the due date (a warning says its real lateness needs ``--times``); else (Moodle, a
pattern) each entry's own time, read in the course's time zone (a zip stores local time).

Nothing is dropped silently: every file not taken is listed with its reason (``unmatched``: no
student, not a notebook, not this lab, too large, unreadable; ``ignored``: an earlier attempt,
after the cutoff), and every roster student with no notebook is ``missing``. A hostile archive
(``zipread``) is refused as a whole before anything is written.

Re-running with a newer download changes only what changed: a submission whose notebook and
time are the same as on disk is not touched; a changed one is rewritten and its grading status
cleared (``StatusStore.forget``), so the next ``mlbook autograde`` grades it again and skips the
rest. A student absent from a newer download keeps what was collected before (an LMS download
filtered to "needs grading" holds only some students). What each collected submission came from (entry, LMS ids, the name prefix the hand-back
zip needs) is kept in ``submitted/.collected/<lab>.json``.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlbook.course import Course, student_id_problem
from mlbook.errors import MlbookError
from mlbook.files import write_atomic
from mlbook.grading.intake import TIMESTAMP
from mlbook.grading.status import StatusStore
from mlbook.lms import formats
from mlbook.lms.formats.base import LmsFormat
from mlbook.lms.formats.pattern import compile_pattern
from mlbook.lms.records import Entry, RosterEntry, Unparsed, name_key
from mlbook.calendar.extensions import read_extensions
from mlbook.lms.roster import roster
from mlbook.calendar.schedule import UTC, Schedule, load_schedule
from mlbook.lms.zipread import BadFile, Refused, SafeZip, shown
from mlbook.sandbox.limits import Limits

MANIFEST_DIR = ".collected"


@dataclass
class Candidate:
    entry: Entry
    student: str
    submitted_at: dt.datetime | None
    sha256: str
    kind: str  # "lab" | "unreadable" | "other"


@dataclass
class CollectReport:
    lab: str
    format: str
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    unmatched: list[tuple[str, str]] = field(default_factory=list)  # (entry, reason)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    late: dict[str, str] = field(default_factory=dict)  # student -> submission time, for the late ones

    @property
    def collected(self) -> list[str]:
        return sorted(self.added + self.updated + self.unchanged)


def manifest_path(course: Course, lab: str) -> Path:
    return course.submitted_dir / MANIFEST_DIR / f"{lab}.json"


def read_manifest(course: Course, lab: str) -> dict:
    path = manifest_path(course, lab)
    if not path.is_file():
        return {"students": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def timestamp_text(when: dt.datetime) -> str:
    """``timestamp.txt`` as nbgrader writes and reads it (``nbgrader.utils.parse_utc``)."""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def collect(course: Course, lab: str, zip_path: Path, fmt: str, *, pattern: str | None = None,
            times: Path | None = None, max_file: int | None = None) -> CollectReport:
    """Collect one lab's submissions from an LMS bulk download; see the module docstring."""
    lms = formats.named(fmt, "downloads")
    compiled = compile_pattern(pattern) if pattern is not None else None
    if not course.source(lab).is_file():
        raise MlbookError(f"{lab}: no source notebook; run `mlbook build {lab}` first")
    schedule = load_schedule(course)
    people = roster(course)
    if not people and lms.needs_roster:
        raise MlbookError("the gradebook has no students: run `mlbook roster import FILE` with the LMS's class list first")
    given_times = _read_times(times, schedule) if times else {}
    extended = read_extensions(course).get(lab, {})
    wanted = _grade_ids(course.source(lab).read_bytes()) or set()
    report = CollectReport(lab, lms.name)
    max_file = max_file or Limits().submission_bytes
    try:
        archive = SafeZip(zip_path, max_file=max_file)
    except Refused as exc:
        raise MlbookError(f"refused: {exc}; nothing was collected") from None
    except FileNotFoundError:
        raise MlbookError(f"no such file: {zip_path}") from None
    with archive:
        try:
            by_student = _candidates(archive, lms, compiled, people, wanted, given_times, schedule, lab, report)
        except Refused as exc:
            raise MlbookError(f"refused: {exc}; nothing was collected") from None
        chosen = _choose(by_student, schedule, lab, extended, report)
        previous = read_manifest(course, lab)
        store = StatusStore(course.status_file)
        archive.read_bytes = 0  # the second reads are a subset of the first, which stayed under the cap
        for student, candidate in sorted(chosen.items()):
            try:
                data = archive.read(candidate.entry.member)
            except (BadFile, Refused) as exc:
                report.unmatched.append((candidate.entry.member.name, f"could not be read again: {exc}"))
                continue
            if hashlib.sha256(data).hexdigest() != candidate.sha256:
                report.unmatched.append((candidate.entry.member.name, "changed between two reads of the archive"))
                continue
            stamp = timestamp_text(candidate.submitted_at) if candidate.submitted_at else None
            try:
                outcome = _place(course, student, lab, data, stamp)
            except (OSError, MlbookError) as exc:
                report.unmatched.append((candidate.entry.member.name, f"could not be written for {student}: {exc}"))
                continue
            getattr(report, outcome).append(student)
            if outcome != "unchanged":
                store.forget(lab, student)
            previous["students"][student] = {
                "entry": candidate.entry.member.name, "file": candidate.entry.filename, "sha256": candidate.sha256,
                "submitted_at": candidate.submitted_at.isoformat() if candidate.submitted_at else None,
                "format": lms.name, "prefix": candidate.entry.prefix, "lms_ref": candidate.entry.lms_ref,
                "lms_late": candidate.entry.late}
    previous["format"] = lms.name
    write_atomic(manifest_path(course, lab), json.dumps(previous, indent=1, ensure_ascii=False, sort_keys=True))
    have = set(chosen) | set(previous["students"])
    report.missing = sorted(p.id for p in people if p.id not in have and not course.has_submission(p.id, lab))
    return report


def _candidates(archive: SafeZip, lms: LmsFormat, pattern, people: list[RosterEntry], wanted: set[str],
                given_times: dict[str, dt.datetime], schedule: Schedule | None, lab: str,
                report: CollectReport) -> dict[str, list[Candidate]]:
    by_lms = {p.lms_user_id: p for p in people if p.lms_user_id}
    by_id = {p.id: p for p in people}
    by_name: dict[str, list[RosterEntry]] = {}
    for p in people:
        for key in {name_key(f"{p.first_name} {p.last_name}"), name_key(f"{p.last_name} {p.first_name}")}:
            if key:
                by_name.setdefault(key, []).append(p)
    out: dict[str, list[Candidate]] = {}
    for member in archive.members:
        parsed = lms.parse(member, pattern)
        if isinstance(parsed, Unparsed):
            report.unmatched.append((member.name, parsed.reason))
            continue
        student, reason = _who(parsed, by_lms, by_id, by_name, people, lms)
        if not student:
            report.unmatched.append((member.name, reason))
            continue
        if not parsed.filename.lower().endswith(".ipynb"):
            suffix = Path(parsed.filename).suffix or "no extension"
            report.unmatched.append((member.name, f"{student}: not a notebook ({suffix}); only .ipynb files are collected"))
            continue
        try:
            data = archive.read(member)
        except BadFile as exc:
            report.unmatched.append((member.name, f"{student}: refused: {exc}"))
            continue
        ids = _grade_ids(data)
        if ids is None:
            kind = "unreadable"
        elif wanted and len(ids & wanted) * 2 >= len(wanted):
            kind = "lab"
        else:
            report.unmatched.append((member.name, f"{student}: not a notebook of {lab} (its cells carry "
                                                  f"{len(ids & wanted)} of the lab's {len(wanted)} grade ids)"))
            continue
        when = _submitted_at(parsed, student, lms, given_times, schedule, lab, report)
        out.setdefault(student, []).append(Candidate(parsed, student, when, hashlib.sha256(data).hexdigest(), kind))
    return out


def _who(entry: Entry, by_lms, by_id, by_name, people, lms: LmsFormat) -> tuple[str, str]:
    """The student an entry belongs to, or "" and why not."""
    if entry.key_kind == "lms_id":
        person = by_lms.get(entry.key)
        if person is None:
            return "", (f"no student in the roster has {lms.user_id} {entry.key} ({shown(entry.display_name)}); "
                        "import the current class list with `mlbook roster import`")
        return person.id, ""
    if entry.key_kind == "name":
        found = by_name.get(name_key(entry.key), [])
        if len(found) == 1:
            return found[0].id, ""
        if not found:
            hint = " (blind marking hides names: reveal identities before downloading)" \
                if name_key(entry.key) == "participant" else ""
            return "", f"no student in the roster is named {shown(entry.key)!r}{hint}"
        return "", (f"{len(found)} roster students are named {shown(entry.key)!r} "
                    f"({', '.join(p.id for p in found)}); collect them by hand")
    if problem := student_id_problem(entry.key):
        return "", f"refused: {problem}"
    if people and entry.key not in by_id:
        return "", f"no student {shown(entry.key)!r} in the roster"
    return entry.key, ""


def _submitted_at(entry: Entry, student: str, lms: LmsFormat, given: dict[str, dt.datetime], schedule: Schedule | None,
                  lab: str, report: CollectReport) -> dt.datetime | None:
    for key in (entry.file_ref, entry.lms_ref, student, entry.key):
        if key and key in given:
            return given[key]
    zone = (schedule.timezone if schedule else None) or UTC
    entry_time = entry.member.modified.replace(tzinfo=zone).astimezone(UTC)
    when, warning = lms.submitted_at(entry, entry_time, schedule.due(lab) if schedule else None)
    if warning:
        report.warnings.append(f"{student}: " + warning.format(entry=shown(entry.member.name)))
    return when


def _choose(by_student: dict[str, list[Candidate]], schedule: Schedule | None, lab: str,
            extended: dict[str, dt.datetime], report: CollectReport) -> dict[str, Candidate]:
    chosen = {}
    for student, candidates in by_student.items():
        pool = [c for c in candidates if c.kind == "lab"] or candidates  # an unreadable one only if nothing else
        due = schedule.due(lab) if schedule else None
        if due and extended.get(student) and extended[student] > due:
            due = extended[student]
        cutoff = schedule.cutoff(lab, due) if schedule and due else None
        in_time = [c for c in pool if cutoff is None or c.submitted_at is None or c.submitted_at <= cutoff]
        best = max(in_time or pool, key=lambda c: c.entry.order)
        chosen[student] = best
        if best.kind == "unreadable":
            report.warnings.append(f"{student}: {shown(best.entry.member.name)} is not a readable notebook; collected "
                                   "anyway, so grading records the error with its reason")
        if due and best.submitted_at and best.submitted_at > due:
            report.late[student] = schedule.local(best.submitted_at) if schedule else best.submitted_at.isoformat()
        for other in candidates:
            if other is best:
                continue
            if other.kind != "lab" and best.kind == "lab":
                why = "not a readable notebook; a readable attempt was collected"
            elif cutoff and other.submitted_at and other.submitted_at > cutoff and in_time:
                why = f"after the cutoff ({schedule.local(cutoff)}); the attempt before it counts"
            else:
                why = f"an earlier attempt; {shown(best.entry.member.name)} is the latest"
            report.ignored.append((other.entry.member.name, f"{student}: {why}"))
    return chosen


def _grade_ids(data: bytes) -> set[str] | None:
    """The grade ids of a notebook's cells, or None when it is not a readable notebook."""
    try:
        nb = json.loads(data.decode("utf-8"))
        cells = nb["cells"]
        return {c["metadata"]["nbgrader"]["grade_id"] for c in cells
                if isinstance(c, dict) and isinstance(c.get("metadata", {}).get("nbgrader"), dict)
                and isinstance(c["metadata"]["nbgrader"].get("grade_id"), str)}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _read_times(path: Path, schedule: Schedule | None) -> dict[str, dt.datetime]:
    """``--times``: key (file_id, lms_id or student) -> submission time."""
    zone = (schedule.timezone if schedule else None) or UTC
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")))
    except (OSError, UnicodeDecodeError) as exc:
        raise MlbookError(f"cannot read {path}: {exc}") from None
    out = {}
    for number, row in enumerate(rows, start=2):
        key = (row.get("file_id") or row.get("lms_id") or row.get("student") or "").strip()
        text = (row.get("submitted_at") or "").strip()
        if not key or not text:
            raise MlbookError(f"{path.name}, line {number}: needs `file_id`, `lms_id` or `student`, and `submitted_at`")
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise MlbookError(f"{path.name}, line {number}: {text!r} is not an ISO 8601 time") from None
        out[key] = (when if when.tzinfo else when.replace(tzinfo=zone)).astimezone(UTC)
    return out


# --- writing: through folders opened without following links ---------------------------------

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(parent: int, name: str, create: bool) -> int:
    if create:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except OSError as exc:
        raise MlbookError(f"{name} is not a plain folder (a link or a file); fix it by hand") from exc


def _read_file(folder: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # a link or something else: rewritten below
    with os.fdopen(fd, "rb") as handle:
        return handle.read(Limits().submission_bytes + 1)


def _write_file(folder: int, name: str, data: bytes) -> None:
    """Write ``name`` in ``folder`` atomically (a temporary file renamed over it)."""
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
        raise


def _place(course: Course, student: str, lab: str, notebook: bytes, stamp: str | None) -> str:
    """Write one submission; returns "added", "updated" or "unchanged"."""
    course.submitted(student, lab)  # the id is checked here
    course.submitted_dir.mkdir(parents=True, exist_ok=True)
    top = os.open(course.submitted_dir, _DIR)
    try:
        student_fd = _open_dir(top, student, create=True)
    finally:
        os.close(top)
    try:
        lab_fd = _open_dir(student_fd, lab, create=True)
    finally:
        os.close(student_fd)
    try:
        old_nb = _read_file(lab_fd, f"{lab}.ipynb")
        old_stamp = _read_file(lab_fd, TIMESTAMP)
        new_stamp = (stamp + "\n").encode() if stamp else None
        if old_nb == notebook and old_stamp == new_stamp:
            return "unchanged"
        _write_file(lab_fd, f"{lab}.ipynb", notebook)
        if new_stamp is not None:
            _write_file(lab_fd, TIMESTAMP, new_stamp)
        elif old_stamp is not None:
            os.unlink(TIMESTAMP, dir_fd=lab_fd)
        return "added" if old_nb is None else "updated"
    finally:
        os.close(lab_fd)

