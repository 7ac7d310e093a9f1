"""What every LMS format is: the conventions one LMS has, and defaults for what it lacks."""

from __future__ import annotations

import datetime as dt
import re
from typing import Callable

from mlbook.errors import MlbookError
from mlbook.lms.records import Entry, RosterEntry, Unparsed
from mlbook.lms.zipread import Member

__all__ = ["LmsFormat"]


class LmsFormat:
    """One LMS's conventions. Subclasses set the names and override what their LMS has."""

    name: str = ""  # what --format, --lms and the collect manifest say
    title: str = ""  # how messages name the LMS
    user_id: str = "LMS user id"  # how messages name the id the LMS gives a person
    downloads = False  # parses bulk downloads
    rosters = False  # reads class lists
    handbacks = False  # writes the zip its bulk feedback upload takes
    needs_roster = True  # a download names people by the LMS's ids or names, which the roster resolves
    roster_header = ""  # the class list's header, for the message when none is recognised
    roster_min_cells = 4  # a row with fewer cells (and fewer than the header) is refused

    def parse(self, member: Member, pattern: re.Pattern | None = None) -> Entry | Unparsed:
        raise MlbookError(f"{self.title} has no bulk downloads mlbook reads")

    def reads_roster(self, header: list[str]) -> bool:
        return False

    def roster_entry(self, get: Callable[[str], str], number: int) -> RosterEntry | None:
        """The row's student (``get(column)`` reads a cell), None for a row to skip silently;
        raises ValueError with the reason for a row that cannot be read."""
        raise NotImplementedError

    def handback_name(self, prefix: str, lab: str) -> str:
        """The zip entry of a feedback page, after the download's own ``prefix`` for that student."""
        return f"{prefix}{lab}-feedback.html"

    def submitted_at(self, entry: Entry, entry_time: dt.datetime, due: dt.datetime | None
                     ) -> tuple[dt.datetime, str | None]:
        """When ``entry`` was handed in, from the zip entry's own time, and a warning (or None)."""
        return entry_time, None
