"""Check of mha_batch_first: a sequence-first nn.MultiheadAttention called on batch-first tokens."""

from __future__ import annotations

from typing import Callable

import torch

from ...kit import array, ask_items, close, diagnose, fail, fresh_rng, lend, seed, torch_generator
from ._common import randn, shape_str

__all__ = ["check_mha_batch_first"]


def _layer(rng) -> torch.nn.MultiheadAttention:
    """A sequence-first layer (the default batch_first=False) with fresh weights, never trained."""
    E, H = [(6, 2), (6, 3), (8, 2), (12, 3), (12, 4)][int(rng.integers(5))]
    with torch.random.fork_rng():
        torch.manual_seed(seed(rng))
        mha = torch.nn.MultiheadAttention(E, H).eval()
    return mha.requires_grad_(False)


def check_mha_batch_first(mha_batch_first: Callable) -> None:
    """(out (B, T, E), weights (B, H, T, T)) from a batch_first=False layer on batch-first x (B, T, E).

    The layer is built here and lent; the reference is the same layer called correctly here. B,
    T and H are drawn different from each other, so every wrong layout shows in a shape or a value.
    """
    rng = fresh_rng()
    gen = torch_generator(rng)
    mha = _layer(rng)
    E, H = mha.embed_dim, mha.num_heads
    B = int(rng.integers(2, 5))
    T = int(rng.choice([t for t in range(3, 9) if t not in (B, H)]))
    while B == H:
        B = int(rng.integers(2, 6))
    x = randn(gen, B, T, E, dtype=torch.float32)  # (B, T, E)

    def run(inp: torch.Tensor, **kw) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            return mha(inp, inp, inp, **kw)

    xt = x.transpose(0, 1)  # (T, B, E): what the layer expects
    ref_out, ref_w = run(xt, average_attn_weights=False)  # (T, B, E), (B, H, T, T)
    ref_out = ref_out.transpose(0, 1)  # (B, T, E)
    what = f"mha_batch_first(a batch_first=False layer with {H} heads, x of shape {shape_str(x.shape)})"
    out, w = ask_items(mha_batch_first, lend(mha), x, n=2, what=what, names="out, weights")
    out = array(out, what + ": out", hint="Return the layer's outputs as a tensor, batch first (B, T, E).")
    w_arr = array(w, what + ": weights", hint="Return the layer's weights as a tensor, (B, H, T, T).")

    silent_out, _ = run(x)  # x read as (T=B, B=T, E): the silent transpose
    reshaped = x.reshape(T, B, E)  # (T, B, E) with the entries in the wrong places
    reshape_out = run(reshaped)[0].reshape(B, T, E)  # (B, T, E)
    if out.shape != (B, T, E) or not close(out, ref_out.numpy(), atol=1e-5, rtol=1e-4):
        msg = diagnose(out, {
            "the layer read x as (T, B, E): with batch_first=False it attends over the batch axis; transpose x to "
            "(T, B, E) first and the outputs back": silent_out.numpy(),
            "a reshape (or view) to (T, B, E) reorders the tokens instead of swapping the axes: use "
            "x.transpose(0, 1)": reshape_out.numpy(),
            "the outputs were left sequence first: transpose them back to (B, T, E)": ref_out.transpose(0, 1).numpy(),
        }, atol=1e-5, rtol=1e-4)
        observed = (f"out has shape {out.shape}, expected {(B, T, E)}" if out.shape != (B, T, E)
                    else "out differs from the layer's outputs on the same tokens")
        fail(what, observed, msg or "Transpose x to (T, B, E) with x.transpose(0, 1), call the layer as "
                                    "self-attention (x as query, key and value), and transpose the outputs back.")
    if w_arr.shape == (B, T, T) and close(w_arr, ref_w.mean(1).numpy(), atol=1e-5, rtol=1e-4):
        fail(what, f"weights have shape {w_arr.shape}, expected {(B, H, T, T)}",
             "these are averaged over heads (the default average_attn_weights=True): pass "
             "average_attn_weights=False for one (T, T) map per head")
    if w_arr.shape != (B, H, T, T):
        hint = ("The weights MultiheadAttention returns are already batch first, (B, H, T, T), even with "
                "batch_first=False: do not transpose them." if w_arr.shape == (H, B, T, T) else
                "Return the weights the layer gives with average_attn_weights=False: (B, H, T, T).")
        fail(what, f"weights have shape {w_arr.shape}, expected {(B, H, T, T)}", hint)
    if not close(w_arr, ref_w.numpy(), atol=1e-5, rtol=1e-4):
        fail(what, "the weights differ from the layer's per-head weights on these tokens",
             "Return the second output of the same call, made with average_attn_weights=False.")
