"""mlbook.pyast: syntax trees built from several threads at once never trip CPython 3.11's shared
AST recursion counter (python/cpython#106905), which once failed a four-worker grading batch."""

import ast
import gc
import sys
import threading
import time

import pytest

from mlbook import pyast

SOURCE = "\n".join(f"def f{i}(x):\n    return [[(a, b) for a in range(x) if a] for b in {{1: (2, [3, {{4}}])}}]"
                   for i in range(300))


class _Finalized:
    """Cyclic garbage whose finalizer lets another thread run while a tree is being built."""

    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)


def _errors_when_threads_build(build) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(30):
            _ = [_Finalized() for _ in range(200)]
            try:
                build()
            except SystemError as e:
                errors.append(e)
                return

    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.set_threshold(*threshold)
    return errors


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the shared counter is per-thread from CPython 3.12")
def test_the_workload_reproduces_the_cpython_race_without_the_lock():
    assert _errors_when_threads_build(lambda: ast.parse(SOURCE)), "the workload no longer shows the race"


def test_parse_compile_and_symtable_from_many_threads_never_raise():
    def build() -> None:
        tree = pyast.parse(SOURCE)
        pyast.compile_tree(tree, "<tree>")
        pyast.symtable(SOURCE, "<cell>")

    assert _errors_when_threads_build(build) == []
