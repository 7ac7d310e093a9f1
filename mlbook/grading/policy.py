"""What a lab forbids students to call, flagged for a TA; never scored automatically.

A lab that teaches an algorithm (heads split and merged by hand, the online softmax) forbids the
library function that does it whole. Each lab states its rule in the task text and declares it
in ``mlbook/labs/<lab>/__init__.py``::

    FORBIDDEN_CALLS = {"chunked_attention": ("scaled_dot_product_attention", ...)}

(answer cell grade id -> names its code must not use). The grader reads the submitted answer
cells (data, never run here) and names each forbidden name it finds, as a warning on the
submission: ``mlbook autograde`` prints it and the class report lists it under "Flagged for a
TA". Why a flag and not a verdict: the student's kernel is theirs, so hiding a library function
from it cannot be enforced there (a reference taken earlier survives), and code written to hide a
name (``getattr(F, "scaled_dot_" + "product_attention")``) is found only by reading it. A
student who calls the library function still earns what the hidden checks give; the TA decides.
"""

from __future__ import annotations

import ast

from nbformat import NotebookNode

from mlbook.labs import settings
from mlbook.authoring.notebooks import grade_id, is_answer


def forbidden_calls(lab: str) -> dict[str, tuple[str, ...]]:
    """The lab's rule: answer cell grade id -> names its code must not use."""
    return settings(lab).forbidden_calls


def shortcuts(lab: str, nb: NotebookNode) -> str:
    """A warning naming each forbidden name an answer cell uses ("" when none does)."""
    rule = forbidden_calls(lab)
    found = []
    for cell in nb.cells:
        gid = grade_id(cell) if cell.cell_type == "code" and is_answer(cell) else None
        if gid not in rule:
            continue
        used = sorted(set(rule[gid]) & _names(cell.source))
        if used:
            found.append(f"{gid} uses {', '.join(used)}")
    if not found:
        return ""
    return "the task forbids library shortcuts, check by hand: " + "; ".join(found)


def _names(source: str) -> set[str]:
    """Every identifier, attribute and string constant in ``source`` (all of it when it does not parse)."""
    try:
        tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()))
    except SyntaxError:
        return set(source.replace(".", " ").replace("(", " ").split())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names
