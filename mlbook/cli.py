"""The ``mlbook`` command line. Each subcommand is a thin shell over one module.

Errors the user can fix are one line (``mlbook: ...``) with exit code 2; an unexpected failure
is one line too, with ``--debug`` to see the traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .course import Course
from .errors import MlbookError


def _course(args) -> Course:
    return Course.find(Path(args.course) if args.course else None)


def cmd_build(args) -> int:
    from .build import build_lab

    course = _course(args)
    for lab in course.resolve_labs(args.labs):
        start = time.perf_counter()
        path = build_lab(course, lab)
        print(f"built {lab}: {path.relative_to(course.root)} ({time.perf_counter() - start:.1f} s)")
    return 0


def cmd_run(args) -> int:
    from .execute import execute
    from .notebooks import read_nb

    course = _course(args)
    lab = course.resolve_labs([args.lab])[0]
    path = course.release(lab) if args.release else course.source(lab)
    if not path.is_file():
        raise MlbookError(f"{path.relative_to(course.root)} does not exist; run `mlbook build {lab}`")
    run = execute(read_nb(path))
    for index, gid, message in run.errors:
        print(f"  cell {index} {gid or ''}: {message}")
    what = "release" if args.release else "reference solution"
    print(f"{lab} ({what}) executed in {run.seconds:.1f} s with {len(run.errors)} failing cell(s)")
    return 1 if run.errors and not args.release else 0


def cmd_check(args) -> int:
    from .lint import check_course

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
    from .grading import autograde

    course = _course(args)
    errors = 0
    for lab in course.resolve_labs(args.labs):
        run = autograde(course, lab, args.student or None, force=args.force, progress=not args.quiet)
        for attempt in run.errors:
            print(f"{lab}/{attempt.student}: ERROR: {attempt.reason}")
        print(f"{lab}: graded {len(run.attempts) - len(run.errors)}, errors {len(run.errors)}, "
              f"skipped (already graded) {len(run.skipped)}")
        errors += len(run.errors)
    return 1 if errors else 0


def cmd_feedback(args) -> int:
    from .feedback import generate_feedback

    course = _course(args)
    for lab in course.resolve_labs(args.labs):
        pages = generate_feedback(course, lab, args.student or None)
        print(f"{lab}: {len(pages)} feedback page(s) in feedback/")
    return 0


def cmd_export(args) -> int:
    from .export import export_csv

    course = _course(args)
    path = export_csv(course, course.resolve_labs(args.labs), Path(args.output) if args.output else None)
    print(f"wrote {path}")
    return 0


def cmd_validate(args) -> int:
    from .table import render
    from .validate import validate_notebook

    path = Path(args.notebook)
    if not path.is_file():
        raise MlbookError(f"no notebook at {path}")
    rows, seconds, warnings = validate_notebook(path.resolve())
    print(render(["test", "points", "result"], [(r.grade_id, f"{r.points:g}", "pass" if r.passed else "FAIL")
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
    from .demo import run_demo

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

    s = sub.add_parser("run", help="execute a lab's reference solution (or --release) and time it")
    s.add_argument("lab")
    s.add_argument("--release", action="store_true", help="run the student version instead")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("check", help="instructor lint: metadata, points, release clean and in sync")
    s.add_argument("labs", nargs="*")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("autograde", help="autograde submissions through nbgrader")
    s.add_argument("labs", nargs="*")
    s.add_argument("--student", action="append", help="only this student (repeatable)")
    s.add_argument("--force", action="store_true", help="regrade students already graded")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_autograde)

    s = sub.add_parser("feedback", help="write feedback pages for graded (and failed) submissions")
    s.add_argument("labs", nargs="*")
    s.add_argument("--student", action="append")
    s.set_defaults(func=cmd_feedback)

    s = sub.add_parser("export", help="write the grades CSV (with a status column)")
    s.add_argument("labs", nargs="*")
    s.add_argument("-o", "--output", help="CSV path (default: exports/grades.csv)")
    s.set_defaults(func=cmd_export)

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
