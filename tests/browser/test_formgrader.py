"""A TA in nbgrader's formgrader, inside JupyterLab, after a class was autograded.

The class is three students of lab 1, graded with ``mlbook autograde`` in the suite's scratch
course (the course the server serves): ``demo-ada`` handed in the reference solution,
``demo-cleo`` the lab's first demo mutant, and ``demo-mallory`` the reference with HTML meant to
run in the TA's browser (in the written answer, in a raw cell and in what an answer cell
displays). The formgrader must list them with the scores the gradebook holds, a score typed for
a written answer must land in the gradebook (read back through nbgrader's Gradebook API), and
opening mallory's submission must run none of mallory's HTML.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import nbformat
import pytest
from nbgrader.api import Gradebook
from playwright.sync_api import FrameLocator, Page, expect

from browser_suite import GROUP, REPO
from labpage import menu
from mlbook.authoring import submissions
from mlbook.labs import load_catalogue
from mlbook.authoring.notebooks import is_answer, iter_nbgrader_cells, read_nb

pytestmark = pytest.mark.xdist_group(GROUP)

LAB = "lab01_hand_attention"
GRADE_TIMEOUT_S = 600
SAVE_TIMEOUT_S = 30
SCORE = re.compile(r"^\s*([\d.]+)\s*/\s*([\d.]+)\s*$")


@pytest.fixture(scope="module")
def graded_class(course):
    """Two lab 1 submissions in the scratch course, autograded by ``mlbook autograde``.

    Returns:
        The students, in the order they were placed.
    """
    mutant = next(m for m in load_catalogue(LAB).mutants if m.demo)
    submissions.submit(course, "demo-ada", LAB, submissions.reference(course, LAB))
    submissions.submit(course, "demo-cleo", LAB, submissions.reference(course, LAB, mutant.cells))
    submissions.submit(course, "demo-mallory", LAB, hostile_submission(course))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "mlbook.cli", "autograde", LAB, "--quiet"], cwd=course.root,
                         env=env, capture_output=True, text=True, timeout=GRADE_TIMEOUT_S)
    assert run.returncode == 0, f"`mlbook autograde {LAB}` failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    return ["demo-ada", "demo-cleo", "demo-mallory"]


# Each payload, if it ran, would leave its name in the JupyterLab page that frames the formgrader.
_RUN = "top.PWNED = (top.PWNED || []).concat"
WRITTEN_PAYLOAD = (f"My answer, with some HTML.\n\n<script>{_RUN}('written script')</script>\n"
                   f"<img src=x onerror=\"{_RUN}('written onerror')\">\n<svg onload=\"{_RUN}('written svg')\"></svg>\n")
DISPLAYED = (f"\nfrom IPython.display import HTML, SVG, Javascript, Markdown, display\n"
             f"display(HTML(\"<script>{_RUN}('html output')</script><img src=x onerror=\\\"{_RUN}('html onerror')\\\">\"))\n"
             f"display(Javascript(\"{_RUN}('javascript output')\"))\n"
             f"display(Markdown(\"<script>{_RUN}('markdown output')</script>\"))\n"
             f"display(SVG(\"<svg xmlns='http://www.w3.org/2000/svg' onload=\\\"{_RUN}('svg output')\\\"></svg>\"))\n")


def hostile_submission(course):
    """Lab 1's reference answers, plus HTML a student hopes will run when a TA opens the submission."""
    source = read_nb(REPO.source(LAB))
    written = written_answer_id()
    first_code_answer = next(gid for gid, cell in iter_nbgrader_cells(source)
                             if is_answer(cell) and cell.cell_type == "code")
    answers = {written: WRITTEN_PAYLOAD}
    nb = submissions.reference(course, LAB, answers)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == first_code_answer:
            cell.source += DISPLAYED
    nb.cells.insert(1, nbformat.v4.new_raw_cell(f"<script>{_RUN}('raw cell')</script>",
                                                metadata={"raw_mimetype": "text/html"}))
    return nb


def written_answer_id() -> str:
    """grade_id of lab 1's written answer (a graded markdown answer cell)."""
    nb = read_nb(REPO.source(LAB))
    return next(gid for gid, cell in iter_nbgrader_cells(nb)
                if is_answer(cell) and cell.cell_type == "markdown" and cell.metadata["nbgrader"].get("grade"))


def open_formgrader(page: Page) -> FrameLocator:
    """Nbgrader > Formgrader in JupyterLab's menu bar; returns the formgrader panel's frame."""
    menu(page, "Nbgrader", "Formgrader")
    frame = page.frame_locator("#formgrader iframe")
    expect(frame.get_by_role("link", name="Manual Grading")).to_be_visible(timeout=90_000)
    return frame


def open_submissions_table(frame: FrameLocator) -> None:
    """Manual Grading > lab 1 > its notebook, with the students' names shown."""
    frame.get_by_role("link", name="Manual Grading").click()
    frame.locator(f'table a[href$="/gradebook/{LAB}"]').click()
    frame.locator(f'table a[href$="/gradebook/{LAB}/{LAB}"]').click()
    expect(frame.locator("#main-table a.name-hidden").first).to_be_visible()  # rows loaded, names hidden
    frame.locator("#toggle_names").click()
    expect(frame.locator("#main-table a.name-shown").first).to_be_visible()


def listed_scores(frame: FrameLocator) -> dict[str, dict[str, tuple[float, float]]]:
    """student -> {"score"|"code-score"|"written-score": (points, out of)} from the formgrader's table."""
    rows = frame.locator("#main-table tr")
    expect(rows.first.locator("a.name-shown")).to_be_visible()
    listed = {}
    for row in rows.all():
        student = row.locator("a.name-shown").inner_text().strip()
        listed[student] = {}
        for column in ("score", "code-score", "written-score"):
            text = row.locator(f"td.{column}").inner_text()
            match = SCORE.match(text)
            assert match, f"the formgrader shows {text!r} as {student}'s {column}"
            listed[student][column] = (float(match.group(1)), float(match.group(2)))
    return listed


def gradebook_scores(db_url: str, students: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """The same figures as ``listed_scores``, from nbgrader's gradebook."""
    with Gradebook(db_url) as gradebook:
        scores = {}
        for student in students:
            nb = gradebook.find_submission_notebook(LAB, LAB, student)
            scores[student] = {"score": (nb.score, nb.max_score), "code-score": (nb.code_score, nb.max_code_score),
                               "written-score": (nb.written_score, nb.max_written_score)}
        return scores


def manual_score(db_url: str, grade_id: str, student: str) -> float | None:
    with Gradebook(db_url) as gradebook:
        return gradebook.find_grade(grade_id, LAB, LAB, student).manual_score


def test_formgrader_lists_the_class_with_the_gradebook_scores(graded_class, page, course, shots):
    frame = open_formgrader(page)
    open_submissions_table(frame)
    shots.take(page, "formgrader lab 1 submissions")
    listed = listed_scores(frame)
    assert sorted(listed) == sorted(graded_class), f"the formgrader lists {sorted(listed)}"
    assert listed["demo-mallory"]["code-score"] == listed["demo-ada"]["code-score"], "the HTML changed the grading"
    assert listed == gradebook_scores(course.db_url, graded_class)
    assert listed["demo-ada"]["code-score"][0] > listed["demo-cleo"]["code-score"][0], \
        "the mutant's code score is not below the reference's: the class was not really graded"


def test_a_written_answer_graded_by_hand_is_saved_in_the_gradebook(graded_class, page, course, shots):
    student, grade_id = "demo-ada", written_answer_id()
    before = manual_score(course.db_url, grade_id, student)
    points = 2.0 if before != 2.0 else 1.0

    frame = open_formgrader(page)
    open_submissions_table(frame)
    frame.locator("a.name-shown", has_text=student).click()
    score_box = frame.locator(f"input.score#{grade_id}")
    expect(score_box).to_be_visible()
    # the grading page binds its inputs once it has fetched the grades; a score typed before is lost
    grading_page = page.locator("#formgrader iframe").element_handle().content_frame()
    grading_page.wait_for_function("() => window.formgrader && formgrader.grades && formgrader.grades.loaded")
    score_box.scroll_into_view_if_needed()
    score_box.fill(f"{points:g}")
    score_box.press("Tab")  # the formgrader saves a score when the field loses focus
    deadline = time.monotonic() + SAVE_TIMEOUT_S
    while manual_score(course.db_url, grade_id, student) != points and time.monotonic() < deadline:
        time.sleep(0.2)
    score_box.scroll_into_view_if_needed()
    shots.take(page, "formgrader written answer scored")
    saved = manual_score(course.db_url, grade_id, student)
    assert saved == points, f"typed {points:g} for {student}'s {grade_id}; the gradebook holds {saved}"


def test_opening_a_submission_runs_none_of_the_students_html(graded_class, page, course, shots):
    """A script in the grading page would run as the TA, on the TA's own server (kernels, files, gradebook)."""
    frame = open_formgrader(page)
    open_submissions_table(frame)
    frame.locator("a.name-shown", has_text="demo-mallory").click()
    expect(frame.locator(f"input.score#{written_answer_id()}")).to_be_visible()
    grading_page = page.locator("#formgrader iframe").element_handle().content_frame()
    grading_page.wait_for_function("() => window.formgrader && formgrader.grades && formgrader.grades.loaded")
    grading_page.wait_for_load_state("load")  # images have failed (onerror) and SVGs loaded (onload) by now
    shots.take(page, "formgrader hostile submission")
    ran = page.evaluate("() => window.PWNED || []") + grading_page.evaluate("() => window.PWNED || []")
    assert not ran, f"the student's HTML ran in the TA's browser: {ran}"
    expect(frame.get_by_text("My answer, with some HTML.")).to_be_visible()
    expect(frame.get_by_text("written script").first).to_be_attached()  # the attempt shows, as text
