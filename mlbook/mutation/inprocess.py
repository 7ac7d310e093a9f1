"""A lab's cells run in this process, each test cell decided as grading decides it.

The kernel's part (a notebook's code cells, in order, in one plain dict namespace) runs here; the
judge (``mlbook.judge.server.judge_cell``) runs a test cell's trusted source from the course's
source notebook, reaching the namespace only through the wire (``mlbook_kernel.wire``) over a
socket pair, the kernel's side answering from a thread. So a result the wire changes, an argument
the student's code modifies in place, an object the check can only call: each behaves here as it
does in grading. Used by ``tests/draws.py`` (many seeded draws of every catalogue entry) and by
``mlbook.mutation.engine`` (every first-order mutant of a reference answer).
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
import warnings
from collections.abc import Iterator

from mlbook_kernel import KernelSession, wire

from mlbook.judge.plan import LabPlan
from mlbook.judge.remote import RemoteSession
from mlbook.judge.server import judge_cell


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """``MLBOOK_SEED`` set to ``seed`` (the hidden checks' draws) for the block, then restored."""
    old = os.environ.get("MLBOOK_SEED")
    os.environ["MLBOOK_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLBOOK_SEED", None)
        else:
            os.environ["MLBOOK_SEED"] = old


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """What a cell prints and warns goes nowhere (nbgrader's IgnorePattern drops warnings in grading)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def run_cell(source: str, namespace: dict) -> str | None:
    """Execute one cell; its error as the grader words it (``Type: message``), None when it did not raise."""
    try:
        with quiet():
            exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - the course's own cells
    except BaseException as exc:  # noqa: BLE001 - a test cell's failure is data here
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


def judged(plan: LabPlan, gid: str, namespace: dict) -> str | None:
    """The judge's verdict on test cell ``gid`` (its message, None when it passed), reached as in
    grading: the check runs here and calls into ``namespace`` over the wire, whose kernel side a
    thread answers. The measured process (lab 6's memory) is this one, as for a check run in-process."""
    grader_end, kernel_end = socket.socketpair()
    kernel = KernelSession(kernel_end, namespace)
    thread = threading.Thread(target=kernel.serve, args=({"op": "hello", "lab": plan.lab, "cell": gid},),
                              name=f"kernel-{gid}", daemon=True)
    thread.start()
    try:
        wire.recv(grader_end)  # the hello
        with quiet():
            verdict = judge_cell(plan, gid, RemoteSession(grader_end, memory_root=os.getpid()))
        wire.send(grader_end, {"op": "done", "passed": verdict.passed, "message": verdict.message})
    finally:
        grader_end.close()  # a kernel side still waiting sees the judge gone
        thread.join()
    return None if verdict.passed else f"Misconception: {verdict.message}"  # as probe_cell raises it in the kernel


# Test cells whose check cannot be decided here over the wire, run directly instead (their source
# in the namespace, the student's function in this thread). Both measure memory, and in one process
# a meter counts both sides of the wire: memory_sweep's check compares the kernel's own meter
# (tracemalloc, process-wide) on probes it lends the kernel, which run on the judge's side; the
# peak resident memory of chunked_attention and attention_backward_from_lse would count the wire's
# copies of every argument and result on both sides, and the kernel thread's own malloc arena (in
# grading the kernel is another process, and only its side counts).
DIRECT = {"lab06_chunked_attention": {"test_memory_sweep_hidden", "test_chunked_attention_memory",
                                      "test_attention_backward_from_lse_hidden"}}


def decide_test_cell(plan: LabPlan, gid: str, namespace: dict) -> str | None:
    """A test cell decided as grading decides it: the kernel runs its visible part, then the judge
    its trusted source; the first failure's message, None when both passed."""
    if gid in DIRECT.get(plan.lab, ()):
        return run_cell(plan.cells[gid].source, namespace)
    return run_cell(plan.cells[gid].visible, namespace) or judged(plan, gid, namespace)
