"""Spot-check ``mlbook mutate``: a sample of mutants graded through the real sandbox pipeline agrees.

Usage: .venv/bin/python scripts/mutation_sandbox_check.py LAB CELL WORKDIR [N]

Takes N (default 6) mutants of answer cell CELL of LAB, spread over its mutants, gets each one's
in-process verdict (``mlbook.mutation.engine``), then submits each as a student of a scratch course in
WORKDIR (new, or empty) and grades them all in one batch through the sandbox, the judge and nbgrader.
A mutant is killed when it loses points in either; the script prints both verdicts per mutant and
exits non-zero when any disagree.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness import REPO, scratch_course  # noqa: E402
from mlbook.authoring import submissions  # noqa: E402
from mlbook.authoring.notebooks import without_delimiters  # noqa: E402
from mlbook.grading import GradingOptions, autograde_labs  # noqa: E402
from mlbook.mutation.engine import analyse_lab  # noqa: E402
from mlbook.mutation.operators import cell_mutants  # noqa: E402
from mlbook.outputs.results import collect  # noqa: E402


def main(lab: str, cell: str, workdir: str, n: str = "6") -> int:
    lab = REPO.resolve_labs([lab])[0]
    work = Path(workdir)
    if work.exists() and any(work.iterdir()):
        sys.exit(f"{work} is not empty: name a new folder (nothing there is deleted)")
    (report,) = analyse_lab(REPO, lab, functions=[cell], limit=int(n))
    by_name = {m.name: m for m in cell_mutants(cell, next(c.authored for c in _cells(lab) if c.gid == cell))}
    course = scratch_course(lab, work / "class")
    students = {}
    for i, verdict in enumerate(report.verdicts):
        student = f"mutant{i:03d}"
        students[student] = verdict
        answer = without_delimiters(by_name[verdict.mutant].source)
        submissions.submit(course, student, lab, submissions.reference(course, lab, {cell: answer}))
    autograde_labs(course, [lab], progress=False, options=GradingOptions(workers=2))
    disagree = 0
    for result in collect(course, lab):
        cells = result.auto_cells.values()
        lost = sum(c.score or 0 for c in cells) < sum(c.max_score for c in cells)
        verdict = students[result.student]
        in_process = verdict.status == "killed"
        ok = lost == in_process
        disagree += not ok
        print(f"{'ok  ' if ok else 'DIFF'} {verdict.mutant}: in-process {verdict.status}, sandbox "
              f"{'loses points' if lost else 'full marks'} ({result.status})")
    print(f"{len(students) - disagree}/{len(students)} agree")
    return 1 if disagree else 0


def _cells(lab):
    from mlbook.mutation.engine import LabRun

    return LabRun(REPO, lab).answer_cells()


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
