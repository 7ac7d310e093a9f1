"""The names LMSs give files in a bulk download of one assignment, parsed.

Canvas (Assignment > Download Submissions; canvas-lms ``lib/content_zipper.rb``): one flat
folder, each uploaded file named

    <name>_[LATE_]<user id>_<attachment id>_<file name as uploaded>

``<name>`` is the student's sortable name ("Last, First") lowercased with every non-word
character removed (accented letters stay; ``_<digits>_`` inside it is collapsed, so the first
``_<digits>_<digits>_`` is the ids), ``LATE`` marks a submission Canvas counts as late,
``<user id>`` is Canvas's user id (the roster's ``lms_user_id``) and ``<attachment id>`` the
uploaded file's id: ids only grow, so a higher one is a later upload. A file uploaded again
under the same name reaches the zip as ``name-1.ipynb``. Canvas's zip entries carry the time
the zip was made, not when the student submitted. With anonymous grading the name part is
``anon_<id>``, which names nobody: such files are listed, not taken.

Moodle (Assignment > View all submissions > Download all submissions; ``mod/assign/locallib.php``
``download_submissions``): per participant and submission plugin, either a folder (the default
since Moodle 3.1; with or without the final ``_`` since 4.1)

    <Full Name>_<participant id>_assignsubmission_file_/<file>

or, with "Download submissions in folders" off, flat files
``<Full Name>_<participant id>_assignsubmission_file_<file>``. ``<Full Name>`` is Moodle's
``fullname()`` with ``_`` replaced by spaces, ``<participant id>`` Moodle's per-assignment
participant id (not the user id; under blind marking the name is "Participant"). Moodle's
feedback-zip import reads the same prefix back (``assignfeedback_file`` ``importziplib.php``).

Any other LMS: a regular expression over each entry's path (``/`` separated) with named groups
``student`` (the nbgrader id itself), ``lms_id`` (the roster's LMS user id) or ``name`` (the
student's full name), and optionally ``attempt`` (digits: a higher number is a later attempt)
and ``late`` (any text: the LMS marks it late). Example: ``(?P<student>[^/]+)/(?P<attempt>\\d+)/.*``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from mlbook.errors import MlbookError
from mlbook.lms.zipread import Member

CANVAS, MOODLE, PATTERN = "canvas", "moodle", "pattern"
FORMATS = (CANVAS, MOODLE)

_CANVAS = re.compile(r"^(?P<name>.*?)_(?:(?P<late>LATE)_)?(?P<user>\d+)_(?P<attachment>\d+)_(?P<file>.+)$", re.S)
_CANVAS_ANON = re.compile(r"^(?:LATE_)?anon_", re.S)
_MOODLE = re.compile(r"^(?P<name>[^_]*)_(?P<participant>\d+)_(?P<plugin>assignsubmission_[a-z0-9]+)(?:_(?P<rest>.*))?$",
                     re.S)


@dataclass(frozen=True)
class Entry:
    """One file of a download, with whom and which attempt its name says it is."""

    member: Member
    key_kind: str  # "lms_id" | "name" | "student"
    key: str
    display_name: str  # the name the LMS shows, for messages
    filename: str  # the file as the student uploaded it
    order: tuple  # larger is a later upload (attempt number, attachment id, entry time)
    late: bool | None  # the LMS's own late marker (None: the format has none)
    prefix: str  # what the LMS put before the file name (the hand-back key)
    lms_ref: str  # the id the LMS's feedback upload keys on (Canvas user id, Moodle participant id)
    file_ref: str = ""  # the LMS's id of this file (Canvas's attachment id), for ``--times``


@dataclass(frozen=True)
class Unparsed:
    member: Member
    reason: str


def name_key(name: str) -> str:
    """A person's name compared loosely: NFC, case folded, only letters and digits kept."""
    return "".join(c for c in unicodedata.normalize("NFC", name).casefold() if c.isalnum())


def parse(member: Member, fmt: str, pattern: re.Pattern | None = None) -> Entry | Unparsed:
    if fmt == CANVAS:
        return _canvas(member)
    if fmt == MOODLE:
        return _moodle(member)
    if pattern is None:
        raise MlbookError("a pattern is needed for --format pattern")
    return _pattern(member, pattern)


def compile_pattern(text: str) -> re.Pattern:
    try:
        pattern = re.compile(text, re.S)
    except re.error as exc:
        raise MlbookError(f"--pattern {text!r} is not a regular expression: {exc}") from None
    if not {"student", "lms_id", "name"} & set(pattern.groupindex):
        raise MlbookError("--pattern needs a named group `student`, `lms_id` or `name`, e.g. (?P<student>[^/]+)/.*")
    return pattern


def _canvas(member: Member) -> Entry | Unparsed:
    base = member.filename
    if _CANVAS_ANON.match(base):
        return Unparsed(member, "Canvas's anonymous grading hides who submitted it (anon_ name); "
                                "download after the assignment's anonymity is lifted")
    m = _CANVAS.match(base)
    if not m:
        return Unparsed(member, "not named as Canvas names submissions (<name>_[LATE_]<user id>_<file id>_<file>)")
    order = (int(m["attachment"]), member.modified)
    prefix = base[: m.start("file")]
    return Entry(member, "lms_id", m["user"], m["name"], m["file"], order, bool(m["late"]), prefix, m["user"],
                 m["attachment"])


def _moodle(member: Member) -> Entry | Unparsed:
    first = member.parts[0]
    m = _MOODLE.match(first)
    if not m:
        return Unparsed(member, "not named as Moodle names submissions (<Full Name>_<participant id>_"
                                "assignsubmission_file_...)")
    if m["plugin"] != "assignsubmission_file":
        return Unparsed(member, f"a {m['plugin'].removeprefix('assignsubmission_')} submission, not an uploaded file")
    if len(member.parts) > 1:
        filename = member.parts[-1]
    elif m["rest"]:
        filename = m["rest"]
    else:
        return Unparsed(member, "a Moodle participant entry without a file name")
    prefix = f"{m['name']}_{m['participant']}_assignsubmission_file_"
    return Entry(member, "name", m["name"], m["name"], filename, (member.modified, member.name), None, prefix,
                 m["participant"])


def _pattern(member: Member, pattern: re.Pattern) -> Entry | Unparsed:
    path = "/".join(member.parts)
    m = pattern.fullmatch(path)
    if not m:
        return Unparsed(member, f"does not match the pattern {pattern.pattern!r}")
    groups = m.groupdict()
    kind = next(k for k in ("student", "lms_id", "name") if k in groups)
    key = groups[kind] or ""
    if not key:
        return Unparsed(member, f"the pattern's `{kind}` group is empty for this entry")
    attempt = groups.get("attempt")
    order = (int(attempt) if attempt and attempt.isdigit() else 0, member.modified, member.name)
    late = bool(groups["late"]) if "late" in groups else None
    return Entry(member, kind, key, key, member.filename, order, late, "", key)
