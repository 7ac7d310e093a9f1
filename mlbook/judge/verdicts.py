"""Turn the judge's verdicts into the test cells' outputs that nbgrader scores.

nbgrader gives a test cell its points when the executed cell has no error and no stderr
output, and reads a number in an ``execute_result`` as partial credit. The kernel's outputs
are the student's, so they are not trusted to pass anything:
- a cell passes only when the judge passed it and every cell it is covered by
  (``plan.CellPlan.covered_by``), and the kernel ran it without an error;
- a failing cell without an error output gets one carrying the judge's message;
- ``execute_result`` outputs of test cells are dropped (no partial credit from the kernel).
"""

from __future__ import annotations

from nbformat import NotebookNode
from nbformat.v4 import new_output

from mlbook.authoring.notebooks import grade_id, is_test
from mlbook.judge.server import Verdict
from mlbook.judge.plan import LabPlan

NOT_RUN = Verdict(False, "this test did not run to the end (an earlier error, an interrupt, or a changed cell)")


def cell_verdicts(plan: LabPlan, verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    """Each test cell's final verdict: its own and those of the cells it is covered by."""
    final = {}
    for gid, cell in plan.cells.items():
        own = verdicts.get(gid, NOT_RUN)
        if not own.passed:
            final[gid] = own
            continue
        failed = [(c, verdicts.get(c, NOT_RUN)) for c in cell.covered_by if not verdicts.get(c, NOT_RUN).passed]
        final[gid] = own if not failed else Verdict(False, f"counts only when {failed[0][0]} passes: {failed[0][1].message}")
    return final


def apply(nb: NotebookNode, executed: NotebookNode, plan: LabPlan, verdicts: dict[str, Verdict]) -> NotebookNode:
    """Copy the executed outputs into ``nb`` (same cells) and make test cells say the verdict."""
    final = cell_verdicts(plan, verdicts)
    for cell, ran in zip(nb.cells, executed.cells):
        if cell.cell_type != "code":
            continue
        cell.outputs = [o for o in ran.get("outputs", []) if isinstance(o, dict) and "output_type" in o]
        cell.execution_count = ran.get("execution_count")
        gid = grade_id(cell) if is_test(cell) else None
        if gid not in final:
            continue
        cell.outputs = [o for o in cell.outputs if o["output_type"] != "execute_result"]
        verdict = final[gid]
        if not verdict.passed and not any(o["output_type"] == "error" for o in cell.outputs):
            cell.outputs.append(new_output("error", ename="Misconception", evalue=verdict.message,
                                           traceback=[f"Misconception: {verdict.message}"]))
    return nb
