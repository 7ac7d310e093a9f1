"""What a student reads when a check fails: named cells, the message first, lines that wrap.

- The feedback page (``mlbook.outputs.feedback_page``) names each graded cell in its contents by its
  grade_id and quotes a failing test's message there; its output text wraps (measured in Chromium:
  no element wider than its box), where nbgrader's own page runs the line off the side.
- In a real IPython kernel, a failed check's error shows the message as its first line, wrapped to
  lines ``nbgrader validate`` does not cut, then the test cell's line, and none of the helpers'
  own frames (``mlbook_helpers.tracebacks``); ``ename`` and ``evalue`` stay what the grader reads.
The same on the real pipeline's pages is checked in ``tests/test_pipeline.py``.
"""

from __future__ import annotations

import os
import re

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

from harness import REPO
from test_inert_html import course_config, render
from mlbook.authoring.notebooks import grade_id, is_test, nbgrader_meta, read_nb
from mlbook.outputs.preprocessors import strip_ansi
from mlbook_helpers.tracebacks import WIDTH

LAB = "lab01_hand_attention"
FAILING = "test_softmax_rows"
MESSAGE = ("softmax_rows of a 2 x 3 matrix: rows sum to [0.9695, 2.031], not 1; its columns sum to 1 instead "
           "(normalised over the queries, axis -2, not the keys). Each row is one query: normalise over the "
           "last axis (keys), not over axis 0 (queries). A_token_longer_than_any_line_" + "x" * 150)


def graded_release() -> nbformat.NotebookNode:
    """Lab 1's release as nbgrader's feedback step sees it: scores on graded cells, one failing test."""
    nb = read_nb(REPO.release(LAB))
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("grade") or meta.get("task"):
            meta["score"] = 0 if grade_id(cell) == FAILING else meta.get("points", 0)
        if grade_id(cell) == FAILING:
            cell.outputs = [nbformat.v4.new_output("error", ename="Misconception", evalue=MESSAGE,
                                                   traceback=[f"Misconception: {MESSAGE}"])]
    return nb


def contents(html: str) -> str:
    return html.split('<div id="toc">', 1)[1].split("</div>\n</div>", 1)[0]


def test_the_contents_name_every_graded_cell_and_quote_the_failing_message():
    nb = graded_release()
    html = render(nb, "mlbook_feedback", course_config())
    toc = contents(html)
    graded = [grade_id(c) for c in nb.cells if nbgrader_meta(c).get("grade") or nbgrader_meta(c).get("task")]
    listed = re.findall(r'<li class="toc-cell" data-grade-id="([^"]+)"', toc)
    assert listed == graded, "the contents do not name each graded cell, in order"
    assert "Test cell" not in toc and "Written response" not in toc
    messages = re.findall(r'data-grade-id="([^"]+)".*?(?:<div class="toc-message">([^<]*)</div>)?</li>', toc, re.S)
    quoted = {gid: text for gid, text in messages if text}
    assert quoted == {FAILING: f"Misconception: {MESSAGE}"}, quoted
    tests = sum(is_test(c) for c in nb.cells)
    assert toc.count('<span class="toc-kind">test</span>') == tests


def overflowing(chromium, html: str) -> list[str]:
    """Text outputs and contents entries of the page wider than their own box, at 1000 px (a figure may be)."""
    page = chromium.new_page(viewport={"width": 1000, "height": 800})
    try:
        page.set_content(html, wait_until="load")
        return page.evaluate("""() => [...document.querySelectorAll(
                 'div.output_text pre, div.output_text, #toc .toc-message')]
               .filter(e => e.scrollWidth > e.clientWidth)
               .map(e => `${e.tagName}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`)""")
    finally:
        page.close()


def test_a_long_misconception_line_wraps_on_the_feedback_page(chromium):
    nb = graded_release()
    wide = overflowing(chromium, render(nb, "feedback", course_config()))
    assert wide, "nbgrader's own page wraps the message too: this test no longer shows the difference"
    assert overflowing(chromium, render(nb, "mlbook_feedback", course_config())) == []


@pytest.fixture(scope="module")
def kernel():
    """A real IPython kernel whose working folder is the course (``mlbook_helpers`` importable)."""
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(REPO.root),
                                       env={**os.environ, "PYTHONPATH": str(REPO.root)})
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run_error(client, code: str) -> dict:
    """The error output of running ``code`` in the kernel."""
    errors = []
    client.execute_interactive(code, timeout=120, output_hook=lambda msg: errors.append(msg["content"])
                               if msg["msg_type"] == "error" else None)
    assert len(errors) == 1, errors
    return errors[0]


def test_a_failed_check_shows_its_message_first_and_no_helper_frames(kernel):
    error = run_error(kernel, 'from mlbook_helpers.checks import expect_close\n'
                              'w = [0.2, 0.8]\n'
                              f'expect_close(w, [0.5, 0.5], "weights of the example", hint={MESSAGE!r})\n')
    lines = strip_ansi("\n".join(error["traceback"])).splitlines()
    assert error["ename"] == "Misconception" and error["evalue"].startswith("weights of the example: got 0.2")
    assert lines[0].startswith("Misconception: weights of the example: got 0.2"), lines[:3]
    message = " ".join(lines[:lines.index("")])
    assert message.replace(" ", "") == f"Misconception: {error['evalue']}".replace(" ", ""), "the message is not whole"
    assert all(len(line) <= WIDTH for line in lines[:lines.index("")])
    shown = "\n".join(lines)
    assert 'expect_close(w, [0.5, 0.5], "weights of the example"' in shown, "the test cell's line is not shown"
    assert "raise Misconception" not in shown and "_fail(" not in shown, "the helpers' own frames are shown"
    assert lines[-1] == "(the check that failed: expect_close, in mlbook_helpers.checks)"


def test_an_error_in_the_students_code_keeps_its_usual_traceback(kernel):
    error = run_error(kernel, 'def softmax_rows(S):\n    return S / undefined_name\n'
                              'from mlbook_helpers.checks import expect_close\n'
                              'expect_close(softmax_rows(1.0), [1.0], "softmax_rows")\n')
    lines = strip_ansi("\n".join(error["traceback"])).splitlines()
    assert error["ename"] == "NameError" and lines[-1].startswith("NameError: name 'undefined_name'")
