"""A student's week in JupyterLab, for each of the six labs, in a real browser.

1. The untouched release, run top to bottom with Shift+Enter: every cell runs except where an
   answer is still missing, the headings and instructions render, and the heat maps that do
   not depend on answers appear as images.
2. The reference answers pasted into the answer cells (from ``source/<lab>/<lab>.ipynb``,
   matched by nbgrader grade_id), Run All: every cell runs, every heat map appears, and
   nbgrader's Validate button reports success.
3. A misconception mutant from the lab's catalogue pasted over the reference answers:
   Validate names the failing visible test and the misconception; each failure's error opens with
   its message, which fits the dialog's width (``mlbook_helpers.tracebacks``). The dialog's path is the
   same for every lab and ``tests/test_lab_grading.py`` already proves every mutant's message
   through nbgrader, so the browser shows it for ``MUTANT_LABS`` only (each lab costs one
   more run of its notebook; the suite's time budget is a few minutes).

A failure "explained by a missing answer" (``unexplained_failures``) is: a NotImplementedError
(the release's unwritten answer), any failure of a graded test cell (tests check answers), or
a NameError for a name that an answer (in the reference solution) or an earlier failing cell
would have defined.
"""

from __future__ import annotations

import ast
import re

import pytest

from browser_suite import GROUP, REPO
from labpage import Cell, NotebookPage, open_notebook
from mlbook.authoring import submissions
from mlbook.authoring.catalogue import Mutant
from mlbook.labs import load_catalogue
from mlbook.authoring.notebooks import read_nb, reference_answers

pytestmark = pytest.mark.xdist_group(GROUP)

LABS = REPO.labs()
MUTANT_LABS = ["lab01_hand_attention"]
HEATMAP_CALL = re.compile(r"\b(attention_heatmap|heatmap_grid)\(")
MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+\S", re.MULTILINE)
NAME_ERROR = re.compile(r"name '([^']+)' is not defined")


def assigned_names(source: str) -> set[str]:
    """Names a cell's code binds (assignments, defs, classes, imports); empty if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def unexplained_failures(cells: list[Cell], answers: dict[str, str]) -> list[Cell]:
    """Cells whose error is not explained by a missing answer (see the module docstring).

    Args:
        cells: the notebook after a top-to-bottom run.
        answers: answer grade_id -> reference answer text.
    """
    never_defined = set().union(*(assigned_names(text) for text in answers.values()))
    unexplained = []
    for cell in cells:
        if not cell.errors:
            continue
        ename, evalue = cell.errors[0]
        missing = NAME_ERROR.search(evalue or "")
        explained = (ename == "NotImplementedError" or cell.grade
                     or (ename == "NameError" and missing is not None and missing.group(1) in never_defined))
        if not explained:
            unexplained.append(cell)
        never_defined |= assigned_names(cell.source)
    return unexplained


def heatmap_cells(cells: list[Cell]) -> list[Cell]:
    return [c for c in cells if c.type == "code" and HEATMAP_CALL.search(c.source)]


def describe(cells: list[Cell]) -> str:
    return "; ".join(f"{c.label()}: {c.errors[0][0]}: {(c.errors[0][1] or '')[:160]}" for c in cells)


def is_visible_test(cell: Cell) -> bool:
    """A graded test cell with code a student can see (not only the hidden-tests comment)."""
    code = [line for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return cell.grade and not cell.solution and cell.type == "code" and bool(code)


def mutant_with_visible_test(lab: str, cells: list[Cell]) -> tuple[Mutant, list[Cell]]:
    """The lab's first demo mutant (else first mutant) that a visible test catches, with those tests."""
    visible = {c.grade_id: c for c in cells if is_visible_test(c)}
    mutants = load_catalogue(lab).mutants
    for mutant in sorted(mutants, key=lambda m: not m.demo):
        caught_by = [visible[t] for t in mutant.must_fail if t in visible]
        if caught_by:
            return mutant, caught_by
    raise AssertionError(f"{lab}: no mutant in its catalogue is caught by a visible test, so Validate "
                         f"cannot show a misconception; give one mutant a visible test in must_fail")


def check_headings_render(notebook: NotebookPage, cells: list[Cell]) -> None:
    """Every markdown cell is rendered, with as many headings as its source has."""
    for cell in cells:
        if cell.type != "markdown" or not cell.source.strip():
            continue
        classes = notebook.cell_node(cell.index).get_attribute("class") or ""
        assert "jp-mod-rendered" in classes.split(), f"markdown {cell.label()} is not rendered: {cell.source[:80]!r}"
        rendered = notebook.rendered_markdown(cell.index)
        headings = rendered.locator("h1, h2, h3, h4, h5, h6").count()
        expected = len(MARKDOWN_HEADING.findall(re.sub(r"```.*?```", "", cell.source, flags=re.DOTALL)))
        assert headings == expected, (f"markdown {cell.label()} shows {headings} heading(s), its source has "
                                      f"{expected}: {cell.source[:80]!r}")
        assert (rendered.text_content() or "").strip(), f"markdown {cell.label()} renders as empty"


def check_heatmaps_drawn(notebook: NotebookPage, cells: list[Cell]) -> None:
    for cell in cells:
        assert cell.has_image, f"heat-map {cell.label()} ran but produced no image output"
        assert notebook.image_is_drawn(cell.index), f"heat-map {cell.label()}'s image is not drawn on the page"


@pytest.mark.parametrize("lab", LABS)
def test_release_runs_top_to_bottom_failing_only_where_answers_are_missing(lab, page, place, shots):
    path = place(lab)
    notebook = open_notebook(page, path)
    shots.take(page, "release opened")

    cells = notebook.run_cell_by_cell()
    never_ran = [c.label() for c in cells if c.runnable and c.count is None]
    assert not never_ran, f"{lab}: cells never ran: {never_ran}"
    unexplained = unexplained_failures(cells, reference_answers(read_nb(REPO.source(lab))))
    assert not unexplained, f"{lab}: cells fail for a reason other than a missing answer: {describe(unexplained)}"
    assert any(c.errors and (c.solution or c.grade) for c in cells), \
        f"{lab}: the untouched release raised nothing: are the answers really removed?"

    check_headings_render(notebook, cells)
    drawn = [c for c in heatmap_cells(cells) if not c.errors]
    assert drawn, f"{lab}: no heat map appears before answers are written; the lab should show one"
    check_heatmaps_drawn(notebook, drawn)
    notebook.shown_image(drawn[0].index)
    shots.take(page, "release heat map")


@pytest.mark.parametrize("lab", LABS)
def test_pasted_reference_answers_run_all_and_pass_validate(lab, page, place, shots):
    path = place(lab)
    notebook = open_notebook(page, path)
    answers = reference_answers(read_nb(REPO.source(lab)))
    answer_cells = [c for c in notebook.cells() if c.solution]  # Validate also wants the written answers
    assert answer_cells, f"{lab}: no answer cells in the release"
    for cell in answer_cells:
        notebook.paste_into(cell.index, answers[cell.grade_id])
    shots.take(page, "reference answers pasted")

    cells = notebook.run_all()
    failed = [c for c in cells if c.errors]
    assert not failed, f"{lab}: with the reference answers, Run All stopped at: {describe(failed)}"
    check_headings_render(notebook, cells)
    maps = heatmap_cells(cells)
    check_heatmaps_drawn(notebook, maps)
    notebook.shown_image(maps[-1].index)
    shots.take(page, "reference heat map")

    validation = notebook.validate(shots, "validate reference")
    assert validation.success, f"{lab}: Validate on the reference answers did not pass:\n{validation.text[:3000]}"


@pytest.mark.parametrize("lab", MUTANT_LABS)
def test_validate_names_the_failing_test_and_misconception_of_a_pasted_mutant(lab, page, place, shots):
    path = place(lab, submissions.reference(REPO, lab))
    notebook = open_notebook(page, path)
    cells = notebook.cells()
    mutant, caught_by = mutant_with_visible_test(lab, cells)
    by_id = {c.grade_id: c for c in cells}
    for grade_id, code in mutant.cells.items():
        notebook.paste_into(by_id[grade_id].index, code)

    validation = notebook.validate(shots, f"validate mutant {mutant.name}")
    assert not validation.success, f"{lab}: Validate passed the mutant {mutant.name!r} ({mutant.misconception})"
    reported = {source.strip(): error for source, error in validation.failures}
    for test in caught_by:
        error = reported.get(test.source.strip())
        assert error is not None, (f"{lab}: Validate did not list {test.grade_id} as failing for the mutant "
                                   f"{mutant.name!r}; it listed:\n{validation.text[:3000]}")
        assert mutant.matches(error), (f"{lab}: {test.grade_id}'s message does not name the misconception "
                                       f"({mutant.message!r}): {error[-600:]}")
        assert error.splitlines()[0].startswith("Misconception: "), \
            f"{lab}: {test.grade_id}'s error does not open with its message: {error[:600]}"
    assert validation.message_fits, f"{lab}: the first failure's message runs past the Validate dialog's edge"
