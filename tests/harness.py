"""The grading harness: grade a lab's catalogue through the real nbgrader pipeline.

For one lab, in a scratch course: the committed release is filled with the reference
solution (student ``reference``), left untouched (``untouched``), filled with mutants
(``mutant-<name>``) and alternatives (``alt-<name>``), plus any extra submissions a test
asks for; then ``mlbook.grading.autograde`` grades them all (sandboxed, verdicts outside the kernel).
Graded labs are cached per test run, so every test of a lab reads the same run.

Which catalogue entries go through the sandbox (``pipeline_entries``): every entry of lab 1
(the report's tests read a whole catalogue's diagnoses) and, of the other labs, a set of mutants
that reaches every test cell some mutant must fail, and every alternative, packed several to a
notebook: alternatives that rewrite different answer cells share one submission (correct answers
side by side are still correct), so each is graded by the pipeline at a fraction of the cost.
Every entry of every lab is checked in-process on many seeded draws, failing cells and
misconception messages included (``test_hidden_draws``): the checks are the same code in both
places, so the sandbox adds the pipeline (kernel, judge, nbgrader's scores), which the sample
proves for each check. A whole lab 5 notebook takes about a minute in the sandbox; the whole
catalogue of every lab (about 200 notebooks) goes through it with ``MLBOOK_CATALOGUE=full``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mlbook.authoring import submissions
from mlbook.authoring.catalogue import Alternative, Catalogue
from mlbook.labs import load_catalogue
from mlbook.course import Course
from mlbook.grading import GradingOptions, autograde
from mlbook.outputs.results import SubmissionResult, collect

REPO = Course(Path(__file__).resolve().parents[1])
LABS = REPO.labs()

# Extra submissions per lab: student -> function(course) placing that student's submission.
Extra = Callable[[Course, str, str], None]
EXTRAS: dict[str, dict[str, Extra]] = {}


def add_extras(lab: str, **extras: Extra) -> None:
    """Ride extra submissions along in ``lab``'s graded batch (any test module, any import order)."""
    mine = EXTRAS.setdefault(lab, {})
    for student, place in extras.items():
        if mine.get(student, place) is not place:
            raise ValueError(f"two test modules add the extra student {student!r} to {lab}")
        mine[student] = place


@dataclass
class GradedLab:
    lab: str
    course: Course
    catalogue: Catalogue
    results: dict[str, SubmissionResult]

    def result(self, student: str) -> SubmissionResult:
        return self.results[student]


def mutant_student(name: str) -> str:
    return f"mutant-{name}"


def alternative_student(name: str) -> str:
    return f"alt-{name}"


FULL_CATALOGUE_LABS = {"lab01_hand_attention"}


def pipeline_entries(catalogue: Catalogue) -> Catalogue:
    """The entries of ``catalogue`` graded through the sandbox in this run (see the module docstring).

    Mutants: a greedy cover, taken one at a time, each the one that must fail the most test
    cells no mutant taken so far fails (the first in catalogue order on a tie), until every test
    cell some mutant must fail is reached. Alternatives: all of them, packed (``packed``).
    Deterministic, so a test id means the same submission on every machine.
    """
    if os.environ.get("MLBOOK_CATALOGUE") == "full" or catalogue.lab in FULL_CATALOGUE_LABS:
        return catalogue
    mutants = _cover(catalogue.mutants, lambda mutant: mutant.must_fail)
    return Catalogue(catalogue.lab, mutants, packed(catalogue.alternatives))


def packed(alternatives: tuple[Alternative, ...]) -> tuple[Alternative, ...]:
    """Every alternative, in as few submissions as first fit gives: each joins the first pack whose
    alternatives rewrite none of its answer cells. A pack of one is the alternative itself; a larger
    one is named ``pack-<n>`` and lists its members in its description."""
    packs: list[list[Alternative]] = []
    for alternative in alternatives:
        home = next((pack for pack in packs if not any(set(alternative.cells) & set(a.cells) for a in pack)), None)
        if home is None:
            packs.append([alternative])
        else:
            home.append(alternative)
    return tuple(pack[0] if len(pack) == 1 else
                 Alternative(name=f"pack-{n}", description=" + ".join(a.name for a in pack),
                             cells={gid: code for a in pack for gid, code in a.cells.items()})
                 for n, pack in enumerate(packs, 1))


def _cover(entries: tuple, reaches: Callable) -> tuple:
    left = {cell for entry in entries for cell in reaches(entry)}
    taken = []
    while left:
        best = max(entries, key=lambda entry: len(left & set(reaches(entry))))
        taken.append(best)
        left -= set(reaches(best))
    return tuple(sorted(taken, key=entries.index))


def scratch_course(lab: str, root: Path) -> Course:
    """A course at ``root`` with the lab's committed source and release."""
    course = REPO.scratch_copy(root, [lab])
    course.release(lab).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO.release(lab), course.release(lab))
    return course


def grade_lab(lab: str, root: Path) -> GradedLab:
    course = scratch_course(lab, root)
    catalogue = pipeline_entries(load_catalogue(lab))
    submissions.submit(course, "reference", lab, submissions.reference(course, lab))
    submissions.submit(course, "untouched", lab, submissions.untouched(course, lab))
    for mutant in catalogue.mutants:
        submissions.submit(course, mutant_student(mutant.name), lab, submissions.reference(course, lab, mutant.cells))
    for alternative in catalogue.alternatives:
        submissions.submit(course, alternative_student(alternative.name), lab,
                           submissions.reference(course, lab, alternative.cells))
    for student, place in EXTRAS.get(lab, {}).items():
        place(course, student, lab)
    # pytest-xdist already keeps both cores busy with one lab each: one sandbox per test worker.
    workers = int(os.environ.get("MLBOOK_TEST_WORKERS", "1"))
    autograde(course, lab, force=True, progress=False, options=GradingOptions(workers=workers))
    return load_graded(lab, root)


def load_graded(lab: str, root: Path) -> GradedLab:
    """Read back a lab graded earlier in this run (possibly by another test worker)."""
    course = Course(root)
    return GradedLab(lab, course, pipeline_entries(load_catalogue(lab)), {r.student: r for r in collect(course, lab)})
