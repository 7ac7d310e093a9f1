"""Which known misconceptions a class shows, from the pattern of failing tests.

Rule: a submission shows a catalogue mutant's misconception when its signature is seen: every
test cell the mutant must fail (``Mutant.must_fail``) failed, each with a message that matches
the mutant's regular expression (``Mutant.matches``). That is the catalogue's own promise,
checked by the harness: this mutant fails these cells with this message. One matching cell is
not enough: a later cell that calls a buggy answer, or a visible test whose hint is shared by
several mistakes of one function, would list misconceptions the submission does not have (a
wrong softmax listed as three mistakes of row_attention). One submission can show several
misconceptions. A misconception a submission shows also explains its other
failing cells whose message matches the same expression (a later cell that calls the buggy
function fails for the same reason).

A failing cell that no shown misconception explains is "unexplained"; the report lists those
per cell, so a TA sees the mistakes the catalogue does not know yet. A cell whose message is
nbgrader's ``NotImplementedError`` stub was not attempted, and is counted per student instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlbook.authoring.catalogue import Mutant
from mlbook.outputs.results import SubmissionResult
from mlbook.outputs.report.data import LabData

NOT_ATTEMPTED = re.compile(r"NotImplementedError|not implemented yet", re.IGNORECASE)


@dataclass
class Finding:
    """One misconception seen in a lab: who shows it, and on which cells."""

    lab: str
    mutant: Mutant
    students: list[str] = field(default_factory=list)
    cells: set[str] = field(default_factory=set)


@dataclass
class Unexplained:
    """Failures of one test cell that no known misconception explains."""

    lab: str
    cell: str
    students: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # distinct messages, first seen first


@dataclass
class Diagnosis:
    """One lab's diagnosis."""

    findings: list[Finding]  # most frequent first
    unexplained: list[Unexplained]  # in notebook order, only cells someone failed
    not_attempted: dict[str, list[str]]  # student -> test cells that still raise the stub


def evidence(result: SubmissionResult, mutant: Mutant) -> set[str]:
    """The cells whose failure shows ``mutant``'s misconception in ``result``: all of its
    ``must_fail`` cells when each failed with a matching message, else none (not shown)."""
    cells = result.cells
    seen = all(gid in cells and not cells[gid].passed and mutant.matches(cells[gid].message) for gid in mutant.must_fail)
    return set(mutant.must_fail) if seen and mutant.must_fail else set()


def diagnose(data: LabData) -> Diagnosis:
    """Which misconceptions the lab's graded submissions show, and which failures stay unexplained.

    Args:
        data: the lab's results and catalogue.
    Returns:
        The diagnosis: findings with at least one student, sorted by count then catalogue order.
    """
    mutants = data.catalogue.mutants if data.catalogue else ()
    findings = {m.name: Finding(data.lab, m) for m in mutants}
    unexplained = {gid: Unexplained(data.lab, gid) for gid in data.test_cells}
    not_attempted: dict[str, list[str]] = {}
    for result in data.graded:
        failing = {gid: c.message for gid, c in result.auto_cells.items() if not c.passed}
        shown = [m for m in mutants if evidence(result, m)]
        for mutant in shown:
            findings[mutant.name].students.append(result.student)
            findings[mutant.name].cells |= evidence(result, mutant)
        for gid, message in failing.items():
            if any(m.matches(message) for m in shown):
                continue
            if NOT_ATTEMPTED.search(message):
                not_attempted.setdefault(result.student, []).append(gid)
                continue
            entry = unexplained.setdefault(gid, Unexplained(data.lab, gid))
            entry.students.append(result.student)
            if message and message not in entry.messages:
                entry.messages.append(message)
    order = {m.name: i for i, m in enumerate(mutants)}
    seen = sorted((f for f in findings.values() if f.students), key=lambda f: (-len(f.students), order[f.mutant.name]))
    return Diagnosis(seen, [u for u in unexplained.values() if u.students], not_attempted)
