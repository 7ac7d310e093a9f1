"""Build: ``notebooks/<lab>.py`` -> ``source/<lab>/<lab>.ipynb`` -> ``release/<lab>/<lab>.ipynb``.

The release is made by nbgrader's own ``generate_assignment`` in a throw-away course, so a
build never touches the course's gradebook and two builds can run side by side. Each build
writes a manifest of content hashes next to the release; ``mlbook check`` compares them to
tell a stale or hand-edited release from a fresh one in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.files import write_atomic
from mlbook.nbgrader_env import api_for, failure_reason
from mlbook.authoring.notebooks import read_authored, write_nb_atomic


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_source(course: Course, lab: str) -> Path:
    """Convert the authored file into nbgrader's source notebook."""
    nb = read_authored(course.authored(lab))
    target = course.source(lab)
    write_nb_atomic(nb, target)
    return target


def generate_release(course: Course, lab: str, dest: Path) -> None:
    """Run nbgrader generate_assignment on the lab's source in a scratch course; copy to ``dest``."""
    with tempfile.TemporaryDirectory(prefix="mlbook-build-") as tmp:
        scratch = course.scratch_copy(Path(tmp), [lab])
        result = api_for(scratch).generate_assignment(lab, force=True, create=True)
        built = scratch.release(lab)
        if not result["success"] or not built.is_file():
            raise MlbookError(f"{lab}: nbgrader generate_assignment failed: {failure_reason(result)}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(built, tmp_dest)
        tmp_dest.replace(dest)


def manifest(course: Course, lab: str) -> dict:
    return {
        "authored_sha256": sha256(course.authored(lab)),
        "source_sha256": sha256(course.source(lab)),
        "release_sha256": sha256(course.release(lab)),
    }


def build_lab(course: Course, lab: str) -> Path:
    """Build one lab's source and release; returns the release notebook path."""
    build_source(course, lab)
    generate_release(course, lab, course.release(lab))
    write_atomic(course.build_manifest(lab), json.dumps(manifest(course, lab), indent=1) + "\n")
    return course.release(lab)
