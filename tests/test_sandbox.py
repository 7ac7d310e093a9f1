"""The sandbox's own promises, without nbgrader: data-only wire, clear failure when bubblewrap
is missing, and the opt-out still judged outside the kernel."""

from __future__ import annotations

import io
import os
import socket
import struct
import subprocess
import sys

import numpy as np
import pytest

from harness import REPO
from mlbook_probe import wire


def _roundtrip(value):
    blobs: list[bytes] = []
    tree = wire.encode(value, blobs, lambda obj: 7)
    return wire.decode(tree, blobs, lambda hid: ("handle", hid))


def test_data_crosses_the_wire_and_objects_become_handles():
    import torch

    value = {"a": np.arange(6.0).reshape(2, 3), "t": torch.ones(2, dtype=torch.float16), "n": (1, 2.5, None, "x"),
             "f": float("nan"), "obj": object()}
    back = _roundtrip(value)
    assert np.array_equal(back["a"], value["a"]) and back["t"].dtype == torch.float16
    assert back["n"] == (1, 2.5, None, "x") and np.isnan(back["f"]) and back["obj"] == ("handle", 7)


def test_the_grader_refuses_pickled_arrays_and_malformed_frames():
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises((wire.WireError, ValueError)):
        wire.decode({"$a": 0}, [buf.getvalue()], lambda h: None)
    a, b = socket.socketpair()
    a.sendall(struct.pack(">Q", wire.MAX_FRAME_BYTES + 1))
    with pytest.raises(wire.WireError):
        wire.recv(b)
    a.sendall(struct.pack(">Q", 3) + b"{}x")
    with pytest.raises(wire.WireError):
        wire.recv(b)


def test_the_grader_never_sends_an_object_it_cannot_express_as_data():
    with pytest.raises(wire.UnsendableError):
        wire.encode(object(), [], None)


def test_without_bubblewrap_autograde_refuses_with_a_clear_message(tmp_path):
    from harness import scratch_course
    from mlbook import submissions

    course = scratch_course("lab02_scaling", tmp_path / "course")
    submissions.submit(course, "someone", "lab02_scaling", submissions.untouched(course, "lab02_scaling"))
    (tmp_path / "bin").mkdir()
    env = {**os.environ, "PATH": str(tmp_path / "bin")}  # no bwrap on this PATH
    done = subprocess.run([sys.executable, "-m", "mlbook.cli", "--course", str(course.root), "autograde", "lab02",
                           "--quiet"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bubblewrap" in done.stderr and "--unsandboxed" in done.stderr and "Traceback" not in done.stderr


def test_the_unsandboxed_opt_out_still_judges_outside_the_kernel():
    from mlbook.notebooks import fill_answers, read_nb, reference_answers
    from mlbook.sandbox.limits import Limits
    from mlbook.sandbox.plan import lab_plan
    from mlbook.sandbox.run import execute_sandboxed

    lab = "lab02_scaling"
    plan = lab_plan(lab, REPO.source(lab))
    nb = fill_answers(read_nb(REPO.release(lab)), reference_answers(read_nb(REPO.source(lab))))
    result = execute_sandboxed(nb, plan, Limits(), sandboxed=False)
    assert result.error is None, result.log
    assert set(result.verdicts) == set(plan.cells) and all(v.passed for v in result.verdicts.values())
