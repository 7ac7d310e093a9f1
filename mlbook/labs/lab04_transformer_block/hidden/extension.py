"""The extension's graded function: fused_qkv, one (d, 3d) projection split into q, k, v heads."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...kit import array, ask_items, close, diagnose, fail, first_bad, float_tolerance, fresh_rng
from ._common import view_error

__all__ = ["check_fused_qkv"]


def _np_fused(x: np.ndarray, W: np.ndarray, H: int, variant: str | None = None) -> tuple[np.ndarray, ...]:
    """q, k, v (B, H, T, d_head) of x @ W (columns [W_Q | W_K | W_V]), or a known wrong layout."""
    B, T, d = x.shape
    dh = d // H
    y = x @ W  # (B, T, 3d)
    if variant == "per_head":  # columns read as H blocks of [q_h | k_h | v_h]
        y = y.reshape(B, T, H, 3, dh).transpose(3, 0, 2, 1, 4)  # (3, B, H, T, d_head)
        return y[0], y[1], y[2]
    parts = y.reshape(B, T, 3, H, dh)  # (B, T, 3, H, d_head)
    if variant == "interleaved":  # column c belongs to role c % 3
        parts = y.reshape(B, T, d, 3).transpose(0, 1, 3, 2).reshape(B, T, 3, H, dh)
    if variant == "direct_view":  # each role's (B, T, d) viewed straight as (B, H, T, d_head)
        roles = y.reshape(B, T, 3, d).transpose(2, 0, 1, 3)  # (3, B, T, d)
        return tuple(r.reshape(B, H, T, dh) for r in roles)
    out = parts.transpose(2, 0, 3, 1, 4)  # (3, B, H, T, d_head)
    return out[0], out[1], out[2]


FUSED_VARIANTS = {
    "per_head": "the fused output was read as H blocks of [q_h | k_h | v_h]; the lab's W_qkv is [W_Q | W_K | W_V], "
                "so split the 3d columns into q, k, v first (d columns each), then each into heads",
    "interleaved": "columns were dealt out to q, k, v in turn (column c to role c % 3); q, k and v each own a "
                   "contiguous block of d columns",
    "direct_view": "each of q, k, v was viewed straight as (B, H, T, d_head), which gives head h whole tokens: "
                   "view as (B, T, H, d_head), then transpose(1, 2)",
}


def check_fused_qkv(fused_qkv: Callable) -> None:
    """fused_qkv(x, W_qkv, n_heads) on fresh shapes in float64, against the three separate projections."""
    rng = fresh_rng()
    for _ in range(2):
        B, T, H, dh = int(rng.integers(1, 4)), int(rng.integers(3, 9)), int(rng.integers(2, 5)), int(rng.integers(2, 6))
        d = H * dh
        x_np = rng.normal(size=(B, T, d))  # (B, T, d_model)
        W_np = rng.normal(size=(d, 3 * d)) / np.sqrt(d)  # (d_model, 3 d_model)
        what = f"fused_qkv(x of shape {(B, T, d)}, W_qkv of shape {(d, 3 * d)}, n_heads={H})"
        got = ask_items(fused_qkv, torch.from_numpy(x_np.copy()), torch.from_numpy(W_np.copy()), H, n=3, what=what,
                        names="(q, k, v)", named=view_error)
        got = [array(g, f"{name} of {what}") for name, g in zip("qkv", got)]
        for name, g in zip("qkv", got):
            if g.shape != (B, H, T, dh):
                fail(what, f"{name} has shape {g.shape}", "Expected q, k, v of shape (B, n_heads, T, d_head) each.")
        ref = _np_fused(x_np, W_np, H)
        tol = float_tolerance("float64")
        if all(close(g, r, **tol) for g, r in zip(got, ref)):
            continue
        found = None
        for variant, msg in FUSED_VARIANTS.items():
            wrong = _np_fused(x_np, W_np, H, variant)
            if all(close(g, w, **tol) for g, w in zip(got, wrong)):
                found = msg
                break
        if found is None:
            perm = {"(k, q, v)": (1, 0, 2), "(v, k, q)": (2, 1, 0), "(q, v, k)": (0, 2, 1)}
            found = diagnose(np.stack(got), {
                f"the three were returned as {order}: return (q, k, v), the column blocks in the order "
                f"[W_Q | W_K | W_V]": (lambda p=p: np.stack([ref[i] for i in p])) for order, p in perm.items()
            }, **tol)
        bad = next(name for name, g, r in zip("qkv", got, ref) if not close(g, r, **tol))
        fail(what, found or f"{bad} differs from the separate projection "
                            f"({first_bad(got['qkv'.index(bad)], ref['qkv'.index(bad)], tol['atol'], tol['rtol'])})",
             None if found else "q = x @ W_qkv[:, :d], k = x @ W_qkv[:, d:2d], v = x @ W_qkv[:, 2d:], "
                                "each then split into heads as split_heads does.")
