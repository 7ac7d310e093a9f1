"""Shared fixtures. Graded labs are cached per worker: run with ``--dist loadgroup`` so that
every test of a lab lands on the worker that graded it."""

from __future__ import annotations

import pytest

from harness import GradedLab, grade_lab

_GRADED: dict[str, GradedLab] = {}


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """``graded(lab)`` -> the lab's catalogue graded through nbgrader (once per worker)."""

    def get(lab: str) -> GradedLab:
        if lab not in _GRADED:
            _GRADED[lab] = grade_lab(lab, tmp_path_factory.mktemp(lab))
        return _GRADED[lab]

    return get
