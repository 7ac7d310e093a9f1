"""Support code for lab 3 (causal and padding masks): ready-made layers to point tests at.

Convention of the lab: a boolean mask is True where attention is allowed. The layers here
are built from PyTorch's own attention (``scaled_dot_product_attention`` with
``is_causal``, and ``nn.MultiheadAttention`` with its ``key_padding_mask``), not from the
lab's answers, so a property test can be tried on a layer that is known to be right and on
one that is known to leak. Every layer works on float32 tensors of width ``D_MODEL``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.nn import functional as F

__all__ = ["D_MODEL", "library_causal_layer", "library_padding_layer"]

D_MODEL = 8  # width of every layer's tokens: x is (B, T, D_MODEL)
N_HEADS = 2


def _projections(seed: int) -> torch.nn.Linear:
    with torch.random.fork_rng():  # fixed weights, without touching the notebook's random state
        torch.manual_seed(seed)
        return torch.nn.Linear(D_MODEL, 3 * D_MODEL)


def library_causal_layer(causal: bool = True, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """A two-head self-attention layer from torch's SDPA, causal or not.

    Args:
        causal: pass ``is_causal=True`` to SDPA; with False the layer reads the future.
        seed: seed of the fixed projection weights.

    Returns:
        layer(x) -> y, with x and y (B, T, D_MODEL) float32.
    """
    proj = _projections(seed)
    d_head = D_MODEL // N_HEADS

    @torch.no_grad()
    def layer(x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        qkv = proj(x.float())  # (B, T, 3 * D_MODEL)
        q, k, v = (t.view(B, T, N_HEADS, d_head).transpose(1, 2) for t in qkv.split(D_MODEL, dim=-1))  # (B, H, T, d_head)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, T, d_head)
        return y.transpose(1, 2).reshape(B, T, D_MODEL)  # (B, T, D_MODEL)

    return layer


def library_padding_layer(use_padding: bool = True, seed: int = 0) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A two-head ``nn.MultiheadAttention`` layer that is told about padding, or not.

    Args:
        use_padding: pass ``is_pad`` as MultiheadAttention's ``key_padding_mask`` (whose own
            convention is True = ignore this key); with False the padding is attended to.
        seed: seed of the layer's weights.

    Returns:
        layer(x, is_pad) -> y, with x and y (B, T, D_MODEL) float32 and is_pad (B, T) bool,
        True at padding tokens.
    """
    with torch.random.fork_rng():  # fixed weights, without touching the notebook's random state
        torch.manual_seed(seed)
        mha = torch.nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).eval()

    @torch.no_grad()
    def layer(x: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
        x = x.float()  # (B, T, D_MODEL)
        y, _ = mha(x, x, x, key_padding_mask=is_pad if use_padding else None, need_weights=False)
        return y  # (B, T, D_MODEL)

    return layer
