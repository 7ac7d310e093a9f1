"""``mlbook mutate``'s table (markdown) and its exit status."""

from __future__ import annotations

import json
import sys

from mlbook.course import Course
from mlbook.mutation.engine import FunctionReport, analyse_lab, as_json

HEADER = ("| lab | answer cell | function | mutants | killed | equivalent | survived | seconds |\n"
          "|---|---|---|---:|---:|---:|---:|---:|")


def table(reports: list[FunctionReport], header: bool = True) -> str:
    rows = [f"| {r.lab} | {r.cell} | {r.function} | {r.mutants} | {r.killed} | {r.equivalent} | {r.survived} "
            f"| {r.seconds:.0f} |" for r in reports]
    return "\n".join(([HEADER] if header else []) + rows)


def listing(reports: list[FunctionReport], status: str) -> str:
    out = []
    for r in reports:
        for v in r.verdicts:
            if v.status == status:
                text = f"- `{v.mutant}` ({r.lab}, {v.function})\n  ```diff\n  " + v.diff.replace("\n", "\n  ") + "\n  ```"
                if status == "survived":
                    text += f"\n  differs: {v.reason}\n  input: {v.distinguishing_input}"
                out.append(text)
    return "\n".join(out)


def run_command(course: Course, args) -> int:
    lab = course.resolve_labs([args.lab])[0]
    reports = analyse_lab(course, lab, functions=args.function, limit=args.limit, seeds=args.seeds,
                          timeout=args.timeout, progress=None if args.json else lambda t: print(t, file=sys.stderr))
    if args.json:
        print(json.dumps(as_json(reports), indent=1))
    else:
        print(table(reports))
        for status in ("survived", "equivalent"):
            text = listing(reports, status)
            if text:
                print(f"\n{status}:\n{text}")
    survivors = sum(r.survived for r in reports)
    return 0 if survivors == 0 or args.allow_survivors else 1
