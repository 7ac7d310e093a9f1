"""Debian's Chromium under Playwright, for every test that opens a page.

Playwright's sync API allows one running session per thread, and a pytest(-xdist) worker runs
all its tests in one thread: a test that started its own session while the browser suite's
was open failed ("Sync API inside the asyncio loop"). So each test process shares one session
and one browser, the session fixture ``chromium`` in ``tests/conftest.py``.

The browser is the binary of Debian's ``chromium`` package (``make system``); Playwright's own
browser download is not used. When it cannot start, tests fail saying why, never skip.
"""

from __future__ import annotations

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def start():
    """Start Playwright and launch Chromium headless.

    Returns:
        (the Playwright session, the Browser); stop both when done.

    Raises:
        RuntimeError: with the reason, when Chromium is missing or does not start.
    """
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        raise RuntimeError(f"no browser at {CHROMIUM}: install Debian's chromium (`make system`)")
    playwright = sync_playwright().start()
    try:
        return playwright, playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    except Exception as exc:  # any launch failure: say what failed
        playwright.stop()
        raise RuntimeError(f"Chromium at {CHROMIUM} could not start under Playwright: {exc}") from exc
