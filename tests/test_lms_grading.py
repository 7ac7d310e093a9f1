"""A grading week through an LMS, end to end: a class of nine (accents and spaces in names,
several attempts, late, past the cutoff, an extension, renamed, stray, wrong lab, missing)
downloaded from Canvas and from Moodle, collected, graded by the real sandboxed
``mlbook autograde`` into nbgrader's gradebook, penalised, and handed back in the zip each
LMS's bulk upload takes, with exactly the right files and numbers."""

from __future__ import annotations

import csv
import re
import zipfile

import pytest

from lms_fixtures import (CLASS, EXTENDED, LAB, LATE_SHARE, MISSING, canvas_roster, canvas_uploads, copy_course,
                          make_course, moodle_roster, moodle_uploads, notebook, times_csv)
from mlbook.grading import GradingOptions, autograde
from mlbook.grading.status import GRADED
from mlbook.lms.collect import collect, read_manifest
from mlbook.lms.downloads import write_zip
from mlbook.calendar.extensions import grant
from mlbook.lms.handback import write_handback
from mlbook.lms.roster import import_roster
from mlbook.nbgrader_env import gradebook
from mlbook.outputs.export import export_canvas_csv, export_csv, export_nbgrader_csv
from mlbook.outputs.feedback import generate_feedback
from mlbook.outputs.report import write_report
from mlbook.outputs.results import collect as results

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lms-grading")]
COLLECTED = sorted(s.id for s in CLASS if s.id not in MISSING)
OPTIONS = GradingOptions(workers=2)


def _week(root, lms: str):
    """Roster -> extension -> collect -> autograde -> feedback (+ hand-back) -> export -> report."""
    course = make_course(root / "course")
    if lms == "canvas":
        import_roster(course, canvas_roster(root / "roster.csv"))
        uploads, times = canvas_uploads(course)
        download = dict(times=times_csv(root / "times.csv", times))
    else:
        import_roster(course, moodle_roster(root / "roster.csv"))
        uploads, download = moodle_uploads(course), {}
    grant(course, LAB, "ana", EXTENDED["ana"])
    report = collect(course, LAB, write_zip(root / f"{lms}.zip", uploads), lms, **download)
    run = autograde(course, LAB, progress=False, options=OPTIONS)
    generate_feedback(course, LAB)
    handback = write_handback(course, LAB, lms)
    export_csv(course, [LAB])
    export_nbgrader_csv(course, [LAB])
    export_canvas_csv(course, [LAB])
    write_report(course, [LAB], course.exports_dir / "report.html")
    return course, report, run, handback


@pytest.fixture(scope="module", params=["canvas", "moodle"])
def week(request, tmp_path_factory):
    return (request.param, *_week(tmp_path_factory.mktemp(f"week-{request.param}"), request.param))


def _full(course) -> float:
    reference = {r.student: r for r in results(course, LAB)}["ada"]
    return sum(c.max_score for c in reference.auto_cells.values())


def _csv(path):
    return list(csv.DictReader(path.open(encoding="utf-8")))


def test_the_download_is_collected_with_every_file_accounted_for(week):
    lms, course, report, run, _ = week
    assert report.collected == COLLECTED
    assert sorted(report.missing) == sorted(MISSING)
    reasons = " | ".join(r for _, r in report.unmatched + report.ignored)
    assert "mia: not a notebook (.pdf)" in reasons and "kai: not a notebook of" in reasons
    assert "sean: after the cutoff" in reasons and "li: an earlier attempt" in reasons
    assert sorted(a.student for a in run.attempts) == COLLECTED and not run.errors


def test_scores_are_penalised_by_the_policy_with_hours_late_and_raw_score_in_grades_csv(week):
    lms, course, *_ = week
    full = _full(course)
    rows = {r["student"]: r for r in _csv(course.exports_dir / "grades.csv")}
    assert set(rows) == set(COLLECTED)
    for student in COLLECTED:
        row = rows[student]
        raw = 0.0 if student == "mia" else full
        penalty = raw * LATE_SHARE.get(student, 0.0)
        assert row["status"] == GRADED, row
        assert float(row["raw_score"]) == pytest.approx(raw), student
        assert float(row["late_penalty"]) == pytest.approx(penalty), student
        assert float(row["score"]) == pytest.approx(raw - penalty), student
    assert float(rows["zoe"]["hours_late"]) == pytest.approx(3.0)
    assert float(rows["sean"]["hours_late"]) == pytest.approx(2.0)  # the attempt before the cutoff
    assert float(rows["ana"]["hours_late"]) == 0.0 and rows["ana"]["due"] == "2027-01-19T14:59:00+00:00"


def test_nbgrader_agrees_on_due_date_extension_seconds_late_and_penalty(week):
    lms, course, *_ = week
    full = _full(course)
    with gradebook(course) as gb:
        assignment = gb.find_assignment(LAB)
        assert assignment.duedate.isoformat() == "2027-01-19T04:59:00"
        subs = {s.student.id: s for s in assignment.submissions}
        assert subs["zoe"].total_seconds_late == 3 * 3600
        assert subs["ana"].extension.total_seconds() == 10 * 3600 and subs["ana"].total_seconds_late == 0
        assert subs["zoe"].late_submission_penalty == pytest.approx(0.3 * full)
        assert subs["sean"].late_submission_penalty == pytest.approx(0.2 * full)
        assert subs["ada"].late_submission_penalty == 0
    rows = {r["student_id"]: r for r in _csv(course.exports_dir / "nbgrader.csv")}
    assert float(rows["zoe"]["late_submission_penalty"]) == pytest.approx(0.3 * full)


def test_canvas_csv_carries_the_penalised_score_the_canvas_id_and_why(week):
    lms, course, *_ = week
    full = _full(course)
    table = list(csv.reader((course.exports_dir / "canvas.csv").open(encoding="utf-8")))
    rows = {r[2]: r for r in table[2:]}
    zoe = rows["zoe"]
    assert zoe[0] == "Ångström, Zoë" and float(zoe[5]) == pytest.approx(0.7 * full)
    assert zoe[1] == "102"  # the roster's LMS id: Canvas's user id, or the fixture's Moodle ID number
    assert f"late 3.0 h, raw {full:g}, penalty {0.3 * full:g}" in zoe[6]
    assert rows["noor"][6] == "missing" and rows["noor"][5] == ""


def test_the_report_shows_late_work_with_raw_score_and_penalty(week):
    lms, course, *_ = week
    full = _full(course)
    html = (course.exports_dir / "report.html").read_text()
    late = dict(re.findall(r'data-row="late" data-lab="[^"]+" data-student="([^"]+)" data-hours-late="[^"]+" '
                           r'data-raw="[^"]+" data-penalty="([^"]+)"', html))
    assert {k: float(v) for k, v in late.items()} == pytest.approx({"zoe": 0.3 * full, "sean": 0.2 * full})
    assert f'data-student="zoe" data-status="graded" data-score="{0.7 * full:g}"' in html


def test_the_feedback_page_says_how_late_and_what_it_cost(week):
    lms, course, *_ = week
    full = _full(course)
    page = course.feedback("zoe", LAB).read_text()
    assert 'id="late-submission" data-hours-late="3.00"' in page
    assert f'data-raw="{full:g}"' in page and f'data-penalty="{0.3 * full:g}"' in page
    assert f"Late submission penalty (Score: -{round(0.3 * full, 2):g})" in page  # nbgrader's own line
    assert "late-submission" not in course.feedback("ana", LAB).read_text(), "an extension is not late"


def test_the_hand_back_zip_holds_every_page_under_the_name_the_lms_reads_back(week):
    lms, course, report, run, handback = week
    with zipfile.ZipFile(handback.path) as archive:
        names = sorted(archive.namelist())
        assert len(names) == len(COLLECTED)
        manifest = read_manifest(course, LAB)["students"]
        for student in COLLECTED:
            name = f"{manifest[student]['prefix']}{LAB}-feedback.html"
            assert name in names, (student, names)
            assert archive.read(name) == course.feedback(student, LAB).read_bytes()
    by_id = {s.id: s for s in CLASS}
    for student in COLLECTED:
        name = handback.files[student]
        if lms == "canvas":  # Canvas re-upload: the first two all-digit parts are user id and file id
            digits = [p for p in name.split("_") if p.isdigit()][:2]
            collected_file = manifest[student]["entry"].split("_")
            assert digits == [str(by_id[student].canvas_id), [p for p in collected_file if p.isdigit()][1]]
        else:  # Moodle's importer: explode('_', name, 5)
            parts = name.split("_", 4)
            assert parts[1] == str(by_id[student].participant) and parts[2:4] == ["assignsubmission", "file"]
            assert parts[4] == f"{LAB}-feedback.html"
    if lms == "canvas":
        assert "_LATE_102_" in handback.files["zoe"]


def test_a_newer_download_regrades_only_the_submission_that_changed(week, tmp_path):
    lms, graded, *_ = week
    course = copy_course(graded, tmp_path / "rerun")
    ada = course.autograded("ada", LAB)
    before = ada.stat().st_mtime_ns
    extra = {"li": ((-0.5, "mutant", "lab01 resubmitted.ipynb"),)}
    if lms == "canvas":
        uploads, times = canvas_uploads(course, extra)
        report = collect(course, LAB, write_zip(tmp_path / "newer.zip", uploads), lms,
                         times=times_csv(tmp_path / "t.csv", times))
    else:
        report = collect(course, LAB, write_zip(tmp_path / "newer.zip", moodle_uploads(course, extra)), lms)
    assert report.updated == ["li"] and sorted(report.unchanged) == [s for s in COLLECTED if s != "li"]
    run = autograde(course, LAB, progress=False, options=OPTIONS)
    assert [a.student for a in run.attempts] == ["li"]
    assert sorted(s for _, s in run.skipped) == [s for s in COLLECTED if s != "li"]
    assert ada.stat().st_mtime_ns == before, "a graded submission that did not change was touched"
    li = {r.student: r for r in results(course, LAB)}["li"]
    assert li.status == GRADED and 0 < li.raw_score < _full(course)
    assert (course.submitted("li", LAB) / f"{LAB}.ipynb").read_bytes() == notebook(course, "mutant")
