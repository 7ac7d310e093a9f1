"""``mlbook demo``: the main job on embedded defaults.

Builds every lab, creates a demo class under ``submitted/`` (students ``demo-*`` only, so a
real class beside it is never touched), autogrades it into the sqlite gradebook, writes
feedback and the grades CSV, prints a student x lab table, and ends by writing the HTML report
of the demo class (``exports/demo-report.html``, demo students only).

The demo class, per lab:
  demo-ada   the reference solution            demo-ben   the untouched release
  demo-cleo  the lab's 1st demo mutant         demo-dev   its 2nd demo mutant
  demo-eli   an alternative correct solution   demo-fay   its 3rd demo mutant; in lab 1 a corrupt file
"""

from __future__ import annotations

import shutil
import time

from mlbook.authoring import submissions
from mlbook.authoring.build import build_lab
from mlbook.authoring.catalogue import load_catalogue
from mlbook.course import Course
from mlbook.outputs.export import export_csv
from mlbook.outputs.feedback import generate_feedback
from mlbook.grading import autograde_labs
from mlbook.outputs.report import write_report
from mlbook.outputs.results import collect
from mlbook.grading.status import ERROR, GRADED
from mlbook.outputs.table import text_table

STUDENTS = ("demo-ada", "demo-ben", "demo-cleo", "demo-dev", "demo-eli", "demo-fay")


def make_demo_class(course: Course, lab: str) -> dict[str, str]:
    """Write the demo submissions of ``lab``; returns student -> what they submitted."""
    catalogue = load_catalogue(lab, course.source(lab))
    mutants = [m for m in catalogue.mutants if m.demo] or list(catalogue.mutants)
    plan: dict[str, str] = {}
    for student in STUDENTS:
        shutil.rmtree(course.submitted(student, lab), ignore_errors=True)
    submissions.submit(course, "demo-ada", lab, submissions.reference(course, lab))
    plan["demo-ada"] = "reference solution"
    submissions.submit(course, "demo-ben", lab, submissions.untouched(course, lab))
    plan["demo-ben"] = "untouched release"
    for student, index in (("demo-cleo", 0), ("demo-dev", 1), ("demo-fay", 2)):
        if student == "demo-fay" and lab == course.labs()[0]:
            submissions.submit(course, student, lab, raw=submissions.corrupt_text(course, lab))
            plan[student] = "corrupt notebook file"
        elif mutants:
            mutant = mutants[index % len(mutants)]
            submissions.submit(course, student, lab, submissions.reference(course, lab, mutant.cells))
            plan[student] = f"mutant: {mutant.misconception}"
    if catalogue.alternatives:
        alternative = catalogue.alternatives[0]
        submissions.submit(course, "demo-eli", lab, submissions.reference(course, lab, alternative.cells))
        plan["demo-eli"] = f"alternative: {alternative.description}"
    return plan


def run_demo(course: Course, labs: list[str], echo=print) -> int:
    """Run the whole demo; returns the number of labs whose reference did not get full marks."""
    start = time.perf_counter()
    for lab in labs:
        echo(f"build    {lab}")
        build_lab(course, lab)
    plans = {}
    for lab in labs:
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
                row.append(f"{sum(c.score or 0 for c in auto):g}/{sum(c.max_score for c in auto):g}")
        row.append(plans[labs[0]].get(student, "-"))
        rows.append(row)
    echo("")
    echo("Autograded points (written answers await a TA):")
    echo(text_table(header, rows))
    errors = [(lab, r) for lab in labs for r in results[lab].values() if r.status == ERROR]
    for lab, r in errors:
        echo(f"  {r.student} / {lab}: ERROR: {r.reason}")
    echo("")
    echo(f"grades CSV: {csv_path.relative_to(course.root)}   feedback: feedback/<student>/<lab>/<lab>.html")
    report = write_report(course, labs, course.exports_dir / "demo-report.html", list(STUDENTS))
    echo(f"report   {report.relative_to(course.root)} (open it in a browser; it works offline)")
    echo(f"demo finished in {time.perf_counter() - start:.0f} s")
    bad = [lab for lab in labs if results[lab]["demo-ada"].status != GRADED or any(
        not c.passed for c in results[lab]["demo-ada"].auto_cells.values())]
    for lab in bad:
        echo(f"mlbook: the reference solution of {lab} did not earn full marks")
    return len(bad)
