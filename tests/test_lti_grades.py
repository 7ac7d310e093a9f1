"""``mlbook export --lti LAB``: final scores (after late penalties) reach the LMS's line item by AGS.

The LMS is the suite's LTI 1.3 platform (``mlbook.hub.lti_platform``) in this process; the course
is a copy of lab 1's graded catalogue (the real pipeline's gradebook), with its schedule, one
submission made late through nbgrader's gradebook, and a roster imported with ``mlbook roster
import``: most students carry an LMS user id the platform knows, one carries none, one an id the
platform's course does not have.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from mlbook.course import Course
from mlbook.hub.lti_platform import Context, Person, Platform, Tool, new_key, public_jwk
from mlbook.outputs.results import collect

LAB = "lab01_hand_attention"
REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.xdist_group(LAB), pytest.mark.slow]
CONTEXT = "attention-labs"
LATE = "reference"  # submitted 36 h after the due date: two started days, 20 % off
NO_LMS_ID = "untouched"
STRANGER = "stranger-id"  # an LMS id the platform's course has no member for


def mlbook(course: Course, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mlbook.cli", *args], cwd=course.root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def setup(graded, tmp_path_factory):
    """(course, platform, graded students with an LMS id the platform knows, the stranger's student)."""
    root = tmp_path_factory.mktemp("lti-grades") / "course"
    shutil.copytree(graded(LAB).course.root, root)
    course = Course(root)
    shutil.copy2(REPO / "course.toml", root / "course.toml")  # lab 1 due 2027-01-18T23:59 Europe/London
    with Gradebook(course.db_url) as gb:
        submission = gb.find_submission(LAB, LATE)
        submission.timestamp = dt.datetime(2027, 1, 20, 12, 0)  # nbgrader's timestamps are naive UTC
        gb.db.commit()
    students = sorted(r.student for r in collect(course, LAB) if r.status == "graded")
    stranger = next(s for s in students if s not in (LATE, NO_LMS_ID))
    known = [s for s in students if s not in (NO_LMS_ID, stranger)]
    lines = ["id,first,last,email,lms_id"] + [f"{s},{s},Student,{s}@example.edu,{'sub-' + s}" for s in known] \
        + [f"{stranger},Str,Anger,{stranger}@example.edu,{STRANGER}", f"{NO_LMS_ID},No,Id,,"]
    (root / "roster.csv").write_text("\n".join(lines) + "\n")
    imported = mlbook(course, "roster", "import", "roster.csv")
    assert imported.returncode == 0, imported.stderr

    platform = Platform()
    platform.contexts = {CONTEXT: Context(CONTEXT, "ATT101", "Attention labs")}
    platform.people = {s: Person(s, s, "Student", {CONTEXT: "student"}, sub=f"sub-{s}") for s in known}
    tool_key = new_key()
    from cryptography.hazmat.primitives import serialization

    (root / "lti-tool-key.pem").write_bytes(tool_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    platform.tool = Tool("mlbook-hub", "deployment-1", "http://127.0.0.1:9/unused", [], "http://127.0.0.1:9/",
                         jwks={"keys": [public_jwk(tool_key, "tool-1")]})
    platform.start()
    (root / "lti.toml").write_text(f'client_id = "mlbook-hub"\ntoken_url = "{platform.token_url}"\n'
                                   f'lineitems = "{platform.lineitems_url(CONTEXT)}"\n'
                                   'key_file = "lti-tool-key.pem"\nkid = "tool-1"\n')
    yield course, platform, known, stranger
    platform.stop()


def test_final_scores_after_late_penalties_reach_the_line_item(setup):
    course, platform, known, stranger = setup
    run = mlbook(course, "export", "--lti", LAB)
    print(run.stdout)
    assert run.returncode == 1, f"a run that left students unposted must exit 1:\n{run.stdout}\n{run.stderr}"
    (item,) = platform.lineitems.values()
    assert item.resource_id == LAB and item.label == LAB
    held = item.latest()
    expected = {f"sub-{r.student}": r for r in collect(course, LAB) if r.student in known}
    assert set(held) == set(expected), "the line item holds other students than the graded ones with an LMS id"
    for user, r in expected.items():
        assert held[user]["scoreGiven"] == pytest.approx(r.score) and held[user]["scoreMaximum"] == r.max_score
        assert held[user]["activityProgress"] == "Completed" and held[user]["gradingProgress"] == "FullyGraded"
    late = expected[f"sub-{LATE}"]
    assert late.raw_score > 0 and held[f"sub-{LATE}"]["scoreGiven"] == pytest.approx(late.raw_score * 0.8), \
        "the late student's score is not after the 20 % penalty"
    grades = {row.split(",")[0]: row.split(",")[3] for row in (course.exports_dir / "grades.csv").read_text().splitlines()[1:]}
    assert float(grades[LATE]) == pytest.approx(held[f"sub-{LATE}"]["scoreGiven"]), "AGS and grades.csv disagree"
    assert f"{NO_LMS_ID}: no LMS user id" in run.stdout
    assert f"{stranger}: the LMS refused the score (HTTP 422" in run.stdout and "not a member" in run.stdout
    not_posted = len(collect(course, LAB)) - len(known)  # ungraded entries, no LMS id, the stranger
    assert f"posted {len(known)}:" in run.stdout and f"NOT posted {not_posted}" in run.stdout


def test_a_rerun_posts_nothing_twice(setup):
    course, platform, known, stranger = setup
    (item,) = platform.lineitems.values()
    before = list(item.scores)
    run = mlbook(course, "export", "--lti", LAB)
    print(run.stdout)
    assert item.scores == before, "a re-run sent scores the LMS already held"
    assert f"already held by the LMS, not sent again {len(known)}" in run.stdout and "posted 0: none" in run.stdout
    assert f"{stranger}: the LMS refused" in run.stdout  # what failed is retried, and fails again, said again


def test_a_changed_score_is_sent_again_with_a_later_timestamp(setup):
    course, platform, known, _ = setup
    (item,) = platform.lineitems.values()
    student = next(s for s in known if s != LATE)
    ledger = json.loads((course.exports_dir / f"lti-{LAB}.json").read_text())
    entry = ledger[platform.lineitem_url(item)][f"sub-{student}"]
    entry["scoreGiven"] = -1.0  # what the LMS was sent differs from the gradebook now (a TA's regrade)
    (course.exports_dir / f"lti-{LAB}.json").write_text(json.dumps(ledger))
    old = item.latest()[f"sub-{student}"]
    run = mlbook(course, "export", "--lti", LAB)
    assert "posted 1:" in run.stdout and student in run.stdout.split("posted 1:")[1].splitlines()[0]
    new = item.latest()[f"sub-{student}"]
    assert new["timestamp"] > old["timestamp"] and new["scoreGiven"] == old["scoreGiven"]


def test_a_tool_key_the_platform_does_not_know_posts_nothing(setup):
    course, platform, _, _ = setup
    (item,) = platform.lineitems.values()
    before = list(item.scores)
    config = course.root / "lti.toml"
    saved = config.read_text()
    config.write_text(saved.replace('kid = "tool-1"', 'kid = "tool-2"'))
    try:
        run = mlbook(course, "export", "--lti", LAB)
    finally:
        config.write_text(saved)
    assert run.returncode != 0
    assert "token endpoint refused the tool" in run.stderr + run.stdout and "nothing was posted" in run.stderr + run.stdout
    assert item.scores == before
