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

from mlbook.authoring.notebooks import nbgrader_meta

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# Stderr chunks that are only library warnings: the autograder drops them (nbgrader's
# IgnorePattern, configured in nbgrader_config.py) and so does `mlbook validate`.
WARNING_STDERR_PATTERN = r"\w*Warning: |warnings\.warn\("


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def error_line(output: NotebookNode) -> str:
    """An error output as one line: ``Misconception: rows sum to 0.73 ...``."""
    return strip_ansi(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}")


def cell_failure(cell: NotebookNode) -> str | None:
    """The one-line reason a cell failed (its error, else its stderr), or None if it did not."""
    outputs = cell.get("outputs", [])
    for output in outputs:
        if output.get("output_type") == "error":
            return error_line(output)
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            return "stderr: " + strip_ansi(output.get("text", "")).strip()[:300]
    return None


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
                output["traceback"] = [error_line(output)]
        return cell, resources
