"""Each lab's catalogue of misconception mutants and alternative correct solutions.

A lab declares, in ``mlbook/labs/<lab>/catalogue.py``, two lists:

    MUTANTS = [Mutant(...), ...]         # buggy answers the grader must catch
    ALTERNATIVES = [Alternative(...), ...]  # other correct answers the grader must accept

Both replace answer cells of the student notebook by grade_id: ``cells`` maps an answer
cell's grade_id to the complete code the student would have written there. Every answer
cell not named keeps the reference solution, so a mutant isolates one mistake.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .labs import lab_module

__all__ = ["Mutant", "Alternative", "Catalogue", "load_catalogue"]


@dataclass(frozen=True)
class Mutant:
    """A buggy answer that embodies one misconception.

    Attributes:
        name: short identifier, used as the demo student's id (``[a-z0-9-]+``).
        misconception: one line naming the mistake, as a TA would say it.
        cells: answer grade_id -> the buggy code for that cell.
        must_fail: grade_ids of the test cells that must lose points.
        message: a regular expression (case-insensitive) that the failure message of each
            cell in ``must_fail`` must match: the grader names the misconception.
        demo: include this mutant among the demo class's realistic wrong submissions.
    """

    name: str
    misconception: str
    cells: dict[str, str]
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
    cells: dict[str, str]


@dataclass(frozen=True)
class Catalogue:
    lab: str
    mutants: tuple[Mutant, ...] = field(default_factory=tuple)
    alternatives: tuple[Alternative, ...] = field(default_factory=tuple)


def load_catalogue(lab: str) -> Catalogue:
    """Read a lab's catalogue, checking that names are unique and usable as student ids."""
    module = lab_module(lab, "catalogue")
    mutants = tuple(getattr(module, "MUTANTS", ()))
    alternatives = tuple(getattr(module, "ALTERNATIVES", ()))
    names = [m.name for m in mutants] + [a.name for a in alternatives]
    for name in names:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise ValueError(f"{lab}: catalogue name {name!r} must match [a-z0-9-]+")
    if len(set(names)) != len(names):
        raise ValueError(f"{lab}: catalogue names must be unique")
    return Catalogue(lab, mutants, alternatives)
