"""A lab written from docs/authoring.md alone builds, passes `mlbook check` and grades correctly.

The lab (tests/fixtures/new_lab/) is one authored notebook and one grading package kept outside
``mlbook/labs/`` (found through ``MLBOOK_LABS_PATH``): if adding a lab needed anything the guide
does not say, or anything in ``mlbook/`` that knows the six labs by name, this test fails.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import mlbook.labs
from harness import REPO
from mlbook.authoring import submissions
from mlbook.authoring.build import build_lab
from mlbook.labs import load_catalogue
from mlbook.lint import check_course
from mlbook.course import Course
from mlbook.grading import GradingOptions, autograde
from mlbook.grading.status import GRADED
from mlbook.outputs.results import collect

FIXTURE = Path(__file__).parent / "fixtures" / "new_lab"
LAB = "lab90_score_scale"


@pytest.fixture(scope="module")
def new_lab(tmp_path_factory):
    """A scratch course holding only the new lab, built, with its grading package on the path."""
    grading = str(FIXTURE / "grading")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLBOOK_LABS_PATH", grading)  # for any process the grader starts
    mp.setattr(mlbook.labs, "__path__", [*mlbook.labs.__path__, grading])  # this one imported it already
    root = tmp_path_factory.mktemp("new-lab")
    shutil.copy2(REPO.config, root / REPO.config.name)
    shutil.copy2(REPO.root / "pyproject.toml", root / "pyproject.toml")
    for package in ("mlbook_helpers", "mlbook_kernel"):  # what a course folder holds beside its labs
        shutil.copytree(REPO.root / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(FIXTURE / "notebooks", root / "notebooks")
    course = Course(root)
    build_lab(course, LAB)
    yield course
    mp.undo()


@pytest.fixture(scope="module")
def graded(new_lab):
    """The reference, the untouched release, every mutant and every alternative, graded."""
    course = new_lab
    catalogue = load_catalogue(LAB, course.source(LAB))
    submissions.submit(course, "reference", LAB, submissions.reference(course, LAB))
    submissions.submit(course, "untouched", LAB, submissions.untouched(course, LAB))
    for entry in (*catalogue.mutants, *catalogue.alternatives):
        submissions.submit(course, entry.name, LAB, submissions.reference(course, LAB, entry.cells))
    autograde(course, LAB, force=True, progress=False, options=GradingOptions(workers=1))
    return catalogue, {r.student: r for r in collect(course, LAB)}


def test_the_course_finds_the_new_lab(new_lab):
    assert new_lab.labs() == [LAB]
    assert new_lab.release(LAB).is_file()


def test_a_lab_written_from_the_guide_passes_check(new_lab):
    assert check_course(new_lab, [LAB]) == {LAB: []}


@pytest.mark.slow
def test_the_new_lab_grades_its_catalogue_through_the_real_pipeline(graded):
    catalogue, results = graded
    reference, untouched = results["reference"], results["untouched"]
    assert reference.status == GRADED and reference.auto_cells
    assert all(c.passed for c in reference.auto_cells.values()), reference.auto_cells
    assert untouched.status == GRADED and not any(c.score for c in untouched.auto_cells.values())
    for mutant in catalogue.mutants:
        cells = results[mutant.name].auto_cells
        for gid in mutant.must_fail:
            assert not cells[gid].passed, f"mutant {mutant.name} passed {gid}"
            assert mutant.matches(cells[gid].message or ""), f"{mutant.name} {gid}: {cells[gid].message!r}"
    for alternative in catalogue.alternatives:
        cells = results[alternative.name].auto_cells
        assert all(c.passed for c in cells.values()), f"alternative {alternative.name}: {cells}"


def test_a_patch_that_no_longer_applies_is_reported_by_check(new_lab, tmp_path):
    """Catalogues edit the reference; when the reference changes under an edit, check says which."""
    source = new_lab.source(LAB)
    text = source.read_text()
    try:
        source.write_text(text.replace("Q @ K.T / math.sqrt(d_k)", "Q @ K.T / np.sqrt(d_k)"))
        problems = check_course(new_lab, [LAB])[LAB]
        assert any("catalogue_names_real_cells" in p and "divide-by-dk" in p and "finds 0" in p for p in problems), problems
    finally:
        source.write_text(text)
