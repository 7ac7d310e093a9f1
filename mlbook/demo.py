"""``mlbook demo``: the main job on embedded defaults.

Builds every lab in the course (``source/``, ``release/``), then does everything else in a demo
course of its own, ``<course>/.mlbook-demo/`` (``DEMO_FOLDER``; made afresh on every run from the
course's config, schedule, helpers and the release just built, with its own sqlite gradebook
whatever the course's config names): it creates a demo class there, autogrades it, writes
feedback and the grades CSV, prints a student x lab table, and ends by writing the HTML report
of the demo class and the hand-back zip. Nothing of the demo reaches the course's own
``submitted/``, gradebook, ``exports/`` or feedback, so a real class's export, report and
``autograde`` exit code are what they would be had the demo never run.

Lab 1 arrives the way a course's hand-ins do, through an LMS: the demo roster is imported
(``mlbook roster import``), lab 1's files are zipped as Moodle's "Download all submissions"
names them, with the entry times as submission times around the schedule's due date
(``course.toml``), and ``mlbook collect`` places them. In that download demo-cleo is a day
late (the late policy's penalty shows in the table), demo-dev handed in twice (the untouched
release first, then the mutant: the later attempt counts), demo-eli renamed the notebook and
demo-ada also uploaded a stray PDF (listed, not taken). The demo ends by writing
``.mlbook-demo/exports/handback/<lab 1>-moodle.zip``, the feedback pages keyed for Moodle's
"Upload multiple feedback files in a zip". The other labs are placed directly.

The demo class, per lab:
  demo-ada   the reference solution            demo-ben   the untouched release
  demo-cleo  the lab's 1st demo mutant         demo-dev   its 2nd demo mutant
  demo-eli   an alternative correct solution   demo-fay   its 3rd demo mutant; in lab 1 a corrupt file
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from pathlib import Path

import nbformat

from mlbook.authoring import submissions
from mlbook.authoring.build import build_lab
from mlbook.labs import load_catalogue
from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.outputs.export import export_csv
from mlbook.outputs.feedback import generate_feedback
from mlbook.grading import autograde_labs
from mlbook.outputs.report import write_report
from mlbook.outputs.results import collect
from mlbook.grading.status import ERROR, GRADED
from mlbook.outputs.table import text_table

DEMO_FOLDER = ".mlbook-demo"
STUDENTS = ("demo-ada", "demo-ben", "demo-cleo", "demo-dev", "demo-eli", "demo-fay")
# The demo roster: id, first name, last name (Moodle names the download's folders by full name).
ROSTER = {"demo-ada": ("Ada", "Lovelace-Demo"), "demo-ben": ("Ben", "Núñez Demo"), "demo-cleo": ("Cléo", "Demo"),
          "demo-dev": ("Dev", "Demo"), "demo-eli": ("Eli", "Demo"), "demo-fay": ("Fay", "Demo")}
# Hours before (-) or after (+) lab 1's due date each file was handed in, and its name.
HAND_IN = {"demo-ada": [(-50, None)], "demo-ben": [(-5, None)], "demo-cleo": [(26, None)],
           "demo-dev": [(-72, "first"), (-20, None)], "demo-eli": [(-1, "my attention lab (final).ipynb")],
           "demo-fay": [(-2, None)]}


def demo_notebooks(course: Course, lab: str) -> dict[str, tuple[str, str]]:
    """student -> (the notebook's text, what it is) for the demo class of ``lab``."""
    catalogue = load_catalogue(lab, course.source(lab))
    mutants = [m for m in catalogue.mutants if m.demo] or list(catalogue.mutants)
    out = {"demo-ada": (nbformat.writes(submissions.reference(course, lab)), "reference solution"),
           "demo-ben": (nbformat.writes(submissions.untouched(course, lab)), "untouched release")}
    for student, index in (("demo-cleo", 0), ("demo-dev", 1), ("demo-fay", 2)):
        if student == "demo-fay" and lab == course.labs()[0]:
            out[student] = (submissions.corrupt_text(course, lab), "corrupt notebook file")
        elif mutants:
            mutant = mutants[index % len(mutants)]
            out[student] = (nbformat.writes(submissions.reference(course, lab, mutant.cells)),
                            f"mutant: {mutant.misconception}")
    if catalogue.alternatives:
        alternative = catalogue.alternatives[0]
        out["demo-eli"] = (nbformat.writes(submissions.reference(course, lab, alternative.cells)),
                           f"alternative: {alternative.description}")
    return out


def make_demo_class(course: Course, lab: str) -> dict[str, str]:
    """Write the demo submissions of ``lab`` directly; returns student -> what they submitted."""
    plan: dict[str, str] = {}
    for student in STUDENTS:
        shutil.rmtree(course.submitted(student, lab), ignore_errors=True)
    for student, (text, what) in demo_notebooks(course, lab).items():
        submissions.submit(course, student, lab, raw=text)
        plan[student] = what
    return plan


def make_demo_download(course: Course, lab: str, path: Path) -> tuple[Path, Path, dict[str, str]]:
    """Write the demo roster and lab's Moodle-style bulk download; returns the roster CSV and
    student -> what they submitted."""
    from mlbook.lms.downloads import Upload, moodle_name, write_zip
    from mlbook.calendar.schedule import load_schedule

    schedule = load_schedule(course)
    if schedule is None or schedule.due(lab) is None:
        raise MlbookError(f"the demo needs {lab}'s due date in course.toml")
    due, zone = schedule.due(lab), schedule.timezone
    roster_csv = path.parent / "demo-roster.csv"
    roster_csv.write_text("id,first,last,email,lms_id\n" + "".join(
        f"{s},{first},{last},{s}@example.org,{9000 + i}\n" for i, (s, (first, last)) in enumerate(ROSTER.items())),
        encoding="utf-8")
    notebooks = demo_notebooks(course, lab)
    uploads, plan = [], {}
    for i, (student, (text, what)) in enumerate(notebooks.items()):
        first, last = ROSTER[student]
        participant = 700 + i
        for hours, name in HAND_IN[student]:
            when = (due + dt.timedelta(hours=hours)).astimezone(zone).replace(tzinfo=None)
            data = text
            if name == "first":  # an earlier attempt: the untouched release
                data, name = nbformat.writes(submissions.untouched(course, lab)), f"{lab} (1).ipynb"
            uploads.append(Upload(moodle_name(f"{first} {last}", participant, name or f"{lab}.ipynb"),
                                  data.encode("utf-8"), when))
        plan[student] = what
    first, last = ROSTER["demo-ada"]
    uploads.append(Upload(moodle_name(f"{first} {last}", 700, "notes.pdf"), b"%PDF-1.4 stray notes\n",
                          (due - dt.timedelta(hours=49)).astimezone(zone).replace(tzinfo=None)))
    return write_zip(path, uploads), roster_csv, plan


def demo_course(course: Course, labs: list[str]) -> Course:
    """A fresh demo course at ``<course>/.mlbook-demo/`` holding what grading ``labs`` needs.

    Copied from ``course``: the nbgrader config (with the gradebook pointed at the demo's own
    sqlite file, so a course's shared PostgreSQL gradebook never sees a demo student), the
    schedule, ``mlbook_helpers`` and each lab's authored, source and release files.
    """
    root = course.root / DEMO_FOLDER
    if root.is_symlink() or root.is_file():
        root.unlink()
    shutil.rmtree(root, ignore_errors=True)
    demo = course.scratch_copy(root, labs)
    for lab in labs:
        shutil.copytree(course.release(lab).parent, demo.release(lab).parent, dirs_exist_ok=True)
    from mlbook.calendar.schedule import SCHEDULE_NAME

    if (course.root / SCHEDULE_NAME).is_file():
        shutil.copy2(course.root / SCHEDULE_NAME, root / SCHEDULE_NAME)
    shutil.copytree(course.root / "mlbook_helpers", root / "mlbook_helpers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with demo.config.open("a", encoding="utf-8") as config:
        config.write(f"\n# Added by mlbook demo: the demo's own gradebook, whatever the course uses.\n"
                     f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}\n")
    return demo


def similar_line(course: Course, lab: str) -> str:
    """``mlbook similarity`` on the demo class, in one line: the flagged pairs, the first three named.

    The demo's mutant students (demo-cleo, demo-dev) and demo-eli hand in demo-ada's reference with
    one edit: copies, as far as a TA can tell; the similarity report must name them."""
    from mlbook.similarity import DEFAULT_THRESHOLD, run as similarity_run

    flagged = [p for p in similarity_run(course, lab, echo=lambda *_: None) if p.score >= DEFAULT_THRESHOLD]
    named = "; ".join(f"{p.a} / {p.b} {p.score:.2f}" for p in flagged[:3]) or "none"
    more = f"; {len(flagged) - 3} more" if len(flagged) > 3 else ""
    return (f"similar  {lab}: {len(flagged)} pair(s) at or above {DEFAULT_THRESHOLD:g}: {named}{more} "
            f"({DEMO_FOLDER}/exports/similarity-{lab}.html; never changes a grade)")


def run_demo(real: Course, labs: list[str], echo=print) -> int:
    """Build ``labs`` in ``real``, then grade a demo class of them in ``demo_course(real)``;
    returns the number of labs whose reference did not get full marks."""
    start = time.perf_counter()
    for lab in labs:
        echo(f"build    {lab}")
        build_lab(real, lab)
    course = demo_course(real, labs)
    if left := sorted(p.name for p in real.submitted_dir.glob("demo-*")):
        echo(f"note     {real.submitted_dir.name}/ still holds {', '.join(left)} from an earlier mlbook demo, "
             "which graded into the course itself: remove those folders (and their gradebook entries) "
             "before exporting a real class")
    echo(f"demo     a demo course in {course.root.relative_to(real.root)}/ (the course's own class is never touched)")
    from mlbook.lms.collect import collect as collect_download
    from mlbook.lms.handback import write_handback
    from mlbook.lms.roster import import_roster

    plans = {}
    first_lab = labs[0]
    with tempfile.TemporaryDirectory() as scratch:
        for student in STUDENTS:
            shutil.rmtree(course.submitted(student, first_lab), ignore_errors=True)
        download, roster_csv, plans[first_lab] = make_demo_download(
            course, first_lab, Path(scratch) / f"{first_lab}-moodle-download.zip")
        imported = import_roster(course, roster_csv)
        echo(f"roster   {len(imported.added) + len(imported.updated) + len(imported.unchanged)} demo students "
             f"(Moodle-style class list)")
        collected = collect_download(course, first_lab, download, "moodle")
        echo(f"collect  {first_lab}: {len(collected.collected)} notebooks from a Moodle-style download")
        for student, when in sorted(collected.late.items()):
            echo(f"           late: {student} (handed in {when})")
        for warning in collected.warnings:
            echo(f"           warning: {warning}")
        for name, reason in collected.ignored + collected.unmatched:
            echo(f"           not taken: {name}: {reason}")
    for lab in labs[1:]:
        plans[lab] = make_demo_class(course, lab)
        echo(f"submit   {lab}: {len(plans[lab])} demo submissions")
    echo(f"grade    {sum(len(p) for p in plans.values())} notebooks of {len(labs)} lab(s) in one batch")
    autograde_labs(course, labs, {lab: list(plan) for lab, plan in plans.items()}, force=True)
    for lab in labs:
        generate_feedback(course, lab, list(plans[lab]))
    csv_path = export_csv(course, labs)

    results = {lab: {r.student: r for r in collect(course, lab, list(plans[lab]))} for lab in labs}
    header = ["student"] + [lab.split("_")[0] for lab in labs] + ["what they submitted (lab 1)"]
    rows = []
    for student in STUDENTS:
        row = [student]
        for lab in labs:
            r = results[lab].get(student)
            if r is None:
                row.append("-")
            elif r.status == ERROR:
                row.append("ERROR")
            else:
                auto = r.auto_cells.values()
                points = sum(c.score or 0 for c in auto)
                cell = f"{points * (1 - r.late_share):g}/{sum(c.max_score for c in auto):g}"
                if r.late:
                    cell += f" (late {r.hours_late:.0f} h: {points:g} - {points * r.late_share:g})"
                row.append(cell)
        row.append(plans[labs[0]].get(student, "-"))
        rows.append(row)
    echo("")
    echo("Autograded points after any late penalty (written answers await a TA):")
    echo(text_table(header, rows))
    errors = [(lab, r) for lab in labs for r in results[lab].values() if r.status == ERROR]
    for lab, r in errors:
        echo(f"  {r.student} / {lab}: ERROR: {r.reason}")
    echo("")
    echo(f"grades CSV: {csv_path.relative_to(real.root)}   feedback: {DEMO_FOLDER}/feedback/<student>/<lab>/<lab>.html")
    report = write_report(course, labs, course.exports_dir / "demo-report.html", list(STUDENTS))
    echo(f"report   {report.relative_to(real.root)} (open it in a browser; it works offline)")
    echo(similar_line(course, first_lab))
    handback = write_handback(course, first_lab, "moodle", list(plans[first_lab]))
    echo(f"handback {handback.path.relative_to(real.root)}: {len(handback.files)} feedback pages for Moodle's "
         "\"Upload multiple feedback files in a zip\"")
    echo(f"demo finished in {time.perf_counter() - start:.0f} s")
    bad = [lab for lab in labs if results[lab]["demo-ada"].status != GRADED or any(
        not c.passed for c in results[lab]["demo-ada"].auto_cells.values())]
    for lab in bad:
        echo(f"mlbook: the reference solution of {lab} did not earn full marks")
    return len(bad)
