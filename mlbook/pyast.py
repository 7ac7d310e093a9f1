"""Python syntax trees built safely from several threads.

CPython 3.11 keeps the counter that its AST converter uses to bound recursion in process-wide
state (python/cpython#106905): two threads turning source into ``ast`` objects, or ``ast`` objects
into code, at the same moment raise ``SystemError: AST constructor recursion depth mismatch``.
The grader builds trees in several threads at once (a batch's main thread reads answer cells for
the lab's rules while sandbox threads build the judge's plan), so every ``ast.parse``,
``compile`` of a tree and ``symtable`` in mlbook goes through this module's one lock.
"""

from __future__ import annotations

import ast
import symtable as _symtable
import threading
from types import CodeType

LOCK = threading.RLock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)`` under the lock."""
    with LOCK:
        return ast.parse(source)


def compile_tree(tree: ast.AST | str, filename: str) -> CodeType:
    """``compile(tree, filename, "exec")`` under the lock (a tree or source text)."""
    with LOCK:
        return compile(tree, filename, "exec")


def symtable(source: str, filename: str) -> _symtable.SymbolTable:
    """The module symbol table of ``source`` under the lock."""
    with LOCK:
        return _symtable.symtable(source, filename, "exec")
