"""nbgrader preprocessors that mlbook adds to nbgrader's own pipelines.

Convention: a student sees, for a failing test cell, the last line of the error
(``Misconception: rows sum to 0.73 ...``) and nothing of the traceback: tracebacks of hidden
tests quote hidden lines (measured on nbgrader 0.9.6 even with ClearHiddenTests), and the
message already names the misconception.
"""

from __future__ import annotations

import re

from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .notebooks import nbgrader_meta

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


class RedactTestTracebacks(NbGraderPreprocessor):
    """Replace each graded test cell's error traceback with its one-line message."""

    def preprocess_cell(
        self, cell: NotebookNode, resources: ResourcesDict, cell_index: int
    ) -> tuple[NotebookNode, ResourcesDict]:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            return cell, resources
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                message = strip_ansi(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}")
                output["traceback"] = [message]
        return cell, resources
