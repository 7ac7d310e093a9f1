"""First-order mutants of a reference answer's solution region, made with mutmut's operators.

Why mutmut (3.8.1) and not cosmic-ray: mutmut's operators are plain functions from a libcst node
to its mutated nodes (``mutmut.mutation.mutators.mutation_operators``), and its ``MutationVisitor``
walks a module with them, honouring lines it is told to leave alone. So a reference answer's
solution region can be mutated in memory, in the notebook's own cell, without mutmut's project
layout (a ``mutants/`` copy of a package, trampolines, a pytest run per mutant); the mutants are
graded by the lab's own checks instead. cosmic-ray's operators are classes bound to its session
database and its module-on-disk workflow. mutmut is maintained (3.8.1, 2026).

mutmut covers arithmetic and comparison operator swaps, constants changed (a number + 1, a string
altered), ``True``/``False`` swapped, an argument dropped or replaced by ``None``, an assignment
given ``None``, ``and``/``or`` swapped, ``not`` removed, a ternary forced down each arm. The issue
also asks for four mutations it lacks; they are added here, each labelled (``ADDED``):

- ``dim_changed``: a ``dim=``/``axis=`` keyword set to another axis (mutmut only adds 1 to a
  literal, and leaves ``dim=d`` alone): attention code is wrong most often by its axis.
- ``slice_bound_shifted``: a slice bound shifted by one either way (mutmut adds 1 to a literal
  bound only, never to ``x[:t]``): off-by-one windows and caches.
- ``statement_removed``: a simple statement replaced by ``pass`` (mutmut never drops a statement):
  a forgotten in-place update, scaling or mask.
- ``call_arguments_swapped``: two adjacent positional arguments of a call swapped (mutmut drops
  arguments but never reorders them): ``matmul(k, q)``, ``transpose`` and ``masked_fill`` orders.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from mutmut.mutation import mutators
from mutmut.mutation.file_mutation import MutationVisitor
from mutmut.mutation.pragma_handling import IgnoredCode

from mlbook.authoring.notebooks import BEGIN_SOLUTION, END_SOLUTION

_AXIS_KEYWORDS = {"dim", "axis", "dims", "axes"}
_AXES = (-1, -2, 0, 1)


def _literal_int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.evaluated_value)
    return None


def _int_node(value: int) -> cst.BaseExpression:
    return cst.Integer(str(value)) if value >= 0 else cst.UnaryOperation(cst.Minus(), cst.Integer(str(-value)))


def operator_dim_changed(node: cst.Arg) -> Iterable[cst.Arg]:
    """ADDED: ``dim=``/``axis=`` set to each other common axis (-1, -2, 0, 1) than the one it names."""
    if node.keyword is None or node.keyword.value not in _AXIS_KEYWORDS:
        return
    current = _literal_int(node.value)
    if current is None and not isinstance(node.value, (cst.Name, cst.Attribute, cst.BinaryOperation, cst.UnaryOperation)):
        return  # a tuple of axes and the like: mutmut's number operator reaches its literals
    for axis in _AXES:
        if axis != current:
            yield node.with_changes(value=_int_node(axis))


def operator_slice_bound_shifted(node: cst.Slice) -> Iterable[cst.Slice]:
    """ADDED: a slice's lower or upper bound shifted by one either way (mutmut's +1 of a literal aside)."""
    for field in ("lower", "upper"):
        bound = getattr(node, field)
        if bound is None:
            continue
        literal = _literal_int(bound)
        for op in (cst.Add(), cst.Subtract()):
            if literal is not None:
                shifted = literal + (1 if isinstance(op, cst.Add) else -1)
                if isinstance(op, cst.Add) and isinstance(bound, cst.Integer):
                    continue  # mutmut's number operator makes this one
                yield node.with_changes(**{field: _int_node(shifted)})
            else:
                paren = bound.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
                    if isinstance(bound, (cst.BinaryOperation, cst.UnaryOperation, cst.IfExp)) else bound
                yield node.with_changes(**{field: cst.BinaryOperation(paren, op, cst.Integer("1"))})


def operator_statement_removed(node: cst.SimpleStatementLine) -> Iterable[cst.SimpleStatementLine]:
    """ADDED: a simple statement (an assignment, a call, a return) replaced by ``pass``."""
    body = node.body
    if len(body) == 1 and isinstance(body[0], cst.Pass):
        return
    if len(body) == 1 and isinstance(body[0], cst.Expr) and isinstance(body[0].value, cst.BaseString):
        return  # a docstring
    if any(isinstance(s, (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)) for s in body):
        return
    yield node.with_changes(body=[cst.Pass()])


def operator_call_arguments_swapped(node: cst.Call) -> Iterable[cst.Call]:
    """ADDED: two adjacent positional arguments of a call swapped."""
    args = list(node.args)
    for i in range(len(args) - 1):
        a, b = args[i], args[i + 1]
        if a.keyword or b.keyword or a.star or b.star:
            continue
        if a.value.deep_equals(b.value):
            continue
        swapped = [*args[:i], a.with_changes(value=b.value), b.with_changes(value=a.value), *args[i + 2:]]
        yield node.with_changes(args=swapped)


ADDED_OPERATORS = [
    (cst.Arg, operator_dim_changed),
    (cst.Slice, operator_slice_bound_shifted),
    (cst.SimpleStatementLine, operator_statement_removed),
    (cst.Call, operator_call_arguments_swapped),
]
OPERATORS = [*mutators.mutation_operators, *ADDED_OPERATORS]


def operator_name(function) -> str:
    """``swap_op``, ``number``, ... for mutmut's operators; the added ones keep their ``operator_`` names' tail."""
    return function.__name__.removeprefix("operator_")


@dataclass(frozen=True)
class Mutant:
    cell: str  # the answer cell's grade_id
    function: str  # the top-level def or class it is in (the cell's grade_id for a cell of values)
    index: int  # its number among the cell's mutants
    operator: str  # the operator that made it (see OPERATORS)
    line: int  # its line in the cell
    source: str  # the whole answer cell, mutated

    def diff(self, reference: str) -> str:
        """The changed lines as a unified diff against the reference cell."""
        lines = difflib.unified_diff(reference.splitlines(), self.source.splitlines(), "reference", "mutant",
                                     n=0, lineterm="")
        return "\n".join(line for line in lines if not line.startswith(("---", "+++", "@@")))

    @property
    def name(self) -> str:
        return f"{self.cell}#{self.index}:{self.operator}@{self.line}"


def solution_lines(source: str) -> set[int]:
    """The 1-based lines of ``source`` inside its ``### BEGIN SOLUTION`` .. ``### END SOLUTION`` blocks."""
    inside, lines = False, set()
    for number, line in enumerate(source.splitlines(), start=1):
        if BEGIN_SOLUTION in line:
            inside = True
        elif END_SOLUTION in line:
            inside = False
        elif inside:
            lines.add(number)
    return lines


class _Visitor(MutationVisitor):
    """mutmut's visitor, remembering which operator made each mutation and the line it is on."""

    def __init__(self, operators, ignored: IgnoredCode):
        super().__init__(operators, ignored)
        self.made: list[tuple[str, int, cst.CSTNode, cst.CSTNode, cst.CSTNode | None]] = []

    def _create_mutations(self, node: cst.CSTNode) -> None:
        position = self.get_metadata(PositionProvider, node, None)
        for kind, operator in self._operators:
            if isinstance(node, kind):
                for mutated in operator(node):
                    if self._removes_ignored_code(node, mutated):
                        continue
                    top = self.get_metadata(mutators_outer(), node, None)
                    self.made.append((operator_name(operator), position.start.line if position else 0, node, mutated, top))


def mutators_outer():
    from mutmut.mutation.file_mutation import OuterFunctionProvider

    return OuterFunctionProvider


def cell_mutants(cell: str, source: str, operators=None) -> list[Mutant]:
    """Every first-order mutant of the solution regions of one answer cell, each distinct and compiling.

    Args:
        cell: the answer cell's grade_id (names the mutants).
        source: the reference answer cell, with its ``### BEGIN/END SOLUTION`` lines.
        operators: (node type, operator) pairs; mutmut's plus the additions by default.
    Returns:
        the mutants in source order; a mutant whose text equals the reference's, or another
        mutant's, or that does not compile, is dropped.
    """
    inside = solution_lines(source)
    outside = set(range(1, source.count("\n") + 2)) - inside
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module)
    visitor = _Visitor(operators or OPERATORS, IgnoredCode(no_mutate_lines=outside, ignore_node_lines=set(),
                                                           ignore_pattern_lines=set()))
    wrapper.visit(visitor)
    seen, out = {source}, []
    for kind, line, node, mutated, top in visitor.made:
        if line not in inside:
            continue
        text = wrapper.module.deep_replace(node, mutated).code
        if text in seen:
            continue
        try:
            compile(text, "<mutant>", "exec")
        except SyntaxError:
            continue
        seen.add(text)
        function = top.name.value if isinstance(top, (cst.FunctionDef, cst.ClassDef)) else cell
        out.append(Mutant(cell, function, len(out), kind, line, text))
    return out
