"""Canvas: its bulk download, its gradebook export as a class list, its re-upload of files.

Download (Assignment > Download Submissions; canvas-lms ``lib/content_zipper.rb``): one flat
folder, each uploaded file named

    <name>_[LATE_]<user id>_<attachment id>_<file name as uploaded>

``<name>`` is the student's sortable name ("Last, First") lowercased with every non-word
character removed (accented letters stay; ``_<digits>_`` inside it is collapsed, so the first
``_<digits>_<digits>_`` is the ids), ``LATE`` marks a submission Canvas counts as late,
``<user id>`` is Canvas's user id (the roster's ``lms_user_id``) and ``<attachment id>`` the
uploaded file's id: ids only grow, so a higher one is a later upload. A file uploaded again
under the same name reaches the zip as ``name-1.ipynb``. Canvas's zip entries carry the time
the zip was made, not when the student submitted (``submitted_at``). With anonymous grading the
name part is ``anon_<id>``, which names nobody: such files are listed, not taken.

Class list (Grades > Export): recognised by ``Student``, ``ID`` and ``SIS User ID`` (or ``SIS
Login ID``); id ``SIS User ID``, else ``SIS Login ID``, else ``canvas-<ID>``; names from ``Student``
(Canvas's sortable name ``Last, First``); email ``SIS Login ID`` when it is an address; LMS user
id ``ID`` (Canvas's user id, which names files in its bulk download). Canvas's ``Points
Possible`` row and its test student are skipped.

Hand-back (Assignment > "Re-Upload Submissions"; canvas-lms
``Assignment#generate_comments_from_files``): ``<name>_[LATE_]<user id>_<attachment id>_<lab>-feedback.html``.
Canvas reads the first two all-digit ``_`` parts as the user id and the id of a file of that
user's submission (the notebook that was collected), and adds the page to the submission as a
comment attachment. Canvas has no separate feedback-file upload; grades go through
``exports/canvas.csv``.
"""

from __future__ import annotations

import datetime as dt
import re

from mlbook.lms.formats.base import LmsFormat
from mlbook.lms.records import Entry, RosterEntry, Unparsed
from mlbook.lms.zipread import Member

_NAMED = re.compile(r"^(?P<name>.*?)_(?:(?P<late>LATE)_)?(?P<user>\d+)_(?P<attachment>\d+)_(?P<file>.+)$", re.S)
_ANONYMOUS = re.compile(r"^(?:LATE_)?anon_", re.S)
_NOT_STUDENTS = ("Points Possible", "Student, Test", "Test Student")


class Canvas(LmsFormat):
    name, title, user_id = "canvas", "Canvas", "Canvas user id"
    downloads = rosters = handbacks = True
    roster_header = "Canvas's (Student, ID, SIS User ID, ...)"

    def parse(self, member: Member, pattern: re.Pattern | None = None) -> Entry | Unparsed:
        base = member.filename
        if _ANONYMOUS.match(base):
            return Unparsed(member, "Canvas's anonymous grading hides who submitted it (anon_ name); "
                                    "download after the assignment's anonymity is lifted")
        m = _NAMED.match(base)
        if not m:
            return Unparsed(member, "not named as Canvas names submissions (<name>_[LATE_]<user id>_<file id>_<file>)")
        order = (int(m["attachment"]), member.modified)
        prefix = base[: m.start("file")]
        return Entry(member, "lms_id", m["user"], m["name"], m["file"], order, bool(m["late"]), prefix, m["user"],
                     m["attachment"])

    def reads_roster(self, header: list[str]) -> bool:
        names = set(header)
        return {"Student", "ID"} <= names and bool({"SIS User ID", "SIS Login ID"} & names)

    def roster_entry(self, get, number: int) -> RosterEntry | None:
        name = get("Student")
        if name.strip() in _NOT_STUDENTS:
            return None
        canvas_id = get("ID")
        if canvas_id and not canvas_id.isdigit():
            raise ValueError(f"Canvas's ID {canvas_id!r} is not a number")
        student = get("SIS User ID") or get("SIS Login ID") or (f"canvas-{canvas_id}" if canvas_id else "")
        if not student:
            raise ValueError("no SIS User ID, SIS Login ID or ID")
        last, _, first = name.partition(",")
        login = get("SIS Login ID")
        return RosterEntry(number, student, first.strip(), last.strip(), login if "@" in login else "", canvas_id)

    def submitted_at(self, entry: Entry, entry_time: dt.datetime, due: dt.datetime | None
                     ) -> tuple[dt.datetime, str | None]:
        """The zip's times are when it was made: the ``LATE`` marker decides, against the due date."""
        if due is None:
            return entry_time, None
        if entry.late:
            return due + dt.timedelta(seconds=1), (
                "Canvas marks {entry} LATE but the download does not say when it was submitted; counted as "
                "1 second late (pass --times for the real time)")
        return min(entry_time, due), None
