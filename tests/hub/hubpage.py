"""A person on the hub in Chromium: log in, the Assignments tab, the formgrader.

Every wait polls what the page or the server says, with a generous timeout; when a list stays
empty, the failure says what the student's server answered (its ``courses`` and
``assignments`` API) and what the exchange holds, so the cause is in the message.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from browser_suite import VIEWPORT
from labpage import MODEL_JS, menu

SPAWN_TIMEOUT_MS = int(float(os.environ.get("MLBOOK_HUB_SPAWN_S", 300)) * 1000)  # a first server start on a loaded machine
LIST_TIMEOUT_S = 180  # the Assignments tab showing what the exchange holds
ACTION_TIMEOUT_MS = 300_000  # fetch, submit, fetch feedback (the server copies files)

LIST = "#nbgrader-assignment-list"


def log_in(browser: Browser, hub_url: str, person, hub_log=None) -> Page:
    """A new browser context for ``person``: log in with the hub's form, wait for JupyterLab."""
    context = browser.new_context(viewport=VIEWPORT)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=hub_url.rstrip("/"))
    context.add_init_script(MODEL_JS)
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(hub_url + "hub/login")
    page.locator("#username_input").fill(person.name)
    page.locator("#password_input").fill(person.password)
    page.locator("#login_submit").click()
    try:
        page.wait_for_function("() => !!window.jupyterapp", timeout=SPAWN_TIMEOUT_MS, polling=250)
    except PlaywrightTimeout:
        shown = page.locator("body").inner_text()[:1500]
        raise AssertionError(f"{person.name}'s JupyterLab did not load within {SPAWN_TIMEOUT_MS / 1000:.0f} s; "
                             f"the page is {page.url} showing:\n{shown}\n"
                             f"the hub's log ends:\n{hub_log() if hub_log else ''}") from None
    page.evaluate("() => window.jupyterapp.restored")
    return page


def server_url(hub_url: str, person) -> str:
    return f"{hub_url}user/{person.name}/"


def server_says(page: Page, hub_url: str, person) -> str:
    """What the student's server answers to the Assignments tab's two requests (for failures)."""
    said = []
    for path in ("courses", "assignments?course_id=attention-labs"):
        try:
            reply = page.request.get(server_url(hub_url, person) + path)
            said.append(f"GET {path} -> {reply.status}: {reply.text()[:1500]}")
        except Exception as exc:  # the report of a failure must not fail itself
            said.append(f"GET {path} -> {type(exc).__name__}: {exc}")
    return "\n".join(said)


def exchange_listing(root: Path) -> str:
    lines = []
    for current, dirs, files in os.walk(root):
        for name in sorted(dirs) + sorted(files):
            path = Path(current) / name
            st = path.lstat()
            lines.append(f"{oct(st.st_mode & 0o7777)} {st.st_uid}:{st.st_gid} {path.relative_to(root)}")
    return "\n".join(lines[:80])


def error_dialog(page: Page) -> str:
    """The text of nbgrader's error dialog when one is open, else ""."""
    dialog = page.locator(".nbgrader-ErrorDialog")
    return dialog.first.inner_text() if dialog.count() else ""


def open_assignments(page: Page) -> None:
    """Nbgrader > Assignment List."""
    if page.locator(LIST).is_visible():
        return
    menu(page, "Nbgrader", "Assignment List")
    page.locator(LIST).wait_for(state="visible", timeout=60_000)


def rows(page: Page, section: str) -> list[str]:
    """Texts of the rows of one of the tab's lists: released | fetched | submitted."""
    return page.locator(f"{LIST} #{section}_assignments_list > .list_item:not(#{section}_assignments_list_placeholder)"
                        ).all_inner_texts()


def wait_listed(page: Page, section: str, pattern: str, hub_url: str, person, exchange_root: Path,
                count: int = 1, timeout_s: float = LIST_TIMEOUT_S) -> list[str]:
    """Refresh the Assignments tab until ``count`` rows of ``section`` match ``pattern``.

    Each round presses the tab's refresh button and waits for its lists to finish loading.
    On timeout the assertion quotes the page, the server's answers and the exchange.
    """
    open_assignments(page)
    deadline = time.monotonic() + timeout_s
    while True:
        if shown := error_dialog(page):
            raise AssertionError(f"nbgrader's error dialog in {person.name}'s Assignments tab:\n{shown[:3000]}")
        try:
            page.locator(f"{LIST} #refresh_assignments_list").click(timeout=30_000)
        except PlaywrightTimeout:
            if shown := error_dialog(page):
                raise AssertionError(f"nbgrader's error dialog in {person.name}'s Assignments tab:\n{shown[:3000]}")
            raise
        try:  # the lists say "Loading" until both requests answered
            page.wait_for_function(LOADED_JS, timeout=60_000, polling=250)
        except PlaywrightTimeout:
            pass
        found = [r for r in rows(page, section) if re.search(pattern, r)]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            course_text = page.locator(f"{LIST} #course_list_default").inner_text()
            raise AssertionError(
                f"{person.name}'s Assignments tab never listed {count} {section} row(s) matching {pattern!r} "
                f"in {timeout_s:.0f} s; course menu says {course_text!r}; rows: {rows(page, section)}\n"
                f"the server says:\n{server_says(page, hub_url, person)}\n"
                f"the exchange holds:\n{exchange_listing(exchange_root)}")
        page.wait_for_timeout(1000)  # the poll's interval between refreshes


LOADED_JS = """() => ['released', 'fetched', 'submitted'].every(s => {
    const el = document.getElementById(s + '_assignments_list_loading');
    return !el || el.hidden || el.offsetParent === null; })"""


def snap(page: Page, shots, step: str):
    """A screenshot once the Assignments tab (when shown) has finished loading its lists."""
    try:
        page.wait_for_function(LOADED_JS, timeout=60_000, polling=250)
    except PlaywrightTimeout:
        pass  # the screenshot shows what is there
    return shots.take(page, step)


def press_in_row(page: Page, section: str, lab: str, button: str) -> None:
    row = page.locator(f"{LIST} #{section}_assignments_list > .list_item", has_text=lab).last
    row.get_by_role("button", name=button).click()


def save(page: Page, path: str) -> None:
    """Ctrl+S in the notebook; wait until the model is saved."""
    page.keyboard.press("Control+S")
    page.wait_for_function("p => { const w = window.__lab.panel(p); return w && !w.context.model.dirty; }",
                           arg=path, timeout=60_000, polling=200)


def api_json(page: Page, url: str):
    reply = page.request.get(url)
    assert reply.ok, f"GET {url} -> {reply.status}: {reply.text()[:500]}"
    return json.loads(reply.text())


def xsrf(page: Page) -> str:
    """The Jupyter server's XSRF token from the page's cookies (for the API calls JupyterLab makes)."""
    return next((c["value"] for c in page.context.cookies() if c["name"] == "_xsrf"), "")
