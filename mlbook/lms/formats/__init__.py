"""The LMS formats: each LMS one module, all of them in one registry.

An LMS format says how that LMS names the files of a bulk download (``parse``), how its class
list reads (``reads_roster``, ``roster_entry``), how its bulk feedback upload names a page
(``handback_name``), and when a file counts as handed in (``submitted_at``). What a format has
no such thing for, it leaves out: ``downloads``, ``rosters`` and ``handbacks`` say which it
offers. Collect, roster import, hand-back and the command line read ``FORMATS`` and nothing
else, so a new LMS is one module and one line of ``_BUILT_IN`` (or one ``register`` call).

Modules: ``base`` (``LmsFormat``), ``canvas``, ``moodle``, ``pattern`` (any other LMS's download, by a regular
expression), ``plain`` (an ``id,first,last,email,lms_id`` class list).
"""

from __future__ import annotations

import re

from mlbook.errors import MlbookError
from mlbook.lms.formats import canvas, moodle, pattern, plain
from mlbook.lms.formats.base import LmsFormat

__all__ = ["LmsFormat", "FORMATS", "register", "named", "offering"]


FORMATS: dict[str, LmsFormat] = {}


def register(fmt: LmsFormat) -> LmsFormat:
    """Add ``fmt`` to ``FORMATS`` (a course's own LMS, or a test's); its name must be new."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", fmt.name) or fmt.name in FORMATS:
        raise ValueError(f"an LMS format needs a new lower-case name, not {fmt.name!r}")
    FORMATS[fmt.name] = fmt
    return fmt


def offering(capability: str) -> list[str]:
    """The names of the formats that offer ``capability`` ("downloads", "rosters", "handbacks")."""
    return [name for name, fmt in FORMATS.items() if getattr(fmt, capability)]


def named(name: str, capability: str) -> LmsFormat:
    """The format called ``name`` (any case), which must offer ``capability``."""
    fmt = FORMATS.get(name.lower())
    if fmt is None or not getattr(fmt, capability):
        raise MlbookError(f"unknown format {name!r}: {', '.join(offering(capability))}")
    return fmt


_BUILT_IN = (canvas.Canvas(), moodle.Moodle(), pattern.Pattern(), plain.Plain())
for _fmt in _BUILT_IN:
    register(_fmt)
