"""The course's loop on a real JupyterHub, in Chromium: release, fetch, submit, collect, grade, feedback.

The tests of this module run in order and build on each other (one class, one lab):
1. the instructor sees the formgrader; the grading account releases lab 1 to the exchange;
2. student A fetches it in the Assignments tab, pastes the reference answers, validates, submits;
   student B submits a misconception mutant, then the reference (the later attempt wins);
   the lab falls due (``course.toml``); student C submits a misconception mutant after it;
3. the grading account collects and runs ``mlbook autograde`` (sandboxed); C's work is late and
   penalised as ``course.toml``'s policy says, A's and B's is not;
4. the TA presses the formgrader's Autograde button: it runs nothing and points to ``mlbook autograde``;
   the TA grades each student's written answer by hand in the formgrader (score and comment saved;
   C's answer holds HTML meant to run in the TA's browser, and none of it runs);
5. feedback is written and released; A, B and C fetch theirs in the browser and see their own
   score and messages (C the late penalty and the misconception's message), no hidden test,
   nobody else's work.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from conftest import LAB, mlbook
from hubpage import (ACTION_TIMEOUT_MS, error_dialog, snap, LIST, api_json, log_in, open_assignments, press_in_row, rows, save,
                     server_url, wait_listed, xsrf)
from labpage import NotebookPage
from mlbook.labs import load_catalogue
from mlbook.authoring.notebooks import read_nb, reference_answers

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
NOTEBOOK = f"{LAB}/{LAB}.ipynb"  # where the Assignments tab's fetch puts it, relative to the home


@pytest.fixture(scope="module")
def pages(chromium, hub, site, people):
    """One logged-in page per person, opened when first asked for; closed at the end."""
    opened = {}

    def page_of(person):
        if person.name not in opened:
            opened[person.name] = log_in(chromium, site.url, person, hub_log=lambda: hub['hub'].log_tail(60))
        return opened[person.name]

    yield page_of
    for page in opened.values():
        page.context.close()


def answers(course, replace=None) -> dict[str, str]:
    found = reference_answers(read_nb(course.source(LAB)))
    found.update(replace or {})
    return found


def fill_and_save(page, filled: dict[str, str]) -> NotebookPage:
    """Open the fetched notebook (File > Open from Path) and paste each answer into its cell."""
    from labpage import open_notebook

    notebook = open_notebook(page, NOTEBOOK)
    for cell in notebook.cells():
        if cell.solution and cell.grade_id in filled:
            notebook.paste_into(cell.index, filled[cell.grade_id])
    save(page, NOTEBOOK)
    return notebook


def close_all(page) -> None:
    page.evaluate("""() => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
        if (w.context) w.context.model.dirty = false; w.dispose(); } }""")


def fetch(page, site, person, exchange, shots, label: str) -> None:
    open_assignments(page)
    wait_listed(page, "released", LAB, site.url, person, exchange.root)
    snap(page, shots, f"{label}-released")
    press_in_row(page, "released", LAB, "Fetch")
    wait_listed(page, "fetched", LAB, site.url, person, exchange.root)
    assert (person.home / NOTEBOOK).is_file(), f"the tab says fetched, but {person.home / NOTEBOOK} is not there"


def submit(page, site, person, exchange, attempts: int) -> list[str]:
    open_assignments(page)
    wait_listed(page, "fetched", LAB, site.url, person, exchange.root)
    press_in_row(page, "fetched", LAB, "Submit")
    return wait_listed(page, "submitted", LAB, site.url, person, exchange.root, count=1,
                       timeout_s=ACTION_TIMEOUT_MS / 1000)


def attempts_in_exchange(exchange, person) -> list[Path]:
    return sorted((exchange.course / "inbound").glob(f"{person.name}+{LAB}+*"))


def test_01_release(pages, people, course, exchange, shots):
    """The instructor's JupyterLab opens on the course with the formgrader; release puts lab 1 in outbound."""
    page = pages(people.instructor)
    snap(page, shots, "instructor-lab")
    out = mlbook(course, "hub", "release", LAB)
    assert "released to" in out, out
    released = exchange.course / "outbound" / LAB / f"{LAB}.ipynb"
    assert released.is_file(), out
    assert released.read_bytes() == course.release(LAB).read_bytes()
    assert not re.search(r"BEGIN (SOLUTION|HIDDEN)", released.read_text())


def test_02_student_a_fetches_fills_validates_submits(pages, people, site, course, exchange, shots):
    a = people.students["A"]
    page = pages(a)
    fetch(page, site, a, exchange, shots, "a")
    snap(page, shots, "a-fetched")
    shutil.copyfile(shots.folder / f"{shots.count:02d}-a-fetched.png", DOCS_IMG / "hub-assignments.png")
    notebook = fill_and_save(page, answers(course))
    check = notebook.validate(shots, "a-validated")
    assert check.success, f"the reference answers did not validate in A's server: {check.text[:2000]}"
    close_all(page)
    submitted = submit(page, site, a, exchange, 1)
    snap(page, shots, "a-submitted")
    assert len(attempts_in_exchange(exchange, a)) == 1, submitted


def test_03_student_b_resubmits(pages, people, site, course, exchange, shots):
    """B submits a misconception mutant, then the reference: the later attempt is the one graded."""
    b = people.students["B"]
    page = pages(b)
    fetch(page, site, b, exchange, shots, "b")
    mutant = next(m for m in load_catalogue(LAB).mutants if m.demo)
    fill_and_save(page, answers(course, mutant.cells))
    close_all(page)
    submit(page, site, b, exchange, 1)
    snap(page, shots, "b-first-attempt")
    fill_and_save(page, answers(course))
    close_all(page)
    open_assignments(page)
    press_in_row(page, "fetched", LAB, "Submit")
    deadline = time.monotonic() + ACTION_TIMEOUT_MS / 1000  # the tab lists both attempts in one row
    while len(attempts_in_exchange(exchange, b)) < 2:
        assert time.monotonic() < deadline, f"B's second attempt never reached the exchange: {error_dialog(page)}"
        page.wait_for_timeout(500)
    wait_listed(page, "submitted", LAB, site.url, b, exchange.root)
    snap(page, shots, "b-second-attempt")
    assert len(attempts_in_exchange(exchange, b)) == 2


LATE_PERCENT = 10  # the hub course's policy: 10 % of the score earned per started day late


def make_lab_due_now(course) -> dt.datetime:
    """Give the hub's course a schedule (``course.toml``) in which lab 1 is due a second from now,
    without grace: what A and B submitted is on time, what C submits next is late."""
    due = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=1)
    (course.root / "course.toml").write_text(
        'timezone = "UTC"\n\n[late]\npolicy = "per_day"\n'
        f"percent = {LATE_PERCENT}\ncap_percent = 50\ngrace_minutes = 0\n\n[labs.{LAB}]\n"
        f"release = {due - dt.timedelta(days=7):%Y-%m-%dT%H:%M:%S}\ndue = {due:%Y-%m-%dT%H:%M:%S}\n")
    while dt.datetime.now(dt.timezone.utc) <= due:
        time.sleep(0.2)
    return due


def late_mutant():
    """What C hands in late: a misconception other than B's first attempt's, so that C's feedback
    shows a misconception message (B's and A's graded attempts are correct)."""
    return [m for m in load_catalogue(LAB).mutants if m.demo][2]


def test_03b_student_c_submits_after_the_due_date(pages, people, site, course, exchange, shots):
    make_lab_due_now(course)
    c = people.students["C"]
    page = pages(c)
    fetch(page, site, c, exchange, shots, "c")
    fill_and_save(page, answers(course, {**late_mutant().cells, WRITTEN: HOSTILE_WRITTEN_ANSWER}))
    close_all(page)
    submit(page, site, c, exchange, 1)
    snap(page, shots, "c-submitted-late")
    assert len(attempts_in_exchange(exchange, c)) == 1


def test_04_collect_and_autograde(people, course, exchange):
    out = mlbook(course, "hub", "collect", LAB)
    a, b, c = (people.students[key].name for key in "ABC")
    assert f"collected 3 new attempt(s)" in out and a in out and b in out and c in out, out
    newest_b = attempts_in_exchange(exchange, people.students["B"])[-1]
    assert (course.submitted(b, LAB) / "timestamp.txt").read_text() == (newest_b / "timestamp.txt").read_text()
    again = mlbook(course, "hub", "collect", LAB)
    assert "collected 0 new attempt(s)" in again and "3 unchanged" in again, again
    graded = mlbook(course, "autograde", LAB, "--quiet")
    assert "errors 0" in graded, graded
    with Gradebook(course.db_url) as gb:
        for student in (a, b):
            sub = gb.find_submission(LAB, student)
            assert sub.code_score == sub.max_code_score > 0, (student, sub.code_score, sub.max_code_score)
        sub = gb.find_submission(LAB, c)  # C's misconception loses the checks it fails, not all
        assert 0 < sub.code_score < sub.max_code_score, (c, sub.code_score, sub.max_code_score)
    mlbook(course, "export")
    with open(course.root / "exports" / "grades.csv", newline="") as handle:
        rows_by_student = {row["student"]: row for row in csv.DictReader(handle) if row["lab"] == LAB}
    for student in (a, b):  # handed in before the due date: on time, no penalty
        row = rows_by_student[student]
        assert dt.datetime.fromisoformat(row["submitted_at"]) <= dt.datetime.fromisoformat(row["due"]), row
        assert float(row["late_penalty"]) == 0 and float(row["score"]) == float(row["raw_score"]) > 0, row
    late = rows_by_student[c]
    raw = float(late["raw_score"])
    assert dt.datetime.fromisoformat(late["submitted_at"]) > dt.datetime.fromisoformat(late["due"]), late
    assert float(late["hours_late"]) < 1, late  # minutes after the due date
    assert float(late["late_penalty"]) == pytest.approx(raw * LATE_PERCENT / 100), late
    assert float(late["score"]) == pytest.approx(raw * (1 - LATE_PERCENT / 100)), late


def test_05_formgrader_autograde_button_runs_nothing(pages, people, site, course, shots):
    """The TA clicks Autograde (the flash icon of A's row in Manage Submissions): it runs nothing and
    the formgrader's error dialog points to ``mlbook autograde``; the button's request, sent from the
    TA's session, gets the same answer."""
    page = pages(people.ta)
    a = people.students["A"].name
    before = sorted(p.relative_to(course.root).as_posix() for p in (course.root / "autograded").rglob("*"))
    manage = page.context.new_page()
    manage.goto(server_url(site.url, people.ta) + f"formgrader/manage_submissions/{LAB}")
    try:
        manage.locator("#main-table td.autograde a").first.wait_for(timeout=90_000)
    except Exception:
        shots.take(manage, "ta-manage-submissions-not-listed")
        raise AssertionError(f"Manage Submissions lists no submission to autograde: {manage.locator('body').inner_text()[:1500]}")
    row = manage.locator("#main-table tr", has=manage.locator("td.student-id", has_text=a))
    row.locator("td.autograde a").click(timeout=ACTION_TIMEOUT_MS)
    dialog = manage.locator("#error-modal")
    dialog.wait_for(state="visible", timeout=ACTION_TIMEOUT_MS)
    shots.take(manage, "ta-autograde-button-refused")
    assert "mlbook autograde" in dialog.inner_text(), dialog.inner_text()
    manage.close()
    reply = page.request.post(server_url(site.url, people.ta) + f"formgrader/api/submission/{LAB}/{a}/autograde",
                              headers={"X-XSRFToken": xsrf(page)})
    assert reply.ok, reply.status
    said = json.loads(reply.text())
    assert said["success"] is False and "mlbook autograde" in said["error"], said
    from labpage import menu

    menu(page, "Nbgrader", "Formgrader")  # the TA's formgrader opens on the course
    page.locator("#formgrader iframe").wait_for(timeout=120_000)
    snap(page, shots, "ta-formgrader")
    after = sorted(p.relative_to(course.root).as_posix() for p in (course.root / "autograded").rglob("*"))
    assert after == before, "the Autograde button changed autograded/"


WRITTEN = "written_explanation"  # lab 1's written answer: graded by hand
# C's written answer carries HTML that, if the TA's formgrader ran it, would leave its mark in the TA's page.
HOSTILE_WRITTEN_ANSWER = ("The scale keeps the scores' spread near 1.\n\n<script>top.PWNED = 'script'</script>\n"
                          "<img src=x onerror=\"top.PWNED = 'onerror'\">\n")


def test_05b_written_answer_graded_by_hand_in_the_formgrader(pages, people, site, course, hub, shots):
    """The TA opens each student's submission in the formgrader's grading page, types a score for
    the written answer and a comment; both reach the gradebook, and the submission no longer needs
    manual grading."""
    page = pages(people.ta)
    typed = {"A": 3, "B": 2, "C": 1}
    for key, score in typed.items():
        student = people.students[key].name
        with Gradebook(course.db_url) as gb:
            notebook_id = gb.find_submission_notebook(LAB, LAB, student).id
            grade = gb.find_grade(WRITTEN, LAB, LAB, student)
            assert grade.needs_manual_grade and grade.manual_score is None, (student, grade.to_dict())
        grading = page.context.new_page()
        grading.goto(server_url(site.url, people.ta) + f"formgrader/submissions/{notebook_id}/")
        box = grading.locator(f"input.score#{WRITTEN}")
        box.wait_for(timeout=90_000)
        grading.wait_for_load_state("networkidle")  # the page binds its boxes once it has fetched the grades
        ran = grading.evaluate("() => window.PWNED || null")
        assert ran is None, f"{student}'s written answer ran its HTML ({ran!r}) in the TA's formgrader"
        comment = grading.locator(f"textarea.comment#{WRITTEN}-comment")
        wanted = (score, False, f"Graded by hand: {score} of 3.")
        deadline = time.monotonic() + ACTION_TIMEOUT_MS / 1000
        while True:
            box.fill(str(score))
            box.press("Tab")  # the page saves a score when its box changes
            comment.fill(wanted[2])
            comment.press("Tab")
            typed_at = time.monotonic()
            while time.monotonic() < typed_at + 15:
                with Gradebook(course.db_url) as gb:
                    grade = gb.find_grade(WRITTEN, LAB, LAB, student)
                    saved = (grade.manual_score, grade.needs_manual_grade,
                             gb.find_comment(WRITTEN, LAB, LAB, student).comment)
                if saved == wanted:
                    break
                grading.wait_for_timeout(300)
            if saved == wanted:
                break
            if time.monotonic() > deadline:
                shots.take(grading, f"{key.lower()}-manual-grade-not-saved")
                raise AssertionError(f"the score typed for {student} did not reach the gradebook (it holds {saved}); "
                                     f"the hub's log ends:\n{hub['hub'].log_tail(40)}")
            box.fill("")  # as a TA would: clear the box and type the score again
        shots.take(grading, f"{key.lower()}-graded-by-hand")
        if key == "A":
            shutil.copyfile(shots.folder / f"{shots.count:02d}-a-graded-by-hand.png", DOCS_IMG / "hub-manual-grading.png")
        grading.close()
    with Gradebook(course.db_url) as gb:
        for key, score in typed.items():
            sub = gb.find_submission(LAB, people.students[key].name)
            assert not sub.needs_manual_grade and sub.score == pytest.approx(sub.code_score + score), sub.to_dict()


def test_06_feedback_fetched_in_browser(pages, people, site, course, exchange, shots):
    out = mlbook(course, "hub", "feedback", LAB)
    assert "3 released" in out, out
    with Gradebook(course.db_url) as gb:  # nbgrader's page shows the score less the late penalty
        submitted = {s: gb.find_submission(LAB, s) for s in (p.name for p in people.students.values())}
        scores = {s: sub.score - (sub.late_submission_penalty or 0) for s, sub in submitted.items()}
    for key in ("A", "B", "C"):
        person = people.students[key]
        page = pages(person)
        close_all(page)
        open_assignments(page)
        wait_listed(page, "submitted", r"feedback available to fetch|Fetch Feedback", site.url, person, exchange.root)
        press_in_row(page, "submitted", LAB, "Fetch Feedback")
        wait_listed(page, "submitted", r"view feedback", site.url, person, exchange.root)
        snap(page, shots, f"{key.lower()}-feedback-listed")
        pages_found = sorted((person.home / LAB / "feedback").rglob(f"{LAB}.html"))
        assert pages_found, f"no feedback page under {person.home / LAB / 'feedback'}"
        relative = pages_found[-1].relative_to(person.home).as_posix()
        view = page.context.new_page()
        view.goto(server_url(site.url, person) + "files/" + relative)
        view.wait_for_load_state("load")
        text = view.locator("body").inner_text()
        shots.take(view, f"{key.lower()}-feedback-page")
        if key == "A":
            shutil.copyfile(shots.folder / f"{shots.count:02d}-a-feedback-page.png", DOCS_IMG / "hub-feedback.png")
        view.close()
        total = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", text)
        assert total, text[:1000]
        assert float(total.group(1)) == pytest.approx(scores[person.name]), (person.name, total.group(0))
        late_box = re.search(r"Late submission\..*?late penalty \(([^)]*)\): .([\d.]+); score: ([\d.]+)", text, re.S)
        if key == "C":
            assert late_box, f"C's feedback does not show the late penalty: {text[:1500]}"
            mutant = late_mutant()
            assert mutant.matches(text), f"C's feedback does not name {mutant.misconception} (/{mutant.message}/)"
            assert float(late_box.group(2)) > 0 and "per started day" in late_box.group(1), late_box.group(0)
            assert float(late_box.group(3)) == pytest.approx(float(total.group(1))), late_box.group(0)
        else:
            assert not late_box, f"{key}'s feedback shows a late penalty for work handed in on time"
        assert "BEGIN HIDDEN" not in text and "END HIDDEN" not in text
        others = [p.name for p in people.students.values() if p.name != person.name]
        assert not any(o in text for o in others), f"{person.name}'s feedback names another student"
