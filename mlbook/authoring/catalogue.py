"""Each lab's catalogue of misconception mutants and alternative correct solutions.

A lab declares, in ``mlbook/labs/<lab>/catalogue.py``, two lists:

    MUTANTS = [Mutant(...), ...]            # buggy answers the grader must catch
    ALTERNATIVES = [Alternative(...), ...]  # other correct answers the grader must accept

Both replace answer cells of the student notebook by grade_id. ``cells`` maps an answer cell's
grade_id to what the student wrote there, in one of two forms:

- an edit of the reference answer: ``patch(old, new)``, or a tuple of patches applied in turn.
  This is the usual form for a mutant: one mistake, written as the line that differs, so the
  catalogue never copies a solution and follows the reference when the reference changes.
  A patch whose ``old`` text is not in the reference (or is there more times than it says)
  fails loudly when the catalogue is loaded, and ``mlbook check`` reports it;
- the complete code of the cell, a string: for an answer written another way from the start
  (most alternatives, a hand-typed list of numbers).

Every answer cell not named keeps the reference solution, so a mutant isolates one mistake.
``mlbook.labs.load_catalogue`` reads a lab's lists and returns the entries with every cell resolved
to its complete code (``resolve_cells``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Union

from mlbook.errors import MlbookError

__all__ = ["Mutant", "Alternative", "Catalogue", "Patch", "patch", "resolve_cells"]


@dataclass(frozen=True)
class Patch:
    """Replace ``old`` by ``new`` in the reference answer; ``old`` must occur exactly ``count`` times."""

    old: str
    new: str
    count: int = 1

    def apply(self, text: str, where: str) -> str:
        found = text.count(self.old)
        if found != self.count:
            raise MlbookError(f"{where}: the patch expects {self.count} occurrence(s) of {self.old!r} in the "
                              f"reference answer and finds {found}; update the catalogue to the reference")
        return text.replace(self.old, self.new)


def patch(old: str, new: str, count: int = 1) -> Patch:
    """An edit of the reference answer: ``old`` (found exactly ``count`` times) becomes ``new``."""
    return Patch(old, new, count)


CellCode = Union[str, Patch, tuple]  # complete code, one patch, or patches applied in turn


@dataclass(frozen=True)
class Mutant:
    """A buggy answer that embodies one misconception.

    Attributes:
        name: short identifier, used as the demo student's id (``[a-z0-9-]+``).
        misconception: one line naming the mistake, as a TA would say it.
        cells: answer grade_id -> the buggy code for that cell (see the module docstring).
        must_fail: grade_ids of the test cells that must lose points.
        message: a regular expression (case-insensitive) that the failure message of each
            cell in ``must_fail`` must match: the grader names the misconception.
        demo: include this mutant among the demo class's realistic wrong submissions.
    """

    name: str
    misconception: str
    cells: dict[str, CellCode]
    must_fail: tuple[str, ...]
    message: str
    demo: bool = False

    def matches(self, text: str) -> bool:
        """True when ``text`` (a failing cell's message) names this misconception."""
        return re.search(self.message, text, flags=re.IGNORECASE) is not None


@dataclass(frozen=True)
class Alternative:
    """A different but correct way to write some answers; it must earn full marks."""

    name: str
    description: str
    cells: dict[str, CellCode]


@dataclass(frozen=True)
class Catalogue:
    lab: str
    mutants: tuple[Mutant, ...] = field(default_factory=tuple)
    alternatives: tuple[Alternative, ...] = field(default_factory=tuple)


def resolve_cells(cells: Mapping[str, CellCode], answers: Mapping[str, str], where: str) -> dict[str, str]:
    """Every cell of a catalogue entry as complete code, patches applied to the reference ``answers``."""
    resolved = {}
    for gid, code in cells.items():
        if isinstance(code, str):
            resolved[gid] = code
            continue
        if gid not in answers:
            raise MlbookError(f"{where}: patches answer cell {gid!r}, which the source notebook does not have")
        text = answers[gid]
        for edit in (code if isinstance(code, tuple) else (code,)):
            if not isinstance(edit, Patch):
                raise MlbookError(f"{where}: cell {gid!r} must be code (a string) or patch(...) edits, "
                                  f"not {type(edit).__name__}")
            text = edit.apply(text, f"{where}, cell {gid!r}")
        resolved[gid] = text
    return resolved
