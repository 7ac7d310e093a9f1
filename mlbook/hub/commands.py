"""``mlbook hub ...``: the exchange steps the grading account runs, and a demo hub."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mlbook.errors import MlbookError
from mlbook.hub.exchange import Exchange

DEFAULT_ROOT = "/srv/nbgrader/exchange"
DEFAULT_GROUP = "nbgrader-staff"


def exchange_of(course, root: str | None, group: str | None) -> Exchange:
    """The course's exchange: ``--exchange`` or the course config's ``Exchange.root``."""
    from mlbook.nbgrader_env import load_config

    config = load_config(course)
    configured = config.Exchange.get("root") if "Exchange" in config else None
    course_id = config.CourseDirectory.get("course_id") or ""
    if not course_id:
        raise MlbookError(f"{course.config} sets no c.CourseDirectory.course_id")
    exchange = Exchange(Path(root or configured or DEFAULT_ROOT), course_id, group or DEFAULT_GROUP)
    inbound = exchange.course / "inbound"
    if group is None and inbound.is_dir():  # the staff group the exchange was prepared with
        import grp

        exchange.staff_group = grp.getgrgid(inbound.stat().st_gid).gr_name
    return exchange


def run(args, course) -> int:
    os.umask(0o007)  # what the grading account writes stays readable and writable by the staff group
    if args.hub_command == "demo":
        from mlbook.hub.demo import run_demo

        return run_demo(course, args)
    from mlbook.hub import exchange as ex

    labs = course.resolve_labs(args.labs)
    warnings = {}
    if args.hub_command == "release":  # the schedule decides before the exchange is touched
        from mlbook.calendar.schedule import release_gate

        warnings = {lab: release_gate(course, lab, early=args.now) for lab in labs}
    exchange = exchange_of(course, args.exchange, args.staff_group)
    for lab in labs:
        if args.hub_command == "release":
            if warnings[lab]:
                print(warnings[lab], file=sys.stderr)
            print(f"{lab}: released to {ex.release(course, lab, exchange)}")
        elif args.hub_command == "collect":
            report = ex.collect(course, lab, exchange)
            print(f"{lab}: collected {len(report.new)} new attempt(s) ({', '.join(report.new) or 'none'}), "
                  f"{len(report.unchanged)} unchanged")
            for student, reason in report.refused:
                print(f"{lab}: REFUSED {student}: {reason}")
        elif args.hub_command == "feedback":
            from mlbook.outputs.feedback import generate_feedback

            pages = generate_feedback(course, lab, args.student or None)
            released = ex.release_feedback(course, lab, exchange, args.student or None)
            print(f"{lab}: {len(pages)} feedback page(s) written, {released} released to the exchange")
    return 0


def add_parser(sub) -> None:
    s = sub.add_parser("hub", help="the course on a JupyterHub: release, collect and feedback through "
                                   "nbgrader's exchange; `hub demo` starts a demo hub")
    steps = s.add_subparsers(dest="hub_command", required=True)
    for name, text in [("release", "copy release/<lab> to the exchange for students to fetch"),
                       ("collect", "take each student's newest attempt from the exchange into submitted/"),
                       ("feedback", "write feedback pages (mlbook feedback) and release them to the exchange")]:
        step = steps.add_parser(name, help=text)
        step.add_argument("labs", nargs="*")
        step.add_argument("--exchange", help=f"exchange root (default: the course config's, else {DEFAULT_ROOT})")
        step.add_argument("--staff-group", help="group of instructors and TAs (default: the group of the exchange's "
                                                     f"inbound folder, else {DEFAULT_GROUP})")
        if name == "feedback":
            step.add_argument("--student", action="append")
        if name == "release":
            step.add_argument("--now", action="store_true",
                              help="release before the lab's release date in course.toml (with a warning)")
    demo = steps.add_parser("demo", help="start a local demo hub (as root): an instructor, a TA, three students")
    demo.add_argument("--port", type=int, default=8000)
    demo.add_argument("--folder", default="/srv/mlbook-hub-demo", help="hub state, course copy and exchange")
    demo.add_argument("--lti", action="store_true", help="enter by LTI 1.3 launch from a test platform on "
                                                         "127.0.0.1 (launch links printed) instead of passwords")
    demo.set_defaults(labs=[])
