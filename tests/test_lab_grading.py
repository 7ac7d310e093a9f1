"""Every lab's grader, proven through the real nbgrader pipeline.

A grader that fails a correct student is as broken as one that passes a wrong one, so each
lab must: give the reference full marks; give the untouched release 0 without hanging; catch
catalogued mutants on the cells they name, with a message naming the misconception; and give
alternative correct solutions full marks. The mutants and alternatives graded here are
``harness.pipeline_entries`` (every check reached; all of them with ``MLBOOK_CATALOGUE=full``);
``test_hidden_draws`` holds every entry of every catalogue to the same properties in-process.
"""

from __future__ import annotations

import pytest

from harness import LABS, REPO, alternative_student, mutant_student, pipeline_entries
from mlbook.labs import load_catalogue
from mlbook.lint import release_is_clean
from mlbook.authoring.notebooks import is_test, iter_nbgrader_cells, read_authored, read_nb
from mlbook.grading.status import GRADED


def _lab_params():
    return [pytest.param(lab, marks=pytest.mark.xdist_group(lab), id=lab) for lab in LABS]


def _entry_params(kind: str):
    params = []
    for lab in LABS:
        try:
            catalogue = pipeline_entries(load_catalogue(lab))
        except Exception as exc:  # a lab without a usable catalogue fails its own test, not collection
            params.append(pytest.param(lab, exc, marks=pytest.mark.xdist_group(lab), id=f"{lab}-no-catalogue"))
            continue
        for entry in catalogue.mutants if kind == "mutants" else catalogue.alternatives:
            params.append(pytest.param(lab, entry, marks=pytest.mark.xdist_group(lab), id=f"{lab}-{entry.name}"))
    return params


def _describe(result) -> str:
    return "; ".join(f"{gid}: {c.score:g}/{c.max_score:g} {c.message}" for gid, c in result.auto_cells.items()
                     if not c.passed) or "all passed"


@pytest.mark.slow
@pytest.mark.parametrize("lab", _lab_params())
def test_reference_solution_earns_full_marks(graded, lab):
    result = graded(lab).result("reference")
    assert result.status == GRADED, f"reference failed as a whole: {result.reason}"
    assert result.auto_cells, "no autograded cells were recorded"
    assert all(c.passed for c in result.auto_cells.values()), _describe(result)


@pytest.mark.slow
@pytest.mark.parametrize("lab", _lab_params())
def test_untouched_release_runs_to_the_end_and_earns_zero(graded, lab):
    result = graded(lab).result("untouched")
    assert result.status == GRADED, f"the untouched release failed as a whole (hang or crash?): {result.reason}"
    earned = {gid: c.score for gid, c in result.auto_cells.items() if c.score}
    assert not earned, f"the untouched release earned points on {earned}: a test that cannot fail?"


@pytest.mark.slow
@pytest.mark.parametrize("lab,mutant", _entry_params("mutants"))
def test_mutant_loses_points_with_its_misconception_named(graded, lab, mutant):
    if isinstance(mutant, Exception):
        pytest.fail(f"{lab}: cannot load the catalogue: {mutant}")
    result = graded(lab).result(mutant_student(mutant.name))
    assert result.status == GRADED, f"mutant failed as a whole instead of on its tests: {result.reason}"
    for gid in mutant.must_fail:
        cell = result.cells[gid]
        assert not cell.passed, f"{gid} gave {mutant.name!r} ({mutant.misconception}) full marks"
        assert mutant.matches(cell.message), (
            f"{gid} failed {mutant.name!r} but its message does not name the misconception "
            f"(wanted /{mutant.message}/): {cell.message!r}")


@pytest.mark.slow
@pytest.mark.parametrize("lab,alternative", _entry_params("alternatives"))
def test_alternative_correct_solution_earns_full_marks(graded, lab, alternative):
    if isinstance(alternative, Exception):
        pytest.fail(f"{lab}: cannot load the catalogue: {alternative}")
    result = graded(lab).result(alternative_student(alternative.name))
    assert result.status == GRADED, f"{alternative.description}: failed as a whole: {result.reason}"
    assert all(c.passed for c in result.auto_cells.values()), f"{alternative.description}: {_describe(result)}"


@pytest.mark.parametrize("lab", _lab_params())
def test_release_contains_no_solution_or_hidden_test_text(lab):
    source = read_authored(REPO.authored(lab))
    assert release_is_clean(REPO, lab, source) == []
    release_text = REPO.release(lab).read_text()
    assert "mlbook.labs" not in release_text, "the release names the grader's hidden-check module"


@pytest.mark.slow
@pytest.mark.parametrize("lab", _lab_params())
def test_visible_tests_pass_on_reference_and_fail_on_release(graded, lab):
    from mlbook.student.validate import validate_notebook

    course = graded(lab).course
    visible = {gid for gid, cell in iter_nbgrader_cells(read_nb(REPO.release(lab)))
               if is_test(cell) and any(line.strip() and not line.strip().startswith("#")
                                        for line in cell.source.splitlines())}
    assert visible, "the lab has no visible tests"
    reference = course.submitted("reference", lab) / f"{lab}.ipynb"
    rows, _, _ = validate_notebook(reference)
    failing = {r.grade_id: r.message for r in rows if r.grade_id in visible and not r.passed}
    assert not failing, f"visible tests fail on the reference solution: {failing}"
    untouched = course.submitted("untouched", lab) / f"{lab}.ipynb"
    rows, _, _ = validate_notebook(untouched)
    passing = [r.grade_id for r in rows if r.grade_id in visible and r.passed]
    assert not passing, f"visible tests pass on the untouched release: {passing}"
