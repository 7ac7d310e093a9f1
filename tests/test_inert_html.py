"""None of a student's HTML runs in the pages made from their notebook (``mlbook.outputs.inert_html``).

The pages are rendered as the formgrader and nbgrader's feedback render them: nbconvert's
``HTMLExporter`` with nbgrader's ``formgrade`` or ``feedback`` template, and the course's own feedback
page (``mlbook_feedback``: ``FeedbackExporter``, which also quotes a failing test's message in its
contents), under the course's own ``nbgrader_config.py`` (and, for the hub, under the staff profile's nbgrader config). The
notebook is a hostile submission: scripts, event attributes, ``javascript:`` links, frames,
styles and forms in a written answer, in a raw cell, in every kind of output its code can
print, in a failing test cell's error message, and in the notebook's widget state. Each payload would set ``PWNED``; the page must hold
that word only as text. What a TA needs to grade stays: the answer's words, its formatting, its
math, its images, and the payload itself, escaped, as evidence.
"""

from __future__ import annotations

import os
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

import nbgrader.server_extensions.formgrader.handlers as formgrader_pages
from harness import REPO
from mlbook.outputs.feedback_page import FeedbackExporter

TEMPLATES = ("formgrade", "feedback", "mlbook_feedback")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="

ANSWER = """My answer: the scale keeps the **spread** of the scores near 1, so $a < b$ and $x_i^2$ stay readable.

| d_k | spread |
|-----|--------|
| 4   | 2.0    |

<script>window.PWNED = 'markdown script'</script>
<img src=x onerror="window.PWNED = 'markdown onerror'">
<svg onload="window.PWNED = 'markdown svg'"></svg>
<iframe src="javascript:window.PWNED = 'markdown iframe'"></iframe>
<a href="javascript:window.PWNED = 'markdown link'">click</a> [click too](javascript:window.PWNED='md link')
<style>body { background: url("javascript:window.PWNED = 'style'") }</style>
<form action="https://example.org/steal"><input name="PWNED"></form>
<div id="formgrader" onclick="window.PWNED = 'div'">shadowing the page's own names</div>
<a href="data:text/html,<script>window.PWNED = 'data link'</script>">data</a>
<meta http-equiv="refresh" content="0;url=javascript:window.PWNED = 'meta'">

![inlined](attachment:plot.png)
"""


def hostile_notebook(harmless: bool = False) -> nbformat.NotebookNode:
    """The submission; ``harmless``: the same cells holding plain text and no outputs (what the page
    carries for any submission: its own scripts, stylesheet and score boxes)."""
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_markdown_cell("My answer." if harmless else ANSWER, metadata={"nbgrader": {
        "grade": True, "solution": True, "locked": False, "points": 2, "score": 1, "grade_id": "written",
        "schema_version": 3}})
    answer.attachments = {"plot.png": {"image/png": PNG}}
    raw = nbformat.v4.new_raw_cell("raw" if harmless else "<script>window.PWNED = 'raw cell'</script>",
                                   metadata={"raw_mimetype": "text/html"})
    code = nbformat.v4.new_code_cell("show()", metadata={"nbgrader": {
        "grade": False, "solution": True, "locked": False, "grade_id": "code", "schema_version": 3}})
    code.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": "<b>table</b><script>window.PWNED = 'html output'</script>"
                         "<img src=x onerror=\"window.PWNED = 'html onerror'\">", "text/plain": "html"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "window.PWNED = 'javascript output'",
                                                      "text/plain": "js"}),
        nbformat.v4.new_output("display_data", data={
            "text/markdown": "<script>window.PWNED = 'markdown output'</script>", "text/plain": "md"}),
        nbformat.v4.new_output("display_data", data={
            "image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload=\"window.PWNED = 'svg'\"></svg>",
            "text/plain": "svg"}),
        nbformat.v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "</script><script>window.PWNED = 'widget'</script>",
                                                         "version_major": 2, "version_minor": 0},
            "text/plain": "widget"}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
    ]
    message = "rows sum to 2" if harmless else "</pre><script>window.PWNED = 'test message'</script>"
    test = nbformat.v4.new_code_cell("check()", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "points": 1, "score": 0, "grade_id": "test_code",
        "schema_version": 3}})
    test.outputs = [nbformat.v4.new_output("error", ename="Misconception", evalue=message,
                                           traceback=[f"Misconception: {message}"])]
    nb.cells = [answer, raw, code, test]
    if harmless:
        code.outputs = []
        return nb
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {}, "version_major": 2, "version_minor": 0, "note": "</script><script>window.PWNED = 'state'</script>"}}
    return nb


class Page(HTMLParser):
    """What of a page can run (script bodies, event attributes, script URLs, active elements) and what is text."""

    ACTIVE = {"iframe", "frame", "object", "embed", "form", "style", "link", "base", "meta", "svg", "input"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.runnable: list[str] = []
        self.active: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_script = tag == "script"
        for name, value in attrs:
            value = value or ""
            if "PWNED" in value and (name.startswith("on") or name in ("href", "src", "action", "content", "style")):
                self.runnable.append(f"<{tag} {name}={value!r}>")
        if tag in self.ACTIVE and tag != "meta" or (tag == "meta" and dict(attrs).get("http-equiv")):
            self.active.append(f"<{tag} {dict(attrs)}>")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        (self.runnable if self._in_script and "PWNED" in data else self.text).append(data)


def course_config(extra: str = "") -> Config:
    """The course's nbgrader config, loaded as nbgrader loads it (plus ``extra`` config lines)."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(REPO.root)).load_config()
    if extra:
        config.merge(_lines_config(extra))
    return config


def _lines_config(lines: str) -> Config:
    namespace = {"c": Config(), "get_config": None}
    namespace["get_config"] = lambda: namespace["c"]
    exec(compile(lines, "<profile>", "exec"), namespace)  # noqa: S102 - the project's own config lines
    return namespace["c"]


def render(nb: nbformat.NotebookNode, template: str, config: Config) -> str:
    """The page nbgrader renders with ``template`` (the formgrader's grading page, or feedback)."""
    config = Config(config)
    exporter = FeedbackExporter if template == "mlbook_feedback" else HTMLExporter
    config.HTMLExporter.template_name = "feedback" if template == "mlbook_feedback" else template  # as nbgrader's API
    config.HTMLExporter.extra_template_basedirs = [formgrader_pages.template_path]
    config.HTMLExporter.extra_template_paths = [os.path.join(formgrader_pages.static_path, "node_modules", "bootstrap",
                                                             "dist", "css")]  # the feedback page inlines it, as nbgrader does
    resources = {"assignment_id": "lab", "notebook_id": "lab", "submission_id": "1", "index": 0, "total": 1,
                 "base_url": "/", "student": "mallory", "last_name": "", "first_name": "", "notebook_path": "lab.ipynb",
                 "nbgrader": {"notebook": "lab", "score": 1, "max_score": 2, "late_penalty": 0}}  # what GetGrades adds
    html, _ = exporter(config=config).from_notebook_node(nb, resources=resources)
    return html


def _own_elements(template: str, config: Config) -> tuple[int, list[str]]:
    """The scripts and active elements a page of ``template`` carries for a harmless submission: the page's own."""
    page = Page()
    page.feed(render(hostile_notebook(harmless=True), template, config))
    return page.tags.count("script"), page.active


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_students_html_does_not_run_in_the_page(template):
    config = course_config()
    page = Page()
    page.feed(render(hostile_notebook(), template, config))
    assert not page.runnable, f"{template}: the student's code can run: {page.runnable}"
    scripts, active = _own_elements(template, config)
    assert page.tags.count("script") == scripts, f"{template}: scripts beyond the page's own"
    assert page.active == active, f"{template}: active elements from the student: {set(page.active) - set(active)}"


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_ta_still_sees_the_answer_its_formatting_and_the_attempt(template):
    html = render(hostile_notebook(), template, course_config())
    page = Page()
    page.feed(html)
    text = "".join(page.text)
    assert "My answer: the scale keeps the" in text and "spread" in text
    assert {"strong", "table", "th", "td", "img"} <= set(page.tags), "formatting the answer needs was lost"
    assert f"data:image/png;base64,{PNG}" in html, "the inlined image was lost"
    assert "$a &lt; b$" in html and "&amp;lt;" not in html, "math must reach MathJax escaped once"
    assert "<script>window.PWNED = 'markdown script'</script>" in text, "the attempt must show, as text"


def test_the_hub_formgrader_renders_under_the_same_rules(tmp_path):
    """A TA's formgrader on the hub reads the staff profile's nbgrader config (the server starts in the TA's
    home, not in the course): that config alone must make the student's HTML inert."""
    from mlbook.hub.exchange import Exchange
    from mlbook.hub.site import HubSite, nbgrader_config

    site = HubSite(tmp_path / "hub", REPO.root, Exchange(tmp_path / "exchange", "attention-labs", "staff"), [], [])
    page = Page()
    page.feed(render(hostile_notebook(), "formgrade", _lines_config(nbgrader_config(site, "staff"))))
    assert not page.runnable, f"the hub's formgrader runs the student's code: {page.runnable}"
