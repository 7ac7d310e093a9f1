"""Memory prepared before a measured call and reused during it is charged (procmem referenced mode).

Each attack makes a buffer resident BEFORE the measured call (at import, as a global) and only
touches it during the call; the peak-growth measurement alone misses it, the referenced-pages
measurement does not. A correct bystander (fresh, small work) measured the same way stays small.
Through the pipeline, lab 6 is graded in the sandbox with the T x T scores kept in such buffers (a
torch tensor, a NumPy array, a bytearray, an anonymous mmap, C memory from ctypes, a buffer filled by
another cell, a child process that does the work, a float16 copy behind a faked
round-trip baseline) or in a tmpfs file written and read back, beside correct bystanders: each
loses exactly the memory points. A file-backed mmap is tested here at the procmem level only: the
sandbox's tmpfs cannot hold a T x T score file at lab 6's lengths. Data parked in the operating
system's socket buffers is invisible to procmem (shown here at the procmem level); the grading
kernel refuses the socket pairs that would hold it (``mlbook_kernel.admission``), and an attack that
parks the scores there, falling back to its own memory when refused, loses the memory points.
"""

import ctypes
import mmap
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from mlbook.course import Course
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

    small = bytearray(64 * 1024)

    def read_back(fd: int) -> None:  # the data stays in the file: only a 64 KiB buffer is ever touched
        for offset in range(0, SIZE, len(small)):
            os.preadv(fd, [small], offset)

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
        "file read back in small pieces": lambda: read_back(fh.fileno()),
    }


ATTACKS = ("global torch tensor", "numpy array", "bytearray", "anonymous mmap", "file-backed mmap", "ctypes buffer",
           "file read back in small pieces")


def _in_fresh_process(fn, *args):
    """``fn(*args)`` in a newly spawned process. A test worker's own process tree is not a clean
    subject: processes earlier tests left behind (a forkserver, a kernel) are its descendants and
    their pages count (CI, 2026-12-07: a bystander read ~20 MB in every try)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result(timeout=300)


def _bystander_and_attack(name: str) -> tuple[int, int]:
    return _charged(_bystander), _charged(_attacks()[name])


@pytest.mark.parametrize("name", ATTACKS)
def test_prepared_buffer_is_charged(name):
    bystander, attack = _in_fresh_process(_bystander_and_attack, name)
    assert bystander < SIZE // 8, f"a correct bystander must stay far below the buffer, charged {bystander} bytes"
    assert attack >= SIZE * 3 // 4, f"{name}: a buffer resident before the call and touched in it is charged"


def test_the_attack_list_is_the_one_measured():
    assert tuple(_attacks()) == ATTACKS


def _parked_in_socket_buffers() -> tuple[int, int, int]:
    """SIZE bytes computed in small blocks, parked in socket pairs' buffers (``send``) and streamed back
    through a 64 KiB window (``recv_into``) in the measured call: (bytes charged, bytes parked, bytes that
    came back intact)."""
    import socket

    block = 64 * 1024
    pairs = [socket.socketpair() for _ in range(4)]
    for pair in pairs:
        for end in pair:
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)  # 8 MiB a direction, as the OS allows
    ends = [(a, b) for a, b in pairs] + [(b, a) for a, b in pairs]  # (writer, reader): 8 directions
    window, parked, intact = bytearray(block), [0], [0]

    def call() -> None:
        route = [ends[i * len(ends) // (SIZE // block)] for i in range(SIZE // block)]  # 4 MiB a direction
        for i, (writer, _) in enumerate(route):
            writer.sendall(bytes([i % 251]) * block)  # a fresh block, freed once sent
            parked[0] += block
        for i, (_, reader) in enumerate(route):
            got = reader.recv_into(window, block, socket.MSG_WAITALL)
            intact[0] += got if window[0] == i % 251 == window[-1] else 0

    charged = _charged(call)
    parked[0], intact[0] = parked[0] // 2, intact[0] // 2  # the warm-up call moved as much again
    return charged, parked[0], intact[0]


def test_socket_buffers_are_invisible_to_procmem_which_is_why_the_grading_kernel_refuses_them():
    """Without the kernel's admission filter (here, a process of the test itself), SIZE bytes parked in
    socket buffers and read back in the call are charged like a bystander's work: neither pages nor
    ``rchar``/``wchar`` see them. ``tests/test_kernel_admission.py`` shows a grading kernel cannot make them."""
    charged, parked, intact = _in_fresh_process(_parked_in_socket_buffers)
    assert parked == intact == SIZE, (parked, intact)
    assert charged < SIZE // 8, f"procmem now sees socket buffers ({charged} bytes charged): update the docs"


def _child(conn) -> None:
    buf = np.zeros(SIZE // 8)  # (SIZE/8,) held by the child, resident before the call
    conn.send("ready")
    while conn.recv() == "go":
        buf += 1
        conn.send("done")


def _charged_through_a_child() -> int:
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(child,))
    proc.start()
    try:
        assert parent.recv() == "ready"

        def call() -> None:
            parent.send("go")
            parent.recv()

        return _charged(call)
    finally:
        parent.send("stop")
        proc.join(10)


def test_child_process_buffer_is_charged():
    assert _in_fresh_process(_charged_through_a_child) >= SIZE * 3 // 4


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


# ---- through the real pipeline: lab 6 graded in the sandbox, attacks beside correct bystanders ----
LAB6 = "lab06_chunked_attention"
_BUF_BYTES = 7_712 * 7_712 * 4  # the largest score matrix of a memory check (float32, T2 < 7,712)
_PREPARED = {  # name -> code that makes a buffer resident when its cell runs, and `_scores_view(n, dtype)`
    "torch-global": ("import torch as _t\n_RAW = _t.ones(_BUF_BYTES, dtype=_t.uint8)  # (bytes,)\n"
                     "def _scores_view(n, dtype):\n    return _RAW.view(dtype)[:n]\n"),
    "numpy-array": ("import numpy as _np, torch as _t\n_RAW = _np.ones(_BUF_BYTES, dtype=_np.uint8)  # (bytes,)\n"
                    "def _scores_view(n, dtype):\n    return _t.from_numpy(_RAW).view(dtype)[:n]\n"),
    "bytearray": ("import torch as _t\n_RAW = bytearray(b'\\1' * _BUF_BYTES)\n"
                  "def _scores_view(n, dtype):\n    return _t.frombuffer(_RAW, dtype=dtype)[:n]\n"),
    # the kernel is the student's: a no-op the grader calls for its round-trip baseline, replaced by
    # one that reads the whole buffer, would hide the buffer in the baseline but for its cap
    "faked-baseline": ("import torch as _t\n_RAW = _t.ones(_BUF_BYTES, dtype=_t.uint8)  # (bytes,)\n"
                       "_real_atleast_1d = _t.atleast_1d\n"
                       "def _touching(*tensors):\n    _RAW.max()  # reads every page (a uint8 sum would make an int64 copy)\n    return _real_atleast_1d(*tensors)\n"
                       "_t.atleast_1d = _touching\n"
                       "def _scores_view(n, dtype):\n    return _RAW.view(dtype)[:n]\n"),
    "anonymous-mmap": ("import mmap as _mm, torch as _t\n_RAW = _mm.mmap(-1, _BUF_BYTES)\n_RAW.write(b'\\1' * _BUF_BYTES)\n"
                       "def _scores_view(n, dtype):\n    return _t.frombuffer(_RAW, dtype=dtype)[:n]\n"),
    # memory from the C library, outside Python's and torch's allocators, filled by ctypes
    "ctypes-malloc": ("import ctypes as _ct, torch as _t\n_libc = _ct.CDLL(None)\n_libc.malloc.restype = _ct.c_void_p\n"
                      "_libc.malloc.argtypes = [_ct.c_size_t]\n_ADDR = _libc.malloc(_BUF_BYTES)\n"
                      "_ct.memset(_ADDR, 1, _BUF_BYTES)\n_RAW = (_ct.c_uint8 * _BUF_BYTES).from_address(_ADDR)\n"
                      "def _scores_view(n, dtype):\n    return _t.frombuffer(_RAW, dtype=dtype)[:n]\n"),
}
_OTHER_CELL = "attention_matrix_bytes"  # an answer cell before chunked_attention's


def _prepared_answer(reference_cell: str, prepared: str | None) -> str:
    """The reference with the T x T score matrix computed into a buffer prepared at definition time
    (``prepared`` None: by code in another cell, which defines ``_scores_view``)."""
    head = "" if prepared is None else f"_BUF_BYTES = {_BUF_BYTES}\n" + prepared
    body = reference_cell.replace(
        "    lse = q.new_empty(T_q)  # (T_q,)\n",
        "    lse = q.new_empty(T_q)  # (T_q,)\n    scores_all = _scores_view(T_q * k.shape[0], q.dtype).view(T_q, k.shape[0])"
        "  # (T_q, T_k)\n    torch.mm(q, k.T, out=scores_all)\n    scores_all.mul_(scale)\n", 1).replace(
        "scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)",
        "scores = scores_all[q_start:q_stop, k_start:k_stop]  # (n_q, n_k)", 1)
    assert body != reference_cell and "scores_all[q_start" in body, "the reference's text moved: update the attack"
    return head + body


def _float16_answer(reference_cell: str, prepared: str | None = None) -> str:
    """The reference, keeping a float16 copy of every block of scores in a T x T matrix of prepared memory
    (``prepared``; by default behind a faked round-trip baseline: the matrix the touched-pages rule could
    not see before)."""
    body = reference_cell.replace(
        "    lse = q.new_empty(T_q)  # (T_q,)\n",
        "    lse = q.new_empty(T_q)  # (T_q,)\n    kept = _scores_view(T_q * k.shape[0], torch.float16).view(T_q, k.shape[0])"
        "  # (T_q, T_k)\n", 1).replace(
        "            scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)\n",
        "            scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)\n"
        "            kept[q_start:q_stop, k_start:k_stop].copy_(scores)\n", 1)
    assert "kept[q_start" in body, "the reference's text moved: update the attack"
    return f"_BUF_BYTES = {_BUF_BYTES}\n" + (prepared or _PREPARED["faked-baseline"]) + body


def _file_answer(reference_cell: str) -> str:
    """The reference, keeping every block of scores in a file of the sandbox's tmpfs and computing with
    the copy read back: the process holds one block at a time, the file the T x T matrix."""
    body = reference_cell.replace(
        "            scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)\n",
        "            scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)\n"
        "            at = (q_start * k.shape[0] + k_start * (q_stop - q_start)) * scores.element_size()\n"
        "            _os.pwrite(_FILE.fileno(), scores.contiguous().numpy().tobytes(), at)\n"
        "            scores = torch.frombuffer(bytearray(_os.pread(_FILE.fileno(), scores.nbytes, at)), "
        "dtype=scores.dtype).view(scores.shape)  # (n_q, n_k)\n", 1)
    assert "_os.pread" in body, "the reference's text moved: update the attack"
    return "import os as _os, tempfile as _tf\n_FILE = _tf.TemporaryFile()\n" + body


# Made in the cell before chunked_attention's: socket pairs whose buffers hold a T2 x T2 float32
# matrix (48 pairs, 8 MiB a direction), and a FIFO of score blocks kept there, streamed back through
# one block's window. Refused the pairs (the grading kernel's admission filter), it keeps the blocks
# in a list instead: the matrix in its own memory.
_SOCKET_PARKING = """
import collections as _co, socket as _so, torch as _t
try:
    _PAIRS = [_so.socketpair() for _ in range(48)]
    for _pair in _PAIRS:
        for _end in _pair:
            _end.setsockopt(_so.SOL_SOCKET, _so.SO_SNDBUF, 4 << 20)
    print("scores parked in", len(_PAIRS), "socket pairs")
except OSError as _refused:
    _PAIRS = None
    print("scores kept in a list, socket pairs refused:", _refused)


class _Parking:
    \"\"\"Score blocks in the order put, taken back in that order.\"\"\"
    BUDGET = 6 << 20  # bytes queued a direction, under what it holds

    def __init__(self):
        self.ends = [(a, b) for a, b in _PAIRS] + [(b, a) for a, b in _PAIRS] if _PAIRS else []
        for _, reader in self.ends:  # what a call that raised left behind
            reader.setblocking(False)
            try:
                while reader.recv(1 << 20):
                    pass
            except BlockingIOError:
                pass
            reader.setblocking(True)
        self.queued, self.route, self.kept, self.window = [0] * len(self.ends), _co.deque(), _co.deque(), bytearray()

    def put(self, block):
        data = block.detach().contiguous().view(-1).view(_t.uint8).numpy()  # (bytes,)
        end = next((i for i, q in enumerate(self.queued) if q + data.nbytes <= self.BUDGET), None)
        self.route.append(end)
        if end is None:
            self.kept.append(block.detach().clone())
        else:
            self.ends[end][0].sendall(data)
            self.queued[end] += data.nbytes

    def take(self, n_q, n_k, dtype):
        end = self.route.popleft()
        if end is None:
            return self.kept.popleft()
        size = n_q * n_k * _t.empty(0, dtype=dtype).element_size()
        if len(self.window) < size:
            self.window = bytearray(size)
        got = self.ends[end][1].recv_into(self.window, size, _so.MSG_WAITALL)
        assert got == size, (got, size)
        self.queued[end] -= size
        return _t.frombuffer(self.window, dtype=dtype, count=n_q * n_k).view(n_q, n_k).clone()  # (n_q, n_k)
"""


def _socket_answer(reference_cell: str) -> str:
    """The reference computing every block of scores first, parked by ``_SOCKET_PARKING``'s ``_Parking``,
    then taking them back one by one: the T x T matrix exists in full between the two passes."""
    body = reference_cell.replace(
        "    lse = q.new_empty(T_q)  # (T_q,)\n",
        "    lse = q.new_empty(T_q)  # (T_q,)\n    parking = _Parking()\n"
        "    for q_start in range(0, T_q, chunk_size):\n"
        "        q_stop = min(q_start + chunk_size, T_q)\n"
        "        q_tile = q[q_start:q_stop] * scale  # (n_q, d_k)\n"
        "        for k_start in range(0, min(q_stop, T_k) if causal else T_k, chunk_size):\n"
        "            parking.put(q_tile @ k[k_start:min(k_start + chunk_size, T_k)].T)  # (n_q, n_k)\n", 1).replace(
        "scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)",
        "scores = parking.take(q_stop - q_start, k_stop - k_start, q.dtype)  # (n_q, n_k)", 1)
    assert "parking.take" in body and "parking.put" in body, "the reference's text moved: update the attack"
    return body


def _child_answer(answers: dict[str, str]) -> str:
    """chunked_attention answered by a child process started at definition time, which keeps the T x T
    scores in a buffer it made resident before the call: the kernel itself holds only (T, d) arrays."""
    child = ("import math, pickle, struct, sys, torch\ntorch.set_num_threads(1)\n" + answers["online_softmax_update"]
             + "\n" + _prepared_answer(answers["chunked_attention"], _PREPARED["torch-global"])
             + "\nsys.stdout.buffer.write(b'r')\nsys.stdout.buffer.flush()\n"
               "while len(head := sys.stdin.buffer.read(8)) == 8:\n"
               "    args = pickle.loads(sys.stdin.buffer.read(struct.unpack('<Q', head)[0]))\n"
               "    try:\n        reply = ('ok', chunked_attention(*args))\n"
               "    except Exception as exc:\n        reply = ('error', exc)\n"
               "    data = pickle.dumps(reply)\n"
               "    sys.stdout.buffer.write(struct.pack('<Q', len(data)) + data)\n    sys.stdout.buffer.flush()\n")
    return ("import pickle as _pk, struct as _st, subprocess as _sp, sys as _sys\n"
            f"_CHILD = _sp.Popen([_sys.executable, '-c', {child!r}], stdin=_sp.PIPE, stdout=_sp.PIPE)\n"
            "assert _CHILD.stdout.read(1) == b'r', 'the child did not start'\n\n\n"
            "def chunked_attention(q, k, v, chunk_size, causal=False):\n"
            "    data = _pk.dumps((q, k, v, chunk_size, causal))\n"
            "    _CHILD.stdin.write(_st.pack('<Q', len(data)) + data)\n    _CHILD.stdin.flush()\n"
            "    kind, value = _pk.loads(_CHILD.stdout.read(_st.unpack('<Q', _CHILD.stdout.read(8))[0]))\n"
            "    if kind == 'error':\n        raise value\n"
            "    return value\n")


def _attack_cells(answers: dict[str, str]) -> dict[str, dict[str, str]]:
    """name -> the answer cells an attack replaces (the reference's answers: ``answers``)."""
    cell = "chunked_attention"
    attacks = {name: {cell: _prepared_answer(answers[cell], prepared)} for name, prepared in _PREPARED.items()}
    # Not here: a file-backed mmap. The sandbox's tmpfs (256 MiB, shared with the home folder) cannot
    # hold a T2 x T2 score file at these lengths, so the attack fails chunked_attention's other checks
    # too (its own failure, not the grader's); the touched-pages count of a mapped file is tested at the
    # procmem level above (``ATTACKS``).
    attacks["faked-baseline-float16"] = {cell: _float16_answer(answers[cell])}
    # the buffer made and filled by another cell, run earlier: the chunked cell only uses it
    attacks["filled-in-another-cell"] = {
        _OTHER_CELL: f"_BUF_BYTES = {_BUF_BYTES}\n" + _PREPARED["torch-global"] + answers[_OTHER_CELL],
        cell: _prepared_answer(answers[cell], None)}
    attacks["child-process"] = {cell: _child_answer(answers)}
    attacks["scores-in-a-tmpfs-file"] = {cell: _file_answer(answers[cell])}
    attacks["scores-in-socket-buffers"] = {_OTHER_CELL: answers[_OTHER_CELL] + _SOCKET_PARKING,
                                           cell: _socket_answer(answers[cell])}
    return attacks


ATTACK_NAMES = (*_PREPARED, "faked-baseline-float16", "filled-in-another-cell", "child-process", "scores-in-a-tmpfs-file",
                "scores-in-socket-buffers")


@dataclass
class Batch:
    course: Course
    results: dict  # student -> SubmissionResult


@pytest.fixture(scope="module")
def lab6_batch(tmp_path_factory):
    from harness import scratch_course
    from mlbook.authoring import submissions
    from mlbook.labs import load_catalogue
    from mlbook.grading import GradingOptions, autograde_labs
    from mlbook.outputs.results import collect
    from mlbook.sandbox.limits import GiB, Limits

    course = scratch_course(LAB6, tmp_path_factory.mktemp("memattacks"))
    from mlbook.authoring.notebooks import read_nb, reference_answers
    answers = reference_answers(read_nb(course.source(LAB6)))
    submissions.submit(course, "bystander-a", LAB6, submissions.reference(course, LAB6))
    for name, cells in _attack_cells(answers).items():
        submissions.submit(course, f"attack-{name}", LAB6, submissions.reference(course, LAB6, cells))
    alt = next(a for a in load_catalogue(LAB6).alternatives if a.name == "float64-copies-of-the-inputs")
    submissions.submit(course, "alt-float64-copies", LAB6, submissions.reference(course, LAB6, alt.cells))
    submissions.submit(course, "bystander-z", LAB6, submissions.reference(course, LAB6))
    autograde_labs(course, [LAB6], force=True, progress=False,
                   options=GradingOptions(limits=Limits(memory_bytes=3 * GiB, notebook_seconds=600)))
    return Batch(course, {r.student: r for r in collect(course, LAB6)})


@pytest.mark.slow
def test_prepared_buffers_lose_the_memory_points_and_nothing_else(lab6_batch):
    full = lab6_batch.results["bystander-a"]
    scores = {name: c.score for name, c in full.auto_cells.items()}
    for student in ("bystander-z", "alt-float64-copies"):
        cells = lab6_batch.results[student].auto_cells
        assert {n: c.score for n, c in cells.items()} == scores, (
            student, {n: c.message for n, c in cells.items() if c.score != scores[n]})
    # the memory points: the check measured from outside, and the cells that count only when it passes
    from mlbook.labs.lab06_chunked_attention import COVERED_BY
    measured = "test_chunked_attention_memory"
    memory_cells = {measured} | {cell for cell, needs in COVERED_BY.items() if measured in needs}
    assert scores[measured] > 0, "the bystander lost the memory points: nothing is shown"
    for name in ATTACK_NAMES:
        got = {n: c.score for n, c in lab6_batch.results[f"attack-{name}"].auto_cells.items()}
        lost = {n for n in scores if got[n] != scores[n]}
        assert lost == memory_cells, (name, lost, got)
    # the socket pairs were refused in the cell that made them (so the scores fell back into the kernel's memory)
    from mlbook.authoring.notebooks import read_nb

    printed = "".join(o.get("text", "") for cell in read_nb(lab6_batch.course.autograded(
        "attack-scores-in-socket-buffers", LAB6)).cells if cell.cell_type == "code" for o in cell.outputs)
    assert "socket pairs refused: [Errno 38]" in printed and "parked in" not in printed, printed[-2000:]


def test_touched_pages_over_their_rule_fail_a_call_whose_peak_hardly_grew():
    from mlbook.labs.lab06_chunked_attention.hidden import memory

    T1, T2 = 3_400, 6_900
    peaks = {T1: 2_000_000, T2: 2_200_000}  # what a correct call's peaks grow by (MB)
    per_token = memory._TC_FRACTION * 4 * 400
    assert memory._over_limit(peaks, per_token) < 1
    assert memory._over_limit(peaks, per_token, {T1: 5_000_000, T2: 10_000_000}) < 1  # a correct call's pages
    prepared = {T1: 4 * T1 * T1, T2: 4 * T2 * T2}  # a float32 T x T matrix kept in memory made earlier
    assert memory._over_limit(peaks, per_token, prepared) > 2


@pytest.mark.parametrize("function, entry_bytes", [("forward", 1), ("forward", 2), ("forward", 4),
                                                    ("backward", 2), ("backward", 4)])
def test_a_prepared_matrix_behind_a_faked_baseline_is_over_the_rule_at_every_length_drawn(function, entry_bytes):
    """The most a faked round trip takes off (the cap) leaves a T2 x T2 matrix touched in full over the touched
    rule, for every T2 the check draws: of 1-, 2- or 4-byte entries (a bool mask, float16, float32) in the
    forward, of 2 or 4 in the backward."""
    from mlbook.labs.lab06_chunked_attention.hidden import memory

    t1, chunks, rule_fraction = {"forward": (memory._FORWARD_T1, (384, 513), memory._TOUCHED_FORWARD),
                                 "backward": (memory._BACKWARD_T1, (28, 37), memory._TOUCHED_BACKWARD)}[function]
    rng = np.random.default_rng(0)
    drawn = [memory._memory_sizes(rng, *t1, int(c))[1] for c in rng.integers(*chunks, 2_000)]
    for T2 in (min(drawn), 2 * t1[0] + 1):  # the smallest drawn, and the smallest possible
        rule = rule_fraction * 4 * T2 * T2
        assert entry_bytes * T2 * T2 - memory._ROUND_TRIP_CAP > 1.2 * rule, (entry_bytes, T2)
