"""chunked_attention's results: exact attention tile by tile, against the full-matrix reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ...kit import call_student, close, diagnose, dtype_name, fail, first_bad, float_tolerance, fresh_rng, given
from ._common import out_lse, reference, scores, tensor
from .graders import graders_online_softmax_update
from .online_softmax import update

__all__ = ["check_chunked_attention"]


def _stream(q, k, v, c, causal, *, m0=-np.inf, drop_last=False, skip_diagonal=False, no_mask=False, strict=False,
            local_mask=False, scale="d_k", keys_to_T_q=None, update_mistake: dict[str, Any] | None = None):
    """The grader's tiled attention in float64, with switches that reproduce known mistakes."""
    update_mistake = update_mistake or {}
    T_q, d = q.shape
    T_k = k.shape[0]
    n_keys = (T_k // c) * c if drop_last else T_k
    key_loop = n_keys  # where the loop over key blocks stops
    if keys_to_T_q == "keys":  # exactly the first T_q keys
        key_loop = n_keys = min(T_q, T_k)
    elif keys_to_T_q == "blocks":  # the key blocks that start before T_q, each ending at min(start + c, T_k)
        key_loop = min(T_q, T_k)
    divisor = {"d_k": math.sqrt(d), "d_v": math.sqrt(v.shape[1]), "none": 1.0}[scale]  # what the scores are divided by
    out, lse = np.zeros((T_q, v.shape[1])), np.zeros(T_q)
    for qs in range(0, T_q, c):
        qe = min(qs + c, T_q)
        m, l, acc = np.full(qe - qs, m0), np.zeros(qe - qs), np.zeros((qe - qs, v.shape[1]))
        stop = (qs if skip_diagonal else min(qe, n_keys)) if causal else key_loop
        for ks in range(0, stop, c):
            ke = min(ks + c, n_keys)
            s = q[qs:qe] @ k[ks:ke].T / divisor
            if causal and local_mask:  # positions counted from the tile's and the block's starts
                s = np.where(np.arange(ke - ks)[None, :] > np.arange(qe - qs)[:, None], -np.inf, s)
            elif causal and not no_mask:
                future = np.arange(ks, ke)[None, :] > np.arange(qs, qe)[:, None]  # (n_q, n_k)
                if strict:
                    future = np.arange(ks, ke)[None, :] >= np.arange(qs, qe)[:, None]
                s = np.where(future, -np.inf, s)
            m, l, acc = update(m, l, acc, s, v[ks:ke], **update_mistake)
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
    "the causal mask also hides each query's own key (j >= i): query i may read keys j <= i, itself included":
        dict(strict=True),
    "the causal mask compares positions counted from the start of each tile and block (0 .. chunk_size - 1), not "
    "the absolute positions q_start + i and k_start + j: every block before the diagonal loses keys it may read":
        dict(local_mask=True),
    "the scores were not scaled by 1/sqrt(d_k)": dict(scale="none"),
    "the scores were scaled by 1/sqrt(d_v), the value width: the scale uses d_k, the query/key width (here "
    "d_v differs)": dict(scale="d_v"),
    "only the first T_q keys were read: loop over the T_k keys (k.shape[0]), which may differ from the T_q queries":
        dict(keys_to_T_q="keys"),
    "only the key blocks that start before T_q were read: loop over the T_k keys (k.shape[0]), which may differ "
    "from the T_q queries": dict(keys_to_T_q="blocks"),
    "the running sums are not rescaled by exp(m_old - m_new) when the max grows":
        dict(update_mistake=dict(rescale_l=False, rescale_acc=False)),
    "the denominator is rescaled but the accumulator is not (acc needs exp(m_old - m_new) too)":
        dict(update_mistake=dict(rescale_acc=False)),
    "the accumulator is divided by the denominator inside the loop: divide acc by l once, after the last block":
        dict(update_mistake=dict(normalise=True)),
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
            f"T_k={k.shape[0]}, {dtype_name(dtype)}{label}")
    got = call_student(fn, tensor(q, dtype), tensor(k, dtype), tensor(v, dtype), c, causal=causal, what=what)
    out, lse = out_lse(got, what, q.shape[0], v.shape[1], dtype)
    want_out, want_lse = reference(q, k, v, causal)
    tol = float_tolerance(dtype, loose)
    if close(out, want_out, **tol) and close(lse, want_lse, **tol):
        return
    name, mine, want = ("out", out, want_out) if not close(out, want_out, **tol) else ("lse", lse, want_lse)
    idx = 0 if name == "out" else 1
    variants = {msg: (lambda sw=sw: _stream(q, k, v, c, causal, **sw)[idx]) for msg, sw in _CHUNK_MISTAKES.items()}
    if name == "lse":
        row_max = scores(q, k, causal).max(axis=1)  # (T_q,)
        variants = {
            "lse is log(l) without the running max: lse = m + log(l)": want_lse - row_max,
            "lse is the running max alone: lse = m + log(l)": row_max,
            "lse was computed from unscaled scores: scale them by 1/sqrt(d_k)":
                lambda: reference(q * math.sqrt(q.shape[1]), k, v, causal)[1],
            **variants,
        }
    # A mistake's NaN or inf (0 / 0 after an underflow) is part of its signature: diagnose matches it.
    cause = diagnose(mine, variants, **tol)
    if cause is None and dtype == torch.float64 and close(mine, want, atol=1e-4, rtol=1e-4):
        cause = ("the result is right only to float32 precision: create new tensors with the inputs' dtype "
                 "(q.new_zeros, q.new_full, dtype=q.dtype) so float64 stays float64")
    fail(f"{what}: {name}", first_bad(mine, want, **tol),
         cause or "Compare with the full softmax on a small case: every query tile streams every allowed key "
                  "block through online_softmax_update, then out = acc / l and lse = m + log(l).")


def check_chunked_attention(fn) -> None:
    # the tiling alone: the online_softmax_update it calls is the grader's (a wrong update costs its own cells)
    fn = given(fn, online_softmax_update=graders_online_softmax_update)
    rng = fresh_rng()
    # a) non-causal, T_k not a multiple of chunk_size and longer than T_q by more than a block (so that keys
    #    read up to T_q instead of T_k miss some), float64, d_v != d_k
    c = int(rng.integers(5, 12))
    T_k = c * int(rng.integers(4, 8)) + int(rng.integers(1, c))
    T_q = int(rng.integers(c + 1, T_k - c))
    d = int(rng.integers(4, 17))
    d_v = int(rng.choice([x for x in range(2, 13) if x != d]))
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
