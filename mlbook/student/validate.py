"""``mlbook validate``: a student's pre-submission check, with an honest exit code.

Runs the notebook as it is in a real kernel (the visible tests only: hidden tests are not in
a student's copy), then scores each test cell by nbgrader's own rule
(``nbgrader.utils.determine_grade``) after dropping warning-only stderr as the grader does.
Prints one row per test with its hint, and returns non-zero when any test fails, unlike
``nbgrader validate``.

A test cell of the release whose code is only comments (every ``*_hidden`` cell, and any test
cell whose whole content is hidden) holds nothing a student's copy can run: its row says
``run at grading`` and counts neither as passed nor as failed. Telling them apart by content, not
by name, keeps the rule true for a cell a lab author names differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlbook import pyast

from mlbook.student.local_kernel import execute
from mlbook.authoring.notebooks import grade_id, is_test, read_nb
from mlbook.outputs.preprocessors import WARNING_STDERR_PATTERN


PASS, FAIL, AT_GRADING = "pass", "FAIL", "run at grading"


@dataclass
class TestRow:
    grade_id: str
    points: float
    passed: bool
    message: str
    status: str = ""  # PASS, FAIL or AT_GRADING

    def __post_init__(self) -> None:
        self.status = self.status or (PASS if self.passed else FAIL)


def runs_nothing(source: str) -> bool:
    """Whether a test cell's code has no statement at all (comments and blank lines only)."""
    try:
        return not pyast.parse(source).body
    except SyntaxError:
        return False  # an edited cell that does not parse: run, and failed, like any other


def validate_notebook(path: Path, timeout: int = 300) -> tuple[list[TestRow], float, list[str]]:
    """Execute ``path`` and score its test cells.

    Returns:
        rows (one per test cell), the execution time in seconds, and warnings (edited test cells).
    """
    from nbgrader.preprocessors import IgnorePattern
    from nbgrader.utils import compute_checksum, determine_grade

    nb = read_nb(path)
    warnings = [f"test cell {grade_id(c)!r} was edited; the grader restores the original"
                for c in nb.cells if is_test(c) and "checksum" in c.metadata.get("nbgrader", {})
                and compute_checksum(c) != c.metadata["nbgrader"]["checksum"]]
    run = execute(nb, workdir=path.parent, timeout=timeout)
    messages = {gid: msg for _, gid, msg in run.errors}
    drop_warnings = IgnorePattern(pattern=WARNING_STDERR_PATTERN, enabled=True)  # as the autograder does
    rows = []
    for cell in run.notebook.cells:
        if not is_test(cell):
            continue
        drop_warnings.preprocess_cell(cell, {}, 0)
        score, max_score = determine_grade(cell)
        if runs_nothing(cell.source):
            rows.append(TestRow(grade_id(cell), max_score, False, "", AT_GRADING))
            continue
        rows.append(TestRow(grade_id(cell), max_score, score is not None and score >= max_score,
                            messages.get(grade_id(cell), "")))
    return rows, run.seconds, warnings
