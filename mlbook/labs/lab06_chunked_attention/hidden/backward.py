"""attention_backward_from_lse: gradients rebuilt block by block from the saved out and lse."""

from __future__ import annotations

import math

import numpy as np
import torch

from ...kit import attention_grads, call_student, causal_allowed, compare, dtype_name, fresh_rng
from ._common import grads, reference, scores, tensor
from .memory import check_backward_memory, memory_root

__all__ = ["check_backward_from_lse"]


def _backward_variants(q, k, v, out, dout, lse, causal, c) -> dict:
    """What known backward mistakes return, as (dq, dk, dv) in float64 (``c``: the chunk size)."""
    d = q.shape[1]
    s = scores(q, k, causal)  # (T_q, T_k)

    def mistake(A, D=None, scale=1 / math.sqrt(d), transpose_dk=True):
        dA = dout @ v.T  # (T_q, T_k)
        D = (dout * out).sum(axis=1)[:, None] if D is None else D  # (T_q, 1), or (T_q, T_k): one value per block
        dS = A * (dA - D)
        dk = (dS.T @ q if transpose_dk else dS @ q) * scale
        return dS @ k * scale, dk, A.T @ dout

    def per_block_D(A):
        """(T_q, T_k): each key block's own rowsum(dA * A), as a loop that computes D inside the block does."""
        dA = dout @ v.T  # (T_q, T_k)
        D = np.empty_like(A)
        for start in range(0, A.shape[1], c):
            D[:, start:start + c] = (dA[:, start:start + c] * A[:, start:start + c]).sum(axis=1, keepdims=True)
        return D

    A = np.exp(s - lse[:, None])
    with np.errstate(all="ignore"):
        return {
            "D was computed inside the loop from each key block's own dA * A: D is the rowsum over the whole row, "
            "D = rowsum(dout * out), computed once before the loop": lambda: mistake(A, D=per_block_D(A)),
            "the causal mask is missing where the weights are rebuilt: mask keys j > i before exp(S - lse), so that "
            "their weights are exactly 0": lambda: mistake(np.exp(scores(q, k, False) - lse[:, None])),
            "the 1/sqrt(d_k) scale is missing from dq and dk (S = Q K^T / sqrt(d_k))":
                lambda: mistake(A, scale=1.0),
            "the weights were rebuilt as exp(S) / lse: subtract lse in the exponent, A = exp(S - lse)":
                lambda: mistake(np.exp(s) / lse[:, None]),
            "D is rowsum(dout) instead of rowsum(dout * out)": lambda: mistake(A, D=dout.sum(axis=1)[:, None]),
            "dK is missing the transpose: dK = dS^T Q / sqrt(d_k)": lambda: mistake(A, transpose_dk=False),
        }


_FORMULAS = ("dV = A^T dout; dA = dout V^T; dS = A * (dA - D) with D = rowsum(dout * out); dQ = dS K / sqrt(d_k); "
             "dK = dS^T Q / sqrt(d_k); A = exp(S - lse) block by block.")
_ACROSS_BLOCKS = ("correct on one block but not across blocks? Rebuild each block's weights as exp(S_block - lse) with "
                  "the full row's lse, not from a softmax over the block")


def _backward_case(fn, T_q, T_k, d, d_v, c, causal, dtype, rng) -> None:
    q, k, v = (rng.standard_normal(shape) for shape in ((T_q, d), (T_k, d), (T_k, d_v)))
    dout = rng.standard_normal((T_q, d_v))
    if dtype == torch.float32:
        q, k, v, dout = (x.astype(np.float32).astype(np.float64) for x in (q, k, v, dout))
    out, lse = reference(q, k, v, causal)
    if dtype == torch.float32:
        out, lse = out.astype(np.float32).astype(np.float64), lse.astype(np.float32).astype(np.float64)
    what = f"attention_backward_from_lse(T_q={T_q}, T_k={T_k}, chunk_size={c}, causal={causal}, {dtype_name(dtype)})"
    got = call_student(fn, *(tensor(x, dtype) for x in (q, k, v, out, dout, lse)), c, causal=causal, what=what)
    got = grads(got, what, q.shape, k.shape, v.shape, dtype)
    ref = attention_grads(q, k, v, dout, causal_allowed(T_q, T_k) if causal else None)
    want = [ref["dq"], ref["dk"], ref["dv"]]
    tol = dict(atol=1e-3, rtol=1e-3) if dtype == torch.float32 else dict(atol=1e-8, rtol=1e-8)
    variants = _backward_variants(q, k, v, out, dout, lse, causal, c)
    for i, name in enumerate(("dq", "dk", "dv")):
        # With several key blocks, dq and dk that no known mistake explains often come from weights
        # normalised per block instead of with the full row's lse.
        across = c < T_k and name in ("dq", "dk")
        compare(got[i], want[i], f"{what}: {name}", _ACROSS_BLOCKS if across else _FORMULAS, **tol,
                mistakes={message: (lambda variant=variant, i=i: variant()[i]) for message, variant in variants.items()})


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
    root = memory_root()
    for causal in (False, True):
        check_backward_memory(fn, rng, causal, root)
