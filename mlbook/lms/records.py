"""What an LMS's files say, in the LMS's own terms: one file of a bulk download, one row of a class list.

The vocabulary every LMS format (``mlbook.lms.formats``) reads into and every step after it
(collect, roster, hand-back) reads from.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from mlbook.lms.zipread import Member

__all__ = ["Entry", "Unparsed", "RosterEntry", "name_key"]


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
    """A file of a download whose name says nothing usable, and why."""

    member: Member
    reason: str


@dataclass(frozen=True)
class RosterEntry:
    """One student of a class list, as nbgrader's ``Student`` will hold them."""

    line: int
    id: str
    first_name: str
    last_name: str
    email: str
    lms_user_id: str

    @property
    def full_name(self) -> str:
        return " ".join(p for p in (self.first_name, self.last_name) if p)


def name_key(name: str) -> str:
    """A person's name compared loosely: NFC, case folded, only letters and digits kept."""
    return "".join(c for c in unicodedata.normalize("NFC", name).casefold() if c.isalnum())
