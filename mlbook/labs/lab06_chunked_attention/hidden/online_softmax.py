"""online_softmax_update: one block of keys folded into the running state (m, l, acc)."""

from __future__ import annotations

import numpy as np
import torch

from ...kit import ask_items, close, dtype_name, fail, first_bad, float_tolerance, fresh_rng
from ._common import floats, tensor

__all__ = ["update", "check_online_softmax_update"]


def update(m, l, acc, s, v, *, rescale_l=True, rescale_acc=True, invert=False, normalise=False, shift_by_old=False,
           block_max=False):
    """The grader's online-softmax update in float64, with switches for known mistakes."""
    with np.errstate(all="ignore"):
        m_new = np.maximum(m, s.max() if block_max else s.max(axis=-1))  # (n_q,)
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
    "the running max took the whole block's largest score (scores_block.max()), not each row's: m holds one max "
    "per query row, the max over that row's keys (dim=-1)": dict(block_max=True),
}


def _update_case(fn, m, l, acc, s, v, dtype, what, loose=False) -> None:
    args = [tensor(x, dtype) for x in (m, l, acc, s, v)]
    got = ask_items(fn, *args, n=3, what=what, names="the tuple (m_new, l_new, acc_new)")
    names = ("m_new", "l_new", "acc_new")
    n_q, d_v = acc.shape
    got = [floats(g, f"{what}: {name}", shape, dtype, "m_new and l_new of shape (n_q,), acc_new of shape (n_q, d_v)")
           for g, name, shape in zip(got, names, ((n_q,), (n_q,), (n_q, d_v)))]
    want = update(m, l, acc, s, v)
    tol = float_tolerance(dtype, loose)
    if all(close(g, w, **tol) for g, w in zip(got, want)):
        return
    # A mistake matches when all three results do; its NaN and inf (0 / 0 after an underflow) are its signature.
    cause = next((message for message, switches in _UPDATE_MISTAKES.items()
                  if all(close(g, w, equal_nan=True, **tol) for g, w in zip(got, update(m, l, acc, s, v, **switches)))),
                 None)
    gv = dict(zip(names, got))
    if cause is None and not (np.all(np.isfinite(gv["acc_new"])) and np.all(np.isfinite(gv["l_new"]))):
        cause = ("the state contains nan or inf: subtract the new running max before exponentiating, and "
                 "compute exp(m_old - m_new) so that m_old = -inf gives 0")
    bad_name = next(n for n, g, w in zip(names, got, want) if not close(g, w, **tol))
    observed = first_bad(gv[bad_name], want[names.index(bad_name)], **tol)
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
                     f"online_softmax_update with scores near {offset:+.0f}, {dtype_name(dtype)}",
                     loose=True)
