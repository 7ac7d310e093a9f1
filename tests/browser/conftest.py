"""Fixtures of the browser suite: a scratch course, a JupyterLab server on it, Chromium.

Conventions:
- One scratch course, one ``jupyter lab`` (see ``labserver``) and one page showing JupyterLab
  per test session; every test works on its own copy of a notebook under ``work/<test>/``,
  and its documents are closed and its kernels shut down when it ends.
- The browser is Debian's Chromium (the ``chromium`` fixture of tests/conftest.py), driven by Playwright. When it cannot
  start, every test FAILS saying why (never skips).
- Screenshots of each step go to ``$MLBOOK_SCREENSHOTS/<test>/``; by default to
  ``browser-screenshots`` in the run's pytest temporary folder (shared by all workers under
  pytest-xdist), printed at the end of a run without xdist.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from browser_suite import REPO, VIEWPORT, WORKSPACE
from labpage import MODEL_JS, Shots, load_lab, tidy
from labserver import LabServer, start_lab
from mlbook.course import Course

_SCREENSHOTS: list[Path] = []


def pytest_configure(config):
    # pytest-xdist registers this marker; declare it too so `-p no:xdist` runs pass --strict-markers
    config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker with its group")


def _test_name(request) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """The folder receiving every test's screenshots."""
    configured = os.environ.get("MLBOOK_SCREENSHOTS")
    run_folder = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_folder = run_folder.parent  # the run's folder, not this worker's
    folder = Path(configured).resolve() if configured else run_folder / "browser-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    _SCREENSHOTS.append(folder)
    return folder


@pytest.fixture(scope="session")
def course(tmp_path_factory) -> Course:
    """A scratch copy of the course: config, authored notebooks, source and release of every lab."""
    labs = REPO.labs()
    scratch = REPO.scratch_copy(tmp_path_factory.mktemp("course"), labs)
    for lab in labs:
        shutil.copytree(REPO.release(lab).parent, scratch.release(lab).parent, dirs_exist_ok=True)
    return scratch


@pytest.fixture(scope="session")
def lab_server(course, tmp_path_factory):
    """``jupyter lab`` on 127.0.0.1 with a token, serving the scratch course; stopped at the end."""
    try:
        server = start_lab(course.root, tmp_path_factory.mktemp("jupyter-home"))
    except RuntimeError as exc:
        pytest.fail(f"JupyterLab did not start: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.browser_test_failed = report.failed
    return report


@pytest.fixture
def shots(request, screenshots) -> Shots:
    """Numbered screenshots of this test's steps."""
    return Shots(screenshots / _test_name(request))


@pytest.fixture(scope="session")
def lab_page(chromium, lab_server: LabServer):
    """One browser page showing JupyterLab for the whole session (loading the app costs seconds)."""
    context = chromium.new_context(viewport=VIEWPORT)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab_server.url.rstrip("/"))
    context.add_init_script(MODEL_JS)
    context.set_default_timeout(30_000)
    tab = context.new_page()
    load_lab(tab, lab_server.lab_url(WORKSPACE))
    yield tab
    context.close()


@pytest.fixture
def page(request, lab_page, lab_server: LabServer, shots):
    """JupyterLab with nothing open. After the test its documents are closed and its kernels
    shut down; after a failure the page is saved as a screenshot and JupyterLab reloaded."""
    yield lab_page
    failed = getattr(request.node, "browser_test_failed", True)
    if failed:
        try:
            shots.take(lab_page, "failure")
        except Exception:  # the page may be gone; the failure itself is what matters
            pass
    if failed or not tidy(lab_page):
        load_lab(lab_page, lab_server.lab_url(WORKSPACE))
    lab_server.shutdown_kernels()


@pytest.fixture
def place(request, course: Course):
    """``place(lab, nb=None)`` -> path (relative to the course) of this test's copy of a notebook.

    The copy is the lab's release notebook, or the notebook ``nb`` when given.
    """
    folder = course.root / "work" / _test_name(request)

    def _place(lab: str, nb=None) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{lab}.ipynb"
        if nb is None:
            shutil.copy2(course.release(lab), target)
        else:
            nbformat.write(nb, target)
        return target.relative_to(course.root).as_posix()

    return _place


def pytest_terminal_summary(terminalreporter):
    for folder in _SCREENSHOTS:
        terminalreporter.write_line(f"browser screenshots: {folder}")
