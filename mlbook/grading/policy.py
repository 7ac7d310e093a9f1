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

What is read: the answer cell and, transitively, every top-level definition in the notebook's
other code cells (test cells excepted) that it refers to by a global name: a helper function or
class defined in another cell, an alias (``f = F.scaled_dot_product_attention``), an import
(``import torch.nn.functional as G``), and whatever those refer to in turn. String constants
joined with ``+`` or in an f-string are read joined, so ``"scaled_" + "dot_product_attention"``
is found. Names are resolved with ``symtable``, so a local variable of the answer that happens to
share a name with a global of another cell does not pull that cell in.
"""

from __future__ import annotations

import ast

from nbformat import NotebookNode

from mlbook import pyast
from mlbook.labs import settings
from mlbook.authoring.notebooks import grade_id, is_answer, is_test

def forbidden_calls(lab: str) -> dict[str, tuple[str, ...]]:
    """The lab's rule: answer cell grade id -> names its code must not use."""
    return settings(lab).forbidden_calls


def shortcuts(lab: str, nb: NotebookNode) -> str:
    """A warning naming each forbidden name an answer cell uses ("" when none does)."""
    rule = forbidden_calls(lab)
    if not rule:
        return ""
    definitions = _definitions(nb)
    found = []
    for cell in nb.cells:
        gid = grade_id(cell) if cell.cell_type == "code" and is_answer(cell) else None
        if gid not in rule:
            continue
        used = sorted(set(rule[gid]) & _reachable_names(cell.source, definitions))
        if used:
            found.append(f"{gid} uses {', '.join(used)}")
    if not found:
        return ""
    return "the task forbids library shortcuts, check by hand: " + "; ".join(found)


def _code(source: str) -> str:
    """``source`` with IPython magics and shell lines blanked, so it parses as Python."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _bound(stmt: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    bound: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not stmt:
            break
    return bound


def _definitions(nb: NotebookNode) -> dict[str, list[str]]:
    """Global name -> source of each top-level statement, in any non-test code cell, that binds it."""
    definitions: dict[str, list[str]] = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or is_test(cell):
            continue
        try:
            tree = pyast.parse(_code(cell.source))
        except SyntaxError:
            continue
        for stmt in tree.body:
            for name in _bound(stmt):
                definitions.setdefault(name, []).append(ast.unparse(stmt))
    return definitions


def _reachable_names(source: str, definitions: dict[str, list[str]]) -> set[str]:
    """The names of ``source`` and of every definition it reaches through global names."""
    names = _names(source)
    seen: set[str] = set()
    todo = list(_globals(source))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for definition in definitions.get(name, ()):
            names |= _names(definition)
            todo.extend(_globals(definition) - seen)
    return names


def _globals(source: str) -> set[str]:
    """The global names ``source`` refers to, in any of its scopes (every word when it does not parse)."""
    try:
        top = pyast.symtable(_code(source), "<cell>")
    except SyntaxError:
        return set(source.replace(".", " ").replace("(", " ").split())
    found: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        for symbol in table.get_symbols():
            if not symbol.is_referenced():
                continue
            if table is top or symbol.is_global() or (table.get_type() == "class" and not symbol.is_assigned()):
                found.add(symbol.get_name())
        tables.extend(table.get_children())
    return found


def _names(source: str) -> set[str]:
    """Every identifier, attribute and string constant in ``source`` (all of it when it does not parse).

    Strings joined with ``+`` or in an f-string count joined as well as in parts."""
    try:
        tree = pyast.parse(_code(source))
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
            if node.asname:
                names.add(node.asname)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
        elif isinstance(node, (ast.BinOp, ast.JoinedStr)):
            joined = _joined(node)
            if joined is not None:
                names.add(joined)
    return names


def _joined(node: ast.expr) -> str | None:
    """The string a ``+`` of string constants (or an f-string of constants) makes, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _joined(node.left), _joined(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_joined(v) for v in node.values]
        return None if None in parts else "".join(parts)
    return None
