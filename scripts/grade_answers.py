"""Grade answers that are not in a catalogue through the real pipeline (sandbox, judge, nbgrader).

Usage: .venv/bin/python scripts/grade_answers.py LAB ENTRIES.py WORKDIR

ENTRIES.py defines ``ENTRIES = {"name": {"<answer grade id>": "<the whole answer cell>", ...}, ...}``:
each entry is the reference notebook with those answer cells replaced (the others keep the
reference). WORKDIR (new, or empty) gets a scratch course; every entry is submitted as a student of
that name and graded in one batch. Prints each entry's autograded score and every failing cell's
message. For trying a new way of being right or wrong before it becomes a catalogue entry.
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness import scratch_course  # noqa: E402
from mlbook.authoring import submissions  # noqa: E402
from mlbook.grading import GradingOptions, autograde_labs  # noqa: E402
from mlbook.outputs.results import collect  # noqa: E402


def main(lab: str, entries_file: str, workdir: str) -> None:
    entries = runpy.run_path(entries_file)["ENTRIES"]
    work = Path(workdir)
    if work.exists() and any(work.iterdir()):
        sys.exit(f"{work} is not empty: name a new folder (nothing there is deleted)")
    course = scratch_course(lab, work / "class")
    for name, cells in sorted(entries.items()):
        submissions.submit(course, name, lab, submissions.reference(course, lab, cells))
    autograde_labs(course, [lab], progress=False, options=GradingOptions(workers=2))
    for result in collect(course, lab):
        cells = result.auto_cells.values()
        print(f"== {result.student}: {result.status} {result.reason}".rstrip())
        print(f"   {sum(c.score or 0 for c in cells):g}/{sum(c.max_score for c in cells):g}")
        for grade_id, cell in result.auto_cells.items():
            if not cell.passed:
                print(f"   FAIL {grade_id}: {cell.message}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
