"""Check of permutation_gap: attention is permutation-equivariant without a mask, not with the causal one."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from mlbook_helpers.masking import library_attention

from ...kit import attention, call_student, causal_allowed, diagnose, fail, fresh_rng, lend, number, torch_generator
from ._common import as_numpy, randn

__all__ = ["check_permutation_gap"]


def check_permutation_gap(permutation_gap: Callable) -> None:
    """gap = max |Attn(Pq, Pk, Pv) - P Attn(q, k, v)|: 0 without a mask, > 0 with the causal mask.

    The student's ``permutation_gap`` gets torch's SDPA (``library_attention``, lent to the
    kernel); the reference gap is kit.attention's, in float64. Without a fully masked row the
    two agree to rounding.
    """
    rng = fresh_rng()
    gen = torch_generator(rng)
    B, H, T, d = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(5, 9)), int(rng.integers(2, 7))
    q, k, v = (randn(gen, B, H, T, d) for _ in range(3))  # (B, H, T, d) float64 each
    perm = torch.from_numpy(rng.permutation(T))
    while torch.equal(perm, torch.arange(T)):
        perm = torch.from_numpy(rng.permutation(T))
    causal = torch.from_numpy(causal_allowed(T))[None, None]  # (1, 1, T, T)
    qn, kn, vn, p = as_numpy(q), as_numpy(k), as_numpy(v), perm.numpy()

    for mask, label in ((None, "without a mask"), (causal, "with the causal mask")):
        allowed = None if mask is None else mask.numpy()
        out = attention(qn, kn, vn, allowed)[0]  # (B, H, T, d): the tokens in order
        out_perm = attention(qn[..., p, :], kn[..., p, :], vn[..., p, :], allowed)[0]  # (B, H, T, d)
        what = f"permutation_gap {label}, T = {T}"
        got = call_student(permutation_gap, lend(library_attention), q, k, v, perm, mask, what=what)
        got = number(got, what, "Return one number: the largest absolute difference (float(...) or .item()).")
        ref = float(np.abs(out_perm - out[..., p, :]).max())
        if abs(got - ref) <= 1e-8 + 1e-6 * abs(ref):
            continue
        msg = diagnose(got, {
            "the outputs were re-ordered with the inverse permutation: Attn(q[perm], ...) should equal out[perm]":
                lambda: float(np.abs(out_perm - out[..., np.argsort(p), :]).max()),
            "only the queries were permuted: permute q, k and v together (the same token order for all three)":
                lambda: float(np.abs(attention(qn[..., p, :], kn, vn, allowed)[0] - out[..., p, :]).max()),
            "the gap is not the largest absolute difference: use (a - b).abs().max()":
                lambda: float((out_perm - out[..., p, :]).max()),
        }, atol=1e-8, rtol=1e-6)
        fail(what, f"your gap is {got:.3g}",
             msg or "Permute the token axis (dim -2) of q, k and v with perm, run attn_fn, and compare with the "
                    "unpermuted outputs re-ordered by the same perm.")
