"""Shared fixtures.

A lab's catalogue is graded once per test run, by whichever worker gets to it first: the
graded course lives in the run's shared temporary folder, guarded by a file lock, and every
other test (on any worker) reads the same gradebook. Under pytest-xdist each worker also
starts, before its first test, on its share of the labs the selected tests need (heaviest
first), so the two cores grade different labs at once whatever order the scheduler picks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from filelock import FileLock

import debian_chromium
from harness import GradedLab, grade_lab, load_graded

# Seconds to grade each lab's share of the catalogue (``harness.pipeline_entries``) in the sandbox
# on this 2-core machine under test load: per-notebook seconds from autograded/.mlbook-status.json
# of a test run (2026-12-03: lab 5 about 60 s, lab 6 15, lab 4 9, labs 1-3 5 to 6; lab 5 since 2026-12-04
# about two thirds of that, its sink models trained on a third of the tokens) times the number
# of submissions graded (alternatives packed several to a notebook). Used only to order the pre-grading, heaviest first; unknown labs count 300.
GRADING_COST_S = {"lab05_entropy_collapse": 460, "lab06_chunked_attention": 245, "lab04_transformer_block": 170,
                  "lab01_hand_attention": 140, "lab03_masks": 90, "lab02_scaling": 80}

_GRADED: dict[str, GradedLab] = {}
_LOST_GROUPS = pytest.StashKey[str]()  # why this run's xdist groups are not kept on one worker


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` every test marked ``xdist_group`` must carry its group in its node id.

    pytest-xdist keeps a group on one worker by appending ``@group`` to the id while a worker collects.
    When a pytest release stores the id elsewhere (pytest 9.2 and xdist 3.8: see pyproject.toml), the
    suffix is lost and every group is silently spread over the workers: each worker then builds the
    module fixtures (the red-team batch, the LMS course) again. Such a run fails every test at once,
    with this reason (see ``_pregrade_this_workers_share``).
    """
    if not getattr(config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        config.stash[_LOST_GROUPS] = (
            f"pytest-xdist's --dist loadgroup is not honoured by pytest {pytest.__version__}: {len(lost)} grouped "
            f"tests lost their group (e.g. {lost[0]}). Install the pytest pinned in pyproject.toml's test extra.")


def _shared_base(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # shared by all workers


def _graded(lab: str, base: Path) -> GradedLab:
    if lab not in _GRADED:
        root, done = base / f"graded-{lab}", base / f"graded-{lab}.done"
        with FileLock(str(base / f"graded-{lab}.lock")):
            if done.exists():
                _GRADED[lab] = load_graded(lab, root)
            else:
                _GRADED[lab] = grade_lab(lab, root)
                done.touch()
    return _GRADED[lab]


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """``graded(lab)`` -> the lab's catalogue graded through nbgrader (once per run)."""
    base = _shared_base(tmp_path_factory)
    return lambda lab: _graded(lab, base)


@pytest.fixture(scope="session", autouse=True)
def _pregrade_this_workers_share(request, tmp_path_factory):
    if _LOST_GROUPS in request.config.stash:
        pytest.fail(request.config.stash[_LOST_GROUPS], pytrace=False)
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count:
        return
    needed = set()
    for item in request.session.items:
        group = item.get_closest_marker("xdist_group")
        if "graded" in item.fixturenames and group:
            needed.add(group.args[0])
    ordered = sorted(needed, key=lambda lab: -GRADING_COST_S.get(lab, 300))
    index, total = int(worker.removeprefix("gw")), int(count)
    loads = [0.0] * total
    share = []
    for lab in ordered:  # longest job to the least loaded worker
        target = loads.index(min(loads))
        loads[target] += GRADING_COST_S.get(lab, 300)
        if target == index:
            share.append(lab)
    base = _shared_base(tmp_path_factory)
    for lab in share:
        _graded(lab, base)


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium (a Playwright Browser), one per test process; see ``debian_chromium``."""
    try:
        playwright, browser = debian_chromium.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield browser
    browser.close()
    playwright.stop()
