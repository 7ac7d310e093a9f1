"""Hidden checks for lab 6, chunked attention (grader only).

Conventions:
- The lab's API takes torch tensors, one head at a time: q (T_q, d_k), k (T_k, d_k),
  v (T_k, d_v); causal means key j is masked for query i when j > i (then T_q == T_k).
  Students' results may be torch tensors or NumPy arrays; both are compared as float64.
- The grader's references are its own: full-matrix NumPy float64 attention for outputs and
  log-sum-exp, torch float64 autograd for gradients. They are never the notebook's text.
- Known mistakes are reproduced by ``_stream``, the grader's own NumPy streaming
  implementation with one switch per mistake; ``diagnose`` names the one a result matches.
- Every result is validated before it is compared, and fails closed (``_support.array``,
  ``items``, ``number``): a NaN, an inf, an empty or object result, another shape, integers
  where floats are due, or float32 where float64 inputs came in is a failure that says what came
  back. A comparison is ``close`` (False when it cannot be made) or ``not (err <= tol)``, never
  ``err > tol``, which NaN passes.

Memory (``check_chunked_memory`` and the memory part of ``check_backward_from_lse``):
- Measured from OUTSIDE the student's kernel, by the operating system's accounting:
  ``mlbook.sandbox.procmem`` resets the peak resident memory of every process of the submission
  (the sandbox's root, ``RemoteSession.memory_root``, and its descendants), the judge calls the
  student's function through the socket, and the growth of the processes' peaks is read from
  the host's ``/proc``. Nothing in the kernel (``mlbook_helpers.measure``, ``tracemalloc``, a
  torch mode, ``sys.gettrace``) takes part or can tell that it is measured, so an answer that
  behaves differently when it detects a measurement is measured doing what it does. The
  sandbox's allocator returns large freed blocks to the system (``bwrap.environment``), so
  resident memory follows what the call holds. In a check run in-process (no sandbox: the
  seeded-draw tests, plain ``nbgrader autograde``) the measured process is this one, where the
  student's function runs. A sandboxed check raises ``procmem.MeasurementError`` (a grader
  error, never a verdict) without a root pid, or when the process that connected the check's
  socket (the kernel, by ``SO_PEERCRED``) is not in the root's tree.
- Every measured call's OUTPUT is checked against the grader's reference: a call whose result
  is wrong earns nothing, however little memory it used.
- What is decided is how the peak GROWS, not a constant factor. Each function is measured at
  two lengths T1 < T2 (T1 about 2,000 and T2 about 2 T1 for the forward, 1,300 and 2,600 for
  the backward) with the chunk size fixed, causal and not, with d_k, d_v of 4 or 5, so that the
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
  more (measured in the sandbox: at most about 310 bytes per token against a limit of 770 or
  more, and 1,500 against 3,600 or more in the backward). Over its limit, the forward is measured
  once more at T2 with half the chunk size: a T x T matrix does not shrink, (T, chunk_size)
  matrices halve, and the message names which it is. Messages quote the growth measured at
  each length, per added token, and its growth exponent.
- Noise: resident memory moves by pages (4 KiB) and by what the interpreter allocates; a limit
  passed by less than 2x is measured again and the smaller growth counts.

``memory_sweep`` (the student's sweep for their own table) measures in the kernel with the
kernel's ``peak_memory``, by design: that is the lab's experiment. Its hidden check lends it
probe functions built HERE (``remote.lend``: the kernel gets a stand-in, calls run in the
grader), records which inputs each call received, and compares the sweep's numbers with the
kernel's own ``peak_memory`` of the same probe on inputs made before the call. What stays
trusted to the kernel is therefore that cell's measurement only, and its verdict is about the
sweep's own logic (inputs of the right shape, dtype and order made outside the measured call,
one number per T). It can earn nothing for chunked_attention: the memory points of
chunked_attention come from ``check_chunked_memory`` alone, and the visible
``test_memory_growth``, which reads the kernel's table, counts only when that check passes too
(``COVERED_BY`` in ``__init__``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable

import numpy as np
import torch

from mlbook.labs._support import (RemoteError, array, call_student, close, diagnose, fail, fresh_rng, helper,
                                  items, number)
from mlbook.sandbox import procmem
from mlbook.judge.remote import lend, session
from mlbook_helpers.checks import Misconception, data_array, describe
from mlbook_helpers.measure import format_bytes
from mlbook_kernel.wire import WireError

__all__ = [
    "check_attention_matrix_bytes",
    "check_online_softmax_update",
    "check_chunked_attention",
    "check_chunked_memory",
    "check_backward_from_lse",
    "check_memory_sweep",
]

_F32 = dict(atol=2e-4, rtol=2e-4)  # float32 results against a float64 reference
_F64 = dict(atol=1e-9, rtol=1e-9)


def _t(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=dtype)


def _tol(dtype: torch.dtype, loose: bool = False) -> dict:
    if dtype == torch.float64:
        return dict(_F64)
    return dict(atol=2e-3, rtol=2e-3) if loose else dict(_F32)


def _first_bad(actual, expected, atol, rtol) -> str:
    """'got 0.1234 at index (3, 1)' for the first entry off tolerance (student's value only)."""
    a, e = data_array(actual), np.asarray(expected, dtype=np.float64)
    if a is None or a.dtype.kind not in "iuf":
        return f"got {describe(actual)}"
    a = a.astype(np.float64)
    if a.shape != e.shape:
        return f"shape is {a.shape}, expected {e.shape}"
    n_bad = int((~np.isfinite(a)).sum())
    if n_bad:
        return f"{n_bad} of {a.size} entries are nan or inf"
    bad = ~(np.abs(a - e) <= atol + rtol * np.abs(e))
    if not bad.any():
        return "matches"
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} of {a.size} entries are off, e.g. {a[idx]:.6g} at index {idx}"


def _floats(x: Any, what: str, shape: tuple, dtype: torch.dtype, names: str, finite: bool = False) -> np.ndarray:
    """A student's array result as float64, after checking that it is one: floats (not integers,
    booleans, objects or strings), of ``shape``, not empty, and float64 when the inputs were float64.
    Non-finite entries are left to the comparison (it fails them) unless ``finite``."""
    hint = f"Return {names}, computed in the inputs' dtype."
    arr = array(x, what, shape=shape, kind="f", finite=finite, hint=hint)
    if dtype == torch.float64 and data_array(x).dtype.itemsize < 8:
        fail(what, f"got {data_array(x).dtype} for float64 inputs",
             "Create new tensors with the inputs' dtype (q.new_zeros, q.new_full, dtype=q.dtype) so float64 stays "
             "float64.")
    return arr


def _diagnose_nan(actual: np.ndarray, variants: dict, **tol) -> str | None:
    """``diagnose`` where a variant's NaN or inf is the mistake's own signature (0 / 0 after an underflow, say):
    the student's non-finite entries match it only where the variant has the same ones."""
    for message, value in variants.items():
        if callable(value):
            try:
                value = value()
            except Exception:  # a variant that cannot be formed here does not match
                continue
        if close(actual, value, equal_nan=True, **tol):
            return message
    return None


# --------------------------------------------------------------------------------------------
# 1. attention_matrix_bytes


def check_attention_matrix_bytes(fn) -> None:
    rng = fresh_rng()
    for _ in range(4):
        B, H, T = int(rng.integers(2, 9)), int(rng.integers(2, 17)), int(rng.integers(100, 5000))
        per = int(rng.choice([1, 2, 4]))
        what = f"attention_matrix_bytes({B}, {H}, {T}, {per})"
        got = number(call_student(fn, B, H, T, per, what=what), what,
                     "Return the number of bytes as one int: B * H * T * T * bytes_per_entry.")
        want = B * H * T * T * per
        if close(got, want, atol=0.5, rtol=1e-9):
            continue
        cause = diagnose(got, {
            "the batch size B is missing": H * T * T * per,
            "the number of heads H is missing": B * T * T * per,
            "T is not squared: the matrix has T x T entries per head": B * H * T * per,
            "bytes_per_entry is ignored": B * H * T * T * 2,
            "the entries are counted, not the bytes": B * H * T * T,
        }, atol=0.5, rtol=1e-9)
        fail(f"attention_matrix_bytes(B={B}, H={H}, T={T}, bytes_per_entry={per})", f"got {got:.10g}",
             cause or "The matrix has B * H * T * T entries of bytes_per_entry bytes each.")


# --------------------------------------------------------------------------------------------
# 2. online_softmax_update


def _update(m, l, acc, s, v, *, rescale_l=True, rescale_acc=True, invert=False, normalise=False,
            shift_by_old=False):
    """The grader's online-softmax update in float64, with switches for known mistakes."""
    with np.errstate(all="ignore"):
        m_new = np.maximum(m, s.max(axis=-1))  # (n_q,)
        alpha = np.exp(m_new - m) if invert else np.exp(m - m_new)  # (n_q,)
        p = np.exp(s - (m if shift_by_old else m_new)[:, None])  # (n_q, n_k)
        l_new = (alpha if rescale_l else 1.0) * l + p.sum(axis=-1)  # (n_q,)
        acc_new = (alpha[:, None] if rescale_acc else 1.0) * acc + p @ v  # (n_q, d_v)
        if normalise:
            acc_new = acc_new / l_new[:, None]
    return m_new, l_new, acc_new


_UPDATE_MISTAKES = {
    "neither l nor acc was rescaled by exp(m_old - m_new) when the running max grew":
        dict(rescale_l=False, rescale_acc=False),
    "l was rescaled but the accumulator acc was not: when the max grows, acc must be multiplied by "
    "exp(m_old - m_new) too": dict(rescale_acc=False),
    "the accumulator was rescaled but the denominator l was not: both need exp(m_old - m_new)":
        dict(rescale_l=False),
    "the rescale factor is inverted: it must be exp(m_old - m_new), at most 1": dict(invert=True),
    "acc was divided by the denominator inside the update: keep acc un-normalised and divide by l "
    "once, after the last block": dict(normalise=True),
    "the new block was exponentiated against the old max instead of the new one": dict(shift_by_old=True),
}


def _update_case(fn, m, l, acc, s, v, dtype, what, loose=False) -> None:
    args = [_t(x, dtype) for x in (m, l, acc, s, v)]
    got = items(call_student(fn, *args, what=what), 3, what, "the tuple (m_new, l_new, acc_new)")
    names = ("m_new", "l_new", "acc_new")
    n_q, d_v = acc.shape
    got = [_floats(g, f"{what}: {name}", shape, dtype, "m_new and l_new of shape (n_q,), acc_new of shape (n_q, d_v)")
           for g, name, shape in zip(got, names, ((n_q,), (n_q,), (n_q, d_v)))]
    want = _update(m, l, acc, s, v)
    tol = _tol(dtype, loose)
    for name, g, w in zip(names, got, want):
        if not close(g, w, **tol):
            break
    else:
        return
    variants = {}
    for message, switches in _UPDATE_MISTAKES.items():
        variants[message] = _update(m, l, acc, s, v, **switches)
    cause = None
    for message, variant in variants.items():
        if all(close(g, w, equal_nan=True, **tol) for g, w in zip(got, variant)):
            cause = message
            break
    gv = dict(zip(names, got))
    if cause is None and not (np.all(np.isfinite(gv["acc_new"])) and np.all(np.isfinite(gv["l_new"]))):
        cause = ("the state contains nan or inf: subtract the new running max before exponentiating, and "
                 "compute exp(m_old - m_new) so that m_old = -inf gives 0")
    bad_name = next(n for n, g, w in zip(names, got, want) if not close(g, w, **tol))
    observed = _first_bad(gv[bad_name], want[names.index(bad_name)], **tol)
    fail(f"{what}: {bad_name}", observed,
         cause or "m_new = max(m, rowmax(S_b)); l_new = exp(m - m_new) l + rowsum(exp(S_b - m_new)); "
                  "acc_new = exp(m - m_new) acc + exp(S_b - m_new) V_b.")


def _consistent_state(rng, n_q, n_prev, d_v, spread=2.0):
    """A state (m, l, acc) that really summarises n_prev earlier keys."""
    s0 = spread * rng.standard_normal((n_q, n_prev))
    v0 = rng.standard_normal((n_prev, d_v))
    m = s0.max(axis=1)
    p = np.exp(s0 - m[:, None])
    return m, p.sum(axis=1), p @ v0


def check_online_softmax_update(fn) -> None:
    rng = fresh_rng()
    n_q, n_k, d_v = int(rng.integers(5, 10)), int(rng.integers(3, 8)), int(rng.integers(2, 6))
    # a) the max grows in the even rows and not in the odd ones
    m, l, acc = _consistent_state(rng, n_q, int(rng.integers(4, 9)), d_v)
    s = rng.standard_normal((n_q, n_k))
    s[0::2] += m[0::2, None] + 3.0
    s[1::2] += m[1::2, None] - 3.0
    v = rng.standard_normal((n_k, d_v))
    _update_case(fn, m, l, acc, s, v, torch.float64,
                 f"online_softmax_update on {n_q} rows where the max grows in some rows, float64")
    # b) the first block, from m = -inf, l = 0, acc = 0
    _update_case(fn, np.full(n_q, -np.inf), np.zeros(n_q), np.zeros((n_q, d_v)), s, v, torch.float64,
                 "online_softmax_update from the initial state m = -inf, l = 0, acc = 0")
    # c) masked keys, one row entirely masked in this block (its max is already finite)
    s_masked = s.copy()
    s_masked[rng.random(s.shape) < 0.3] = -np.inf
    s_masked[1] = -np.inf
    _update_case(fn, m, l, acc, s_masked, v, torch.float64,
                 "online_softmax_update with masked (-inf) scores, one row fully masked in the block")
    # d) scores near +1000 and near -1000, float32 and float64
    for dtype, offset in ((torch.float64, 1000.0), (torch.float32, 1000.0), (torch.float64, -1000.0)):
        m_big, l_big, acc_big = _consistent_state(rng, n_q, 5, d_v)
        m_big = m_big + offset
        s_big = offset + 2.0 * rng.standard_normal((n_q, n_k))
        if dtype == torch.float32:  # inputs as float32 sees them, so the reference uses the same numbers
            m_big, s_big = m_big.astype(np.float32).astype(np.float64), s_big.astype(np.float32).astype(np.float64)
        _update_case(fn, m_big, l_big, acc_big, s_big, v, dtype,
                     f"online_softmax_update with scores near {offset:+.0f}, {str(dtype).replace('torch.', '')}",
                     loose=True)


# --------------------------------------------------------------------------------------------
# 3. chunked_attention


def _reference(q, k, v, causal):
    """Full-matrix attention in float64: (out (T_q, d_v), lse (T_q,))."""
    s = q @ k.T / math.sqrt(q.shape[1])  # (T_q, T_k)
    if causal:
        s = np.where(np.triu(np.ones(s.shape, dtype=bool), 1), -np.inf, s)
    m = s.max(axis=1, keepdims=True)  # (T_q, 1)
    e = np.exp(s - m)  # (T_q, T_k)
    l = e.sum(axis=1, keepdims=True)  # (T_q, 1)
    return (e / l) @ v, (m + np.log(l))[:, 0]


def _stream(q, k, v, c, causal, *, m0=-np.inf, drop_last=False, skip_diagonal=False, no_mask=False,
            update=None):
    """The grader's tiled attention in float64, with switches that reproduce known mistakes."""
    update = update or {}
    T_q, d = q.shape
    T_k = k.shape[0]
    n_keys = (T_k // c) * c if drop_last else T_k
    out, lse = np.zeros((T_q, v.shape[1])), np.zeros(T_q)
    for qs in range(0, T_q, c):
        qe = min(qs + c, T_q)
        m, l, acc = np.full(qe - qs, m0), np.zeros(qe - qs), np.zeros((qe - qs, v.shape[1]))
        stop = (qs if skip_diagonal else min(qe, n_keys)) if causal else n_keys
        for ks in range(0, stop, c):
            ke = min(ks + c, n_keys)
            s = q[qs:qe] @ k[ks:ke].T / math.sqrt(d)
            if causal and not no_mask:
                s = np.where(np.arange(ks, ke)[None, :] > np.arange(qs, qe)[:, None], -np.inf, s)
            m, l, acc = _update(m, l, acc, s, v[ks:ke], **update)
        with np.errstate(all="ignore"):
            out[qs:qe] = acc / l[:, None]
            lse[qs:qe] = m + np.log(l)
    return out, lse


_CHUNK_MISTAKES = {
    "the running max starts at 0 instead of -inf: when every score is very negative, exp(score - 0) "
    "underflows to 0": dict(m0=0.0),
    "the last, shorter block of keys is dropped when T is not a multiple of chunk_size": dict(drop_last=True),
    "the causal skip is off by one block: the diagonal block (whose first key is at or before the tile's "
    "last query) must be processed, with the mask": dict(skip_diagonal=True),
    "causal blocks are skipped but the diagonal block is not masked: keys j > i inside it leak": dict(no_mask=True),
    "the running sums are not rescaled by exp(m_old - m_new) when the max grows":
        dict(update=dict(rescale_l=False, rescale_acc=False)),
    "the denominator is rescaled but the accumulator is not (acc needs exp(m_old - m_new) too)":
        dict(update=dict(rescale_acc=False)),
    "the accumulator is divided by the denominator inside the loop: divide acc by l once, after the last block":
        dict(update=dict(normalise=True)),
}


def _inputs(rng, T_q, T_k, d, d_v, dtype, q_scale=1.0, shift=0.0):
    """q, k, v as float64 NumPy arrays (rounded through dtype), optionally adding `shift` to every score."""
    q = q_scale * rng.standard_normal((T_q, d))
    k = rng.standard_normal((T_k, d))
    v = rng.standard_normal((T_k, d_v))
    if shift:
        # one extra dimension whose product adds `shift` to every scaled score
        a = math.sqrt(abs(shift) * math.sqrt(d + 1))
        q = np.hstack([q, np.full((T_q, 1), math.copysign(a, shift))])
        k = np.hstack([k, np.full((T_k, 1), a)])
    cast = (lambda x: x.astype(np.float32).astype(np.float64)) if dtype == torch.float32 else (lambda x: x)
    return cast(q), cast(k), cast(v)


def _out_lse(got: Any, what: str, T_q: int, d_v: int, dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray]:
    """chunked_attention's (out, lse), validated: float arrays of shapes (T_q, d_v) and (T_q,)."""
    out, lse = items(got, 2, what, "the pair (out, lse)")
    names = "out of shape (T_q, d_v) and lse of shape (T_q,)"
    return (_floats(out, f"{what}: out", (T_q, d_v), dtype, names),
            _floats(lse, f"{what}: lse", (T_q,), dtype, names))


def _chunked_case(fn, q, k, v, c, causal, dtype, label, loose=False) -> None:
    what = (f"chunked_attention(q, k, v, chunk_size={c}, causal={causal}) with T_q={q.shape[0]}, "
            f"T_k={k.shape[0]}, {str(dtype).replace('torch.', '')}{label}")
    got = call_student(fn, _t(q, dtype), _t(k, dtype), _t(v, dtype), c, causal=causal, what=what)
    out, lse = _out_lse(got, what, q.shape[0], v.shape[1], dtype)
    want_out, want_lse = _reference(q, k, v, causal)
    tol = _tol(dtype, loose)
    if close(out, want_out, **tol) and close(lse, want_lse, **tol):
        return
    name, mine, want = ("out", out, want_out) if not close(out, want_out, **tol) else ("lse", lse, want_lse)
    idx = 0 if name == "out" else 1
    variants = {msg: (lambda sw=sw: _stream(q, k, v, c, causal, **sw)[idx]) for msg, sw in _CHUNK_MISTAKES.items()}
    if name == "lse":
        s_full = q @ k.T / math.sqrt(q.shape[1])  # (T_q, T_k)
        if causal:
            s_full = np.where(np.triu(np.ones(s_full.shape, dtype=bool), 1), -np.inf, s_full)
        row_max = s_full.max(axis=1)  # (T_q,)
        variants = {
            "lse is log(l) without the running max: lse = m + log(l)": want_lse - row_max,
            "lse is the running max alone: lse = m + log(l)": row_max,
            "lse was computed from unscaled scores: scale them by 1/sqrt(d_k)":
                lambda: _reference(q * math.sqrt(q.shape[1]), k, v, causal)[1],
            **variants,
        }
    cause = _diagnose_nan(mine, variants, **tol)
    if cause is None and dtype == torch.float64 and close(mine, want, atol=1e-4, rtol=1e-4):
        cause = ("the result is right only to float32 precision: create new tensors with the inputs' dtype "
                 "(q.new_zeros, q.new_full, dtype=q.dtype) so float64 stays float64")
    fail(f"{what}: {name}", _first_bad(mine, want, **tol),
         cause or "Compare with the full softmax on a small case: every query tile streams every allowed key "
                  "block through online_softmax_update, then out = acc / l and lse = m + log(l).")


def check_chunked_attention(fn) -> None:
    rng = fresh_rng()
    # a) non-causal, T_q != T_k, T_k not a multiple of chunk_size, float64
    c = int(rng.integers(5, 12))
    T_q, T_k = int(rng.integers(20, 60)), c * int(rng.integers(3, 7)) + int(rng.integers(1, c))
    d, d_v = int(rng.integers(4, 17)), int(rng.integers(2, 9))
    _chunked_case(fn, *_inputs(rng, T_q, T_k, d, d_v, torch.float64), c, False, torch.float64,
                  f" (T_k not a multiple of {c})")
    # b) causal, T not a multiple of chunk_size, float32 and float64
    for dtype in (torch.float32, torch.float64):
        c = int(rng.integers(4, 10))
        T = c * int(rng.integers(3, 8)) + int(rng.integers(1, c))
        _chunked_case(fn, *_inputs(rng, T, T, d, d_v, dtype), c, True, dtype, f" (T not a multiple of {c})")
    # c) chunk_size 1 and chunk_size >= T, causal and not
    T = int(rng.integers(7, 15))
    for c in (1, T, T + int(rng.integers(1, 20))):
        for causal in (False, True):
            _chunked_case(fn, *_inputs(rng, T, T, d, d_v, torch.float64), c, causal, torch.float64, "")
    # d) large score magnitudes: spread +-100 in float32 (exp overflows without the max), and
    #    every score near -1000 in float64 (exp underflows unless shifted by the true max)
    c = int(rng.integers(4, 9))
    T = c * int(rng.integers(3, 6)) + int(rng.integers(1, c))
    _chunked_case(fn, *_inputs(rng, T, T, d, d_v, torch.float32, q_scale=30.0), c, True, torch.float32,
                  " and scores spread over about +-100", loose=True)
    _chunked_case(fn, *_inputs(rng, T, T + 3, d, d_v, torch.float64, shift=-1000.0), c, False, torch.float64,
                  " and every score near -1000")


# --------------------------------------------------------------------------------------------
# 4. memory, measured from outside the kernel (see the module's docstring)

_MEM_D = (4, 5)  # head widths of the memory runs: (T, d) inputs, outputs and state stay far below a (T, c) matrix
_MEM_TOL = dict(atol=2e-3, rtol=2e-3)  # a measured call's float32 output against the float64 reference
_MEM_ATTEMPTS = 2  # each size is measured again when a limit is passed by less than 2x; the smaller growth counts
# Rules, in bytes (float32 entries are 4 bytes; T1 < T2 are the two lengths, c the chunk size):
_TT_ABSOLUTE = 1 / 4  # the growth at T2 stays below 1/4 of one float32 T2 x T2 matrix
_TT_FRACTION = 1 / 4  # backward: the growth from T1 to T2 stays below 1/4 of one float32 T x T matrix's growth
_TC_FRACTION = 1 / 2  # forward: the growth from T1 to T2 stays below half a float32 (T, c) matrix per added token
_TC_SEEN = 1 / 4  # a forward over its limit holds (T, c) matrices when halving c removes 1/4 of one or more


def _memory_root() -> int:
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
            "the sandbox's root pid is unknown (RemoteSession.memory_root is None): the memory of the submission's "
            "processes cannot be measured from outside")
    # The kernel process that connected this check's socket must be in the measured tree.
    procmem.require_in_tree(int(root), procmem.socket_peer(current.conn))
    return int(root)


def _settle(root: int) -> None:
    """Before a check's first call: when the measured process is this one, let glibc give back what it
    kept before the thresholds were set (the calls that follow, a warm-up first, fault back what they use)."""
    if root == os.getpid():
        procmem.settle_own_allocator(release=True)


def _measured_call(fn: Callable, args: tuple, kwargs: dict, what: str, root: int) -> tuple[Any, int]:
    """(the student's result, the growth of the submission's peak resident memory during the call)."""
    with procmem.TreePeak(root) as peak:
        got = call_student(fn, *args, what=what, **kwargs)
    return got, peak.bytes


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


def _over_limit(peaks: dict[int, int], per_token: float) -> float:
    """How far the growth goes past its limits, the larger of two ratios (at least 1: over the limit):
    the growth at the larger length against 1/4 of one float32 T x T matrix, and the growth from the
    smaller length to the larger against ``per_token`` bytes per added token. NaN counts as over."""
    (T1, p1), (T2, p2) = sorted(peaks.items())
    ratio = max(p2 / (_TT_ABSOLUTE * 4 * T2 * T2), (p2 - p1) / (per_token * (T2 - T1)))
    return ratio if ratio == ratio else math.inf


def _memory_sizes(rng: np.random.Generator, low: int, high: int, chunk: int) -> tuple[int, int]:
    """Two lengths T1 < T2 = about 2 T1, neither a multiple of the chunk size (as a rule)."""
    T1 = int(rng.integers(low, high))
    return T1, 2 * T1 + int(rng.integers(1, chunk))


def _f32(rng: np.random.Generator, *shape: int) -> torch.Tensor:
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _measure_sizes(fn: Callable, cases: dict[int, tuple[tuple, dict, Callable[[Any, str], None]]], what: Callable,
                   per_token: float, root: int) -> tuple[dict[int, int], bool]:
    """Measure one call per length (again, up to _MEM_ATTEMPTS, while over the limit), each call's output checked.

    Args:
        cases: T -> (args, kwargs, check) where ``check(result, what)`` fails a wrong result.
        what: T -> the call's description.
        per_token: the limit of ``_over_limit``.
    Returns:
        (T -> the smallest growth measured, whether it is over the limit).
    """
    peaks = {T: math.inf for T in cases}
    for _ in range(_MEM_ATTEMPTS):
        for T, (args, kwargs, check) in cases.items():
            got, grown = _measured_call(fn, args, kwargs, what(T), root)
            check(got, what(T))  # a wrong result earns nothing, however little memory it used
            peaks[T] = min(peaks[T], grown)
        ratio = _over_limit(peaks, per_token)
        if ratio < 1 or ratio >= 2:  # within the limit, or too far over it for noise to explain
            break
    return {T: int(p) for T, p in peaks.items()}, not (ratio < 1)


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
    T1, T2 = _memory_sizes(rng, 1900, 2200, c)
    d, d_v = (int(rng.integers(_MEM_D[0], _MEM_D[1] + 1)) for _ in range(2))
    cases = {}
    for T in (T1, T2):
        q, k, v = _f32(rng, T, d), _f32(rng, T, d), _f32(rng, T, d_v)
        want_out, want_lse = _reference_rows(q, k, v, causal)

        def check(got, what, want_out=want_out, want_lse=want_lse, T=T):
            out, lse = _out_lse(got, what, T, d_v, torch.float32)
            for name, mine, want in (("out", out, want_out), ("lse", lse, want_lse)):
                if not close(mine, want, **_MEM_TOL):
                    fail(f"{what}: {name}", _first_bad(mine, want, **_MEM_TOL),
                         "The call whose memory is measured must give the right result too.")

        cases[T] = ((q, k, v, c), {"causal": causal}, check)

    def call(T, chunk=c):
        return (f"chunked_attention(q, k, v, chunk_size={chunk}, causal={causal}) with T={T:,}, d_k={d}, d_v={d_v}, "
                "float32")

    _settle(root)
    args, kwargs, check = cases[T1]
    check(call_student(fn, *args, what=call(T1), **kwargs), call(T1))  # warm-up: first-use costs are not the call's
    peaks, over = _measure_sizes(fn, cases, call, _TC_FRACTION * 4 * c, root)
    if not over:
        return
    # Over the limit: a T x T matrix does not shrink with the chunk size, a (T, c) one halves with it.
    half = c // 2
    (q, k, v, _), kwargs, check = cases[T2]
    got, at_half = _measured_call(fn, (q, k, v, half), kwargs, call(T2, half), root)
    check(got, call(T2, half))
    matrices = (peaks[T2] - at_half) / (4 * T2 * (c - half))  # float32 (T, c) matrices that went with the chunk
    what = f"memory of chunked_attention(chunk_size={c}, causal={causal}, d={d})"
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
    root = _memory_root()
    for causal in (False, True):
        _chunked_memory_case(fn, rng, causal, root)


# --------------------------------------------------------------------------------------------
# 5. backward from lse


def _autograd(q, k, v, dout, causal):
    """dq, dk, dv in float64 by torch autograd through the grader's own full-matrix forward."""
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    s = leaves[0] @ leaves[1].T / math.sqrt(q.shape[1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape, dtype=torch.bool).triu(1), -math.inf)
    (torch.softmax(s, dim=-1) @ leaves[2]).backward(torch.tensor(dout))
    return [t.grad.numpy() for t in leaves]


def _backward_variants(q, k, v, out, dout, lse, causal) -> dict:
    """What known backward mistakes return, as (dq, dk, dv) in float64."""
    d = q.shape[1]
    s = q @ k.T / math.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones(s.shape, dtype=bool), 1), -np.inf, s)

    def grads(A, D=None, scale=1 / math.sqrt(d), transpose_dk=True):
        dA = dout @ v.T
        D = (dout * out).sum(axis=1) if D is None else D
        dS = A * (dA - D[:, None])
        dk = (dS.T @ q if transpose_dk else dS @ q) * scale
        return dS @ k * scale, dk, A.T @ dout

    A = np.exp(s - lse[:, None])
    with np.errstate(all="ignore"):
        return {
            "the 1/sqrt(d_k) scale is missing from dq and dk (S = Q K^T / sqrt(d_k))":
                lambda: grads(A, scale=1.0),
            "the weights were rebuilt as exp(S) / lse: subtract lse in the exponent, A = exp(S - lse)":
                lambda: grads(np.exp(s) / lse[:, None]),
            "D is rowsum(dout) instead of rowsum(dout * out)": lambda: grads(A, D=dout.sum(axis=1)),
            "dK is missing the transpose: dK = dS^T Q / sqrt(d_k)": lambda: grads(A, transpose_dk=False),
        }


def _grads(got: Any, what: str, q_shape, k_shape, v_shape, dtype: torch.dtype) -> list[np.ndarray]:
    """attention_backward_from_lse's (dq, dk, dv), validated: float arrays of the shapes of q, k, v."""
    got = items(got, 3, what, "the tuple (dq, dk, dv)")
    names = "dq, dk, dv of the shapes of q, k, v"
    return [_floats(g, f"{what}: {name}", tuple(shape), dtype, names)
            for g, name, shape in zip(got, ("dq", "dk", "dv"), (q_shape, k_shape, v_shape))]


def _backward_case(fn, T_q, T_k, d, d_v, c, causal, dtype, rng) -> None:
    q, k, v = (rng.standard_normal(shape) for shape in ((T_q, d), (T_k, d), (T_k, d_v)))
    dout = rng.standard_normal((T_q, d_v))
    if dtype == torch.float32:
        q, k, v, dout = (x.astype(np.float32).astype(np.float64) for x in (q, k, v, dout))
    out, lse = _reference(q, k, v, causal)
    if dtype == torch.float32:
        out, lse = out.astype(np.float32).astype(np.float64), lse.astype(np.float32).astype(np.float64)
    what = (f"attention_backward_from_lse(T_q={T_q}, T_k={T_k}, chunk_size={c}, causal={causal}, "
            f"{str(dtype).replace('torch.', '')})")
    got = call_student(fn, *(_t(x, dtype) for x in (q, k, v, out, dout, lse)), c, causal=causal, what=what)
    got = _grads(got, what, q.shape, k.shape, v.shape, dtype)
    want = _autograd(q, k, v, dout, causal)
    tol = dict(atol=1e-3, rtol=1e-3) if dtype == torch.float32 else dict(atol=1e-8, rtol=1e-8)
    if all(close(g, w, **tol) for g, w in zip(got, want)):
        return
    names = ("dq", "dk", "dv")
    bad = next(i for i in range(3) if not close(got[i], want[i], **tol))
    cause = None
    for message, variant in _backward_variants(q, k, v, out, dout, lse, causal).items():
        try:
            values = variant()
        except Exception:  # a variant that cannot be formed for these shapes does not match
            continue
        if close(got[bad], values[bad], **tol):
            cause = message
            break
    if cause is None and c < T_k and names[bad] in ("dq", "dk"):
        cause = ("correct on one block but not across blocks? Rebuild each block's weights as exp(S_block - lse) "
                 "with the full row's lse, not from a softmax over the block")
    fail(f"{what}: {names[bad]}", _first_bad(got[bad], want[bad], **tol),
         cause or "dV = A^T dout; dA = dout V^T; dS = A * (dA - D) with D = rowsum(dout * out); "
                  "dQ = dS K / sqrt(d_k); dK = dS^T Q / sqrt(d_k); A = exp(S - lse) block by block.")


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


def _backward_memory_case(fn: Callable, rng: np.random.Generator, causal: bool, root: int) -> None:
    c = int(rng.integers(28, 37))  # (T, c) slices are allowed here; at this c they stay small beside T x T
    T1, T2 = _memory_sizes(rng, 1200, 1400, c)
    d, d_v = (int(rng.integers(_MEM_D[0], _MEM_D[1] + 1)) for _ in range(2))
    cases = {}
    for T in (T1, T2):
        q, k, v, dout = _f32(rng, T, d), _f32(rng, T, d), _f32(rng, T, d_v), _f32(rng, T, d_v)
        out, lse, *want = _backward_reference_rows(q, k, v, dout, causal)
        args = (q, k, v, torch.from_numpy(out.astype(np.float32)), dout, torch.from_numpy(lse.astype(np.float32)), c)

        def check(got, what, want=want, shapes=(q.shape, k.shape, v.shape)):
            for name, mine, ref in zip(("dq", "dk", "dv"), _grads(got, what, *shapes, torch.float32), want):
                if not close(mine, ref, **_MEM_TOL):
                    fail(f"{what}: {name}", _first_bad(mine, ref, **_MEM_TOL),
                         "The call whose memory is measured must give the right gradients too.")

        cases[T] = (args, {"causal": causal}, check)
    def call(T):
        return f"attention_backward_from_lse(chunk_size={c}, causal={causal}) with T={T:,}, d_k={d}, d_v={d_v}, float32"

    _settle(root)
    args, kwargs, check = cases[T1]
    check(call_student(fn, *args, what=call(T1), **kwargs), call(T1))  # warm-up: first-use costs are not the call's
    peaks, over = _measure_sizes(fn, cases, call, _TT_FRACTION * 4 * (T1 + T2), root)
    if over:
        fail(f"memory of attention_backward_from_lse(chunk_size={c}, causal={causal}, d={d})",
             f"{_growth_report(peaks)}; one float32 T x T matrix is {format_bytes(4 * T2 * T2)} at T={T2:,}",
             "That is the growth of a T x T matrix: stream over key blocks, each needing only a (T, chunk_size) "
             "slice of A rebuilt from lse; does your code build the full T x T matrix (or a T x T mask)?")


def check_backward_from_lse(fn) -> None:
    rng = fresh_rng()
    d, d_v = int(rng.integers(4, 13)), int(rng.integers(2, 9))
    c = int(rng.integers(5, 11))
    T = c * int(rng.integers(3, 6)) + int(rng.integers(1, c))
    _backward_case(fn, T, T, d, d_v, c, True, torch.float64, rng)
    _backward_case(fn, int(rng.integers(20, 50)), T + 2, d, d_v, c, False, torch.float64, rng)
    _backward_case(fn, T, T, d, d_v, 1, True, torch.float64, rng)
    _backward_case(fn, T, T, d, d_v, T + int(rng.integers(0, 10)), False, torch.float64, rng)
    _backward_case(fn, T, T, d, d_v, c, True, torch.float32, rng)
    # memory: streaming over key blocks holds (T, chunk_size) slices, never (T, T)
    root = _memory_root()
    for causal in (False, True):
        _backward_memory_case(fn, rng, causal, root)


# --------------------------------------------------------------------------------------------
# 6. memory_sweep


def _call_with_objects(fn, *args, what: str, **kwargs):
    """Call a student's function whose arguments include functions (kernel objects, not arrays).

    ``call_student`` describes a crash by the arguments' shapes, which it reads with ``hasattr``;
    on a kernel object that read is itself a remote call that fails, so such calls come here.
    """
    try:
        return fn(*args, **kwargs)
    except (Misconception, WireError, EOFError, OSError, TimeoutError):
        raise  # a verdict, or the kernel went away: not the student's exception
    except Exception as exc:  # the student's error, in a sandboxed check as a RemoteError
        kind, text = (exc.type_name, exc.message) if isinstance(exc, RemoteError) else (type(exc).__name__, str(exc))
        if kind == "NotImplementedError":
            fail(what, "not implemented yet", "Replace `raise NotImplementedError()` with your code.")
        fail(what, f"raised {kind}: {text}", "Make sure the function runs on this size first.")


class _SweepProbe:
    """An attention function lent to the student's memory_sweep; it runs here, in the grader.

    It records the inputs of every call, (shape, dtype) of q, k and v, and answers a (T, T) float64
    array (``square``) or None: what the kernel then allocates for it is decoding that answer.
    """

    def __init__(self, square: bool, largest_T: int):
        self.square, self.largest_T = square, largest_T
        self.calls: list[tuple] = []

    def __call__(self, q=None, k=None, v=None, *extra, **kwargs):
        seen = []
        for x in (q, k, v):
            arr = data_array(x)
            seen.append(None if arr is None else (tuple(arr.shape), str(arr.dtype)))
        self.calls.append((tuple(seen), bool(extra or kwargs)))
        T = seen[0][0][0] if seen[0] is not None and len(seen[0][0]) == 2 else 0
        if self.square and 0 < T <= self.largest_T:  # never answer more than the sweep asked for
            return np.zeros((T, T))
        return None


def _check_probe_calls(probe: _SweepProbe, Ts: list[int], d: int, what: str) -> None:
    """The sweep called attention_fn(q, k, v) with float32 (T, d) inputs, for each T in order."""
    order = []
    for seen, extra in probe.calls:
        if extra:
            fail(what, "attention_fn was called with more than (q, k, v)", "Call attention_fn(q, k, v) only.")
        shapes = [s[0] if s else None for s in seen]
        if any(s is None for s in seen) or len(set(shapes)) != 1 or len(shapes[0]) != 2 or shapes[0][1] != d:
            fail(what, f"attention_fn got q, k, v of shapes {shapes}",
                 "Draw q, k and v of shape (T, d) each, with the d you were given.")
        if {s[1] for s in seen} != {"float32"}:
            fail(what, f"attention_fn got q, k, v of dtypes {[s[1] for s in seen]}", "Draw q, k, v in float32.")
        if not order or order[-1] != shapes[0][0]:
            order.append(shapes[0][0])
    if order != list(Ts):
        fail(what, f"attention_fn was called for T = {order}", "Measure one call for each T of T_values, in order.")


def check_memory_sweep(fn) -> None:
    rng = fresh_rng()
    Ts = sorted(int(t) for t in rng.choice(np.arange(150, 500), size=3, replace=False))
    d = int(rng.integers(24, 65))
    # Probes are built and run here; the kernel's own peak_memory of the same probe, on inputs made
    # before the call, is what a right sweep reports (the kernel's measurement: see the module's docstring).
    kernel_peak = helper("mlbook_helpers.measure:peak_memory")
    slack = 16_384  # Python objects made during the call are counted too (a few KiB)
    for label, square in (("a function that returns nothing", False), ("a function that returns a T x T array", True)):
        probe = _SweepProbe(square, max(Ts))
        lent = lend(probe)
        expected = {}
        for T in [Ts[0], *Ts]:  # the first measurement warms the path up and is not used
            q, k, v = (_f32(rng, T, d) for _ in range(3))
            expected[T] = number(_call_with_objects(kernel_peak, lent, q, k, v, what="peak_memory").bytes,
                                 "the kernel's peak_memory of a probe")
        probe.calls.clear()
        what = f"memory_sweep({label}, T_values={Ts}, d={d})"
        got = _call_with_objects(fn, lent, Ts, d, what=what)
        got = array(got, what, shape=(len(Ts),), kind="iuf",
                    hint="Return a list of ints: one measured peak (peak_memory(...).bytes) per T, in order.")
        _check_probe_calls(probe, Ts, d, what)
        for T, b in zip(Ts, got):
            want = expected[T]
            if not (b >= 0 and abs(b - want) <= slack + 0.01 * want):
                cause = diagnose(b, {"The inputs were allocated inside the measured call: create q, k, v first.":
                                     want + 3 * 4 * T * d}, atol=slack, rtol=0.01)
                fail(f"memory_sweep({label}) at T={T}, d={d}", f"gave {b:,.0f} bytes",
                     cause or "Call peak_memory(attention_fn, q, k, v) on float32 (T, d) inputs made before the "
                              "call, and return its .bytes for each T.")
