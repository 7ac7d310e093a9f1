"""Pages made from a student's notebook run none of the student's HTML.

A submitted notebook is hostile, and so is every output its code printed in the sandbox. Two
pages render one as HTML for a person: nbgrader's formgrader, where a TA grades the written
answers, and the feedback page a student fetches (or an LMS shows). The formgrader is served by
the TA's own Jupyter server, so a script in it acts as the TA: it can start a kernel, read the
hidden tests and write the gradebook. Nothing a student wrote may run there.

nbconvert can render untrusted notebooks (``HTMLExporter.sanitize_html``: outputs cleaned,
JavaScript and widget outputs left out, SVG shown as an image), but nbgrader 0.9.6's
``formgrade`` and ``feedback`` templates render markdown cells, the written answers among them,
straight through ``markdown2html``, raw HTML included. So ``configure`` turns sanitizing on for
every HTML exporter of the course and replaces the two filters those pages render student text
with: ``markdown2html`` cleans what it renders, and ``clean_html`` keeps the formatting a
written answer or an output table needs (headings, paragraphs, lists, tables, code, images
inlined as data) and nothing that runs: no script or style element, no event attribute, no
``id`` (it could shadow the grading page's own names), links to http(s) and mail only. What it
does not keep is escaped, not dropped, so the TA sees what was handed in. Math stays text for
MathJax, which the page loads with its Safe extension.
"""

from __future__ import annotations

from typing import Any

import bleach
import jinja2

__all__ = ["configure", "clean_html", "markdown2html", "TAGS"]

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div",
    "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd",
    "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table",
    "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
})
_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align"},
    "ol": {"start"},
    "abbr": {"title"},
}
_PROTOCOLS = frozenset({"http", "https", "mailto", "data"})


def _allowed(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: the attributes above; a data: URL only as an inlined image."""
    if name not in _ATTRIBUTES.get(tag, ()):
        return False
    if value.strip().lower().startswith("data:"):
        return tag == "img" and name == "src" and value.strip().lower().startswith("data:image/")
    return True


def clean_html(element: Any) -> str:
    """``element`` (HTML, as text or bytes) with only formatting left; everything else escaped."""
    text = element.decode() if isinstance(element, bytes) else str(element)
    return bleach.clean(text, tags=TAGS, attributes=_allowed, protocols=_PROTOCOLS, strip=False, strip_comments=True)


@jinja2.pass_context
def markdown2html(context: jinja2.runtime.Context, source: str) -> str:
    """Markdown (a cell's or an output's) rendered as nbconvert renders it, then ``clean_html``.

    Attachments of the cell being rendered are inlined as data images, as nbconvert does.
    """
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    cell = context.get("cell", {})
    renderer = IPythonRenderer(escape=False, allow_harmful_protocols=False, exclude_anchor_links=True,
                               attachments=cell.get("attachments", {}) if hasattr(cell, "get") else {})
    return clean_html(MarkdownWithMath(renderer=renderer).render(source))


def configure(c: Any) -> None:
    """Make every HTML page nbconvert renders under the traitlets config ``c`` inert (see above):
    nbgrader's feedback, and the formgrader's grading pages."""
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = {"markdown2html": f"{__name__}.markdown2html", "clean_html": f"{__name__}.clean_html"}
