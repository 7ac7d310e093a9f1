"""A class, its roster and its bulk downloads, built in code from the LMSs' documented formats
(``mlbook.lms.formats``): shared by the LMS tests."""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import nbformat

from harness import REPO, scratch_course
from mlbook.authoring import submissions
from mlbook.labs import load_catalogue
from mlbook.course import Course

LAB = "lab01_hand_attention"
OTHER_LAB = "lab02_scaling"
ZONE = ZoneInfo("America/New_York")
RELEASE = dt.datetime(2027, 1, 11, 9, 0, tzinfo=ZONE)
DUE = dt.datetime(2027, 1, 18, 23, 59, tzinfo=ZONE)
SCHEDULE = f"""timezone = "America/New_York"

[late]
policy = "per_hour"
percent = 10
cap_percent = 50
zero_after_hours = 48

[labs.{LAB}]
release = 2027-01-11T09:00:00
due = 2027-01-18T23:59:00
"""


@dataclass(frozen=True)
class Student:
    id: str
    first: str
    last: str
    canvas_id: int
    participant: int  # Moodle's per-assignment participant id
    # (hours after the due date, what, file name); what: reference | untouched | mutant | other-lab | pdf
    uploads: tuple[tuple[float, str, str], ...]

    @property
    def sortable(self) -> str:
        return f"{self.last}, {self.first}"

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"


L = f"{LAB}.ipynb"
CLASS = [
    Student("ada", "Ada", "Lovelace", 101, 501, ((-30, "reference", L),)),
    Student("zoe", "Zoë", "Ångström", 102, 502, ((3, "reference", L),)),  # 3 hours late: 30%
    Student("jose", "José María", "García Márquez", 103, 503, ((-2, "reference", "Lab 1 final version.ipynb"),)),
    Student("li", "Wei", "Li", 104, 504, ((-48, "untouched", L), (-1, "reference", L))),  # the later attempt counts
    Student("ana", "Ana-Lucía", "Pérez", 105, 505, ((5, "reference", L),)),  # 5 h late, extended by 10 h
    Student("sean", "Seán", "O'Brien", 106, 506, ((2, "reference", L), (60, "untouched", L))),  # past the cutoff
    Student("mia", "Mia", "Müller", 107, 507, ((-3, "untouched", L), (-3.5, "pdf", "notes.pdf"))),
    Student("noor", "Noor", "Haddad", 108, 508, ()),  # missing
    Student("kai", "Kai", "Nakamura", 109, 509, ((-1, "other-lab", f"{OTHER_LAB}.ipynb"),)),  # wrong lab only
]
EXTENDED = {"ana": DUE + dt.timedelta(hours=10)}
# penalty share of each late student's score, by the schedule: per started hour 10%, at most 50%
LATE_SHARE = {"zoe": 0.3, "sean": 0.2}
MISSING = {"noor", "kai"}


def make_course(root: Path) -> Course:
    """A scratch course with lab 1 (and lab 2's release, for a wrong-lab upload) and the schedule."""
    course = scratch_course(LAB, root)
    (root / "course.toml").write_text(SCHEDULE)
    return course


def notebook(course: Course, what: str) -> bytes:
    if what == "reference":
        return nbformat.writes(submissions.reference(course, LAB)).encode()
    if what == "untouched":
        return nbformat.writes(submissions.untouched(course, LAB)).encode()
    if what == "mutant":
        mutant = load_catalogue(LAB, course.source(LAB)).mutants[0]
        return nbformat.writes(submissions.reference(course, LAB, mutant.cells)).encode()
    if what == "other-lab":
        return REPO.release(OTHER_LAB).read_bytes()
    if what == "pdf":
        return b"%PDF-1.4 my notes\n"
    raise ValueError(what)


def local(hours: float) -> dt.datetime:
    """``hours`` after the due date, as a zip entry stores it (the course's local time, no zone)."""
    return (DUE + dt.timedelta(hours=hours)).astimezone(ZONE).replace(tzinfo=None)


def canvas_roster(path: Path) -> Path:
    """Canvas's gradebook export: Points Possible row, the Test Student, one broken row (line 5)."""
    lines = ["Student,ID,SIS User ID,SIS Login ID,Section,lab01 (9001)",
             "    Points Possible,,,,,26",
             '"Student, Test",999,,,Section A,']
    for i, s in enumerate(CLASS):
        lines.append(f'"{s.sortable}",{s.canvas_id},{s.id},{s.id}@uni.example,Section A,')
        if i == 0:
            lines.append('"Broken, Row",notanumber,x1,x1@uni.example,Section A,')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def moodle_roster(path: Path) -> Path:
    """Moodle's grade export: BOM, semicolons, Username and ID number."""
    lines = ["First name;Last name;Username;ID number;Institution;Department;Email address;Lab 1 (Real)"]
    for s in CLASS:
        lines.append(f"{s.first};{s.last};{s.id};{s.canvas_id};Uni;CS;{s.id}@uni.example;-")
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def canvas_uploads(course: Course, extra: dict[str, tuple] | None = None):
    """Canvas's entries for the class: (name, data, when, canvas late marker)."""
    from mlbook.lms.downloads import Upload, canvas_name

    uploads, times = [], {}
    attachment = 7000
    for s in CLASS:
        for hours, what, filename in s.uploads + (extra or {}).get(s.id, ()):
            attachment += 1
            late = hours > 0 and s.id not in EXTENDED
            uploads.append(Upload(canvas_name(s.sortable, s.canvas_id, attachment, filename, late),
                                  notebook(course, what), local(200)))  # Canvas: the time the zip was made
            times[str(attachment)] = DUE + dt.timedelta(hours=hours)  # one row per attempt
    return uploads, times


def moodle_uploads(course: Course, extra: dict[str, tuple] | None = None):
    from mlbook.lms.downloads import Upload, moodle_name

    uploads = []
    for s in CLASS:
        seen: set[str] = set()
        for hours, what, filename in s.uploads + (extra or {}).get(s.id, ()):
            while filename in seen:  # one submission holds one file of a name: the student renamed it
                filename = filename.replace(".ipynb", " (1).ipynb")
            seen.add(filename)
            uploads.append(Upload(moodle_name(s.full, s.participant, filename), notebook(course, what), local(hours)))
    return uploads


def times_csv(path: Path, times: dict[str, dt.datetime]) -> Path:
    """Submission times as Canvas's submissions API gives them (``submitted_at``, UTC, ``Z``)."""
    rows = ["file_id,submitted_at"] + [f"{k},{v.astimezone(dt.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}"
                                      for k, v in times.items()]
    path.write_text("\n".join(rows) + "\n")
    return path


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its content hash (links and all, not followed)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = "link:" + str(p.readlink())
        elif p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def copy_course(src: Course, dest: Path) -> Course:
    shutil.copytree(src.root, dest)
    return Course(dest)
