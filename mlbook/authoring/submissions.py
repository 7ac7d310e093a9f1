"""Make submissions the way students would hand them in (for the harness and the demo).

Kinds, by what fills the answer cells of the release notebook:
- ``reference``: every answer from the source notebook's solution blocks;
- ``untouched``: the release as students receive it;
- a catalogue entry (mutant or alternative): the reference with the entry's cells replaced;
- ``corrupt``: a file that is not a notebook at all (truncated JSON).
"""

from __future__ import annotations

from typing import Mapping

from nbformat import NotebookNode

from mlbook.course import Course
from mlbook.authoring.notebooks import fill_answers, read_nb, reference_answers, write_nb_atomic


def reference(course: Course, lab: str, replace: Mapping[str, str] | None = None) -> NotebookNode:
    """The release filled with the reference answers, with ``replace``'s cells swapped in."""
    answers = reference_answers(read_nb(course.source(lab)))
    answers.update(replace or {})
    return fill_answers(read_nb(course.release(lab)), answers)


def untouched(course: Course, lab: str) -> NotebookNode:
    return read_nb(course.release(lab))


def submit(course: Course, student: str, lab: str, nb: NotebookNode | None = None, *, raw: str | None = None,
           filename: str | None = None) -> None:
    """Place a submission at ``submitted/<student>/<lab>/<filename or lab.ipynb>``."""
    folder = course.submitted(student, lab)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (filename or f"{lab}.ipynb")
    if raw is not None:
        target.write_text(raw)
    else:
        write_nb_atomic(nb, target)


def corrupt_text(course: Course, lab: str) -> str:
    """The release notebook's JSON cut in half, as an interrupted upload leaves it."""
    text = course.release(lab).read_text()
    return text[: len(text) // 2]
