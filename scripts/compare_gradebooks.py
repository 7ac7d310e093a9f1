"""Compare two nbgrader gradebooks cell by cell: did the same class get the same grades?

Usage: python scripts/compare_gradebooks.py BEFORE.db AFTER.db

For every graded cell of every submission (student, assignment, grade id) it compares the automatic
score, the manual score, the cell's maximum and the notebook's late penalty. Prints the cells only one
gradebook has and every cell that differs; exits 1 when any shared cell differs.
Typical use: `make demo` in a clone of the old commit and of the new one, then compare their gradebook.db.
"""

from __future__ import annotations

import sqlite3
import sys

# One row per graded cell of a submitted notebook, keyed by who, which lab and which cell.
QUERY = """
SELECT sa.student_id, a.name, bc.name, g.auto_score, g.manual_score, gc.max_score, sn.late_submission_penalty
FROM grade g
JOIN grade_cells gc ON gc.id = g.cell_id
JOIN base_cell bc ON bc.id = gc.id
JOIN submitted_notebook sn ON sn.id = g.notebook_id
JOIN submitted_assignment sa ON sa.id = sn.assignment_id
JOIN assignment a ON a.id = sa.assignment_id
"""
FIELDS = ("auto_score", "manual_score", "max_score", "late_penalty")


def load(path: str) -> dict[tuple[str, str, str], tuple]:
    """(student, assignment, grade id) -> (auto, manual, max, late penalty), read-only."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {(s, a, c): rest for s, a, c, *rest in db.execute(QUERY)}


def main(before_path: str, after_path: str) -> int:
    before, after = load(before_path), load(after_path)
    print(f"graded cells: {len(before)} before, {len(after)} after")
    for label, keys in (("only before", before.keys() - after.keys()), ("only after", after.keys() - before.keys())):
        print(f"{label}: {len(keys)}")
        for key in sorted(keys):
            print("   ", " / ".join(key))
    differ = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    print(f"shared cells that differ: {len(differ)}")
    for key in differ:
        changes = ", ".join(f"{f} {b} -> {a}" for f, b, a in zip(FIELDS, before[key], after[key]) if b != a)
        print("   ", " / ".join(key), ":", changes)
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
