"""The ``mlbook`` command line. Each subcommand is a thin shell over one module.

Errors the user can fix are one line (``mlbook: ...``) with exit code 2; an unexpected failure
is one line too, with ``--debug`` to see the traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mlbook.course import Course
from mlbook.errors import MlbookError


def _course(args) -> Course:
    return Course.find(Path(args.course) if args.course else None)


def cmd_build(args) -> int:
    from mlbook.authoring.build import build_lab

    course = _course(args)
    for lab in course.resolve_labs(args.labs):
        start = time.perf_counter()
        path = build_lab(course, lab)
        print(f"built {lab}: {path.relative_to(course.root)} ({time.perf_counter() - start:.1f} s)")
    return 0


def cmd_run(args) -> int:
    from mlbook.authoring.notebooks import read_nb
    from mlbook.outputs.preprocessors import cell_failure
    from mlbook.judge.plan import lab_plan
    from mlbook.sandbox.notebook import execute_sandboxed

    course = _course(args)
    lab = course.resolve_labs([args.lab])[0]
    path = course.release(lab) if args.release else course.source(lab)
    if not path.is_file():
        raise MlbookError(f"{path.relative_to(course.root)} does not exist; run `mlbook build {lab}`")
    _require_sandbox(args)
    result = execute_sandboxed(read_nb(path), lab_plan(lab, course.source(lab)), _limits(args),
                               sandboxed=not args.unsandboxed, warm=False)  # one notebook: a cold start is cheaper
    if result.error:
        print(f"  the notebook failed as a whole: {result.error}")
    failing = 0
    for index, cell in enumerate(result.notebook.cells if result.notebook else []):
        message = cell_failure(cell)
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        verdict = result.verdicts.get(gid)
        if verdict is not None and not verdict.passed:
            message = f"judged: {verdict.message}"
        if message:
            failing += 1
            print(f"  cell {index} {gid}: {message[:300]}")
    what = "release" if args.release else "reference solution"
    passed = sum(v.passed for v in result.verdicts.values())
    where = "without the sandbox" if args.unsandboxed else "in the sandbox"
    print(f"{lab} ({what}) ran {where} in {result.seconds:.1f} s: {failing} failing cell(s), "
          f"{passed}/{len(result.verdicts)} test cells judged passing")
    return 1 if (failing or result.error) and not args.release else 0


def _limits(args):
    from mlbook.sandbox.limits import GiB, Limits

    changes = {k: v for k, v in (("cell_seconds", getattr(args, "cell_timeout", None)),
                                 ("notebook_seconds", getattr(args, "time_budget", None)),
                                 ("memory_bytes", int(args.memory_gib * GiB) if getattr(args, "memory_gib", None) else None))
               if v}
    return Limits().with_(**changes)


def _require_sandbox(args) -> None:
    from mlbook.sandbox import bwrap

    if not args.unsandboxed and (problem := bwrap.problem()):
        raise MlbookError(f"cannot start the grading sandbox: {problem}")


def _sandbox_options(s) -> None:
    s.add_argument("--unsandboxed", action="store_true",
                   help="run student code without the sandbox (only if you trust every submission)")
    s.add_argument("--cell-timeout", type=int, help="seconds per cell before it is interrupted (default 120)")
    s.add_argument("--time-budget", type=int, help="seconds for a whole notebook (default 600)")
    s.add_argument("--memory-gib", type=float, help="address space per process in GiB (default 6)")


def cmd_check(args) -> int:
    from mlbook.lint import check_course

    course = _course(args)
    report = check_course(course, course.resolve_labs(args.labs))
    failed = 0
    for lab, problems in report.items():
        print(f"{lab}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  - {problem}")
        failed += bool(problems)
    return 1 if failed else 0


def cmd_autograde(args) -> int:
    from mlbook.grading import GradingOptions, autograde_labs
    from mlbook.labs import settings
    from mlbook.sandbox import forkserver, profiles

    course = _course(args)
    if not args.unsandboxed and not args.scheduler:
        for name in {settings(lab).sandbox_profile for lab in course.resolve_labs(args.labs)}:
            forkserver.warm_up(profiles.profile(name))  # torch and friends load while the gradebook and submissions are read
    options = GradingOptions(workers=args.workers, scheduler=args.scheduler, limits=_limits(args),
                             sandboxed=not args.unsandboxed)
    errors = 0
    runs = autograde_labs(course, course.resolve_labs(args.labs), args.student or None, force=args.force,
                          progress=not args.quiet, options=options)
    for lab, run in runs.items():
        for attempt in run.attempts:
            if attempt.warning:
                print(f"{lab}/{attempt.student}: warning: {attempt.warning}")
        for attempt in run.errors:
            print(f"{lab}/{attempt.student}: ERROR: {attempt.reason}")
        print(f"{lab}: graded {len(run.attempts) - len(run.errors)}, errors {len(run.errors)}, "
              f"skipped (already graded) {len(run.skipped)}")
        errors += len(run.errors)
    attempts = sum(len(run.attempts) for run in runs.values())
    if attempts:
        at_once = max(r.at_once for r in runs.values())
        print(f"{attempts} notebook(s) of {len(runs)} lab(s) graded in {max(r.seconds for r in runs.values()):.0f} s"
              + (f", up to {at_once} at once" if at_once else ""))
    return 1 if errors else 0


def cmd_feedback(args) -> int:
    from mlbook.outputs.feedback import generate_feedback, pending_written
    from mlbook.outputs.results import collect

    course = _course(args)
    for lab in course.resolve_labs(args.labs):
        pages = generate_feedback(course, lab, args.student or None)
        print(f"{lab}: {len(pages)} feedback page(s) in feedback/")
        if pending := pending_written(collect(course, lab, args.student or None)):
            points = sum(p for _, p in pending.values())
            print(f"warning: {lab}: {len(pending)} student(s) have written answers not graded yet ({points:g} points in "
                  f"all: {', '.join(sorted(pending)[:5])}{', ...' if len(pending) > 5 else ''}); their pages say "
                  "the score is not final. Grade them in the formgrader, then run `mlbook feedback` again "
                  "before handing back.", file=sys.stderr)
        if args.lms:
            from mlbook.lms.handback import write_handback

            handback = write_handback(course, lab, args.lms, args.student or None)
            print(f"{lab}: wrote {handback.path.relative_to(course.root)} ({len(handback.files)} page(s)) for "
                  f"{args.lms}'s bulk feedback upload")
            for student, reason in handback.skipped:
                print(f"  not in the zip: {student}: {reason}")
    return 0


def cmd_roster(args) -> int:
    from mlbook.lms.roster import import_roster

    course = _course(args)
    report = import_roster(course, Path(args.file))
    print(f"{args.file} ({report.layout} layout): added {len(report.added)}, updated {len(report.updated)}, "
          f"unchanged {len(report.unchanged)}, rows not read {len(report.problems)}")
    for problem in report.problems:
        print(f"  - {problem}")
    return 1 if report.problems else 0


def cmd_collect(args) -> int:
    from mlbook.lms.collect import collect

    course = _course(args)
    lab = course.resolve_labs([args.lab])[0]
    from mlbook.lms import formats

    fmt = args.format or ("pattern" if args.pattern else None)
    if fmt is None:
        raise MlbookError(f"say which LMS made the zip: --format {'|'.join(formats.offering('downloads'))}, "
                          "or --pattern REGEX for another")
    report = collect(course, lab, Path(args.zip), fmt, pattern=args.pattern,
                     times=Path(args.times) if args.times else None)
    print(f"{lab}: collected {len(report.collected)} submission(s) from {Path(args.zip).name}: new {len(report.added)}, "
          f"changed {len(report.updated)} (graded again by the next autograde), unchanged {len(report.unchanged)}")
    for student, when in sorted(report.late.items()):
        print(f"  late: {student} (submitted {when})")
    for warning in report.warnings:
        print(f"  warning: {warning}")
    for name, reason in report.ignored:
        print(f"  not taken: {name}: {reason}")
    for name, reason in report.unmatched:
        print(f"  unmatched: {name}: {reason}")
    if report.missing:
        print(f"  missing (in the roster, no submission): {', '.join(report.missing)}")
    return 0


def cmd_extend(args) -> int:
    import datetime as dt

    from mlbook.calendar.extensions import grant
    from mlbook.calendar.schedule import load_schedule

    course = _course(args)
    lab = course.resolve_labs([args.lab])[0]
    schedule = load_schedule(course)
    try:
        until = dt.datetime.fromisoformat(args.until)
    except ValueError:
        raise MlbookError(f"--until {args.until!r}: write a date and time, e.g. 2027-01-20T23:59 "
                          "(the course's time zone unless an offset is given)") from None
    if until.tzinfo is None:
        if schedule is None or schedule.timezone is None:
            raise MlbookError("--until has no offset and the course has no time zone (course.toml): add one, "
                              "e.g. 2027-01-20T23:59+00:00")
        until = until.replace(tzinfo=schedule.timezone)
    granted = grant(course, lab, args.student, until)
    shown = schedule.local(granted) if schedule else granted.isoformat()
    print(f"{lab}: {args.student} may hand in until {shown} without a late penalty (extensions.toml)")
    return 0


def cmd_export(args) -> int:
    from mlbook.outputs.export import export_canvas_csv, export_csv, export_nbgrader_csv

    course = _course(args)
    labs = course.resolve_labs(args.labs)
    canvas_ids = {}
    for pair in args.canvas_id or []:
        lab, _, number = pair.partition("=")
        if not number.strip().isdigit():
            raise MlbookError(f"--canvas-id {pair!r}: write LAB=NUMBER, e.g. lab01=12345 (the number in the "
                              "assignment's Canvas address)")
        canvas_ids[course.resolve_labs([lab])[0]] = number.strip()
    path = export_csv(course, labs, Path(args.output) if args.output else None)
    for written in (path, export_nbgrader_csv(course, labs, path.with_name("nbgrader.csv")),
                    export_canvas_csv(course, labs, path.with_name("canvas.csv"), canvas_ids)):
        print(f"wrote {written}")
    failed = False
    if args.lti:
        from mlbook.outputs.lti_grades import post_grades

        for lab in course.resolve_labs(args.lti):
            report = post_grades(course, lab)
            print(report.summary())
            failed = failed or bool(report.not_posted)
    return 1 if failed else 0


def cmd_report(args) -> int:
    from mlbook.outputs.report import write_report

    course = _course(args)
    start = time.perf_counter()
    path = write_report(course, course.resolve_labs(args.labs), Path(args.output) if args.output else None)
    print(f"wrote {path} ({time.perf_counter() - start:.1f} s); it opens offline in any browser")
    return 0


def cmd_release(args) -> int:
    from mlbook.authoring.release_zip import write_release_zip
    from mlbook.calendar.schedule import release_gate

    course = _course(args)
    labs = course.resolve_labs(args.labs)
    warnings = {lab: release_gate(course, lab, early=args.now) for lab in labs}  # all refused before any is written
    for lab in labs:
        if warnings[lab]:
            print(warnings[lab], file=sys.stderr)
        path = write_release_zip(course, lab, Path(args.output) / f"{lab}.zip" if args.output else None)
        print(f"wrote {path} (upload it to the LMS for students)")
    return 0


def cmd_validate(args) -> int:
    from mlbook.outputs.table import text_table
    from mlbook.student.validate import AT_GRADING, FAIL, validate_notebook

    path = Path(args.notebook)
    if not path.is_file():
        raise MlbookError(f"no notebook at {path}")
    rows, seconds, warnings = validate_notebook(path.resolve())
    print(text_table(["test", "points", "result"], [(r.grade_id, f"{r.points:g}", r.status) for r in rows]))
    failed = [r for r in rows if r.status == FAIL]
    later = [r for r in rows if r.status == AT_GRADING]
    if failed:
        print("\nWhat failed, and the likely reason:")
    for r in failed:
        print(f"  {r.grade_id}: {r.message or 'the cell raised an error or wrote to stderr'}")
    for warning in warnings:
        print(f"warning: {warning}")
    print(f"{len(rows) - len(failed) - len(later)} passed, {len(failed)} failed"
          + (f", {len(later)} hidden (run at grading, on fresh inputs; "
             f"{sum(r.points for r in later):g} points)" if later else "") + f" ({seconds:.1f} s)")
    return 1 if failed else 0


def cmd_similarity(args) -> int:
    from mlbook.similarity import DEFAULT_THRESHOLD, run

    course = _course(args)
    for lab in course.resolve_labs([args.lab]):
        run(course, lab, DEFAULT_THRESHOLD if args.threshold is None else args.threshold, Path(args.csv) if args.csv else None, Path(args.html) if args.html else None)
    return 0


def cmd_demo(args) -> int:
    from mlbook.demo import run_demo

    course = _course(args)
    return 1 if run_demo(course, course.resolve_labs(args.labs)) else 0


def cmd_mutate(args) -> int:
    from mlbook.mutation.report import run_command

    return run_command(_course(args), args)


def cmd_hub(args) -> int:
    from mlbook.hub.commands import run

    return run(args, _course(args))


def parser() -> argparse.ArgumentParser:
    from mlbook.lms import formats  # the LMS formats' names, for --format and --lms

    p = argparse.ArgumentParser(prog="mlbook", description="Build, grade and report the attention labs.")
    p.add_argument("--course", help="course directory (default: the one containing the working directory)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("build", help="notebooks/ -> source/ -> release/ (nbgrader generate_assignment)")
    s.add_argument("labs", nargs="*", help="labs to build (default: all), e.g. lab01")
    s.set_defaults(func=cmd_build)

    s = sub.add_parser("run", help="run a lab's reference solution (or --release) in the grading sandbox, judge it, time it")
    s.add_argument("lab")
    s.add_argument("--release", action="store_true", help="run the student version instead")
    _sandbox_options(s)
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("check", help="instructor lint: metadata, points, release clean and in sync")
    s.add_argument("labs", nargs="*")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("autograde", help="autograde submissions through nbgrader")
    s.add_argument("labs", nargs="*")
    s.add_argument("--student", action="append", help="only this student (repeatable)")
    s.add_argument("--force", action="store_true", help="regrade students already graded")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--workers", type=int, help="grade exactly this many submissions at once (default: one per core, "
                   "and more while cores sit idle, up to four per core)")
    s.add_argument("--scheduler", help="grade on a Dask cluster: the scheduler's address (tcp://host:8786)")
    _sandbox_options(s)
    s.set_defaults(func=cmd_autograde)

    s = sub.add_parser("feedback", help="write feedback pages for graded (and failed) submissions")
    s.add_argument("labs", nargs="*")
    s.add_argument("--student", action="append")
    s.add_argument("--lms", choices=formats.offering("handbacks"),
                   help="also write the zip the LMS's bulk feedback upload takes (exports/handback/<lab>-<lms>.zip)")
    s.set_defaults(func=cmd_feedback)

    s = sub.add_parser("roster", help="the class list: `roster import FILE` (Canvas, Moodle or id,first,last,email,lms_id CSV)")
    roster_sub = s.add_subparsers(dest="roster_command", required=True)
    r = roster_sub.add_parser("import", help="add or update nbgrader's students from an LMS class list export")
    r.add_argument("file")
    r.set_defaults(func=cmd_roster)

    s = sub.add_parser("collect", help="place an LMS bulk download of one lab in submitted/<student>/<lab>/")
    s.add_argument("lab")
    s.add_argument("zip")
    s.add_argument("--format", choices=formats.offering("downloads"), help="the LMS that made the zip")
    s.add_argument("--pattern", help="for another LMS: a regex over each entry's path with a named group "
                   "student, lms_id or name (and optionally attempt, late)")
    s.add_argument("--times", help="CSV of submission times (file_id, lms_id or student; submitted_at): Canvas's zip has none")
    s.set_defaults(func=cmd_collect)

    s = sub.add_parser("extend", help="give a student a later due date for a lab (kept in extensions.toml)")
    s.add_argument("lab")
    s.add_argument("student")
    s.add_argument("--until", required=True, help="the new due date, e.g. 2027-01-20T23:59 (course time zone)")
    s.set_defaults(func=cmd_extend)

    s = sub.add_parser("export", help="write grades.csv (with a status column), nbgrader.csv and canvas.csv")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="grades CSV path (default: exports/grades.csv); the others go beside it")
    s.add_argument("--canvas-id", action="append", metavar="LAB=ID",
                   help="the Canvas assignment id of a lab, for canvas.csv's column header (repeatable)")
    s.add_argument("--lti", action="append", metavar="LAB",
                   help="also post LAB's final scores to its LMS line item by LTI AGS (the course's lti.toml; "
                        "a re-run sends only what changed; exit 1 when a student was not posted)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("report", help="write the HTML report for TAs and instructors (exports/report.html)")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="HTML path (default: exports/report.html, or report-<lab>.html)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("release", help="write the zip students get from the LMS (exports/release/<lab>.zip)")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="folder for the zips (default: exports/release/)")
    s.add_argument("--now", action="store_true",
                   help="release before the lab's release date in course.toml (with a warning)")
    s.set_defaults(func=cmd_release)

    s = sub.add_parser("validate", help="run a notebook's visible tests; non-zero exit on failure")
    s.add_argument("notebook")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("similarity", help="rank pairs of students by how alike their answer cells are (TA review; never grades)")
    s.add_argument("lab")
    s.add_argument("--threshold", type=float, default=None, help="flag pairs whose score (overall, or one counted cell if higher) is at or above this (default 0.8)")
    s.add_argument("--csv", help="CSV path (default: exports/similarity-<lab>.csv)")
    s.add_argument("--html", help="HTML path (default: exports/similarity-<lab>.html, beside the report)")
    s.set_defaults(func=cmd_similarity)

    s = sub.add_parser("mutate", help="mutation analysis: grade every first-order mutant of a lab's reference answers")
    s.add_argument("lab", help="the lab, e.g. lab01")
    s.add_argument("--function", action="append", help="an answer cell (grade_id) or a function in one; repeatable")
    s.add_argument("--limit", type=int, help="at most N mutants per answer cell, spread evenly")
    s.add_argument("--seeds", type=int, default=3, help="MLBOOK_SEEDs each cell's own test cells run on (default 3)")
    s.add_argument("--timeout", type=float, help="seconds a mutant may run (default: 5 x the reference's + 20)")
    s.add_argument("--json", action="store_true", help="print every verdict as JSON instead of the table")
    s.add_argument("--allow-survivors", action="store_true", help="exit 0 even when some mutant survived")
    s.set_defaults(func=cmd_mutate)

    s = sub.add_parser("demo", help="build, grade a demo class, export and print the results")
    s.add_argument("labs", nargs="*")
    s.set_defaults(func=cmd_demo)

    from mlbook.hub.commands import add_parser as add_hub_parser

    add_hub_parser(sub)
    sub.choices["hub"].set_defaults(func=cmd_hub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except MlbookError as exc:
        print(f"mlbook: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mlbook: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, not a traceback, unless asked
        if args.debug:
            raise
        print(f"mlbook: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
