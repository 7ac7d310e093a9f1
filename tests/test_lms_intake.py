"""Hand-in through an LMS, before grading: the schedule, the roster, bulk downloads (hostile ones
too) placed in nbgrader's layout. Everything goes through nbgrader's real gradebook; nothing
here runs a notebook (tests/test_lms_grading.py grades the class)."""

from __future__ import annotations

import datetime as dt
import stat
import subprocess
import sys
import warnings
import struct
import zipfile

import pytest

from lms_fixtures import (CLASS, DUE, EXTENDED, LAB, SCHEDULE, canvas_roster, canvas_uploads, local, make_course,
                          copy_course, moodle_roster, moodle_uploads, notebook, times_csv, tree)
from mlbook.lint import check_course
from mlbook.errors import MlbookError
from mlbook.calendar import schedule as schedule_mod
from mlbook.lms.collect import collect, read_manifest
from mlbook.lms.downloads import Upload, canvas_name, moodle_name, write_zip
from mlbook.calendar.extensions import grant
from mlbook.calendar.late import share
from mlbook.lms.roster import import_roster
from mlbook.calendar.schedule import LatePolicy, read_schedule
from mlbook.nbgrader_env import gradebook

pytestmark = pytest.mark.xdist_group("lms-intake")


@pytest.fixture
def course(tmp_path):
    return make_course(tmp_path / "course")


@pytest.fixture(scope="module")
def rostered_template(tmp_path_factory):
    """A course with the Canvas roster in its gradebook (copied for each test: creating a
    gradebook costs seconds)."""
    root = tmp_path_factory.mktemp("lms-template")
    course = make_course(root / "course")
    import_roster(course, canvas_roster(root / "canvas-roster.csv"))
    return course


@pytest.fixture
def rostered(rostered_template, tmp_path):
    return copy_course(rostered_template, tmp_path / "rostered")


# --- the schedule ---------------------------------------------------------------------------

def test_due_dates_carry_the_schedules_time_zone(course):
    schedule = read_schedule(course)
    assert not schedule.problems
    assert schedule.due(LAB) == DUE and schedule.due(LAB).utcoffset() == dt.timedelta(0)
    assert schedule.due(LAB).isoformat() == "2027-01-19T04:59:00+00:00"  # 23:59 in New York, winter


def _scheduling(course) -> dict[str, list[str]]:
    """``mlbook check``'s problems about the schedule (a scratch course is not built)."""
    report = check_course(course, [LAB])
    return {key: [p for p in problems if key != LAB or p.startswith("lab_is_scheduled")]
            for key, problems in report.items()}


def test_check_rejects_a_due_date_before_its_release_a_lab_without_one_and_an_unknown_lab(course):
    assert _scheduling(course) == {LAB: []}
    (course.root / "course.toml").write_text(SCHEDULE.replace("due = 2027-01-18T23:59:00", "due = 2027-01-10T23:59:00"))
    assert any("before it is released" in p for p in _scheduling(course)[LAB])
    (course.root / "course.toml").write_text(SCHEDULE.split("[labs.")[0])
    assert any("has no entry in course.toml" in p for p in _scheduling(course)[LAB])
    (course.root / "course.toml").write_text(SCHEDULE + "\n[labs.lab77_ghost]\nrelease = 2027-01-01T09:00:00\n"
                                             "due = 2027-01-02T09:00:00\n")
    report = _scheduling(course)
    assert report[LAB] == [] and any("schedule_names_real_labs" in p and "lab77_ghost" in p for p in report["course.toml"])
    (course.root / "course.toml").write_text(SCHEDULE.replace("America/New_York", "Mars/Olympus").replace(
        'policy = "per_hour"', 'policy = "per_fortnight"'))
    problems = _scheduling(course)["course.toml"]
    assert any("Mars/Olympus" in p for p in problems) and any("per_fortnight" in p for p in problems)


def test_a_course_without_a_schedule_has_no_due_dates_and_no_schedule_rules(tmp_path):
    from harness import scratch_course

    course = scratch_course(LAB, tmp_path / "plain")
    assert read_schedule(course) is None and _scheduling(course) == {LAB: []}


@pytest.mark.parametrize("policy, seconds, expected", [
    (LatePolicy("none"), 86400, 0.0),
    (LatePolicy("zero"), 1, 1.0),
    (LatePolicy("per_hour", 10, 50), 1, 0.1),  # a started hour counts
    (LatePolicy("per_hour", 10, 50), 3 * 3600, 0.3),
    (LatePolicy("per_hour", 10, 50), 30 * 3600, 0.5),  # the cap
    (LatePolicy("per_day", 10, 50, grace_minutes=15), 14 * 60, 0.0),  # grace
    (LatePolicy("per_day", 10, 50, grace_minutes=15), 26 * 3600, 0.2),
    (LatePolicy("per_day", 10, 50, zero_after_hours=48), 49 * 3600, 1.0),  # the cutoff
    (LatePolicy("per_day", 10, 50), 0, 0.0),
])
def test_the_penalty_is_the_policys_share_of_the_score(policy, seconds, expected):
    assert share(policy, seconds) == pytest.approx(expected)


def test_autograde_writes_the_schedules_due_date_into_nbgraders_gradebook(rostered):
    from mlbook.grading import api_for, register_assignment

    register_assignment(rostered, LAB, api_for(rostered))
    schedule_mod.sync_gradebook(rostered, [LAB])
    with gradebook(rostered) as gb:
        assert gb.find_assignment(LAB).duedate == dt.datetime(2027, 1, 19, 4, 59)  # naive UTC, as nbgrader keeps it


# --- the roster -----------------------------------------------------------------------------

def test_a_canvas_class_list_fills_nbgraders_students_with_their_canvas_ids(course, tmp_path):
    report = import_roster(course, canvas_roster(tmp_path / "roster.csv"))
    assert report.layout == "canvas" and sorted(report.added) == sorted(s.id for s in CLASS)
    assert len(report.problems) == 1 and report.problems[0].startswith("roster.csv, line 5:"), report.problems
    assert "notanumber" in report.problems[0]
    with gradebook(course) as gb:
        students = {s.id: s for s in gb.students}
    assert set(students) == {s.id for s in CLASS}, "the Test Student and Points Possible rows are not students"
    zoe = students["zoe"]
    assert (zoe.first_name, zoe.last_name, zoe.lms_user_id, zoe.email) == ("Zoë", "Ångström", "102", "zoe@uni.example")


def test_reimporting_a_class_list_updates_students_and_never_duplicates_them(course, tmp_path):
    path = canvas_roster(tmp_path / "roster.csv")
    import_roster(course, path)
    path.write_text(path.read_text().replace("ada@uni.example", "ada.lovelace@uni.example"))
    report = import_roster(course, path)
    assert report.updated == ["ada"] and not report.added and len(report.unchanged) == len(CLASS) - 1
    with gradebook(course) as gb:
        assert len(gb.students) == len(CLASS)
        assert gb.find_student("ada").email == "ada.lovelace@uni.example"


def test_a_moodle_export_with_a_bom_and_semicolons_is_read(course, tmp_path):
    report = import_roster(course, moodle_roster(tmp_path / "moodle.csv"))
    assert report.layout == "moodle" and not report.problems and len(report.added) == len(CLASS)
    with gradebook(course) as gb:
        jose = gb.find_student("jose")
        assert (jose.first_name, jose.last_name, jose.email) == ("José María", "García Márquez", "jose@uni.example")


def test_a_plain_roster_reports_each_unreadable_row_by_its_line(course, tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text("id,first,last,email,lms_id\nok1,A,B,a@x,1\nev/il,C,D,c@x,2\nshort,row\nok1,E,F,e@x,3\n"
                    ",G,H,g@x,4\nok2,I,J,i@x,1\n")
    report = import_roster(course, path)
    assert report.added == ["ok1"]
    lines = sorted(int(p.split("line ")[1].split(":")[0]) for p in report.problems)
    assert lines == [3, 4, 5, 6, 7], report.problems
    assert any("path separator" in p for p in report.problems)
    assert any("already on line 2" in p for p in report.problems)


# --- collecting a download --------------------------------------------------------------------

def _files(course):
    return {p.relative_to(course.submitted_dir).as_posix() for p in course.submitted_dir.rglob("*") if p.is_file()
            and ".collected" not in p.parts}


def test_a_canvas_download_is_placed_in_nbgraders_layout_with_each_attempts_own_time(rostered, tmp_path):
    uploads, times = canvas_uploads(rostered)
    report = collect(rostered, LAB, write_zip(tmp_path / "canvas.zip", uploads), "canvas",
                     times=times_csv(tmp_path / "times.csv", times))
    took = {"ada", "zoe", "jose", "li", "ana", "sean", "mia"}
    assert set(report.added) == took and set(report.missing) == {"noor", "kai"}
    assert _files(rostered) == {f"{s}/{LAB}/{name}" for s in took for name in (f"{LAB}.ipynb", "timestamp.txt")}
    reference = notebook(rostered, "reference")
    for student in ("ada", "jose", "li", "sean", "zoe", "ana"):  # renamed, the later attempt, before the cutoff
        assert (rostered.submitted(student, LAB) / f"{LAB}.ipynb").read_bytes() == reference, student
    stamp = (rostered.submitted("zoe", LAB) / "timestamp.txt").read_text().strip()
    assert stamp == "2027-01-19 07:59:00.000000 UTC"  # 3 hours after 23:59 New York
    assert (rostered.submitted("sean", LAB) / "timestamp.txt").read_text().startswith("2027-01-19 06:59:00")
    reasons = dict(report.unmatched)
    assert any("not a notebook (.pdf)" in r for r in reasons.values())
    assert any("kai: not a notebook of lab01_hand_attention" in r for r in reasons.values())
    ignored = dict(report.ignored)
    assert any("sean: after the cutoff" in r for r in ignored.values())
    assert any("li: an earlier attempt" in r for r in ignored.values())
    assert set(report.late) == {"zoe", "ana", "sean"}  # ana's extension is not granted yet


def test_canvas_marks_lateness_without_saying_when_so_a_late_file_counts_one_second_late(rostered, tmp_path):
    name = canvas_name("Ångström, Zoë", 102, 8001, f"{LAB}.ipynb", late=True)
    assert name == f"ångströmzoë_LATE_102_8001_{LAB}.ipynb"
    on_time = canvas_name("Lovelace, Ada", 101, 8002, f"{LAB}.ipynb")
    zip_path = write_zip(tmp_path / "c.zip", [Upload(name, notebook(rostered, "reference"), local(300)),
                                              Upload(on_time, notebook(rostered, "reference"), local(300))])
    report = collect(rostered, LAB, zip_path, "canvas")
    assert (rostered.submitted("zoe", LAB) / "timestamp.txt").read_text().startswith("2027-01-19 04:59:01")
    assert (rostered.submitted("ada", LAB) / "timestamp.txt").read_text().startswith("2027-01-19 04:59:00")
    assert any("zoe" in w and "--times" in w for w in report.warnings)


def test_a_moodle_download_matches_students_by_their_accented_names(tmp_path, course):
    import_roster(course, moodle_roster(tmp_path / "moodle.csv"))
    report = collect(course, LAB, write_zip(tmp_path / "moodle.zip", moodle_uploads(course)), "moodle")
    assert set(report.collected) == {"ada", "zoe", "jose", "li", "ana", "sean", "mia"}
    manifest = read_manifest(course, LAB)["students"]
    assert manifest["zoe"]["prefix"] == "Zoë Ångström_502_assignsubmission_file_"
    assert manifest["jose"]["file"] == "Lab 1 final version.ipynb"
    assert (course.submitted("zoe", LAB) / "timestamp.txt").read_text().startswith("2027-01-19 07:59:00")


def test_an_extension_moves_the_cutoff_and_is_kept_in_the_course(rostered, tmp_path):
    grant(rostered, LAB, "ana", EXTENDED["ana"])
    text = (rostered.root / "extensions.toml").read_text()
    assert '"ana" = { until = "2027-01-19T14:59:00+00:00"' in text
    uploads, times = canvas_uploads(rostered)
    report = collect(rostered, LAB, write_zip(tmp_path / "canvas.zip", uploads), "canvas",
                     times=times_csv(tmp_path / "times.csv", times))
    assert "ana" not in report.late


def test_rerunning_with_a_newer_download_rewrites_only_what_changed(rostered, tmp_path):
    uploads, times = canvas_uploads(rostered)
    collect(rostered, LAB, write_zip(tmp_path / "1.zip", uploads), "canvas", times=times_csv(tmp_path / "t1.csv", times))
    before = {s: (rostered.submitted(s, LAB) / f"{LAB}.ipynb").stat().st_mtime_ns for s in ("ada", "zoe", "li")}
    newer, times = canvas_uploads(rostered, {"li": ((-0.5, "mutant", L := f"{LAB}.ipynb"),)})
    report = collect(rostered, LAB, write_zip(tmp_path / "2.zip", newer), "canvas",
                     times=times_csv(tmp_path / "t2.csv", times))
    assert report.updated == ["li"] and not report.added and "ada" in report.unchanged
    assert (rostered.submitted("ada", LAB) / L).stat().st_mtime_ns == before["ada"]
    assert (rostered.submitted("li", LAB) / L).read_bytes() == notebook(rostered, "mutant")


# --- hostile downloads ------------------------------------------------------------------------

def _raw_zip(path, entries):
    """A zip written entry by entry: (ZipInfo or name, data)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return path


def _symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


ADA = canvas_name("Lovelace, Ada", 101, 9001, f"{LAB}.ipynb")


@pytest.mark.parametrize("entries, reason", [
    ([(f"../../{ADA}", b"{}")], "climbs out of the archive"),
    ([("a/../../x/" + ADA, b"{}")], "climbs out of the archive"),
    ([("/tmp/" + ADA, b"{}")], "absolute path"),
    ([("C:\\Users\\" + ADA, b"{}")], "absolute path"),
    ([(_symlink(ADA), b"/etc/passwd")], "symbolic link"),
    ([(ADA.replace("lovelace", "love\nlace"), b"{}")], "control character"),
    ([(ADA, b"{}"), (ADA, b"{}")], "appears twice"),
], ids=["dotdot", "dotdot-inside", "absolute", "windows-drive", "symlink", "control-character", "duplicate"])
def test_a_hostile_zip_is_refused_whole_and_the_course_is_unchanged(rostered, tmp_path, entries, reason):
    good = (canvas_name("Müller, Mia", 107, 9002, f"{LAB}.ipynb"), notebook(rostered, "reference"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it is asked to write
        path = _raw_zip(tmp_path / "hostile.zip", [good, *entries])
    before = tree(rostered.root)
    with pytest.raises(MlbookError, match=reason) as raised:
        collect(rostered, LAB, path, "canvas")
    assert "nothing was collected" in str(raised.value)
    assert tree(rostered.root) == before
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob("*.ipynb"))


def test_a_zip_bomb_is_refused_from_its_declared_size_before_anything_is_decompressed(rostered, tmp_path):
    zeros = b"0" * (200 << 20)
    entries = [(canvas_name(f"Bomb, B{i}", 500 + i, 9100 + i, f"{LAB}.ipynb"), zeros) for i in range(6)]
    path = _raw_zip(tmp_path / "bomb.zip", entries)
    assert path.stat().st_size < 5 << 20
    before = tree(rostered.root)
    with pytest.raises(MlbookError, match="zip bomb"):
        collect(rostered, LAB, path, "canvas")
    assert tree(rostered.root) == before


def test_a_zip_with_too_many_entries_is_refused(rostered, tmp_path):
    path = _raw_zip(tmp_path / "many.zip", [(f"f{i}.txt", b"") for i in range(5001)])
    before = tree(rostered.root)
    with pytest.raises(MlbookError, match="5001 entries"):
        collect(rostered, LAB, path, "canvas")
    assert tree(rostered.root) == before


def test_a_200_mb_notebook_is_refused_by_its_decompressed_bytes_and_the_rest_collected(rostered, tmp_path):
    big = canvas_name("Lovelace, Ada", 101, 9201, f"{LAB}.ipynb")
    mia = canvas_name("Müller, Mia", 107, 9202, f"{LAB}.ipynb")
    path = _raw_zip(tmp_path / "big.zip", [(big, b"{" + b" " * (200 << 20) + b"}"), (mia, notebook(rostered, "untouched"))])
    report = collect(rostered, LAB, path, "canvas")
    assert report.added == ["mia"] and "ada" in report.missing
    assert any(name == big and "cap for a submitted file" in reason for name, reason in report.unmatched)
    assert not rostered.submitted("ada", LAB).exists()


def test_a_header_that_understates_a_files_size_does_not_get_more_than_it_declared_read(rostered, tmp_path):
    """The size in the central directory is patched down: reading stops at the declared size and
    the file is refused as unreadable (its CRC fails), never written."""
    name = canvas_name("Lovelace, Ada", 101, 9301, f"{LAB}.ipynb")
    path = _raw_zip(tmp_path / "lie.zip", [(name, b"{" + b" " * (70 << 20) + b"}")])
    data = bytearray(path.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 1000)  # uncompressed size
    path.write_bytes(bytes(data))
    report = collect(rostered, LAB, path, "canvas")
    assert not report.collected and "unreadable in the archive" in report.unmatched[0][1]


def test_files_that_are_not_notebooks_or_name_nobody_are_listed_with_their_reason(rostered, tmp_path):
    entries = [(canvas_name("Lovelace, Ada", 101, 9401, "essay.docx"), b"PK.."),
               (canvas_name("Stranger, A", 4242, 9402, f"{LAB}.ipynb"), notebook(rostered, "reference")),
               ("README.txt", b"hello"),
               (f"LATE_anon_x7f_9403_{LAB}.ipynb", notebook(rostered, "reference"))]
    report = collect(rostered, LAB, _raw_zip(tmp_path / "odd.zip", entries), "canvas")
    reasons = [r for _, r in report.unmatched]
    assert not report.collected and len(reasons) == 4
    assert "not a notebook (.docx)" in reasons[0]
    assert "Canvas user id 4242" in reasons[1]
    assert "not named as Canvas names submissions" in reasons[2]
    assert "anonymous grading" in reasons[3]


def test_a_pattern_for_another_lms_refuses_crafted_student_ids(rostered, tmp_path):
    entries = [(f".hidden/{LAB}.ipynb", notebook(rostered, "reference")),
               (f"ada/{LAB}.ipynb", notebook(rostered, "reference"))]
    report = collect(rostered, LAB, _raw_zip(tmp_path / "p.zip", entries), "pattern", pattern=r"(?P<student>[^/]+)/.*")
    assert report.added == ["ada"]
    assert any("starts with a dot" in r for _, r in report.unmatched)
    assert not (rostered.submitted_dir / ".hidden").exists()


def test_a_symlinked_student_folder_in_the_course_is_never_written_through(rostered, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    rostered.submitted_dir.mkdir(parents=True, exist_ok=True)
    (rostered.submitted_dir / "ada").symlink_to(outside)
    path = write_zip(tmp_path / "c.zip", [Upload(ADA, notebook(rostered, "reference"), local(-5))])
    report = collect(rostered, LAB, path, "canvas")
    assert not report.collected and "not a plain folder" in report.unmatched[0][1]
    assert not any(outside.iterdir())


def test_a_moodle_name_and_folder_layout_round_trip():
    from mlbook.lms.formats import FORMATS
    from mlbook.lms.zipread import Member

    for folders in (True, False):
        name = moodle_name("Zoë Ångström", 502, "my lab.ipynb", folders)
        member = Member(name, tuple(p for p in name.split("/") if p), 1, dt.datetime(2027, 1, 1), zipfile.ZipInfo(name))
        entry = FORMATS["moodle"].parse(member)
        assert (entry.key, entry.lms_ref, entry.filename) == ("Zoë Ångström", "502", "my lab.ipynb")
        assert entry.prefix == "Zoë Ångström_502_assignsubmission_file_"


def test_the_command_line_imports_collects_extends_and_says_what_it_did(rostered, tmp_path):
    mlbook = [sys.executable, "-m", "mlbook.cli", "--course", str(rostered.root)]
    uploads, times = canvas_uploads(rostered)
    zip_path = write_zip(tmp_path / "canvas.zip", uploads)
    run = lambda *args: subprocess.run([*mlbook, *args], capture_output=True, text=True, timeout=120)  # noqa: E731
    done = run("roster", "import", str(canvas_roster(tmp_path / "again.csv")))
    assert done.returncode == 1 and "line 5:" in done.stdout and "unchanged 9" in done.stdout, done.stdout + done.stderr
    done = run("extend", "lab01", "ana", "--until", "2027-01-19T09:59")
    assert done.returncode == 0 and "2027-01-19 09:59 EST" in done.stdout, done.stdout + done.stderr
    done = run("collect", "lab01", str(zip_path), "--format", "canvas", "--times",
               str(times_csv(tmp_path / "times.csv", times)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "collected 7 submission(s)" in done.stdout and "missing (in the roster, no submission): kai, noor" in done.stdout
    assert "unmatched:" in done.stdout and "not taken:" in done.stdout and "late: zoe" in done.stdout
    done = run("collect", "lab01", str(zip_path))
    assert done.returncode == 2 and "--format canvas|moodle" in done.stderr
