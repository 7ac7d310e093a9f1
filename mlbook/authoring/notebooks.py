"""Notebook transforms: authored text -> nbgrader source, and release -> student submissions.

Conventions:
- The authored file is jupytext percent format; nbgrader metadata sits in each cell header and
  may omit keys that have a default (``normalize_nbgrader``).
- nbgrader's delimiters mark what students must not receive: ``### BEGIN SOLUTION`` /
  ``### END SOLUTION`` and ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``.
- A *submission* is the release notebook with answer cells (``solution: true``) filled in, the
  way a student hands it in: same cells, same metadata, only answer sources changed.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Iterator, Mapping

import nbformat
from nbformat import NotebookNode

from mlbook.errors import MlbookError
from mlbook.files import write_atomic

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
SOLUTION, HIDDEN = (BEGIN_SOLUTION, END_SOLUTION), (BEGIN_HIDDEN, END_HIDDEN)

# jupytext's own bookkeeping that must not reach nbgrader's notebooks
_JUPYTEXT_CELL_KEYS = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker", "title")


def nbgrader_meta(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_answer(cell: NotebookNode) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell: NotebookNode) -> bool:
    """An autograded test cell: graded code that is not itself an answer."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution") and cell.cell_type == "code"


def has_hidden_tests(cell: NotebookNode) -> bool:
    return BEGIN_HIDDEN in cell.source


def split_blocks(text: str, delimiters: tuple[str, str]) -> tuple[str, list[str]]:
    """(``text`` outside its delimited blocks, each block's text), the delimiter lines dropped.

    The one parser of nbgrader's delimiters here. A delimiter is any line that contains it, as
    nbgrader reads them; lines keep their line ends, so the outside text of a cell without
    blocks is the cell itself.

    Args:
        text: a cell's source.
        delimiters: ``SOLUTION`` or ``HIDDEN``.
    """
    begin, end = delimiters
    outside, blocks, current = [], [], None
    for line in text.splitlines(keepends=True):
        if begin in line:
            current = []
        elif end in line and current is not None:
            blocks.append("".join(current))
            current = None
        elif current is not None:
            current.append(line)
        elif end not in line:
            outside.append(line)
    return "".join(outside), blocks


def visible_text(text: str) -> str:
    """A cell's text without its solution and hidden-test blocks: what the release shows of it."""
    return split_blocks(split_blocks(text, SOLUTION)[0], HIDDEN)[0]


def without_delimiters(text: str) -> str:
    """A cell's text with its solution delimiter lines dropped (what a perfect student writes)."""
    return "".join(line for line in text.splitlines(keepends=True) if BEGIN_SOLUTION not in line
                   and END_SOLUTION not in line)


def grade_id(cell: NotebookNode) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


def normalize_nbgrader(meta: Mapping) -> dict:
    """Complete an authored nbgrader block with nbgrader's defaults (schema 3).

    Test cells (graded, not answers) and task cells are locked; answer cells are not.
    """
    out = {"grade": False, "solution": False, "schema_version": 3, **meta}
    out.setdefault("locked", (out["grade"] and not out["solution"]) or bool(out.get("task")))
    if (out["grade"] or out.get("task")) and "points" not in out:
        raise MlbookError(f"cell {out.get('grade_id')!r} is graded but declares no points")
    if (out["grade"] or out["solution"] or out["locked"] or out.get("task")) and not out.get("grade_id"):
        raise MlbookError(f"an nbgrader cell has no grade_id: {dict(meta)}")
    return {key: out[key] for key in sorted(out)}


def read_authored(path: Path) -> NotebookNode:
    """Read ``notebooks/<lab>.py`` into nbgrader's source notebook: normalized metadata, no outputs."""
    import jupytext

    nb = jupytext.read(path, fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    assign_stable_ids(nb)
    for cell in nb.cells:
        for key in _JUPYTEXT_CELL_KEYS:
            cell.metadata.pop(key, None)
        if "nbgrader" in cell.metadata:
            cell.metadata["nbgrader"] = normalize_nbgrader(cell.metadata["nbgrader"])
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    return nb


def assign_stable_ids(nb: NotebookNode) -> None:
    """Give every cell an id that does not change between builds (jupytext draws random ones).

    An nbgrader cell's id is its grade_id; any other cell's id is a hash of its text, with a
    counter for repeated text, so editing one cell changes one id in the built notebooks.
    """
    import hashlib

    seen: dict[str, int] = {}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        base = gid if gid and re.fullmatch(r"[A-Za-z0-9_-]{1,60}", gid) else \
            "c" + hashlib.sha1(f"{cell.cell_type}:{cell.source}".encode()).hexdigest()[:10]
        seen[base] = seen.get(base, 0) + 1
        cell["id"] = base if seen[base] == 1 else f"{base}-{seen[base]}"


def iter_nbgrader_cells(nb: NotebookNode) -> Iterator[tuple[str, NotebookNode]]:
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid:
            yield gid, cell


def reference_answers(source_nb: NotebookNode) -> dict[str, str]:
    """Answer grade_id -> the answer a perfect student writes: the cell with its delimiters removed."""
    return {
        gid: without_delimiters(cell.source)
        for gid, cell in iter_nbgrader_cells(source_nb)
        if is_answer(cell)
    }


def fill_answers(release_nb: NotebookNode, answers: Mapping[str, str]) -> NotebookNode:
    """A copy of the release notebook with the given answer cells replaced (a submission)."""
    nb = copy.deepcopy(release_nb)
    by_id = dict(iter_nbgrader_cells(nb))
    for gid, text in answers.items():
        cell = by_id.get(gid)
        if cell is None or not is_answer(cell):
            raise MlbookError(f"no answer cell {gid!r} in the release notebook")
        cell.source = text
    return nb


def read_nb(path: Path) -> NotebookNode:
    try:
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # corrupt JSON, wrong format: one clear line
        raise MlbookError(f"cannot read notebook {path}: {type(exc).__name__}: {exc}") from None


def write_nb_atomic(nb: NotebookNode, path: Path) -> None:
    """Write a notebook so that readers see the old file or the new one, never half of one."""
    text = nbformat.writes(nb)
    write_atomic(path, text if text.endswith("\n") else text + "\n")  # as nbformat.write ends a file
