"""Killing the autograder mid-class loses nothing: the rerun completes the class, once each."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from harness import scratch_course
from mlbook.authoring import submissions
from mlbook.labs import load_catalogue
from mlbook.outputs.results import collect
from mlbook.grading.status import GRADED

LAB = "lab02_scaling"
pytestmark = [pytest.mark.xdist_group("resume"), pytest.mark.slow]


def _graded_count(status_file) -> int:
    try:
        return sum(v["status"] == GRADED for v in json.loads(status_file.read_text()).values())
    except (OSError, ValueError):
        return 0


def test_sigkill_halfway_then_rerun_grades_every_student_exactly_once(tmp_path):
    course = scratch_course(LAB, tmp_path)
    mutants = load_catalogue(LAB).mutants[:3]
    students = ["s1-reference", "s2-reference"] + [f"s{i + 3}-{m.name}" for i, m in enumerate(mutants)] + ["s6-untouched"]
    for student, mutant in zip(students, [None, None, *mutants, "untouched"]):
        nb = (submissions.untouched(course, LAB) if mutant == "untouched"
              else submissions.reference(course, LAB, mutant.cells if mutant else None))
        submissions.submit(course, student, LAB, nb)
    command = [sys.executable, "-m", "mlbook.cli", "--course", str(course.root), "autograde", LAB,
               "--workers", "1", "--quiet"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 600
    while _graded_count(course.status_file) < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    done_before = _graded_count(course.status_file)
    assert 2 <= done_before < len(students), f"the kill came too late to test anything ({done_before} graded)"

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"skipped (already graded) {done_before}" in rerun.stdout, rerun.stdout

    results = {r.student: r for r in collect(course, LAB)}
    assert all(r.status == GRADED for r in results.values()), {s: r.reason for s, r in results.items()}
    full = results["s1-reference"].max_score - 3  # the 3-point written answer waits for a TA
    assert results["s1-reference"].score == results["s2-reference"].score == full
    assert all(results[f"s{i + 3}-{m.name}"].score < full for i, m in enumerate(mutants))
    assert results["s6-untouched"].score == 0
    db = sqlite3.connect(course.root / "gradebook.db")
    assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
    per_student = dict(db.execute("select student_id, count(*) from submitted_assignment group by student_id"))
    assert per_student == {s: 1 for s in students}
    assert not any((course.root / "autograded" / ".staging").glob("*/*")), "a half-written result was left behind"
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert f"skipped (already graded) {len(students)}" in again.stdout
