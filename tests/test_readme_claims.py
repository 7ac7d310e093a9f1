"""The README's claims that follow from the notebooks stay true: the seed table's "graded" column
names exactly each lab's answer cells and written answers, and their points."""

import re

from harness import LABS, REPO
from mlbook.authoring.notebooks import grade_id, is_answer, nbgrader_meta, read_authored


def _graded_column() -> dict[str, str]:
    text = (REPO.root / "README.md").read_text()
    table = text[text.index("| lab | from the lesson (000) and the chapter (003) |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[-1]
    return rows


def test_the_seed_tables_graded_column_is_each_labs_answer_cells_and_points():
    column = _graded_column()
    for lab in LABS:
        nb = read_authored(REPO.authored(lab))
        answers = {grade_id(c) for c in nb.cells if is_answer(c) and c.cell_type == "code"}
        written = {grade_id(c) for c in nb.cells
                   if is_answer(c) and c.cell_type == "markdown" and nbgrader_meta(c).get("grade")}
        points = sum(float(nbgrader_meta(c).get("points", 0)) for c in nb.cells if nbgrader_meta(c).get("grade"))
        said = column[str(int(lab[3:5]))]
        code_part, _, written_part = said.rpartition(" (")[0].partition("; written: ")
        assert set(re.findall(r"`([^`]+)`", code_part)) == answers, (lab, said)
        assert set(re.findall(r"`([^`]+)`", written_part)) == written, (lab, said)
        assert said.endswith(f"({points:g})"), (lab, said, points)
