"""Release follows the schedule (``course.toml``): ``mlbook release`` and ``mlbook hub release``
refuse a lab before its release date (saying when), ``--now`` releases early with a warning,
and a schedule that ``mlbook check`` refuses is refused by release too. Real CLI, real zips."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import zipfile

from harness import REPO, scratch_course
from mlbook.lint import check_course
from mlbook.authoring.release_zip import default_path

LAB = "lab01_hand_attention"
MLBOOK = [sys.executable, "-m", "mlbook.cli"]


def course_scheduled(tmp_path, release: dt.datetime, due: dt.datetime, extra: str = ""):
    course = scratch_course(LAB, tmp_path)
    shutil.copytree(REPO.root / "mlbook_helpers", tmp_path / "mlbook_helpers",
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    (tmp_path / "course.toml").write_text(
        f'timezone = "Europe/London"\n{extra}\n[labs.{LAB}]\n'
        f"release = {release:%Y-%m-%dT%H:%M:%S}\ndue = {due:%Y-%m-%dT%H:%M:%S}\n")
    return course


def mlbook(course, *args):
    return subprocess.run([*MLBOOK, "--course", str(course.root), *args], capture_output=True, text=True, timeout=300)


def in_days(days: float) -> dt.datetime:
    return dt.datetime.now().replace(microsecond=0) + dt.timedelta(days=days)


def test_release_before_its_date_is_refused_and_says_when(tmp_path):
    course = course_scheduled(tmp_path, dt.datetime(2099, 3, 2, 9, 0), dt.datetime(2099, 3, 9, 23, 59))
    done = mlbook(course, "release", "lab01")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "scheduled for release on 2099-03-02 09:00 GMT" in done.stderr and "--now" in done.stderr, done.stderr
    assert not default_path(course, LAB).exists(), "a refused release must not write the zip"


def test_now_releases_early_with_a_warning(tmp_path):
    course = course_scheduled(tmp_path, dt.datetime(2099, 3, 2, 9, 0), dt.datetime(2099, 3, 9, 23, 59))
    done = mlbook(course, "release", "lab01", "--now")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning:" in done.stderr and "early" in done.stderr and "2099-03-02 09:00 GMT" in done.stderr, done.stderr
    assert zipfile.ZipFile(default_path(course, LAB)).testzip() is None


def test_release_after_its_date_goes_ahead_without_a_warning(tmp_path):
    course = course_scheduled(tmp_path, in_days(-1), in_days(6))
    done = mlbook(course, "release", "lab01")
    assert done.returncode == 0 and "warning" not in done.stderr, done.stdout + done.stderr
    assert default_path(course, LAB).is_file()


def test_a_schedule_check_refuses_is_refused_by_release_even_with_now(tmp_path):
    course = course_scheduled(tmp_path, in_days(-1), in_days(-2))  # due before it is released
    assert any("before it is released" in p for p in check_course(course, [LAB])[LAB])
    for extra in ([], ["--now"]):
        done = mlbook(course, "release", "lab01", *extra)
        assert done.returncode != 0 and "before it is released" in done.stderr, done.stdout + done.stderr
        assert not default_path(course, LAB).exists()
    course = course_scheduled(tmp_path, in_days(-1), in_days(6), extra="[late]\npolicy = \"sometimes\"\n")
    done = mlbook(course, "release", "lab01")
    assert done.returncode != 0 and "late.policy" in done.stderr, done.stdout + done.stderr


def test_hub_release_before_its_date_is_refused_before_the_exchange_is_touched(tmp_path):
    course = course_scheduled(tmp_path, dt.datetime(2099, 3, 2, 9, 0), dt.datetime(2099, 3, 9, 23, 59))
    exchange = tmp_path / "exchange"
    done = mlbook(course, "hub", "release", "lab01", "--exchange", str(exchange))
    assert done.returncode != 0, done.stdout + done.stderr
    assert "scheduled for release on 2099-03-02 09:00 GMT" in done.stderr, done.stderr
    assert not exchange.exists()


def test_the_repository_schedule_holds_back_labs_not_yet_released():
    """The committed course.toml is one check accepts; each lab is refused exactly until its date."""
    from mlbook.errors import MlbookError
    from mlbook.calendar.schedule import read_schedule, release_gate

    schedule = read_schedule(REPO)
    for lab, dates in schedule.labs.items():
        assert release_gate(REPO, lab, now=dates.release) is None
        before = dates.release - dt.timedelta(minutes=1)
        assert "early" in release_gate(REPO, lab, early=True, now=before)
        try:
            release_gate(REPO, lab, now=before)
        except MlbookError as exc:
            assert schedule.local(dates.release) in str(exc)
        else:
            raise AssertionError(f"{lab} released a minute before its date")
