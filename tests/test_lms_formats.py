"""A new LMS is one module and one registry line: collect, roster import, hand-back and the CLI
take it from ``mlbook.lms.formats.FORMATS`` with no other change.

"Chalkboard" is a made-up LMS, small on purpose: its download names each file
``<username>_attempt_<n>_<file>``, its class list has ``Username,Given,Family,Mail`` columns, and
its feedback upload takes ``<username>_<lab>-feedback.html``. Everything below it is mlbook's code.
"""

from __future__ import annotations

import re
import zipfile

import pytest

from lms_fixtures import CLASS, LAB, local, make_course, notebook
from mlbook.cli import parser
from mlbook.lms import formats
from mlbook.lms.collect import collect
from mlbook.lms.downloads import Upload, write_zip
from mlbook.lms.formats.base import LmsFormat
from mlbook.lms.handback import write_handback
from mlbook.lms.records import Entry, RosterEntry, Unparsed
from mlbook.lms.roster import import_roster

_NAMED = re.compile(r"^(?P<user>[a-z0-9]+)_attempt_(?P<attempt>\d+)_(?P<file>.+)$")


class Chalkboard(LmsFormat):
    name, title, user_id = "chalkboard", "Chalkboard", "Chalkboard username"
    downloads = rosters = handbacks = True
    roster_header = "Chalkboard's (Username, Given, Family, Mail)"

    def parse(self, member, pattern=None):
        m = _NAMED.match(member.filename)
        if not m:
            return Unparsed(member, "not named as Chalkboard names submissions")
        return Entry(member, "lms_id", m["user"], m["user"], m["file"], (int(m["attempt"]),), None,
                     f"{m['user']}_", m["user"])

    def reads_roster(self, header):
        return header[:4] == ["Username", "Given", "Family", "Mail"]

    def roster_entry(self, get, number):
        return RosterEntry(number, get("Username"), get("Given"), get("Family"), get("Mail"), get("Username"))

    def handback_name(self, prefix, lab):
        return f"{prefix}{lab}-feedback.html"


@pytest.fixture
def chalkboard():
    fmt = formats.register(Chalkboard())  # the one registry line a new LMS needs
    yield fmt
    del formats.FORMATS[fmt.name]


def test_a_fourth_lms_is_offered_by_the_command_line(chalkboard):
    commands = parser()._subparsers._group_actions[0].choices
    collect_formats = next(a for a in commands["collect"]._actions if "--format" in a.option_strings).choices
    feedback_lms = next(a for a in commands["feedback"]._actions if "--lms" in a.option_strings).choices
    assert "chalkboard" in collect_formats and "chalkboard" in feedback_lms
    assert {"canvas", "moodle", "pattern"} <= set(collect_formats) and {"canvas", "moodle"} <= set(feedback_lms)


def test_a_fourth_lms_reads_its_roster_collects_its_download_and_names_its_hand_back(chalkboard, tmp_path):
    course = make_course(tmp_path / "course")
    people = CLASS[:3]
    roster = tmp_path / "class.csv"
    roster.write_text("Username,Given,Family,Mail\n" + "".join(f"{s.id},{s.first},{s.last},{s.id}@uni.example\n"
                                                            for s in people), encoding="utf-8")
    report = import_roster(course, roster)
    assert report.layout == "chalkboard" and sorted(report.added) == sorted(s.id for s in people)

    uploads = [Upload(f"{people[0].id}_attempt_1_{LAB}.ipynb", notebook(course, "untouched"), local(-10)),
               Upload(f"{people[0].id}_attempt_2_{LAB}.ipynb", notebook(course, "reference"), local(-5)),
               Upload(f"{people[1].id}_attempt_1_{LAB}.ipynb", notebook(course, "reference"), local(-1)),
               Upload("stray file.txt", b"x", local(-1))]
    collected = collect(course, LAB, write_zip(tmp_path / "download.zip", uploads), "chalkboard")
    assert sorted(collected.collected) == sorted([people[0].id, people[1].id])
    assert collected.missing == [people[2].id]
    assert [name for name, _ in collected.unmatched] == ["stray file.txt"]
    assert (course.submitted(people[0].id, LAB) / f"{LAB}.ipynb").read_bytes() == notebook(course, "reference")

    for student in collected.collected:  # a feedback page, as `mlbook feedback` would leave it
        page = course.feedback(student, LAB)
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<html>{student}</html>")
    handback = write_handback(course, LAB, "chalkboard")
    assert handback.path.name == f"{LAB}-chalkboard.zip"
    with zipfile.ZipFile(handback.path) as archive:
        assert sorted(archive.namelist()) == sorted(f"{s}_{LAB}-feedback.html" for s in collected.collected)


def test_an_unknown_format_is_refused_with_the_known_ones(tmp_path):
    from mlbook.errors import MlbookError

    with pytest.raises(MlbookError, match="unknown format 'gradescope': canvas, moodle, pattern"):
        formats.named("gradescope", "downloads")
