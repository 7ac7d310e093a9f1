"""Memory prepared before a measured call and reused during it is charged (procmem referenced mode).

Each attack makes a buffer resident BEFORE the measured call (at import, as a global) and only
touches it during the call; the peak-growth measurement alone misses it, the referenced-pages
measurement does not. A correct bystander (fresh, small work) measured the same way stays small.
"""

import ctypes
import mmap
import multiprocessing
import os

import numpy as np
import pytest
import torch

from mlbook.sandbox import procmem

SIZE = 32 * 1024 * 1024  # the prepared buffer: far above any baseline


def _charged(fn) -> int:
    fn()  # warm-up, unmeasured
    return procmem.measure(os.getpid(), fn, referenced=True)[1]


def _bystander() -> None:
    torch.ones(64, 5) @ torch.ones(5, 64)  # (64, 64)


def _attacks():
    t = torch.zeros(SIZE // 4)  # (SIZE/4,) global tensor prepared in advance
    a = np.zeros(SIZE // 8)  # (SIZE/8,)
    b = bytearray(SIZE)
    anon = mmap.mmap(-1, SIZE)
    anon.write(b"\1" * SIZE)
    path = f"/tmp/memattack-{os.getpid()}"
    with open(path, "wb") as f:
        f.truncate(SIZE)
    fh = open(path, "r+b")
    filemap = mmap.mmap(fh.fileno(), SIZE)
    filemap[:] = b"\1" * SIZE
    cbuf = ctypes.create_string_buffer(SIZE)
    ctypes.memset(cbuf, 1, SIZE)
    cview = np.frombuffer(cbuf, dtype=np.uint8)  # (SIZE,)

    def touch_bytes(buf) -> None:
        view = np.frombuffer(buf, dtype=np.uint8)  # (SIZE,)
        view[::4096] += 1

    return {
        "global torch tensor": lambda: t.add_(1),
        "numpy array": lambda: np.add(a, 1, out=a),
        "bytearray": lambda: touch_bytes(b),
        "anonymous mmap": lambda: touch_bytes(anon),
        "file-backed mmap": lambda: touch_bytes(filemap),
        "ctypes buffer": lambda: np.add(cview, 1, out=cview),
    }


@pytest.mark.parametrize("name", list(_attacks()))
def test_prepared_buffer_is_charged(name):
    attack = _attacks()[name]
    assert _charged(_bystander) < SIZE // 8, "a correct bystander must stay far below the buffer"
    assert _charged(attack) >= SIZE * 3 // 4, f"{name}: a buffer resident before the call and touched in it is charged"


def _child(conn) -> None:
    buf = np.zeros(SIZE // 8)  # (SIZE/8,) held by the child, resident before the call
    conn.send("ready")
    while conn.recv() == "go":
        buf += 1
        conn.send("done")


def test_child_process_buffer_is_charged():
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(child,))
    proc.start()
    try:
        assert parent.recv() == "ready"

        def call() -> None:
            parent.send("go")
            parent.recv()

        assert _charged(call) >= SIZE * 3 // 4
    finally:
        parent.send("stop")
        proc.join(10)


def test_without_smaps_is_a_grader_error(monkeypatch):
    """A kernel without Referenced lines (or an unreadable smaps) is a MeasurementError, never points."""
    real = procmem._read
    monkeypatch.setattr(procmem, "_read", lambda path: "00400000-00401000 rw-p 0 0:0 0\nRss: 4 kB\n"
                        if path.endswith("/smaps") else real(path))
    with pytest.raises(procmem.MeasurementError, match="Referenced"):
        procmem.measure(os.getpid(), _bystander, referenced=True)

    def unreadable(path):
        if path.endswith("/smaps"):
            raise PermissionError("denied")
        return real(path)
    monkeypatch.setattr(procmem, "_read", unreadable)
    with pytest.raises(procmem.MeasurementError, match="smaps"):
        procmem.measure(os.getpid(), _bystander, referenced=True)
