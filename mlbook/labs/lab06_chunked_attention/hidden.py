"""Hidden checks for lab 6, chunked attention (grader only).

Conventions:
- The lab's API takes torch tensors, one head at a time: q (T_q, d_k), k (T_k, d_k),
  v (T_k, d_v); causal means key j is masked for query i when j > i (then T_q == T_k).
  Students' results may be torch tensors or NumPy arrays; both are compared as float64.
- The grader's references are its own: full-matrix NumPy float64 attention for outputs and
  log-sum-exp, torch float64 autograd for gradients. They are never the notebook's text.
- Known mistakes are reproduced by ``_stream``, the grader's own NumPy streaming
  implementation with one switch per mistake; ``diagnose`` names the one a result matches.
- Memory is measured with ``mlbook_helpers.measure.peak_memory`` (the students' tool) IN THE
  STUDENT'S KERNEL: ``helper(...)`` reaches the kernel's copy, the grader sends the inputs (drawn
  here) and reads back the measured ``.bytes``. (Measuring a remote call from the grader would
  measure the socket, not the student's allocations.) A limit is a fraction of one T x T matrix:
  an implementation that builds the matrix cannot pass. ``memory_sweep`` is tested on probes
  built in the kernel too (``mlbook_helpers.measure.square_probe`` and ``copy_probe``), whose
  peaks are known here.
- What stays trusted to the kernel: the memory numbers only. A peak is measured inside the
  student's process, so code that tampers with the measurement there (patching
  ``mlbook_helpers.measure``, ``tracemalloc`` or torch's dispatch) can report any number, and
  ``check_chunked_memory``, the memory part of ``check_backward_from_lse`` and
  ``check_memory_sweep`` (whose subject is a measurement) believe it; so does the visible
  ``test_memory_growth``, which reads the kernel's peaks. Everything else is judged here: the
  same functions' outputs are compared, on fresh inputs, with the grader's own reference in
  this process, so faking a measurement buys the memory points of a function that is otherwise
  correct, never the points of a wrong one.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mlbook.labs._support import RemoteError, call_student, close, diagnose, fail, fresh_rng, helper
from mlbook_helpers.checks import Misconception, as_array
from mlbook_helpers.measure import format_bytes
from mlbook_probe.wire import WireError

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
    a, e = as_array(actual), as_array(expected)
    if a.shape != e.shape:
        return f"shape is {a.shape}, expected {e.shape}"
    n_nan = int(np.isnan(a).sum())
    if n_nan:
        return f"{n_nan} of {a.size} entries are nan"
    bad = ~np.isclose(a, e, atol=atol, rtol=rtol)
    if not bad.any():
        return "matches"
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} of {a.size} entries are off, e.g. {a[idx]:.6g} at index {idx}"


# --------------------------------------------------------------------------------------------
# 1. attention_matrix_bytes


def check_attention_matrix_bytes(fn) -> None:
    rng = fresh_rng()
    for _ in range(4):
        B, H, T = int(rng.integers(2, 9)), int(rng.integers(2, 17)), int(rng.integers(100, 5000))
        per = int(rng.choice([1, 2, 4]))
        got = call_student(fn, B, H, T, per, what=f"attention_matrix_bytes({B}, {H}, {T}, {per})")
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
        fail(f"attention_matrix_bytes(B={B}, H={H}, T={T}, bytes_per_entry={per})", f"got {got}",
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
    got = call_student(fn, *args, what=what)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        fail(what, f"returned {type(got).__name__}", "Return the tuple (m_new, l_new, acc_new).")
    want = _update(m, l, acc, s, v)
    tol = _tol(dtype, loose)
    names = ("m_new", "l_new", "acc_new")
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
        if all(close(g, w, **tol) for g, w in zip(got, variant)):
            cause = message
            break
    gv = {n: as_array(g) for n, g in zip(names, got)}
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


def _chunked_case(fn, q, k, v, c, causal, dtype, label, loose=False) -> None:
    what = (f"chunked_attention(q, k, v, chunk_size={c}, causal={causal}) with T_q={q.shape[0]}, "
            f"T_k={k.shape[0]}, {str(dtype).replace('torch.', '')}{label}")
    got = call_student(fn, _t(q, dtype), _t(k, dtype), _t(v, dtype), c, causal=causal, what=what)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(what, f"returned {type(got).__name__}", "Return the pair (out, lse).")
    out, lse = got
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
    cause = diagnose(mine, variants, **tol)
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
# 4. memory


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


def _kernel_peak_bytes(fn, *args, what: str) -> int:
    """Peak bytes of ``fn(*args)``, measured by ``peak_memory`` where ``fn`` runs (the kernel)."""
    measured = _call_with_objects(helper("mlbook_helpers.measure:peak_memory"), fn, *args, what=what)
    return int(measured.bytes)


def _memory_limit_case(fn, args, T, what, hint, fraction) -> None:
    """Fail unless one measured call of fn peaks below `fraction` of one T x T matrix of the inputs' dtype."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    peak = _kernel_peak_bytes(fn, *args, what=what)
    one_matrix = T * T * tensors[0].element_size()
    if peak >= fraction * one_matrix:
        fail(what, f"measured peak {format_bytes(peak)}, while one T x T matrix is {format_bytes(one_matrix)}",
             hint)


def check_chunked_memory(fn) -> None:
    rng = fresh_rng()
    T, d, c = int(rng.integers(1400, 1600)), 32, 128
    q, k, v = (torch.from_numpy(rng.standard_normal((T, d)).astype(np.float32)) for _ in range(3))
    _memory_limit_case(
        fn, (q, k, v, c), T, f"peak memory of chunked_attention(T={T}, d={d}, chunk_size={c})",
        "A chunked computation holds chunk_size x chunk_size tiles and a (T, d) state, far below the full "
        "T x T matrix: does your code build the full score matrix (or a T x T mask) anywhere?", fraction=0.5)


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
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        fail(what, f"returned {type(got).__name__}", "Return the tuple (dq, dk, dv).")
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
    T, dm = int(rng.integers(1500, 1700)), 32
    c = T // 20  # 20 key blocks: (T, c) slices stay far below one T x T matrix
    q, k, v, dout = (torch.from_numpy(rng.standard_normal((T, dm)).astype(np.float32)) for _ in range(4))
    with torch.no_grad():
        s = q @ k.T / math.sqrt(dm)
        out, lse = torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
        del s
    _memory_limit_case(
        fn, (q, k, v, out, dout, lse, c), T,
        f"peak memory of attention_backward_from_lse(T={T}, d={dm}, chunk_size={c})",
        "Stream over key blocks: each block needs only a (T, chunk_size) slice of A, rebuilt from lse; "
        "does your code build the full T x T matrix?", fraction=1.0)


# --------------------------------------------------------------------------------------------
# 6. memory_sweep


def check_memory_sweep(fn) -> None:
    rng = fresh_rng()
    Ts = sorted(int(t) for t in rng.choice(np.arange(150, 500), size=3, replace=False))
    d = int(rng.integers(24, 65))
    extra = int(rng.integers(50_000, 200_000))
    # Probes are built in the kernel (a grader-side function cannot be sent); their peaks are known here.
    probes = {
        "a function that allocates one float64 T x T tensor": (
            helper("mlbook_helpers.measure:square_probe")("float64"), lambda T: 8 * T * T),
        "a function that allocates a copy of q plus a fixed float32 buffer": (
            helper("mlbook_helpers.measure:copy_probe")(extra), lambda T: 4 * T * d + 4 * extra),
    }
    slack = 16_384  # Python objects made during the call are counted too (a few KiB)
    for label, (probe, expected) in probes.items():
        what = f"memory_sweep({label}, T_values={Ts}, d={d})"
        got = _call_with_objects(fn, probe, Ts, d, what=what)
        try:
            got = [float(b) for b in np.ravel(as_array(got))]
        except (TypeError, ValueError, RemoteError):
            fail(what, "returned something other than numbers", "Return a list of ints: one measured peak per T.")
        if len(got) != len(Ts):
            fail(what, f"returned {len(got)} values", "Return one peak per T, in order.")
        for T, b in zip(Ts, got):
            want = expected(T)
            if abs(b - want) > slack + 0.02 * want:
                cause = diagnose(b, {"the inputs were allocated inside the measured call: create q, k, v first":
                                     want + 3 * 4 * T * d}, atol=slack, rtol=0.02)
                fail(f"memory_sweep({label}) at T={T}, d={d}", f"gave {b:,.0f} bytes",
                     cause or "Call peak_memory(attention_fn, q, k, v) on float32 (T, d) inputs made before the "
                              "call, and return its .bytes for each T.")
