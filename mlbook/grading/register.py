"""Make sure the gradebook knows a lab before its first submission is recorded."""

from __future__ import annotations

import shutil

from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.nbgrader_env import failure_reason


def assignment_registered(gb, lab: str) -> bool:
    """Does the open gradebook ``gb`` know the lab's notebooks?"""
    from nbgrader.api import MissingEntry

    try:
        return bool(gb.find_assignment(lab).notebooks)
    except MissingEntry:
        return False


def register_assignment(course: Course, lab: str, api) -> None:
    """Record the lab's cells in the gradebook (nbgrader generate_assignment), keeping the
    committed release folder (notebook and build manifest) byte for byte: nbgrader recreates
    the folder it writes."""
    if not course.source(lab).is_file():
        raise MlbookError(f"{lab}: no source notebook; run `mlbook build {lab}` first")
    folder = course.release(lab).parent
    kept = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}
    result = api.generate_assignment(lab, force=True, create=True)
    if kept:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, data in kept.items():
            (folder / name).write_bytes(data)
    if not result["success"]:
        raise MlbookError(f"{lab}: cannot register the assignment: {failure_reason(result)}")
