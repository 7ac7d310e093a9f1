"""Any other LMS's bulk download, read by a regular expression over each entry's path.

The expression (``--pattern``) is matched against the whole path (``/`` separated) and names,
with named groups, ``student`` (the nbgrader id itself), ``lms_id`` (the roster's LMS user id)
or ``name`` (the student's full name), and optionally ``attempt`` (digits: a higher number is a
later attempt) and ``late`` (any text: the LMS marks it late). Example:
``(?P<student>[^/]+)/(?P<attempt>\\d+)/.*``. Each entry's own time is when it was submitted.
"""

from __future__ import annotations

import re

from mlbook.errors import MlbookError
from mlbook.lms.formats.base import LmsFormat
from mlbook.lms.records import Entry, Unparsed
from mlbook.lms.zipread import Member


def compile_pattern(text: str) -> re.Pattern:
    """``--pattern``, checked: a regular expression with a group that names the student."""
    try:
        pattern = re.compile(text, re.S)
    except re.error as exc:
        raise MlbookError(f"--pattern {text!r} is not a regular expression: {exc}") from None
    if not {"student", "lms_id", "name"} & set(pattern.groupindex):
        raise MlbookError("--pattern needs a named group `student`, `lms_id` or `name`, e.g. (?P<student>[^/]+)/.*")
    return pattern


class Pattern(LmsFormat):
    name, title = "pattern", "a download read with --pattern"
    downloads = True
    needs_roster = False

    def parse(self, member: Member, pattern: re.Pattern | None = None) -> Entry | Unparsed:
        if pattern is None:
            raise MlbookError("a pattern is needed for --format pattern")
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
