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
    from mlbook.authoring.lint import check_course

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
    from mlbook.sandbox import forkserver

    if not args.unsandboxed and not args.scheduler:
        forkserver.warm_up()  # torch and friends load while the gradebook and submissions are read
    course = _course(args)
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
    from mlbook.outputs.feedback import generate_feedback

    course = _course(args)
    for lab in course.resolve_labs(args.labs):
        pages = generate_feedback(course, lab, args.student or None)
        print(f"{lab}: {len(pages)} feedback page(s) in feedback/")
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
    return 0


def cmd_report(args) -> int:
    from mlbook.outputs.report import write_report

    course = _course(args)
    start = time.perf_counter()
    path = write_report(course, course.resolve_labs(args.labs), Path(args.output) if args.output else None)
    print(f"wrote {path} ({time.perf_counter() - start:.1f} s); it opens offline in any browser")
    return 0


def cmd_release(args) -> int:
    from mlbook.authoring.release_zip import write_release_zip

    course = _course(args)
    for lab in course.resolve_labs(args.labs):
        path = write_release_zip(course, lab, Path(args.output) / f"{lab}.zip" if args.output else None)
        print(f"wrote {path} (upload it to the LMS for students)")
    return 0


def cmd_validate(args) -> int:
    from mlbook.outputs.table import text_table
    from mlbook.student.validate import validate_notebook

    path = Path(args.notebook)
    if not path.is_file():
        raise MlbookError(f"no notebook at {path}")
    rows, seconds, warnings = validate_notebook(path.resolve())
    print(text_table(["test", "points", "result"], [(r.grade_id, f"{r.points:g}", "pass" if r.passed else "FAIL")
                                                for r in rows]))
    failed = [r for r in rows if not r.passed]
    if failed:
        print("\nWhat failed, and the likely reason:")
    for r in failed:
        print(f"  {r.grade_id}: {r.message or 'the cell raised an error or wrote to stderr'}")
    for warning in warnings:
        print(f"warning: {warning}")
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed ({seconds:.1f} s)")
    return 1 if failed else 0


def cmd_demo(args) -> int:
    from mlbook.demo import run_demo

    course = _course(args)
    return 1 if run_demo(course, course.resolve_labs(args.labs)) else 0


def parser() -> argparse.ArgumentParser:
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
    s.set_defaults(func=cmd_feedback)

    s = sub.add_parser("export", help="write grades.csv (with a status column), nbgrader.csv and canvas.csv")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="grades CSV path (default: exports/grades.csv); the others go beside it")
    s.add_argument("--canvas-id", action="append", metavar="LAB=ID",
                   help="the Canvas assignment id of a lab, for canvas.csv's column header (repeatable)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("report", help="write the HTML report for TAs and instructors (exports/report.html)")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="HTML path (default: exports/report.html, or report-<lab>.html)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("release", help="write the zip students get from the LMS (exports/release/<lab>.zip)")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="folder for the zips (default: exports/release/)")
    s.set_defaults(func=cmd_release)

    s = sub.add_parser("validate", help="run a notebook's visible tests; non-zero exit on failure")
    s.add_argument("notebook")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("demo", help="build, grade a demo class, export and print the results")
    s.add_argument("labs", nargs="*")
    s.set_defaults(func=cmd_demo)
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
