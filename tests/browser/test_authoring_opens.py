"""An instructor opens a lab's jupytext source (``notebooks/<lab>.py``) as a notebook in JupyterLab.

jupytext's JupyterLab integration ships with the ``jupytext`` package (the ``jupyterlab_jupytext``
server extension, enabled by its install, and the ``jupyterlab-jupytext`` lab extension); no
project configuration is needed. The instructor right-clicks the file and picks
Open With > Notebook: the notebook shows the same cells as jupytext reads from the file,
with nbgrader's metadata from the cell headers, and its markdown rendered.
"""

from __future__ import annotations

import re

import jupytext
import pytest

from browser_suite import GROUP, REPO
from labpage import NotebookPage

pytestmark = pytest.mark.xdist_group(GROUP)

LAB = "lab01_hand_attention"


def test_a_jupytext_source_opens_as_a_notebook_with_its_nbgrader_cells(page, course, shots):
    source = course.authored(LAB).relative_to(course.root).as_posix()
    folder = source.rsplit("/", 1)[0]
    page.locator(".jp-BreadCrumbs-home").click()  # the file browser at the course root
    page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{re.escape(folder)}$")).dblclick()
    item = page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{LAB}\.py$"))
    item.click(button="right")
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Open With$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Notebook$")).click()
    notebook = NotebookPage(page, source)
    notebook.wait_ready()
    shots.take(page, "jupytext source opened as a notebook")

    expected = jupytext.read(REPO.authored(LAB), fmt="py:percent")
    cells = notebook.cells()
    assert [c.type for c in cells] == [c.cell_type for c in expected.cells], \
        f"{source} opened with {len(cells)} cells; jupytext reads {len(expected.cells)} from the file"
    expected_ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in expected.cells]
    assert [c.grade_id for c in cells] == expected_ids, "the nbgrader metadata of the cell headers did not come through"
    assert all(a.source == b.source for a, b in zip(cells, expected.cells)), "a cell's text differs from the file's"
    first_markdown = next(c for c in cells if c.type == "markdown")
    title = notebook.rendered_markdown(first_markdown.index).locator("h1")
    assert title.inner_text().startswith("Lab 1"), "the lab's title does not render as a heading"
