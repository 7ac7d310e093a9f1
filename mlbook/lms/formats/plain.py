"""A plain class list: the header ``id,first,last,email,lms_id``, one column each, nothing skipped."""

from __future__ import annotations

from mlbook.lms.formats.base import LmsFormat
from mlbook.lms.records import RosterEntry

COLUMNS = ["id", "first", "last", "email", "lms_id"]


class Plain(LmsFormat):
    name, title = "plain", "a plain class list"
    rosters = True
    roster_header = ",".join(COLUMNS)
    roster_min_cells = len(COLUMNS)

    def reads_roster(self, header: list[str]) -> bool:
        return header[: len(COLUMNS)] == COLUMNS

    def roster_entry(self, get, number: int) -> RosterEntry | None:
        if not get("id"):
            raise ValueError("no id")
        return RosterEntry(number, get("id"), get("first"), get("last"), get("email"), get("lms_id"))
