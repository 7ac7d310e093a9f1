"""Lab 1's interactive attention explorer (ipywidgets) in a real browser.

The explorer draws the heat map of the student's own ``attention``, so the notebook here is
the release with the reference answers filled in. Moving a control must redraw the heat map:
the image shown after the move differs from the one before it.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from browser_suite import GROUP, REPO
from labpage import open_notebook
from mlbook.authoring import submissions

pytestmark = pytest.mark.xdist_group(GROUP)

LAB = "lab01_hand_attention"
EXPLORER_CELL = "explorer"  # grade_id of the cell that displays the explorer
REDRAW_TIMEOUT_MS = 60_000


def test_moving_an_explorer_control_redraws_the_heat_map(page, place, shots):
    path = place(LAB, submissions.reference(REPO, LAB))
    notebook = open_notebook(page, path)
    cells = notebook.run_all()
    failed = [c.label() for c in cells if c.errors]
    assert not failed, f"lab 1 with the reference answers failed at {failed}"

    index = next(c.index for c in cells if c.grade_id == EXPLORER_CELL)
    explorer = notebook.cell_node(index).locator(".jp-OutputArea-output .widget-vbox").first
    heatmap = explorer.locator(".widget-output img").first
    expect(heatmap).to_be_visible(timeout=REDRAW_TIMEOUT_MS)
    explorer.scroll_into_view_if_needed()
    shots.take(page, "explorer before")
    first = heatmap.get_attribute("src")

    slider = explorer.locator(".widget-hslider").first
    readout = slider.locator(".widget-readout")
    value_before = readout.inner_text()
    handle = slider.locator(".noUi-handle")
    box = handle.bounding_box()
    assert box is not None, "the explorer's first slider has no handle on the page"
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 60, box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()
    expect(readout).not_to_have_text(value_before, timeout=REDRAW_TIMEOUT_MS)
    expect(heatmap).not_to_have_attribute("src", first, timeout=REDRAW_TIMEOUT_MS)
    shots.take(page, f"explorer after slider {value_before} to {readout.inner_text()}")
    second = heatmap.get_attribute("src")

    explorer.get_by_role("checkbox", name="causal mask").check()
    expect(heatmap).not_to_have_attribute("src", second, timeout=REDRAW_TIMEOUT_MS)
    shots.take(page, "explorer after causal mask")
