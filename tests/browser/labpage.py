"""Drive JupyterLab the way a student or a TA does, and read back what the page shows.

Conventions:
- Actions go through the page: clicks, key presses and the clipboard, as a person would.
- Reads that need precision (a cell's source, execution count, error name) come from the
  notebook model through ``window.jupyterapp`` (see ``labserver``); what a person looks at
  (rendered markdown, images, dialogs, the formgrader's tables) is read from the DOM.
- Waits are on JupyterLab's own state (a cell's execution count, the kernel's idle status,
  a dialog appearing), never on fixed sleeps.
- Notebooks are addressed by their path relative to the server's root; cells by index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Locator, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

OPEN_TIMEOUT_MS = 90_000  # the page, the notebook and a started kernel
CELL_TIMEOUT_MS = 240_000  # the slowest cell (lab 5 trains small models) on a loaded machine
VALIDATE_TIMEOUT_MS = 400_000  # nbgrader runs the whole notebook again on the server
PASTE_TIMEOUT_MS = 10_000

# Read-only helpers over JupyterLab's application object, installed in every page.
MODEL_JS = r"""
window.__lab = {
  panel(path) {
    const app = window.jupyterapp;
    if (!app) return null;
    for (const w of app.shell.widgets('main')) {
      if (w.context && w.context.path === path && w.content && w.content.widgets) return w;
    }
    return null;
  },
  ready(path) {
    const p = this.panel(path);
    const kernel = p && p.sessionContext.session && p.sessionContext.session.kernel;
    return !!(p && p.context.isReady && p.content.widgets.length && kernel && kernel.status === 'idle');
  },
  cells(path) {
    return this.panel(path).content.widgets.map((c, index) => {
      const m = c.model;
      const nb = m.getMetadata('nbgrader') || {};
      const code = m.type === 'code';
      return {
        index, type: m.type, source: m.sharedModel.getSource(),
        grade_id: nb.grade_id || null, solution: !!nb.solution, grade: !!nb.grade,
        count: code ? m.executionCount : null,
        running: code ? m.executionState === 'running' : false,
        outputs: code ? m.outputs.toJSON().map(o => ({
          type: o.output_type, ename: o.ename || null, evalue: o.evalue || null,
          mimes: Object.keys(o.data || {}), text: o.text || null,
        })) : [],
      };
    });
  },
  activeIndex(path) { return this.panel(path).content.activeCellIndex; },
  counts(path) {  // cheap enough to poll: [execution count or null, running] per cell
    return this.panel(path).content.widgets.map(c => c.model.type === 'code'
      ? [c.model.executionCount, c.model.executionState === 'running'] : [null, false]);
  },
  runnable(path) {  // code cells with code: JupyterLab does not send an empty cell to the kernel
    return this.panel(path).content.widgets.map(c =>
      c.model.type === 'code' && c.model.sharedModel.getSource().trim() !== '');
  },
  failed(path) {
    return this.panel(path).content.widgets.some(c => c.model.type === 'code'
      && Array.from({length: c.model.outputs.length}, (_, k) => c.model.outputs.get(k).type).includes('error'));
  },
  editing(path, i) {  // cell i's editor has the keyboard, in edit mode
    const p = this.panel(path), cell = p.content.widgets[i];
    return p.content.mode === 'edit' && p.content.activeCellIndex === i && !!cell.editor && cell.editor.hasFocus();
  },
  allSelected(path, i) {  // cell i's whole text is selected
    const ed = this.panel(path).content.widgets[i].editor, sel = ed.getSelection();
    const ends = [ed.getOffsetAt(sel.start), ed.getOffsetAt(sel.end)].sort((a, b) => a - b);
    return ends[0] === 0 && ends[1] === ed.model.sharedModel.getSource().length;
  },
  source(path, i) { return this.panel(path).content.widgets[i].model.sharedModel.getSource(); },
  maxCount(path) { return Math.max(0, ...this.counts(path).map(([n]) => n || 0)); },
  kernelIdle(path) {
    const k = this.panel(path).sessionContext.session.kernel;
    return k.status === 'idle';
  },
};
"""


@dataclass
class Cell:
    """One notebook cell as the model holds it (see ``MODEL_JS``)."""

    index: int
    type: str
    source: str
    grade_id: str | None
    solution: bool
    grade: bool
    count: int | None
    running: bool
    outputs: list[dict] = field(default_factory=list)

    @property
    def errors(self) -> list[tuple[str, str]]:
        """(ename, evalue) of each error output."""
        return [(o["ename"], o["evalue"]) for o in self.outputs if o["type"] == "error"]

    @property
    def runnable(self) -> bool:
        """A code cell with code (JupyterLab never sends an empty cell to the kernel)."""
        return self.type == "code" and bool(self.source.strip())

    @property
    def has_image(self) -> bool:
        return any("image/png" in o["mimes"] for o in self.outputs)

    def label(self) -> str:
        return f"cell {self.index}" + (f" ({self.grade_id})" if self.grade_id else "")


@dataclass
class Validation:
    """What nbgrader's Validate dialog said.

    Attributes:
        success: the dialog reported "Success! Your notebook passes all the tests."
        text: the dialog's whole text.
        failures: (cell source, error text) of each cell the dialog lists as failed.
        message_fits: the first failure's message (its error text up to the first blank line)
            lies inside the dialog, no line running past its right edge; None without failures.
    """

    success: bool
    text: str
    failures: list[tuple[str, str]]
    message_fits: bool | None = None


# Whether an error <pre>'s text up to its first blank line (the message) ends left of the box's right edge.
_MESSAGE_FITS_JS = """pre => {
  const end = pre.textContent.indexOf("\\n\\n");
  const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  range.setStart(pre, 0);
  let seen = 0, node;
  while ((node = walker.nextNode())) {
    if (end >= 0 && seen + node.length >= end) { range.setEnd(node, end - seen); break; }
    seen += node.length;
    range.setEndAfter(node);
  }
  const right = pre.getBoundingClientRect().right;
  return [...range.getClientRects()].every(r => r.right <= right + 1);
}"""


class Shots:
    """Numbered screenshots of one test's steps, in ``folder``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.count = 0
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page: Page, step: str) -> Path:
        """Save ``<NN>-<step>.png`` of what the page shows; returns its path."""
        self.count += 1
        path = self.folder / f"{self.count:02d}-{re.sub(r'[^a-z0-9]+', '-', step.lower()).strip('-')}.png"
        page.screenshot(path=str(path))
        return path


class NotebookPage:
    """One notebook open in JupyterLab, with the actions a student takes on it."""

    def __init__(self, page: Page, path: str):
        self.page = page
        self.path = path

    # --- reading ------------------------------------------------------------------------
    def cells(self) -> list[Cell]:
        return [Cell(**c) for c in self.page.evaluate("p => window.__lab.cells(p)", self.path)]

    def cell_node(self, index: int) -> Locator:
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook > .jp-WindowedPanel-outer "
                                 ".jp-Cell").nth(index)

    def shown_image(self, index: int) -> Locator:
        """The first image in a cell's outputs, scrolled into view (so the browser decodes it)."""
        image = self.cell_node(index).locator(".jp-OutputArea-output img").first
        image.evaluate("img => img.scrollIntoView({block: 'center'})")
        return image

    def image_is_drawn(self, index: int) -> bool:
        """True when the cell's first output image is loaded and has a size on the page."""
        image = self.shown_image(index)
        return bool(image.evaluate(
            "img => img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().width > 0"))

    def rendered_markdown(self, index: int) -> Locator:
        return self.cell_node(index).locator(".jp-RenderedMarkdown")

    # --- acting -------------------------------------------------------------------------
    def wait_ready(self) -> None:
        """Wait until the notebook is shown and its kernel is idle."""
        self.page.wait_for_function("p => window.__lab && window.__lab.ready(p)", arg=self.path,
                                    timeout=OPEN_TIMEOUT_MS, polling=200)

    def select(self, index: int) -> None:
        """Make ``index`` the active cell, in command mode, by clicking its prompt area."""
        self.cell_node(index).locator(".jp-InputPrompt").first.click()
        self.page.keyboard.press("Escape")
        self.page.wait_for_function("([p, i]) => window.__lab.activeIndex(p) === i", arg=[self.path, index])

    def _wait_cell_done(self, index: int, before: int) -> int:
        """Wait until cell ``index`` has an execution count above ``before`` and is not running.

        Returns:
            The cell's execution count.
        """
        handle = self.page.wait_for_function(
            """([p, i, before]) => {
                 const [count, running] = window.__lab.counts(p)[i];
                 return count !== null && count > before && !running && count;
               }""",
            arg=[self.path, index, before], timeout=CELL_TIMEOUT_MS, polling=100)
        return handle.json_value()

    def run_cell_by_cell(self) -> list[Cell]:
        """Run every cell top to bottom with Shift+Enter, waiting for each code cell to finish.

        This is how a student works through a lab whose answers are still missing: JupyterLab's
        "Run All" stops at the first error, Shift+Enter goes on. Markdown cells need no wait
        (JupyterLab renders and moves on at the key press); a code cell's next key press waits
        for its result, since the kernel drops requests queued behind an error.

        Returns:
            The cells after the run.
        """
        cells = self.cells()
        self.select(0)
        count = self.page.evaluate("p => window.__lab.maxCount(p)", self.path)
        for cell in cells:
            last = cell.index == len(cells) - 1
            self.page.keyboard.press("Control+Enter" if last else "Shift+Enter")  # no new cell at the end
            if cell.runnable:
                count = self._wait_cell_done(cell.index, count)
        return self.cells()

    def run_all(self) -> list[Cell]:
        """Run > Run All Cells from the menu bar; wait until every code cell ran or one failed.

        Returns:
            The cells after the run (the caller checks for errors).
        """
        before = self.page.evaluate("p => window.__lab.maxCount(p)", self.path)
        menu(self.page, "Run", "Run All Cells")
        self.page.wait_for_function(
            """([p, before]) => {
                 const runnable = window.__lab.runnable(p);
                 const counts = window.__lab.counts(p).filter((_, i) => runnable[i]);
                 const done = counts.every(([n, running]) => n !== null && n > before && !running);
                 return (done || window.__lab.failed(p)) && window.__lab.kernelIdle(p);
               }""",
            arg=[self.path, before], timeout=CELL_TIMEOUT_MS * 2, polling=250)
        return self.cells()

    def paste_into(self, index: int, text: str) -> None:
        """Replace a cell's whole text the way a student pastes: select the cell, Enter to edit
        (a markdown cell shows its source), Ctrl+A, Ctrl+V, Escape.

        Each key waits for the editor state the previous one leads to (focus, then a selection
        of the whole text): clicking into the editor instead races CodeMirror's own cursor
        placement, and a select-all pressed too early is lost.
        Raises AssertionError when the cell does not end up holding exactly ``text``.
        """
        self.select(index)
        self.page.keyboard.press("Enter")
        self.page.wait_for_function("([p, i]) => window.__lab.editing(p, i)", arg=[self.path, index])
        self.page.keyboard.press("Control+A")
        self.page.wait_for_function("([p, i]) => window.__lab.allSelected(p, i)", arg=[self.path, index])
        self.page.evaluate("t => navigator.clipboard.writeText(t)", text)
        self.page.keyboard.press("Control+V")
        try:  # a markdown cell inserts pasted text asynchronously (its attachment-aware paste handler)
            self.page.wait_for_function("([p, i, t]) => window.__lab.source(p, i) === t",
                                        arg=[self.path, index, text], timeout=PASTE_TIMEOUT_MS)
        except PlaywrightTimeout:
            held = self.cells()[index].source
            raise AssertionError(f"pasting into cell {index} left {held[:200]!r}, not the pasted text") from None
        self.page.keyboard.press("Escape")

    def validate(self, shots: Shots | None = None, step: str = "validate") -> Validation:
        """Press nbgrader's Validate button, read its dialog, close it.

        Args:
            shots: when given, the dialog is photographed as ``step``.
            step: the screenshot's name.
        """
        self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .validate-button").click()
        message = self.page.locator(".jp-Dialog #validation-message")
        message.wait_for(timeout=VALIDATE_TIMEOUT_MS)
        success = "validation-success" in (message.get_attribute("class") or "")
        text = message.inner_text()
        blocks = message.locator(":scope > .jp-RenderedText pre").all_inner_texts()  # source, error, ...
        failures = list(zip(blocks[0::2], blocks[1::2])) if not success else []
        fits = None
        if failures:  # the first failure's error, which opens with its message
            error = message.locator(":scope > .jp-RenderedText pre").nth(1)
            error.evaluate("e => e.scrollIntoView({block: 'start'})")
            fits = bool(error.evaluate(_MESSAGE_FITS_JS))
        if shots is not None:
            shots.take(self.page, step)
        self.page.locator(".jp-Dialog .jp-mod-accept").click()
        message.wait_for(state="detached")
        return Validation(success, text, failures, fits)


def load_lab(page: Page, url: str) -> None:
    """Load JupyterLab at ``url`` (token included) and wait until it has restored its layout."""
    page.goto(url)
    page.wait_for_function("() => !!window.jupyterapp", timeout=OPEN_TIMEOUT_MS, polling=100)
    page.evaluate("() => window.jupyterapp.restored")


def menu(page: Page, top: str, item: str) -> None:
    """Click ``top`` in the menu bar, then ``item`` (its label, exactly; ``…`` may be left off)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{re.escape(top)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(item)}…?$")).click()


def open_notebook(page: Page, path: str) -> NotebookPage:
    """Open ``path`` with File > Open from Path… and wait until its kernel is idle.

    Args:
        page: a page showing JupyterLab (``load_lab``).
        path: the notebook's path relative to the server root.
    """
    menu(page, "File", "Open from Path")
    field = page.locator(".jp-Dialog input")
    field.fill(path)
    field.press("Enter")
    notebook = NotebookPage(page, path)
    notebook.wait_ready()
    return notebook


def tidy(page: Page) -> bool:
    """Close every tab in the main area without saving (kernels are left to the server) and
    show the course root in the file browser.

    Returns:
        False when a dialog is still open (the page is in an unknown state: reload it).
    """
    clean = page.evaluate("""() => {
        for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
          if (w.context) w.context.model.dirty = false;
          w.dispose();
        }
        return document.querySelectorAll('.jp-Dialog').length === 0;
    }""")
    if clean:
        page.locator(".jp-BreadCrumbs-home").click()
    return clean
