"""split_heads and merge_heads: heads own contiguous channel blocks."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...kit import ask_array, call_student, close, compare, fail, fresh_rng
from ._common import view_error

__all__ = ["DIRECT_VIEW", "MERGE_NO_TRANSPOSE", "check_heads"]

DIRECT_VIEW = ("head h received a block of whole tokens instead of channels [h*d_head, (h+1)*d_head) "
               "of every token: the direct view (B, H, T, d_head) is silently wrong. View as "
               "(B, T, H, d_head) first, then transpose(1, 2)")
MERGE_NO_TRANSPOSE = ("merge without the transpose: flattening (B, H, T, d_head) straight to "
                      "(B, T, d_model) mixes tokens across heads. Transpose back to (B, T, H, d_head) "
                      "first, then .contiguous().view(B, T, d_model)")


def _split_problem(split_heads: Callable, rng: np.random.Generator) -> None:
    B, T, H, dh = int(rng.integers(2, 4)), int(rng.integers(5, 8)), int(rng.integers(2, 5)), int(rng.integers(2, 6))
    d = H * dh
    x_np = rng.normal(size=(B, T, d)).astype(np.float32)  # (B, T, d_model)
    x = torch.from_numpy(x_np.copy())
    what = f"split_heads(x of shape {(B, T, d)}, n_heads={H})"
    out = ask_array(split_heads, x, H, what=what, named=view_error)
    # A split only moves entries, so a tolerance of 0 asks for each one in its place.
    compare(out, x_np.reshape(B, T, H, dh).transpose(0, 2, 1, 3), what,  # (B, H, T, d_head)
            "Head h must hold x[b, t, h*d_head:(h+1)*d_head] at [b, h, t].", atol=0, rtol=0, mistakes={
        DIRECT_VIEW: lambda: x_np.reshape(B, H, T, dh),
        "channels were split with d_head as the outer axis (B, T, d_head, H), so head h got every "
        "H-th channel; head h must own a contiguous block of d_head channels":
            lambda: x_np.reshape(B, T, dh, H).transpose(0, 3, 1, 2),
    }, shape_hint="Expected (B, n_heads, T, d_model // n_heads).",
            observed=lambda _: "heads do not own contiguous channel blocks")


def _merge_problem(merge_heads: Callable, rng: np.random.Generator, contiguous: bool) -> None:
    """merge_heads on heads that are a transposed view (split_heads' output) or contiguous (attn @ v's output)."""
    B, T, H, dh = int(rng.integers(2, 4)), int(rng.integers(5, 8)), int(rng.integers(2, 5)), int(rng.integers(2, 6))
    base = rng.normal(size=(B, T, H, dh)).astype(np.float32)  # (B, T, H, d_head)
    y = torch.from_numpy(base.copy()).transpose(1, 2)  # (B, H, T, d_head), not contiguous, like split_heads output
    if contiguous:
        y = y.contiguous()  # (B, H, T, d_head) in memory order, like attn @ v
    what = f"merge_heads(x of shape {(B, H, T, dh)}, {'contiguous' if contiguous else 'a transposed view'})"
    out = ask_array(merge_heads, y, what=what, named=view_error)
    heads_first = base.transpose(0, 2, 1, 3)  # (B, H, T, d_head)
    compare(out, base.reshape(B, T, H * dh), what,  # (B, T, d_model)
            "Token t's row must be [head 0's d_head channels, head 1's, ...].", atol=0, rtol=0, mistakes={
        MERGE_NO_TRANSPOSE: lambda: heads_first.reshape(B, T, H * dh),
        "channels interleaved across heads (merged through (B, T, d_head, H)); concatenate each "
        "head's d_head channels in head order": lambda: base.transpose(0, 1, 3, 2).reshape(B, T, H * dh),
    }, shape_hint="Expected (B, T, n_heads * d_head).",
            observed=lambda _: "the output is not the concatenation of the heads' channels")


def check_heads(split_heads: Callable, merge_heads: Callable) -> None:
    """split_heads and merge_heads on fresh shapes, and their round trip.

    merge_heads gets heads both as a transposed view (what split_heads returns) and contiguous (what
    attn @ v returns): a .view right after the transpose works on the first only by accident, because
    transposing a transposed view gives back contiguous memory.
    """
    rng = fresh_rng()
    for contiguous in (False, True):
        _split_problem(split_heads, rng)
        _merge_problem(merge_heads, rng, contiguous)
    B, T, H, dh = 2, int(rng.integers(3, 9)), int(rng.integers(2, 5)), int(rng.integers(2, 5))
    x = torch.from_numpy(rng.normal(size=(B, T, H * dh)).astype(np.float32))  # (B, T, d_model)
    heads = call_student(split_heads, x, H, what="split_heads", named=view_error)
    back = call_student(merge_heads, heads, what="merge_heads(split_heads(x))", named=view_error)
    if not close(back, x, atol=0, rtol=0):
        fail("merge_heads(split_heads(x, H))", "does not give x back", "merge_heads must undo split_heads exactly.")
