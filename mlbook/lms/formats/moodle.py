"""Moodle: its bulk download, its grade or participants export as a class list, its feedback-zip upload.

Download (Assignment > View all submissions > Download all submissions; ``mod/assign/locallib.php``
``download_submissions``): per participant and submission plugin, either a folder (the default
since Moodle 3.1; with or without the final ``_`` since 4.1)

    <Full Name>_<participant id>_assignsubmission_file_/<file>

or, with "Download submissions in folders" off, flat files
``<Full Name>_<participant id>_assignsubmission_file_<file>``. ``<Full Name>`` is Moodle's
``fullname()`` with ``_`` replaced by spaces, ``<participant id>`` Moodle's per-assignment
participant id (not the user id; under blind marking the name is "Participant"). Each entry's
own time is when it was submitted.

Class list: recognised by ``First name`` and ``Last name`` (or ``Surname``) and ``Email
address``; id ``Username``, else ``ID number``, else the address's local part; LMS user id ``ID
number`` (blank when absent).

Hand-back (View all submissions > Grading action "Upload multiple feedback files in a zip";
``assignfeedback_file`` ``importziplib.php``): ``<Full Name>_<participant id>_assignsubmission_file_<lab>-feedback.html``.
Moodle splits the name on ``_``, finds the participant by the second part and the submission
plugin by the third and fourth, and attaches the file to that student's feedback.
"""

from __future__ import annotations

import re

from mlbook.lms.formats.base import LmsFormat
from mlbook.lms.records import Entry, RosterEntry, Unparsed
from mlbook.lms.zipread import Member

_NAMED = re.compile(r"^(?P<name>[^_]*)_(?P<participant>\d+)_(?P<plugin>assignsubmission_[a-z0-9]+)(?:_(?P<rest>.*))?$",
                    re.S)


class Moodle(LmsFormat):
    name, title = "moodle", "Moodle"
    downloads = rosters = handbacks = True
    roster_header = "Moodle's (First name, Last name, Email address, ...)"

    def parse(self, member: Member, pattern: re.Pattern | None = None) -> Entry | Unparsed:
        first = member.parts[0]
        m = _NAMED.match(first)
        if not m:
            return Unparsed(member, "not named as Moodle names submissions (<Full Name>_<participant id>_"
                                    "assignsubmission_file_...)")
        if m["plugin"] != "assignsubmission_file":
            return Unparsed(member, f"a {m['plugin'].removeprefix('assignsubmission_')} submission, "
                                    "not an uploaded file")
        if len(member.parts) > 1:
            filename = member.parts[-1]
        elif m["rest"]:
            filename = m["rest"]
        else:
            return Unparsed(member, "a Moodle participant entry without a file name")
        prefix = f"{m['name']}_{m['participant']}_assignsubmission_file_"
        return Entry(member, "name", m["name"], m["name"], filename, (member.modified, member.name), None, prefix,
                     m["participant"])

    def reads_roster(self, header: list[str]) -> bool:
        names = set(header)
        return {"First name", "Email address"} <= names and bool({"Last name", "Surname"} & names)

    def roster_entry(self, get, number: int) -> RosterEntry | None:
        email = get("Email address")
        student = get("Username") or get("ID number") or email.partition("@")[0]
        if not student:
            raise ValueError("no Username, ID number or Email address")
        return RosterEntry(number, student, get("First name"), get("Last name") or get("Surname"), email,
                           get("ID number"))
