"""Memory of chunked_attention and attention_backward_from_lse, measured from outside the kernel.

- Measured from OUTSIDE the student's kernel, by the operating system's accounting:
  ``procmem`` (``mlbook.sandbox.procmem``, through the kit) resets the peak resident memory and
  the referenced bits of every process of the submission (the sandbox's root,
  ``RemoteSession.memory_root``, and its descendants), the judge calls the student's function
  through the socket, and two things are read from the host's ``/proc``: the growth of the
  processes' peaks, and what the call touched (every page of a writable mapping it referenced,
  less an idle round trip's pages, at most ``_ROUND_TRIP_CAP`` of them: ``_measured_call``). Memory
  prepared before the call and reused in it is touched, so it is charged (``_TOUCHED_FORWARD``): the
  lengths are chosen so that a T x T matrix kept there, behind a faked idle trip too, is over that
  rule at every length drawn (of 1-, 2- or 4-byte entries in the forward, 2 or 4 in the backward). Nothing in the kernel
  (``mlbook_helpers.measure``, ``tracemalloc``, a torch mode, ``sys.gettrace``) takes part or can
  tell that it is measured, so an answer that behaves differently when it detects a measurement
  is measured doing what it does. The sandbox's allocator returns large freed blocks to the
  system (``bwrap.environment``, set for the labs whose ``SANDBOX_PROFILE`` is ``"memory"``), so resident memory follows what the call holds. In a check run
  in-process (no sandbox: the seeded-draw tests, plain ``nbgrader autograde``) the measured
  process is this one, where the student's function runs, with what it starts during the call
  (the children it had before, a test runner's browser or server, are left out). A sandboxed check raises
  ``procmem.MeasurementError`` (a grader error, never a verdict) without a root pid, or when the
  process that connected the check's socket (the kernel, by ``SO_PEERCRED``) is not in the
  root's tree.
- Every measured call's OUTPUT is checked against the grader's reference: a call whose result
  is wrong earns nothing, however little memory it used.
- What is decided is how the peak GROWS, not a constant factor. Each function is measured at
  two lengths T1 < T2 (T2 about 2 T1: 6,601 to 7,711 in the forward, 4,801 to 5,434 in the backward,
  ``_FORWARD_T1``, ``_BACKWARD_T1``) with
  the chunk size fixed, causal and not, with d_k, d_v of 4 or 5, so that the
  (T, d) inputs, outputs and running state grow by a few hundred bytes per token, far less than
  any (T, chunk_size) matrix (an unmeasured call at T1 comes first: first-use costs are not the
  call's). The lab forbids the T x T matrix (of scores, weights or a mask) in both functions,
  and in the forward the (T, chunk_size) one too: its query tiles have chunk_size rows, so its
  scores are chunk_size x chunk_size. The backward may hold (T, chunk_size) slices (the lab says
  so), and is measured at chunk sizes near 32, where they are small. The limits
  (``_TT_ABSOLUTE``, ``_TT_FRACTION``, ``_TC_FRACTION``): the growth at T2 stays below 1/4 of one
  float32 T2 x T2 matrix, and from T1 to T2 it stays below half a float32 (T, chunk_size) matrix
  per added token (forward, chunk sizes 384 to 512) or 1/4 of a float32 T x T matrix's growth
  (backward). A float64 copy of the inputs, float64 tiles or a (T, d) state for all queries
  change the constant and the growth by O(d) bytes per token, and pass with a margin of 3x or
  more (measured in the sandbox at lengths near half today's: at most about 310 bytes per token
  against a limit of 770 or more, and 1,500 in the backward, whose limit, T1 + T2 bytes per token,
  is now 7,200 or more). Over its limit, the forward is measured
  once more at T2 with half the chunk size: a T x T matrix does not shrink, (T, chunk_size)
  matrices halve, and the message names which it is. Messages quote the growth measured at
  each length, per added token, and its growth exponent.
- Noise: resident memory moves by pages (4 KiB) and by what the interpreter allocates; a limit
  passed is measured again and the smaller growth counts.
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Any, Callable, Iterator

import numpy as np
import torch

from mlbook_helpers.measure import format_bytes

from ...kit import call_student, compare, fail, float_tolerance, fresh_rng, helper, procmem, session
from ._common import f32, grads, out_lse

__all__ = ["memory_root", "check_chunked_memory", "check_backward_memory"]

# The smaller length T1 of each function's memory runs (T2 is about 2 T1): forward T2 6,601-7,711, backward
# 4,801-5,434 (the backward's calls cost more: its alternatives must finish within the cell's time limit)
_FORWARD_T1, _BACKWARD_T1 = (3300, 3600), (2400, 2700)
_MEM_D = (4, 5)  # head widths of the memory runs: (T, d) inputs, outputs and state stay far below a (T, c) matrix
_MEM_TOL = float_tolerance(torch.float32, loose=True)  # a measured call's float32 output against the float64 reference
_MEM_ATTEMPTS = 3  # each size is measured again (up to 3 times) while a limit is passed; the smallest counts
# Rules, in bytes (float32 entries are 4 bytes; T1 < T2 are the two lengths, c the chunk size):
_TT_ABSOLUTE = 1 / 4  # the growth at T2 stays below 1/4 of one float32 T2 x T2 matrix
_TT_FRACTION = 1 / 4  # backward: the growth from T1 to T2 stays below 1/4 of one float32 T x T matrix's growth
_TC_FRACTION = 1 / 2  # forward: the growth from T1 to T2 stays below half a float32 (T, c) matrix per added token
_TC_SEEN = 1 / 4  # a forward over its limit holds (T, c) matrices when halving c removes 1/4 of one or more
# What a sandboxed call TOUCHED (its referenced pages and the bytes it moved through files, less an idle
# round trip's, at most _ROUND_TRIP_CAP of it) stays below 1/8 of one float32 T2 x T2 matrix in the forward
# (half a byte per entry) and 1/4 in the backward (one byte per entry, at its shorter lengths). Touched
# pages are noisy (the idle trip alone moves by 4-10 MB), so only this absolute rule reads them; the
# growth rules read the precise peak growth. A T x T matrix kept in memory prepared before the call is
# all touched, and even behind a faked idle trip (the cap taken off) it is over the rule at every length
# drawn (test_memory_attacks): in the forward with 1-byte entries too (a bool mask), in the backward with
# 2-byte (float16) and 4-byte ones. Correct answers were charged at most about 10 MB
# (benchmarks/memory_margins.py, sandboxed), against rules of 21.8 MB or more.
_TOUCHED_FORWARD, _TOUCHED_BACKWARD = 1 / 8, 1 / 4
# The most an idle round trip's pages may take off a call's touched pages (honest idle trips measured
# 3.6-7.6 MB). The kernel is the student's, so the idle trip can be faked: what it hides is at most this.
_ROUND_TRIP_CAP = 8 * 2**20


def memory_root() -> int:
    """The host pid whose process tree is measured: the sandbox's root, or this process when the
    check runs in-process (then the student's function runs here too). A sandboxed check fails
    closed (MeasurementError, a grader error) without a root, or when the process that connected
    the check's socket, the kernel, is not in the root's tree."""
    current = session()
    if current is None:
        return os.getpid()
    root = getattr(current, "memory_root", None)
    if root is None:
        raise procmem.MeasurementError(
            "the sandbox's root pid is unknown (RemoteSession.memory_root is None; does the lab declare "
            "SANDBOX_PROFILE = 'memory'?): the memory of the submission's processes cannot be measured from outside")
    # The kernel process that connected this check's socket must be in the measured tree.
    procmem.require_in_tree(int(root), procmem.socket_peer(current.conn))
    return int(root)


@contextlib.contextmanager
def _allocator_settled(root: int) -> Iterator[None]:
    """Around one measured case: when the measured process is this one, let glibc give back what it
    kept before the thresholds were set (the calls that follow, a warm-up first, fault back what they
    use), and afterwards give this process back its speed (``procmem.restore_own_allocator``)."""
    if root != os.getpid():
        yield
        return
    procmem.settle_own_allocator(release=True)
    try:
        yield
    finally:
        procmem.restore_own_allocator()


def _measured_call(fn: Callable, args: tuple, kwargs: dict, what: str, root: int) -> tuple[Any, int, int]:
    """(the student's result, the peak growth of the submission's memory during the call, what it touched).

    The peak growth counts what the call newly makes resident. What it touched counts, sandboxed, every
    page of a writable mapping it read or wrote (``referenced=True``), wherever and whenever that page
    was allocated: memory prepared before the call (a global buffer, an mmap, a child's array) and
    reused in it, and the bytes it read or wrote through system calls (a file in the sandbox's tmpfs). A round trip to the kernel touches pages of its own (the socket, the decoded
    arguments, the interpreter's heap: 3.6-8 MB whatever T), so an idle call of the kernel's own with the
    same tensors (``torch.atleast_1d``, which only hands them back) is measured first and taken off, up
    to ``_ROUND_TRIP_CAP``: the kernel is the student's, and an answer that replaced
    ``torch.atleast_1d`` with something touching its prepared buffer would otherwise hide that buffer
    in the baseline. What was touched is not the peak growth: memory allocated and freed during the
    call is the growth rules' (they see it, and the backward's (T, chunk_size) slices are allowed
    there), while memory prepared before the call is still mapped after it, where the touched pages
    see it. In-process (the seeded-draw tests, plain nbgrader), where this process is also the
    grader's, the touched pages are not measured (0: the growth rules alone decide).
    """
    sandboxed = root != os.getpid()
    if not sandboxed:
        # the call runs here: this process's older children (a test runner's browser) are not the call's
        with procmem.TreePeak(root, only_new_descendants=True) as peak:
            got = call_student(fn, *args, what=what, **kwargs)
        return got, peak.bytes, 0
    echo = helper("torch:atleast_1d")
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    with procmem.TreePeak(root, referenced=True) as idle:
        echo(*tensors)
    with procmem.TreePeak(root) as grown, procmem.TreePeak(root, referenced=True) as touched:
        got = call_student(fn, *args, what=what, **kwargs)
    return got, grown.bytes, max(0, touched.bytes - min(idle.bytes, _ROUND_TRIP_CAP))


def _growth_report(peaks: dict[int, int]) -> str:
    """What was measured, for a message: the growth at each length, per added token, and its exponent."""
    (T1, p1), (T2, p2) = sorted(peaks.items())
    per_token = (p2 - p1) / (T2 - T1)
    if p1 > 0 and p2 > 0:
        exponent = f"it grew like T^{math.log(p2 / p1) / math.log(T2 / T1):.2f} between the two"
    else:
        exponent = "no growth exponent (a growth of 0)"
    return (f"measured from outside your kernel, the peak memory of your processes grew by {format_bytes(p1)} at "
            f"T={T1:,} and by {format_bytes(p2)} at T={T2:,}: {per_token:+,.0f} bytes per added token, {exponent}")


def _over_limit(peaks: dict[int, int], per_token: float, touched: dict[int, int] | None = None,
                touched_rule: float = _TOUCHED_FORWARD) -> float:
    """How far the memory goes past its limits, the largest of three ratios (at least 1: over the limit):
    the peak growth at the larger length against 1/4 of one float32 T x T matrix, the peak growth from
    the smaller length to the larger against ``per_token`` bytes per added token, and what the call
    touched at the larger length against ``touched_rule`` of one float32 T x T matrix. NaN counts as over."""
    (T1, p1), (T2, p2) = sorted(peaks.items())
    ratio = max(p2 / (_TT_ABSOLUTE * 4 * T2 * T2), (p2 - p1) / (per_token * (T2 - T1)))
    if touched is not None:
        ratio = max(ratio, touched[T2] / (touched_rule * 4 * T2 * T2))
    return ratio if ratio == ratio else math.inf


def _touched_report(touched: dict[int, int]) -> str:
    """What the calls touched, for a message (prepared memory reused in the call counts)."""
    (T1, t1), (T2, t2) = sorted(touched.items())
    return (f"the pages your calls touched (read or written, wherever they were allocated) and the bytes they read or "
            f"wrote through files, less an idle round trip's, "
            f"came to {format_bytes(t1)} at T={T1:,} and {format_bytes(t2)} at T={T2:,}")


def _memory_sizes(rng: np.random.Generator, low: int, high: int, chunk: int) -> tuple[int, int]:
    """Two lengths T1 < T2 = about 2 T1, neither a multiple of the chunk size (as a rule)."""
    T1 = int(rng.integers(low, high))
    return T1, 2 * T1 + int(rng.integers(1, chunk))


def _measure_sizes(fn: Callable, cases: dict[int, tuple[tuple, dict, Callable[[Any, str], None]]], what: Callable,
                   per_token: float, root: int, touched_rule: float) -> tuple[dict[int, int], dict[int, int], bool]:
    """Measure one call per length (again, up to _MEM_ATTEMPTS, while over the limit), each call's output checked.

    Args:
        cases: T -> (args, kwargs, check) where ``check(result, what)`` fails a wrong result.
        what: T -> the call's description.
        per_token, touched_rule: the limits of ``_over_limit``.
    Returns:
        (T -> the smallest peak growth measured, T -> the fewest bytes touched, whether it is over a limit).
    """
    peaks = {T: math.inf for T in cases}
    touched = {T: math.inf for T in cases}
    for _ in range(_MEM_ATTEMPTS):
        for T, (args, kwargs, check) in cases.items():
            got, grown, touch = _measured_call(fn, args, kwargs, what(T), root)
            check(got, what(T))  # a wrong result earns nothing, however little memory it used
            peaks[T], touched[T] = min(peaks[T], grown), min(touched[T], touch)
        ratio = _over_limit(peaks, per_token, touched, touched_rule)
        if ratio < 1:  # within the limit; over it, measure again: a T x T matrix is there every time, a spike is not
            break
    return {T: int(p) for T, p in peaks.items()}, {T: int(t) for T, t in touched.items()}, not (ratio < 1)


def _score_rows(q: torch.Tensor, k: torch.Tensor, causal: bool, rows: int):
    """Yield (start, S) for blocks of query rows: the scaled (masked) float64 scores, written in place into
    one reused buffer (the references run between measurements: few and small allocations keep them quick)."""
    scale = 1.0 / math.sqrt(q.shape[1])
    buffer = torch.empty(min(rows, q.shape[0]), k.shape[0], dtype=torch.float64)
    key_pos = torch.arange(k.shape[0])
    for start in range(0, q.shape[0], rows):
        s = buffer[:min(rows, q.shape[0] - start)]
        torch.matmul(q[start:start + rows], k.T, out=s)
        s.mul_(scale)
        if causal:
            s.masked_fill_(key_pos[None, :] > torch.arange(start, start + s.shape[0])[:, None], -math.inf)
        yield start, s


def _reference_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, rows: int = 256):
    """Full-softmax attention in float64, a block of query rows at a time: (out (T_q, d_v), lse (T_q,))."""
    q, k, v = (x.to(torch.float64) for x in (q, k, v))
    out, lse = torch.empty(q.shape[0], v.shape[1], dtype=torch.float64), torch.empty(q.shape[0], dtype=torch.float64)
    for start, s in _score_rows(q, k, causal, rows):
        m = s.max(dim=-1, keepdim=True).values  # (rows, 1), finite: every row has an allowed key
        l = s.sub_(m).exp_().sum(dim=-1, keepdim=True)  # s now holds exp(S - m)
        out[start:start + s.shape[0]] = (s @ v) / l
        lse[start:start + s.shape[0]] = (m + l.log())[:, 0]
    return out.numpy(), lse.numpy()


def _chunked_memory_case(fn: Callable, rng: np.random.Generator, causal: bool, root: int) -> None:
    c = int(rng.integers(384, 513))
    T1, T2 = _memory_sizes(rng, *_FORWARD_T1, c)
    d, d_v = (int(rng.integers(_MEM_D[0], _MEM_D[1] + 1)) for _ in range(2))
    cases = {}
    for T in (T1, T2):
        q, k, v = f32(rng, T, d), f32(rng, T, d), f32(rng, T, d_v)
        want_out, want_lse = _reference_rows(q, k, v, causal)

        def check(got, what, want_out=want_out, want_lse=want_lse, T=T):
            out, lse = out_lse(got, what, T, d_v, torch.float32)
            for name, mine, want in (("out", out, want_out), ("lse", lse, want_lse)):
                compare(mine, want, f"{what}: {name}", "The call whose memory is measured must give the right result "
                        "too.", **_MEM_TOL)

        cases[T] = ((q, k, v, c), {"causal": causal}, check)

    def call(T, chunk=c):
        return (f"chunked_attention(q, k, v, chunk_size={chunk}, causal={causal}) with T={T:,}, d_k={d}, d_v={d_v}, "
                "float32")

    with _allocator_settled(root):
        args, kwargs, check = cases[T1]
        check(call_student(fn, *args, what=call(T1), **kwargs), call(T1))  # warm-up: first-use costs are not the call's
        peaks, touched, over = _measure_sizes(fn, cases, call, _TC_FRACTION * 4 * c, root, _TOUCHED_FORWARD)
        if not over:
            return
        what = f"memory of chunked_attention(chunk_size={c}, causal={causal}, d={d})"
        if _over_limit(peaks, _TC_FRACTION * 4 * c) < 1:  # only the touched pages are over: memory prepared earlier
            fail(what, f"{_touched_report(touched)}; one float32 T x T matrix is {format_bytes(4 * T2 * T2)} at "
                       f"T={T2:,}, and your peak memory hardly grew",
                 "Your call reads or writes that much memory that it did not allocate: a T x T matrix kept in a buffer "
                 "made before the call (a global tensor or array, a cache) or in a file still counts. Compute each "
                 "chunk_size x chunk_size block of scores when you need it.")
        # Over the limit: a T x T matrix does not shrink with the chunk size, a (T, c) one halves with it.
        half = c // 2
        (q, k, v, _), kwargs, check = cases[T2]
        got, at_half, _ = _measured_call(fn, (q, k, v, half), kwargs, call(T2, half), root)
        check(got, call(T2, half))
    matrices = (peaks[T2] - at_half) / (4 * T2 * (c - half))  # float32 (T, c) matrices that went with the chunk
    if not (matrices >= _TC_SEEN):
        fail(what, f"{_growth_report(peaks)}; one float32 T x T matrix is {format_bytes(4 * T2 * T2)} at T={T2:,}",
             "That is the growth of a T x T matrix: does your code build the full score matrix, the weights or a "
             "T x T mask anywhere? Tiles of chunk_size x chunk_size and (T, d) vectors grow only linearly with T.")
    fail(what, f"{_growth_report(peaks)}, and {format_bytes(at_half)} at T={T2:,} with chunk_size={half}: about "
               f"{matrices:.1f} float32 (T, chunk_size) matrices",
         "That is the growth of a T x chunk_size matrix: are all T queries scored against a key block at once? "
         "Tile the queries too, chunk_size rows at a time, so that every block of scores is chunk_size x chunk_size "
         "(float64 copies, tiles or a (T, d) state are fine: they grow by a few bytes per token).")


def check_chunked_memory(fn) -> None:
    """chunked_attention's peak memory grows linearly with T, far below a T x T or T x chunk_size matrix."""
    rng = fresh_rng()
    root = memory_root()
    for causal in (False, True):
        _chunked_memory_case(fn, rng, causal, root)


def _backward_reference_rows(q, k, v, dout, causal: bool, rows: int = 256):
    """(out, lse, dq, dk, dv) in float64, a block of query rows at a time: the grader's own algebra
    (A = softmax(S), dS = A * (dout V^T - rowsum(dout * out))), never a T x T matrix at once."""
    q, k, v, dout = (x.to(torch.float64) for x in (q, k, v, dout))
    scale = 1.0 / math.sqrt(q.shape[1])
    out, lse, dq = torch.empty(q.shape[0], v.shape[1], dtype=torch.float64), torch.empty(q.shape[0], dtype=torch.float64), \
        torch.empty_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for start, A in _score_rows(q, k, causal, rows):
        stop = start + A.shape[0]
        m = A.max(dim=-1, keepdim=True).values
        l = A.sub_(m).exp_().sum(dim=-1, keepdim=True)
        A.div_(l)  # the rows' weights
        out[start:stop] = A @ v
        lse[start:stop] = (m + l.log())[:, 0]
        dout_r = dout[start:stop]
        dv += A.T @ dout_r
        dS = A.mul_(dout_r @ v.T - (dout_r * out[start:stop]).sum(dim=-1, keepdim=True))  # A becomes dS
        dq[start:stop] = dS @ k * scale
        dk += dS.T @ q[start:stop] * scale
    return [x.numpy() for x in (out, lse, dq, dk, dv)]


def check_backward_memory(fn: Callable, rng: np.random.Generator, causal: bool, root: int) -> None:
    """attention_backward_from_lse's peak memory grows far below a T x T matrix (its (T, chunk_size) slices allowed)."""
    c = int(rng.integers(28, 37))  # (T, c) slices are allowed here; at this c they stay small beside T x T
    T1, T2 = _memory_sizes(rng, *_BACKWARD_T1, c)
    d, d_v = (int(rng.integers(_MEM_D[0], _MEM_D[1] + 1)) for _ in range(2))
    cases = {}
    for T in (T1, T2):
        q, k, v, dout = f32(rng, T, d), f32(rng, T, d), f32(rng, T, d_v), f32(rng, T, d_v)
        out, lse, *want = _backward_reference_rows(q, k, v, dout, causal)
        args = (q, k, v, torch.from_numpy(out.astype(np.float32)), dout, torch.from_numpy(lse.astype(np.float32)), c)

        def check(got, what, want=want, shapes=(q.shape, k.shape, v.shape)):
            for name, mine, ref in zip(("dq", "dk", "dv"), grads(got, what, *shapes, torch.float32), want):
                compare(mine, ref, f"{what}: {name}", "The call whose memory is measured must give the right gradients "
                        "too.", **_MEM_TOL)

        cases[T] = (args, {"causal": causal}, check)

    def call(T):
        return f"attention_backward_from_lse(chunk_size={c}, causal={causal}) with T={T:,}, d_k={d}, d_v={d_v}, float32"

    with _allocator_settled(root):
        args, kwargs, check = cases[T1]
        check(call_student(fn, *args, what=call(T1), **kwargs), call(T1))  # warm-up: first-use costs are not the call's
        peaks, touched, over = _measure_sizes(fn, cases, call, _TT_FRACTION * 4 * (T1 + T2), root, _TOUCHED_BACKWARD)
    if over:
        fail(f"memory of attention_backward_from_lse(chunk_size={c}, causal={causal}, d={d})",
             f"{_growth_report(peaks)}; {_touched_report(touched)}; one float32 T x T matrix is "
             f"{format_bytes(4 * T2 * T2)} at T={T2:,}",
             "That is the growth of a T x T matrix: stream over key blocks, each needing only a (T, chunk_size) "
             "slice of A rebuilt from lse; does your code build the full T x T matrix (or a T x T mask)?")
