"""``mlbook demo`` never reaches a real course's outputs (issue #44, item 2).

A course with a real class of its own (one graded student) runs the demo for lab 1; afterwards
the course's submissions, gradebook, grades CSV and ``autograde`` exit code are exactly what
they were, and the demo's class, gradebook and exports live in ``<course>/.mlbook-demo/``.
"""

from __future__ import annotations

import shutil

import pytest
from nbgrader.api import Gradebook

from harness import REPO
from mlbook import cli
from mlbook.authoring import submissions
from mlbook.demo import DEMO_FOLDER, STUDENTS, run_demo
from mlbook.grading import autograde
from mlbook.outputs.export import export_csv

LAB = REPO.labs()[0]
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo")]


def _gradebook_students(course) -> set[str]:
    with Gradebook(course.db_url) as gb:
        return {s.id for s in gb.students}


def test_the_demo_leaves_a_real_class_exactly_as_it_was(tmp_path):
    course = REPO.scratch_copy(tmp_path / "course", [LAB])
    shutil.copytree(REPO.release(LAB).parent, course.release(LAB).parent, dirs_exist_ok=True)
    shutil.copy2(REPO.root / "course.toml", course.root / "course.toml")
    shutil.copytree(REPO.root / "mlbook_helpers", course.root / "mlbook_helpers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    submissions.submit(course, "real-amy", LAB, submissions.reference(course, LAB))
    autograde(course, LAB, progress=False)
    csv_before = export_csv(course, [LAB]).read_bytes()
    exports_before = sorted(p.relative_to(course.root) for p in course.exports_dir.rglob("*"))
    assert _gradebook_students(course) == {"real-amy"}

    printed: list[str] = []
    assert run_demo(course, [LAB], echo=printed.append) == 0, "\n".join(printed)

    assert course.students() == ["real-amy"], "the demo wrote into the course's submitted/"
    assert _gradebook_students(course) == {"real-amy"}, "demo students reached the course's gradebook"
    assert export_csv(course, [LAB]).read_bytes() == csv_before, "the course's grades CSV changed"
    assert sorted(p.relative_to(course.root) for p in course.exports_dir.rglob("*")) == exports_before
    assert not (course.root / "feedback").exists() or not any(
        (course.root / "feedback").glob("demo-*")), "demo feedback in the course's feedback/"
    assert cli.main(["--course", str(course.root), "autograde", LAB]) == 0, \
        "the real class's autograde fails after the demo"

    demo = course.root / DEMO_FOLDER
    assert set(STUDENTS) <= {p.name for p in (demo / "submitted").iterdir()}
    assert (demo / "exports" / "demo-report.html").is_file()
    assert (demo / "exports" / "grades.csv").is_file()
    assert any(line.startswith("handback ") and DEMO_FOLDER in line for line in printed), printed
