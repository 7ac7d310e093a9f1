"""The judge's admission rules and bounds, on its own socket (no kernel needed), and the
grader's own failures kept apart from the student's.

The judge admits one connection per test cell, only while the runner reports that cell running
on its private channel; everything else is closed unread. These tests play the runner and the
kernel with plain sockets.
"""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from harness import REPO
from mlbook.judge.server import HELLO_BYTES, Judge
from mlbook.judge.plan import lab_plan
from mlbook_kernel import wire

LAB = "lab02_scaling"


@pytest.fixture
def judge(tmp_path):
    plan = lab_plan(LAB, REPO.source(LAB))
    gids = list(plan.cells)
    control, runner = socket.socketpair()
    path = tmp_path / "judge.sock"
    j = Judge(plan, path, call_timeout=5, control=control, test_cells={10: gids[0], 11: gids[1]})
    with j:
        yield j, runner, path, gids
    runner.close()


def _say(runner, report):
    runner.sendall(json.dumps(report).encode() + b"\n")


def _connect(path, hello=None):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(str(path))
    if hello is not None:
        try:
            wire.send(s, hello)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before the hello was sent: refused all the same
    return s


def _closed_unread(s) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_connection_while_no_test_cell_runs_is_closed_unread(judge):
    j, runner, path, gids = judge
    _say(runner, {"start": 3})  # an answer cell
    s = _connect(path, {"op": "hello", "lab": LAB, "cell": gids[0]})
    assert _closed_unread(s)
    assert j.refused == 1 and gids[0] not in j.verdicts


def test_the_first_connection_during_a_test_cell_is_its_only_session(judge):
    j, runner, path, gids = judge
    _say(runner, {"start": 10})
    first = _connect(path, {"op": "hello", "lab": LAB, "cell": gids[0]})
    first.settimeout(120)  # the cell's check may compute its reference before it asks anything
    request, _ = wire.recv(first)  # admitted: the check asks the kernel for something
    assert request["op"] in ("global", "import", "call", "done")
    second = _connect(path, {"op": "hello", "lab": LAB, "cell": gids[0]})
    first.close()  # the admitted session ends (the kernel went away): the cell fails
    assert _closed_unread(second)
    deadline = time.time() + 5
    while j.verdicts.get(gids[0]) is None and time.time() < deadline:
        time.sleep(0.05)
    assert not j.verdicts[gids[0]].passed


def test_a_connection_naming_another_cell_than_the_running_one_decides_nothing(judge):
    j, runner, path, gids = judge
    _say(runner, {"start": 10})
    s = _connect(path, {"op": "hello", "lab": LAB, "cell": gids[1]})
    reply, _ = wire.recv(s)
    assert reply["op"] == "done" and not reply["passed"] and gids[0] in reply["message"]
    assert not j.verdicts[gids[0]].passed and gids[1] not in j.verdicts
    _say(runner, {"end": 10})
    _say(runner, {"start": 11})
    time.sleep(0.3)
    late = _connect(path, {"op": "hello", "lab": LAB, "cell": gids[0]})  # cell 10 is over
    reply, _ = wire.recv(late)
    assert not reply["passed"]


def test_an_oversized_hello_is_refused_from_its_length_alone(judge):
    j, runner, path, gids = judge
    _say(runner, {"start": 10})
    s = _connect(path)
    s.sendall(struct.pack(">Q", 200 * 2**20))  # announces 200 MiB, sends none of it
    assert _closed_unread(s)
    assert not j.verdicts[gids[0]].passed
    assert HELLO_BYTES <= 2**16


def test_once_the_runner_is_gone_nothing_is_admitted(judge):
    j, runner, path, gids = judge
    _say(runner, {"start": 10})
    runner.close()
    time.sleep(0.3)
    s = _connect(path, {"op": "hello", "lab": LAB, "cell": gids[0]})
    assert _closed_unread(s)


def test_every_test_cell_is_compiled_when_the_plan_is_built():
    # Judges run as threads of one process; CPython 3.11's compile() is not thread-safe there.
    plan = lab_plan(LAB, REPO.source(LAB))
    assert plan.prelude_code is not None
    assert all(type(cell.code).__name__ == "code" for cell in plan.cells.values())


def _task(lab: str):
    import nbformat

    from mlbook.grading.executors import Task
    from mlbook.authoring.notebooks import fill_answers, read_nb, reference_answers
    from mlbook.sandbox.limits import Limits

    nb = fill_answers(read_nb(REPO.release(lab)), reference_answers(read_nb(REPO.source(lab))))
    return Task(lab, "someone", "key", nbformat.writes(nb), REPO.source(lab).read_text(), Limits())


@pytest.mark.slow
@pytest.mark.parametrize("failures", [1, 2])
def test_a_check_that_fails_for_the_graders_own_reason_is_retried_then_an_error_never_lost_points(
        monkeypatch, failures):
    from mlbook.grading import executors
    from mlbook.judge import server as judge_module

    real = judge_module.judge_cell
    calls = {"n": 0}

    def flaky(plan, gid, remote):  # the grader's own failure on the first check of each run
        if gid == next(iter(plan.cells)) and calls["n"] < failures:
            calls["n"] += 1
            return judge_module.Verdict(False, "[grader error] SystemError: AST constructor recursion depth mismatch",
                                        internal=True)
        return real(plan, gid, remote)

    monkeypatch.setattr(judge_module, "judge_cell", flaky)
    result = executors.grade_task(_task(LAB))
    assert calls["n"] == failures, (result.error, result.log[-2000:], result.verdicts)
    if failures < executors.ATTEMPTS:
        assert result.error is None and all(v.passed for v in result.verdicts.values())
    else:
        assert result.error and "grader failed" in result.error and "not the student's fault" in result.error
