"""grouped_query_attention: groups of query heads sharing key/value heads.

The grader's reference gives query head h the kv head h // (H // G) (``np.repeat`` along the head
axis, which is torch's ``repeat_interleave``) and runs full-matrix float64 attention
(``kit.attention``). Known mistakes are other head maps or an ignored mask.
"""

from __future__ import annotations

import numpy as np
import torch

from ...kit import attention, call_student, causal_allowed, compare, dtype_name, float_tolerance, fresh_rng
from ._common import floats, tensor

__all__ = ["check_grouped_query_attention"]


def _gqa(q, k, v, causal, heads: np.ndarray | None = None, *, no_mask: bool = False, scale=None):
    """Attention with query head h reading kv head heads[h] (default h // (H // G))."""
    H, G = q.shape[1], k.shape[1]
    if heads is None:
        heads = np.arange(H) // (H // G)
    allowed = causal_allowed(q.shape[-2], k.shape[-2]) if causal and not no_mask else None
    return attention(q, k[:, heads], v[:, heads], allowed, scale=scale)[0]


def _variants(q, k, v, causal) -> dict:
    H, G = q.shape[1], k.shape[1]
    out = {
        "query head h read kv head h % G (the kv heads were tiled, as by k.repeat(1, H // G, 1, 1)): query head h "
        "must read kv head h // (H // G), as k.repeat_interleave(H // G, dim=1) gives":
            lambda: _gqa(q, k, v, causal, np.arange(H) % G),
        "query head h read kv head h // G: the group size is H // G, so query head h reads kv head h // (H // G)":
            lambda: _gqa(q, k, v, causal, np.arange(H) // G),
        "every query head read a mix of all kv heads (their mean): query head h must read its own group's kv head, "
        "h // (H // G)": lambda: attention(q, np.broadcast_to(k.mean(1, keepdims=True), (k.shape[0], H) + k.shape[2:]),
                                           np.broadcast_to(v.mean(1, keepdims=True), (v.shape[0], H) + v.shape[2:]),
                                           causal_allowed(q.shape[-2], k.shape[-2]) if causal else None)[0],
        "every query head read kv head 0: with G kv heads, query head h reads kv head h // (H // G)":
            lambda: _gqa(q, k, v, causal, np.zeros(H, dtype=int)),
        "the scores are not divided by sqrt(d_k)": lambda: _gqa(q, k, v, causal, scale=1.0),
    }
    if causal:
        out["causal=True was ignored: mask key j for query i when j > i"] = lambda: _gqa(q, k, v, causal, no_mask=True)
    return out


def _case(fn, rng, B, H, G, T_q, T_k, d_k, d_v, causal, dtype) -> None:
    q, k, v = (rng.standard_normal(s) for s in ((B, H, T_q, d_k), (B, G, T_k, d_k), (B, G, T_k, d_v)))
    if dtype == torch.float32:
        q, k, v = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))
    what = (f"grouped_query_attention(q, k, v, causal={causal}) with B={B}, H={H}, G={G}, T_q={T_q}, T_k={T_k}, "
            f"d_k={d_k}, d_v={d_v}, {dtype_name(dtype)}")
    got = call_student(fn, tensor(q, dtype), tensor(k, dtype), tensor(v, dtype), causal=causal, what=what)
    out = floats(got, what, (B, H, T_q, d_v), dtype, "an output of shape (B, H, T_q, d_v), one per query head")
    compare(out, _gqa(q, k, v, causal), what, "Query head h attends with kv head h // (H // G): repeat each kv head "
            "H // G times along the head axis (repeat_interleave), then attend per head as usual.",
            mistakes=_variants(q, k, v, causal), **float_tolerance(dtype))


def check_grouped_query_attention(fn) -> None:
    rng = fresh_rng()
    d_k, d_v = int(rng.integers(3, 10)), int(rng.integers(2, 8))
    # (H, G) in between: G > 1 and H // G > 1 (so h % G differs from h // (H // G)), H // G != G (so h // G differs
    # too), and H <= G * G (so h // G is a valid kv head and the wrong map gives numbers, not an error)
    mid = [(6, 3), (8, 4), (12, 4), (10, 5), (15, 5), (12, 6), (16, 8)]
    H, G = mid[int(rng.integers(len(mid)))]
    T = int(rng.integers(4, 12))
    _case(fn, rng, int(rng.integers(1, 3)), H, G, int(rng.integers(2, 9)), int(rng.integers(3, 12)), d_k, d_v, False,
          torch.float64)
    _case(fn, rng, int(rng.integers(1, 3)), H, G, T, T, d_k, d_v, True, torch.float64)
    _case(fn, rng, 1, H, G, T, T, d_k, d_v, True, torch.float32)
    H2 = int(rng.integers(2, 7))
    _case(fn, rng, int(rng.integers(1, 3)), H2, H2, T, T, d_k, d_v, True, torch.float64)  # G = H: multi-head
    _case(fn, rng, int(rng.integers(1, 3)), H2 + 1, 1, T, T + 0, d_k, d_v, False, torch.float64)  # G = 1: multi-query
