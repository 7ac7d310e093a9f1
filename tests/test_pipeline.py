"""The course pipeline's own promises, shown on lab 1 through the real nbgrader.

Extra submissions ride along in lab 1's graded batch (see ``harness.EXTRAS``), so these tests
cost one notebook each and also prove that a broken submission disturbs nobody else.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import REPO, add_extras, scratch_course
from mlbook.authoring import submissions
from mlbook.course import Course
from mlbook.authoring.notebooks import grade_id, is_test, iter_nbgrader_cells, read_nb
from mlbook.grading.status import ERROR, GRADED

LAB = "lab01_hand_attention"
pytestmark = pytest.mark.xdist_group(LAB)
MLBOOK = [sys.executable, "-m", "mlbook.cli"]

NOISY_SOFTMAX = '''import warnings

def softmax_rows(S):
    warnings.warn("this kernel is slow on CPU", UserWarning)  # library noise on stderr
    S = np.asarray(S, dtype=float)
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
'''
DIVIDE_BY_DK = '''def attention(Q, K, V, mask=None):
    scores = Q @ K.T / Q.shape[-1]
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax_rows(scores)
    return weights @ V, weights
'''


def _noisy(course: Course, student: str, lab: str) -> None:
    submissions.submit(course, student, lab, submissions.reference(course, lab, {"softmax_rows": NOISY_SOFTMAX}))


def _deleted_tests(course: Course, student: str, lab: str) -> None:
    nb = submissions.reference(course, lab, {"attention": DIVIDE_BY_DK})
    nb.cells = [c for c in nb.cells if grade_id(c) not in ("test_attention", "test_attention_hidden")]
    submissions.submit(course, student, lab, nb)


def _corrupt(course: Course, student: str, lab: str) -> None:
    submissions.submit(course, student, lab, raw=submissions.corrupt_text(course, lab))


def _dead_kernel(course: Course, student: str, lab: str) -> None:
    dying = "import os\nos._exit(1)\n"
    submissions.submit(course, student, lab, submissions.reference(course, lab, {"hand_token0": dying}))


add_extras(LAB, **{"noisy": _noisy, "deleted-tests": _deleted_tests, "corrupt": _corrupt, "dead-kernel": _dead_kernel})


@pytest.mark.slow
def test_library_warnings_on_stderr_do_not_zero_a_correct_answer(graded):
    result = graded(LAB).result("noisy")
    assert result.status == GRADED
    assert all(c.passed for c in result.auto_cells.values()), {g: c.message for g, c in result.auto_cells.items()}


@pytest.mark.slow
def test_deleted_test_cells_are_restored_and_still_fail_a_wrong_answer(graded):
    result = graded(LAB).result("deleted-tests")
    assert result.status == GRADED
    for gid in ("test_attention", "test_attention_hidden"):
        assert not result.cells[gid].passed, f"{gid} was deleted by the student and not restored"
        assert "sqrt" in result.cells[gid].message


@pytest.mark.slow
@pytest.mark.parametrize("student,reason", [("corrupt", r"json|notebook|read"), ("dead-kernel", r"kernel|died")])
def test_a_submission_that_fails_as_a_whole_is_an_error_with_its_reason(graded, student, reason):
    import re

    lab = graded(LAB)
    result = lab.result(student)
    assert result.status == ERROR, f"{student} was recorded as {result.status}, not as an error"
    assert re.search(reason, result.reason, re.IGNORECASE), f"unhelpful reason: {result.reason!r}"
    # ... and it disturbed nobody else in the batch
    assert all(c.passed for c in lab.result("reference").auto_cells.values())


@pytest.mark.slow
def test_export_shows_errors_as_errors_not_as_zero(graded):
    from mlbook.outputs.export import export_csv

    lab = graded(LAB)
    path = export_csv(lab.course, [LAB], lab.course.root / "exports" / "grades.csv")
    rows = {r["student"]: r for r in csv.DictReader(path.open())}
    assert rows["corrupt"]["status"] == "error" and rows["corrupt"]["reason"]
    assert rows["corrupt"]["score"] == ""
    assert rows["reference"]["status"] == "graded"
    assert rows["reference"]["auto_score"] == rows["reference"]["auto_max_score"]
    assert rows["untouched"]["auto_score"] == "0"


@pytest.mark.slow
def test_feedback_shows_the_misconception_but_never_hidden_tests(graded):
    from mlbook.outputs.feedback import generate_feedback

    lab = graded(LAB)
    students = ["mutant-divide-by-dk", "mutant-no-max-subtraction", "corrupt"]
    pages = generate_feedback(lab.course, LAB, students)
    assert len(pages) == len(students)
    page = lab.course.feedback("mutant-divide-by-dk", LAB).read_text()
    assert "d_k instead of sqrt(d_k)" in page, "the misconception message is missing from the feedback"
    for page_path in pages:
        text = page_path.read_text()
        for secret in ("BEGIN HIDDEN TESTS", "mlbook.labs", "check_attention", "hidden.py", "_attention_variants"):
            assert secret not in text, f"{page_path.parent.parent.name}'s feedback reveals {secret!r}"
    error_page = lab.course.feedback("corrupt", LAB).read_text()
    assert "could not be graded" in error_page


def _output_after(page: str, gid: str) -> str:
    """The text of the first error output after test cell ``gid``'s heading on a feedback page, as shown
    (HTML drops the newline that follows ``<pre>``)."""
    rest = page.split(f'<a name="{gid}"></a>', 1)[1].split("output_error", 1)[1]
    text = rest.split("<pre>", 1)[1].split("</pre>", 1)[0]
    return html.unescape(re.sub(r"<[^>]+>", "", text.removeprefix("\n")))


@pytest.mark.slow
def test_feedback_names_each_test_cell_and_a_failing_cells_output_leads_with_the_message(graded):
    from mlbook.outputs.feedback import generate_feedback

    lab = graded(LAB)
    [path] = generate_feedback(lab.course, LAB, ["mutant-divide-by-dk"])
    page = path.read_text()
    toc = page.split('<div id="toc">', 1)[1].split("</ol>", 1)[0]
    tests = [grade_id(c) for c in read_nb(lab.course.release(LAB)).cells if is_test(c)]
    assert re.findall(r'data-grade-id="(test_[^"]+)"', toc) == tests and "Test cell" not in toc, \
        "the feedback page's contents do not name each test cell by its grade_id"
    failing = {gid: c.message for gid, c in lab.result("mutant-divide-by-dk").auto_cells.items() if not c.passed}
    assert {"test_attention", "test_attention_hidden"} <= set(failing), failing
    for gid, message in failing.items():
        assert message.startswith("Misconception: "), f"{gid} failed without a misconception: {message!r}"
        output = _output_after(page, gid)
        shown = output.split("\n\n", 1)[0]  # the message: the output up to its first blank line
        assert "".join(shown.split()) == "".join(message.split()), \
            f"{gid}'s output does not lead with its whole message {message!r}: {output[:600]!r}"
        assert message in html.unescape(toc), f"the contents do not quote {gid}'s message"
    assert "d_k instead of sqrt(d_k)" in _output_after(page, "test_attention_hidden")


@pytest.mark.slow
def test_feedback_page_wraps_its_messages_in_chromium(graded, chromium, tmp_path):
    from mlbook.outputs.feedback import generate_feedback

    lab = graded(LAB)
    [path] = generate_feedback(lab.course, LAB, ["mutant-divide-by-dk"])
    page = chromium.new_page(viewport={"width": 1000, "height": 900})
    try:
        page.goto(path.as_uri())
        messages = page.locator("div.output_error pre").count()
        assert messages >= 2, f"the mutant's page shows {messages} error outputs: nothing long to measure"
        wide = page.evaluate("""() => [...document.querySelectorAll(
                 'div.output_text pre, div.output_text, #toc .toc-message')]
               .filter(e => e.scrollWidth > e.clientWidth).map(e => e.className + ': ' + e.scrollWidth)""")
        assert wide == [], f"text runs off the side of the feedback page: {wide}"
        folder = Path(os.environ.get("MLBOOK_SCREENSHOTS", tmp_path))
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / "feedback-page.png"))
    finally:
        page.close()


@pytest.mark.slow
def test_feedback_says_when_written_answers_still_await_a_ta(graded):
    from mlbook.outputs.feedback import pending_written
    from mlbook.outputs.results import collect

    lab = graded(LAB)
    done = subprocess.run([*MLBOOK, "--course", str(lab.course.root), "feedback", LAB, "--student", "reference",
                           "--student", "untouched"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    pending = pending_written(collect(lab.course, LAB, ["reference", "untouched"]))
    # the reference wrote its explanation (a TA must grade it); the untouched release wrote nothing (0, no TA)
    assert set(pending) == {"reference"}, pending
    assert "written answers not graded yet" in done.stderr and "reference" in done.stderr, done.stderr
    assert 'id="written-answers-pending"' in lab.course.feedback("reference", LAB).read_text()
    assert 'id="written-answers-pending"' not in lab.course.feedback("untouched", LAB).read_text()


@pytest.mark.slow
def test_rerun_skips_students_already_graded(graded):
    from mlbook.grading import autograde

    lab = graded(LAB)
    run = autograde(lab.course, LAB, ["reference", "untouched"], progress=False)
    assert run.attempts == [] and len(run.skipped) == 2


@pytest.mark.slow
def test_validate_exits_nonzero_with_the_hint_when_a_visible_test_fails(graded):
    lab = graded(LAB)
    wrong = lab.course.submitted("mutant-divide-by-dk", LAB) / f"{LAB}.ipynb"
    done = subprocess.run([*MLBOOK, "validate", str(wrong)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_attention" in done.stdout and "FAIL" in done.stdout
    assert "not by d_k" in done.stdout, "the failing row does not carry its hint"


@pytest.mark.slow
def test_validate_says_hidden_tests_run_at_grading_and_never_pass(graded):
    from mlbook.student.validate import runs_nothing

    lab = graded(LAB)
    placeholders = {gid for gid, cell in iter_nbgrader_cells(read_nb(REPO.release(LAB)))
                    if is_test(cell) and runs_nothing(cell.source)}
    assert placeholders, "the release has no hidden-only test cell"
    reference = lab.course.submitted("reference", LAB) / f"{LAB}.ipynb"
    done = subprocess.run([*MLBOOK, "validate", str(reference)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    status = {line.split()[0]: line.split(None, 2)[2].strip() for line in done.stdout.splitlines()
              if line.split() and line.split()[0].startswith("test_") and len(line.split()) >= 3}
    assert {gid: status.get(gid) for gid in placeholders} == {gid: "run at grading" for gid in placeholders}
    assert all(v == "pass" for gid, v in status.items() if gid not in placeholders), status
    assert f"{len(placeholders)} hidden (run at grading" in done.stdout, done.stdout


def test_cli_reports_a_bad_lab_name_in_one_line():
    done = subprocess.run([*MLBOOK, "build", "lab99"], capture_output=True, text=True, cwd=REPO.root, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "unknown lab" in done.stderr
    assert "Traceback" not in done.stderr


def test_check_flags_a_solution_leaked_into_the_release(tmp_path):
    from mlbook.authoring.build import manifest
    from mlbook.lint import check_course

    course = scratch_course(LAB, tmp_path)
    (tmp_path / "mlbook_helpers").mkdir()
    nb = read_nb(course.release(LAB))
    cell = next(c for c in nb.cells if grade_id(c) == "attention")
    cell.source += "\n    scores = np.where(mask, scores, -np.inf)  # (T_q, T_k): forbidden keys drop out of the softmax\n"
    from mlbook.authoring.notebooks import write_nb_atomic

    write_nb_atomic(nb, course.release(LAB))
    course.build_manifest(LAB).write_text(json.dumps(manifest(course, LAB)))
    problems = check_course(course, [LAB])[LAB]
    assert any("release contains a line of 'attention'" in p for p in problems), problems


def test_check_flags_a_release_edited_after_the_build(tmp_path):
    from mlbook.authoring.build import manifest
    from mlbook.lint import check_course

    course = scratch_course(LAB, tmp_path)
    (tmp_path / "mlbook_helpers").mkdir()
    course.build_manifest(LAB).write_text(json.dumps(manifest(course, LAB)))
    assert not [p for p in check_course(course, [LAB])[LAB] if "release_in_sync" in p]
    course.release(LAB).write_text(course.release(LAB).read_text().replace("Attention by hand", "Attention by foot"))
    assert any("release changed since the last build" in p for p in check_course(course, [LAB])[LAB])


def test_mlbook_check_passes_on_the_repository():
    done = subprocess.run([*MLBOOK, "check"], capture_output=True, text=True, cwd=REPO.root, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_build_is_reproducible_and_grading_keeps_the_committed_release(tmp_path):
    from mlbook.authoring.build import build_lab
    from mlbook.grading import api_for, register_assignment

    lab = "lab02_scaling"  # the quickest lab to build
    course = scratch_course(lab, tmp_path)
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    first = build_lab(course, lab).read_bytes()
    manifest = course.build_manifest(lab).read_bytes()
    assert build_lab(course, lab).read_bytes() == first, "two builds of the same source differ"
    assert first == REPO.release(lab).read_bytes(), "the committed release is not what the build makes"
    register_assignment(course, lab, api_for(course))  # nbgrader recreates release/<lab>/
    assert course.release(lab).read_bytes() == first
    assert course.build_manifest(lab).read_bytes() == manifest, "registering lost the build manifest"
