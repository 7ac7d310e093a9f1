"""``mlbook roster import FILE``: an LMS class list into nbgrader's student table.

The layout is recognised from the header row (UTF-8, a byte-order mark allowed; comma,
semicolon or tab separated). Columns read, and where each goes in nbgrader's ``Student``:

| layout | recognised by | id | first_name, last_name | email | lms_user_id |
|---|---|---|---|---|---|
| Canvas gradebook export (Grades > Export) | ``Student``, ``ID``, ``SIS User ID`` | ``SIS User ID``, else ``SIS Login ID``, else ``canvas-<ID>`` | ``Student`` (Canvas's sortable name ``Last, First``) | ``SIS Login ID`` when it is an address | ``ID`` (Canvas's user id, which names files in its bulk download) |
| Moodle grade or participants export | ``First name`` and ``Last name`` (or ``Surname``) and ``Email address`` | ``Username``, else ``ID number``, else the address's local part | ``First name``, ``Last name`` | ``Email address`` | ``ID number`` (blank when absent) |
| plain | ``id,first,last,email,lms_id`` | ``id`` | ``first``, ``last`` | ``email`` | ``lms_id`` |

Each layout is read by its LMS's module of ``mlbook.lms.formats`` (the first whose
``reads_roster`` accepts the header). Canvas's ``Points Possible`` row and its ``Test Student``
are skipped; so are blank rows. A row
that cannot be read (too few cells, no usable id, an id ``student_id_problem`` refuses, an id or
LMS id twice in the file, an LMS id that already belongs to another student in the gradebook)
is reported with its line number and the rest are imported. Importing again updates each
student in place (matched by id): never a duplicate.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from mlbook.course import Course, student_id_problem
from mlbook.errors import MlbookError
from mlbook.lms import formats
from mlbook.lms.records import RosterEntry


@dataclass
class ParsedRoster:
    layout: str
    entries: list[RosterEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    layout: str
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_roster(text: str, shown: str = "roster") -> ParsedRoster:
    """Read a class list; problems name ``shown`` and the line."""
    text = text.lstrip("\ufeff")
    first = text.splitlines()[0] if text.strip() else ""
    delimiter = max(",;\t", key=first.count) if first else ","
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    if not rows:
        raise MlbookError(f"{shown} is empty")
    header = [h.strip() for h in rows[0]]
    layout = next((fmt for fmt in formats.FORMATS.values() if fmt.rosters and fmt.reads_roster(header)), None)
    if layout is None:
        known = [fmt.roster_header for fmt in formats.FORMATS.values() if fmt.rosters]
        raise MlbookError(f"{shown}, line 1: the header {', '.join(header[:6])!r} is none of "
                          f"{', '.join(known[:-1])} or {known[-1]}")
    column = {name: i for i, name in reversed(list(enumerate(header)))}
    parsed = ParsedRoster(layout.name)
    seen_ids: dict[str, int] = {}
    seen_lms: dict[str, int] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue

        def get(name: str) -> str:
            i = column.get(name)
            return row[i].strip() if i is not None and i < len(row) else ""

        where = f"{shown}, line {number}"
        if len(row) < min(len(header), layout.roster_min_cells):
            parsed.problems.append(f"{where}: {len(row)} cell(s) where the header has {len(header)}; row skipped")
            continue
        try:
            entry = layout.roster_entry(get, number)
        except ValueError as exc:
            parsed.problems.append(f"{where}: {exc}; row skipped")
            continue
        if entry is None:
            continue
        if problem := student_id_problem(entry.id):
            parsed.problems.append(f"{where}: {problem}; row skipped")
            continue
        if entry.id in seen_ids:
            parsed.problems.append(f"{where}: student id {entry.id!r} is already on line {seen_ids[entry.id]}; row skipped")
            continue
        if entry.lms_user_id and entry.lms_user_id in seen_lms:
            parsed.problems.append(f"{where}: LMS user id {entry.lms_user_id!r} is already on line "
                                   f"{seen_lms[entry.lms_user_id]}; row skipped")
            continue
        seen_ids[entry.id] = number
        if entry.lms_user_id:
            seen_lms[entry.lms_user_id] = number
        parsed.entries.append(entry)
    return parsed


def import_roster(course: Course, path: Path) -> ImportReport:
    """Read ``path`` and add or update every readable row in nbgrader's student table."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MlbookError(f"{path}: not UTF-8 text (byte {exc.start}); export the class list as UTF-8 CSV") from None
    except OSError as exc:
        raise MlbookError(f"cannot read {path}: {exc.strerror or exc}") from None
    parsed = parse_roster(text, path.name)
    report = import_entries(course, parsed.entries, path.name)
    report.layout = parsed.layout
    report.problems[:0] = parsed.problems
    return report


def import_entries(course: Course, entries: list[RosterEntry], shown: str) -> ImportReport:
    """Add or update each of ``entries`` in nbgrader's student table (matched by id).

    Args:
        course: the course whose gradebook holds the roster.
        entries: the students, from a class list or from LTI launches (``mlbook.hub.lti``).
        shown: where they came from, for the problems' messages.

    Returns:
        Who was added, updated or left unchanged, and each entry skipped with the reason.
    """
    report = ImportReport("")
    from mlbook.nbgrader_env import gradebook

    with gradebook(course) as gb:
        existing = {s.id: s for s in gb.students}
        by_lms = {s.lms_user_id: s.id for s in existing.values() if s.lms_user_id}
        for entry in entries:
            owner = by_lms.get(entry.lms_user_id) if entry.lms_user_id else None
            if owner and owner != entry.id:
                report.problems.append(f"{shown}, line {entry.line}: LMS user id {entry.lms_user_id!r} already "
                                       f"belongs to student {owner!r} in the gradebook; row skipped")
                continue
            wanted = {"first_name": entry.first_name or None, "last_name": entry.last_name or None,
                      "email": entry.email or None, "lms_user_id": entry.lms_user_id or None}
            old = existing.get(entry.id)
            if old is not None and all(getattr(old, k) == v for k, v in wanted.items()):
                report.unchanged.append(entry.id)
                continue
            gb.update_or_create_student(entry.id, **wanted)
            (report.updated if old is not None else report.added).append(entry.id)
            if entry.lms_user_id:
                by_lms[entry.lms_user_id] = entry.id
    return report


def roster(course: Course) -> list[RosterEntry]:
    """nbgrader's student table as roster entries (line 0: from the gradebook)."""
    from mlbook.nbgrader_env import gradebook

    with gradebook(course) as gb:
        return [RosterEntry(0, s.id, s.first_name or "", s.last_name or "", s.email or "", s.lms_user_id or "")
                for s in gb.students]
