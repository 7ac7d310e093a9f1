"""The feedback page's template: nbgrader's own, with names and wrapped messages.

nbgrader 0.9.6's feedback page lists every test cell in its table of contents as a bare "Test
cell" (lab 1 has twenty), and its output areas keep a long line on one line, so a misconception
message runs off the side of the page. ``FeedbackExporter`` (``GenerateFeedback.exporter_class``
in ``nbgrader_config.py``) renders the same page from ``templates/mlbook_feedback.html.j2``,
which extends nbgrader's template (reached as ``nbgrader/feedback/index.html.j2``) and changes
only this:
- each entry of the contents names its cell by its grade_id (``test_softmax_rows``), says what
  kind of cell it is, its score, and, for a failing test, the message, in full;
- output text wraps (``white-space: pre-wrap`` and ``overflow-wrap: anywhere``), the message
  and the student's own printed lines alike.
Everything else, the inert-HTML filters of ``inert_html`` among it, is nbgrader's and the
course config's: the page runs none of the student's HTML (``tests/test_inert_html.py``
renders it with a hostile notebook). Text the student controls (grade ids, messages) is
escaped in the template.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from nbconvert.exporters import HTMLExporter
from nbformat import NotebookNode
from traitlets import default

from mlbook.authoring.notebooks import nbgrader_meta
from mlbook.outputs.preprocessors import cell_failure

__all__ = ["FeedbackExporter", "TEMPLATE", "cell_kind", "failure_message"]

TEMPLATE = "mlbook_feedback.html.j2"
_TEMPLATES = Path(__file__).parent / "templates"


def _nbgrader_templates() -> str:
    import nbgrader.server_extensions.formgrader as formgrader

    return str(Path(formgrader.__file__).parent / "templates")


def cell_kind(cell: NotebookNode) -> str:
    """What a graded cell is, in the words of the contents: test, written answer, code answer, task."""
    meta = nbgrader_meta(cell)
    if meta.get("task"):
        return "task"
    if meta.get("solution"):
        return "written answer" if cell.cell_type == "markdown" else "code answer"
    return "test"


def failure_message(cell: NotebookNode) -> str:
    """A test cell's failure as one line (``Misconception: rows sum to ...``), or "" if it passed."""
    if cell.cell_type != "code" or cell_kind(cell) != "test":
        return ""
    return cell_failure(cell) or ""


class FeedbackExporter(HTMLExporter):
    """nbgrader's ``HTMLExporter`` for feedback, rendering ``TEMPLATE`` (see the module docstring)."""

    @default("template_file")
    def _template_file_default(self) -> str:
        return TEMPLATE

    @default("extra_loaders")
    def _extra_loaders_default(self) -> list:
        return [jinja2.FileSystemLoader(str(_TEMPLATES)),
                jinja2.PrefixLoader({"nbgrader": jinja2.FileSystemLoader(_nbgrader_templates())})]

    def default_filters(self):
        yield from super().default_filters()
        yield "cell_kind", cell_kind
        yield "failure_message", failure_message
