"""Authoring transforms: fast checks with no kernel and no nbgrader run."""

from __future__ import annotations

import nbformat
import pytest

from harness import LABS, REPO
from mlbook.errors import MlbookError
from mlbook.authoring.notebooks import (
    fill_answers,
    normalize_nbgrader,
    read_authored,
    read_nb,
    reference_answers,
)


def test_authored_metadata_is_completed_with_nbgrader_defaults():
    answer = normalize_nbgrader({"grade_id": "softmax_rows", "solution": True})
    assert answer == {"grade": False, "grade_id": "softmax_rows", "locked": False, "schema_version": 3,
                      "solution": True}
    test = normalize_nbgrader({"grade": True, "grade_id": "test_x", "points": 2})
    assert test["locked"] is True and test["solution"] is False


def test_a_graded_cell_without_points_is_refused():
    with pytest.raises(MlbookError, match="no points|declares no points"):
        normalize_nbgrader({"grade": True, "grade_id": "test_x"})


def test_reference_answers_drop_only_the_delimiters():
    cell = nbformat.v4.new_code_cell(
        "def f(x):\n    \"\"\"Doc.\"\"\"\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n",
        metadata={"nbgrader": normalize_nbgrader({"grade_id": "f", "solution": True})})
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert reference_answers(nb) == {"f": "def f(x):\n    \"\"\"Doc.\"\"\"\n    return x + 1\n"}


def test_filling_an_unknown_answer_cell_is_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(MlbookError, match="no answer cell"):
        fill_answers(nb, {"nope": "x = 2"})


@pytest.mark.parametrize("lab", LABS)
def test_committed_source_matches_the_authored_notebook(lab):
    built = read_authored(REPO.authored(lab))
    committed = read_nb(REPO.source(lab))
    assert [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in built.cells] == \
           [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in committed.cells], \
        f"source/{lab} is stale: run `mlbook build {lab}`"


@pytest.mark.parametrize("lab", LABS)
def test_every_answer_cell_of_the_release_is_a_stub(lab):
    release = read_nb(REPO.release(lab))
    for cell in release.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            assert "raise NotImplementedError" in cell.source, f"{meta['grade_id']} is not a stub in the release"


def test_an_all_hidden_test_cell_is_flagged_and_a_commented_one_is_not():
    from mlbook.lint import hidden_cells_say_what_they_check

    def source_with(text):
        cell = nbformat.v4.new_code_cell(text, metadata={"nbgrader": normalize_nbgrader(
            {"grade": True, "grade_id": "test_x_hidden", "points": 1})})
        return nbformat.v4.new_notebook(cells=[cell])

    hidden = "### BEGIN HIDDEN TESTS\ncheck(f)\n### END HIDDEN TESTS\n"
    problems = hidden_cells_say_what_they_check(REPO, LABS[0], source_with(hidden))
    assert problems and "test_x_hidden" in problems[0]
    assert not hidden_cells_say_what_they_check(REPO, LABS[0], source_with("# Hidden tests: f on fresh inputs.\n" + hidden))


def test_the_authoring_guide_names_every_lint_rule():
    from mlbook.lint import COURSE_RULES, RULES

    guide = (REPO.root / "docs" / "authoring.md").read_text()
    missing = [rule.__name__ for rule in (*RULES, *COURSE_RULES) if f"`{rule.__name__}`" not in guide]
    assert not missing, f"docs/authoring.md does not explain the lint rules {missing}"


def test_one_parser_reads_the_delimiters():
    from mlbook.authoring.notebooks import HIDDEN, SOLUTION, split_blocks, visible_text

    cell = "a\n### BEGIN SOLUTION\nb\n### END SOLUTION\nc\n### BEGIN HIDDEN TESTS\nd\n### END HIDDEN TESTS\n"
    assert split_blocks(cell, SOLUTION) == ("a\nc\n### BEGIN HIDDEN TESTS\nd\n### END HIDDEN TESTS\n", ["b\n"])
    assert split_blocks(cell, HIDDEN)[1] == ["d\n"]
    assert visible_text(cell) == "a\nc\n"
