"""Python syntax trees built safely from several threads.

CPython 3.11 keeps the counter that its AST converter uses to bound recursion in process-wide
state (python/cpython#106905): two threads turning source into ``ast`` objects, or ``ast`` objects
into code, at the same moment raise ``SystemError: AST constructor recursion depth mismatch``.
The grader builds trees in several threads at once (a batch's main thread reads answer cells for
the lab's rules while sandbox threads build the judge's plan), and so do libraries it calls from
those threads: numpy's ``np.load`` reads every array header with ``ast.literal_eval`` (the judge
decodes each kernel reply that way), matplotlib parses its cycler settings, ``inspect`` parses
builtin signatures. Locking mlbook's own calls is therefore not enough (stop 49 did only that
and a batch still failed inside ``np.load``). So:

- every ``ast.parse``, ``compile`` of a tree and ``symtable`` in mlbook goes through this
  module's one lock, and
- ``install()`` (called once when ``mlbook`` is imported) makes the interpreter's ``ast.parse``
  itself take the same lock, which covers ``ast.literal_eval`` and every library that parses
  through ``ast``. On CPython 3.12 and later the counter is per thread and ``install()`` does
  nothing.

What the lock cannot cover: a library calling ``compile(..., ast.PyCF_ONLY_AST)`` directly in a
grading thread. None of the grader's dependencies does so on those paths (measured with an audit
hook on a four-worker batch, ``tests/test_pyast.py`` keeps the libraries' paths honest).
"""

from __future__ import annotations

import ast
import symtable as _symtable
import sys
import threading
from types import CodeType

LOCK = threading.RLock()
UNLOCKED_PARSE = getattr(ast.parse, "unlocked", ast.parse)  # the interpreter's own, never locked


def parse(source, filename="<unknown>", mode="exec", **kwargs):
    """``ast.parse`` under the lock (same arguments)."""
    with LOCK:
        return UNLOCKED_PARSE(source, filename, mode, **kwargs)


parse.unlocked = UNLOCKED_PARSE  # type: ignore[attr-defined]


def install() -> None:
    """Make ``ast.parse`` (and so ``ast.literal_eval``) take the lock in this whole process."""
    if sys.version_info < (3, 12):
        ast.parse = parse


def compile_tree(tree: ast.AST | str, filename: str) -> CodeType:
    """``compile(tree, filename, "exec")`` under the lock (a tree or source text)."""
    with LOCK:
        return compile(tree, filename, "exec")


def symtable(source: str, filename: str) -> _symtable.SymbolTable:
    """The module symbol table of ``source`` under the lock."""
    with LOCK:
        return _symtable.symtable(source, filename, "exec")
