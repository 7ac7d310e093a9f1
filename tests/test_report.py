"""The TA report and the grade exports, on lab 1's graded catalogue class.

The class is the harness's lab 1 batch (reference, untouched, every mutant, every alternative,
plus the extras other tests add); this module adds one corrupt file of its own, so an errored
submission is present whichever tests run. Numbers are checked against nbgrader's gradebook,
read here through nbgrader's own ``Gradebook`` API, and against the status file; the page is
opened in a real headless Chromium.
"""

from __future__ import annotations

import csv
import time
from html.parser import HTMLParser

import pytest

from harness import add_extras
from mlbook.authoring import submissions
from mlbook.course import Course
from mlbook.grading.status import ERROR, GRADED, StatusStore

LAB = "lab01_hand_attention"
CORRUPT = "report-corrupt"
pytestmark = [pytest.mark.xdist_group(LAB), pytest.mark.slow]


def _corrupt(course: Course, student: str, lab: str) -> None:
    submissions.submit(course, student, lab, raw=submissions.corrupt_text(course, lab))


add_extras(LAB, **{CORRUPT: _corrupt})


class DataElements(HTMLParser):
    """Every start tag carrying ``data-*`` attributes, as (tag, {key without "data-": value})."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        data = {k.removeprefix("data-"): v or "" for k, v in attrs if k.startswith("data-")}
        if data:
            self.found.append((tag, data))


def rows_of(found: list[tuple[str, dict[str, str]]], kind: str) -> list[dict[str, str]]:
    return [data for tag, data in found if tag == "tr" and data.get("row") == kind]


@pytest.fixture(scope="module")
def report(graded, tmp_path_factory):
    """(course, html text, data elements, seconds to write) for lab 1's graded class."""
    from mlbook.outputs.report import write_report

    course = graded(LAB).course
    start = time.perf_counter()
    path = write_report(course, [LAB], tmp_path_factory.mktemp("report") / "report.html")
    seconds = time.perf_counter() - start
    text = path.read_text(encoding="utf-8")
    parser = DataElements()
    parser.feed(text)
    return course, path, text, parser.found, seconds


def _gradebook_scores(course: Course) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gb:
        return {s.student.id: (s.score, s.max_score) for s in gb.find_assignment(LAB).submissions}


def test_report_scores_agree_with_the_gradebook(report):
    course, _, _, found, _ = report
    store = StatusStore(course.status_file)
    gradebook = _gradebook_scores(course)
    cells = {data["student"]: data for tag, data in found if tag == "td" and "status" in data}
    students = course.students(LAB)
    assert set(cells) == set(students), "the score table does not list every student who submitted"
    graded = [s for s in students if store.get(LAB, s).status == GRADED]
    assert len(graded) >= 10, f"too few graded submissions to compare: {graded}"
    for student in graded:
        score, max_score = gradebook[student]
        assert cells[student]["status"] == GRADED
        assert float(cells[student]["score"]) == pytest.approx(score), f"{student}: report and gradebook differ"
        assert float(cells[student]["max"]) == pytest.approx(max_score), student


def test_report_shows_an_errored_submission_as_an_error_with_its_reason(report):
    course, _, _, found, _ = report
    store = StatusStore(course.status_file)
    errored = {s for s in course.students(LAB) if store.get(LAB, s).status == ERROR}
    assert CORRUPT in errored, f"{CORRUPT} was not recorded as an error: {store.get(LAB, CORRUPT)}"
    cells = {data["student"]: data for tag, data in found if tag == "td" and "status" in data}
    for student in errored:
        assert cells[student]["status"] == ERROR and "score" not in cells[student], f"{student} shows a score"
    listed = {row["student"]: row for row in rows_of(found, "error")}
    assert set(listed) == errored
    assert float(listed[CORRUPT]["seconds"]) == pytest.approx(store.get(LAB, CORRUPT).seconds, abs=0.05)


def test_report_pass_rates_agree_with_the_gradebook(report):
    from nbgrader.api import Gradebook

    course, _, _, found, _ = report
    store = StatusStore(course.status_file)
    graded = {s for s in course.students(LAB) if store.get(LAB, s).status == GRADED}
    expected: dict[str, list[int]] = {}
    with Gradebook(course.db_url) as gb:
        for submission in gb.find_assignment(LAB).submissions:
            if submission.student.id not in graded:
                continue
            for grade in submission.notebooks[0].grades:
                if grade.cell_type == "code":
                    counts = expected.setdefault(grade.name, [0, 0])
                    counts[0] += grade.score >= grade.max_score
                    counts[1] += 1
    shown = {row["cell"]: [int(row["passed"]), int(row["graded"])] for row in rows_of(found, "pass-rate")}
    assert shown == expected


def test_report_has_every_figure_as_inline_svg(report):
    _, _, text, found, _ = report
    figures = {data["figure"] for tag, data in found if tag == "figure"}
    assert figures == {"scores", "pass-rates", "grading-time", f"students-{LAB}"}
    for name in figures:
        block = text.split(f'data-figure="{name}"', 1)[1].split("</figure>", 1)[0]
        assert "<svg" in block and "<path" in block, f"figure {name} holds no drawing"
    assert "<image" not in text and "<script" not in text


def test_every_catalogue_mutant_is_reported_as_its_own_misconception(report, graded):
    from harness import alternative_student, mutant_student

    _, _, _, found, _ = report
    catalogue = graded(LAB).catalogue
    findings = {row["mutant"]: row["students"].split(",") for row in rows_of(found, "misconception")}
    for mutant in catalogue.mutants:
        assert mutant_student(mutant.name) in findings.get(mutant.name, []), \
            f"{mutant.name} ({mutant.misconception}) is not diagnosed in its own submission"
    correct = {"reference"} | {alternative_student(a.name) for a in catalogue.alternatives}
    for name, students in findings.items():
        assert not correct & set(students), f"a correct submission is diagnosed with {name}: {students}"
    for row in rows_of(found, "unexplained"):
        assert not correct & set(row["students"].split(",")), f"a correct submission fails {row['cell']}"


def test_report_grading_times_come_from_the_status_file(report):
    course, _, _, found, _ = report
    store = StatusStore(course.status_file)
    attempts = [store.get(LAB, s) for s in course.students(LAB)]
    (row,) = rows_of(found, "timing")
    assert int(row["count"]) == sum(a.status in (GRADED, ERROR) for a in attempts)
    assert float(row["total"]) == pytest.approx(sum(a.seconds for a in attempts if a.status in (GRADED, ERROR)),
                                                abs=0.05)


def test_report_is_written_in_under_10_seconds(report):
    *_, seconds = report
    assert seconds < 10, f"writing the report took {seconds:.1f} s"


def test_report_opens_offline_in_chromium_without_console_errors_or_requests(report, chromium):
    _, path, text, _, _ = report
    assert "http://" not in text and "https://" not in text, "the report holds a URL"
    url = path.resolve().as_uri()
    requests, problems = [], []
    page = chromium.new_page()
    try:
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.goto(url, wait_until="load")
        sizes = page.eval_on_selector_all("figure svg", "els => els.map(e => e.getBoundingClientRect().width)")
        heading = page.inner_text("h1")
    finally:
        page.close()
    assert requests == [url], f"the report requested more than itself: {requests}"
    assert problems == []
    assert len(sizes) == 4 and all(w > 100 for w in sizes), f"figures not drawn: widths {sizes}"
    assert heading.startswith("Grading report")


def test_canvas_csv_has_canvas_columns_scores_from_the_gradebook_and_a_status(graded, tmp_path):
    from mlbook.outputs.export import CANVAS_STUDENT_COLUMNS, export_canvas_csv

    course = graded(LAB).course
    path = export_canvas_csv(course, [LAB], tmp_path / "canvas.csv", {LAB: "4242"})
    header, points, *rows = list(csv.reader(path.open(encoding="utf-8")))
    assert header == CANVAS_STUDENT_COLUMNS + [f"{LAB} (4242)", f"{LAB} status"]
    assert points[0] == "Points Possible" and points[-1] == "(read only)"
    gradebook = _gradebook_scores(course)
    assert float(points[5]) == pytest.approx(next(iter(gradebook.values()))[1])
    by_id = {row[2]: row for row in rows}
    store = StatusStore(course.status_file)
    for student in course.students(LAB):
        attempt = store.get(LAB, student)
        score, status = by_id[student][5], by_id[student][6]
        if attempt.status == GRADED:
            assert float(score) == pytest.approx(gradebook[student][0]) and status.startswith("graded"), student
        else:
            assert attempt.status == ERROR, f"{student} is {attempt.status}: the batch was not fully graded"
            assert score == "" and status.startswith("error: ") and attempt.reason in status, student


def test_nbgrader_csv_is_nbgraders_own_export(graded, tmp_path):
    from nbgrader.api import Gradebook

    from mlbook.outputs.export import export_nbgrader_csv

    course = graded(LAB).course
    path = export_nbgrader_csv(course, [LAB], tmp_path / "nbgrader.csv")
    rows = list(csv.DictReader(path.open()))
    assert path.read_text().splitlines()[0] == ("assignment,duedate,timestamp,student_id,last_name,first_name,email,"
                                                "raw_score,late_submission_penalty,score,max_score")
    with Gradebook(course.db_url) as gb:
        students = {s.id for s in gb.students}
    assert sorted(r["student_id"] for r in rows) == sorted(students), "nbgrader exports one row per student"
    for student, (score, _) in _gradebook_scores(course).items():
        assert [float(r["raw_score"]) for r in rows if r["student_id"] == student] == [score]


def test_grades_csv_keeps_its_columns_and_status(graded, tmp_path):
    from mlbook.outputs.export import COLUMNS, export_csv

    course = graded(LAB).course
    path = export_csv(course, [LAB], tmp_path / "grades.csv")
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == COLUMNS
    assert {r["student"]: r["status"] for r in rows}[CORRUPT] == ERROR


def test_cli_export_writes_the_three_csv_files(graded, tmp_path):
    import subprocess
    import sys

    course = graded(LAB).course
    done = subprocess.run([sys.executable, "-m", "mlbook.cli", "--course", str(course.root), "export",
                           "-o", str(tmp_path / "grades.csv"), "--canvas-id", "lab01=77"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canvas.csv", "grades.csv", "nbgrader.csv"]
    assert f"{LAB} (77)" in (tmp_path / "canvas.csv").read_text().splitlines()[0]


def test_a_misconception_needs_its_own_cells_and_message_and_explains_later_failures():
    from mlbook.authoring.catalogue import Catalogue, Mutant
    from mlbook.outputs.report.data import LabData
    from mlbook.outputs.report.misconceptions import diagnose
    from mlbook.outputs.results import CellResult, SubmissionResult

    overflow = Mutant("no-max", "softmax without the row max", {}, ("test_softmax",), r"overflow")
    cells = ["test_softmax", "test_attention", "test_other"]

    def submission(student: str, messages: dict[str, str]) -> SubmissionResult:
        result = SubmissionResult(LAB, student, GRADED)
        for gid in cells:
            failed = gid in messages
            result.cells[gid] = CellResult(gid, "auto", 0.0 if failed else 1.0, 1.0, messages.get(gid, ""))
        return result

    class_ = [submission("shows-it", {"test_softmax": "exp overflows", "test_attention": "nan: overflow",
                                      "test_other": "rows sum to 2"}),
              submission("right-message-wrong-cell", {"test_attention": "overflow"}),
              submission("stub", {"test_other": "NotImplementedError: "})]
    diagnosis = diagnose(LabData(LAB, cells, [], class_, Catalogue(LAB, (overflow,))))
    assert [(f.mutant.name, f.students, f.cells) for f in diagnosis.findings] == [("no-max", ["shows-it"],
                                                                                    {"test_softmax"})]
    unexplained = {u.cell: u.students for u in diagnosis.unexplained}
    assert unexplained == {"test_attention": ["right-message-wrong-cell"], "test_other": ["shows-it"]}
    assert diagnosis.not_attempted == {"stub": ["test_other"]}
