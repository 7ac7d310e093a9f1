"""Support code for lab 4 (the transformer block): toy inputs, output statistics, and PyTorch's
own attention layer behind the lab's call.

Nothing here implements attention or a block: these helpers make inputs and measure outputs,
and ``TorchAttention`` only adapts ``torch.nn.MultiheadAttention`` to the lab's calling
convention, so that a block can be given a known attention sublayer.
Shapes follow the lab: a batch of token rows is (B, T, d_model); a mask is True where
attention is allowed (torch.nn.MultiheadAttention's masks are True where it is blocked).
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import torch
from torch import nn

__all__ = ["toy_embeddings", "output_statistics", "head_owner_maps", "TorchAttention", "keep_settings"]


def toy_embeddings(tokens: Sequence[str], d_model: int, scale: float = 1.0) -> torch.Tensor:
    """Untrained, reproducible token vectors: each word always gets the same random vector.

    The vector of a word is drawn from a generator seeded by the word itself, so "refund" has
    the same embedding in every sentence and every run. Nothing is learned.

    Args:
        tokens: T words.
        d_model: the width of each vector.
        scale: standard deviation of the entries.

    Returns:
        (1, T, d_model) float32 tensor.
    """
    rows = [np.random.default_rng(zlib.crc32(t.encode())).normal(0.0, scale, d_model) for t in tokens]  # T x (d_model,)
    return torch.tensor(np.stack(rows), dtype=torch.float32)[None]  # (1, T, d_model)


def output_statistics(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Summaries of a block's output y against its input x (both (B, T, d_model)).

    Returns:
        row_mean: mean over tokens of each token's mean across features.
        row_std: mean over tokens of each token's standard deviation across features.
        cos_to_input: mean over tokens of cos(x_t, y_t): how much of its own input a token keeps.
        cos_between_tokens: mean cosine between different tokens' outputs: 1 means every token
            came out the same.
    """
    x = x.detach().double().reshape(-1, x.shape[-1])  # (B*T, d)
    y = y.detach().double().reshape(-1, y.shape[-1])  # (B*T, d)
    xn = x / x.norm(dim=-1, keepdim=True)  # (B*T, d) unit rows
    yn = y / y.norm(dim=-1, keepdim=True)  # (B*T, d)
    sim = yn @ yn.T  # (B*T, B*T) cosine between output rows
    n = sim.shape[0]
    off_diag = (sim.sum() - sim.diagonal().sum()) / (n * (n - 1))
    return {
        "row_mean": float(y.mean(-1).mean()),
        "row_std": float(y.std(-1, unbiased=False).mean()),
        "cos_to_input": float((xn * yn).sum(-1).mean()),
        "cos_between_tokens": float(off_diag),
    }


def head_owner_maps(T: int, d_model: int, n_heads: int) -> dict[str, np.ndarray]:
    """Which head each (token, channel) entry of a (T, d_model) input ends up in.

    Returns:
        Two (T, d_model) integer maps: "intended" (head h owns channels
        [h * d_head, (h + 1) * d_head) of every token) and "direct view (B, H, T, d_head)"
        (what a single ``view`` to that shape does, which is a bug).
    """
    d_head = d_model // n_heads
    intended = np.tile(np.arange(d_model) // d_head, (T, 1))  # (T, d_model)
    flat_index = np.arange(T * d_model).reshape(T, d_model)  # (T, d_model) position in memory
    direct = flat_index // (T * d_head)  # (T, d_model): the leading axis of a (H, T, d_head) view
    return {"intended": intended, "direct view (B, H, T, d_head)": direct}


def keep_settings(replacement: nn.Module, original: nn.Module) -> nn.Module:
    """``replacement`` given every plain setting (bool, int, float, str) of ``original`` that it lacks.

    A sublayer swapped for another (the lab's attention for ``TorchAttention``) keeps the numbers
    its block may read from it, such as ``n_heads`` or ``d_head``, whatever they are named.

    Returns:
        ``replacement`` itself.
    """
    for name, value in dict(getattr(original, "__dict__", {})).items():
        if not name.startswith("_") and isinstance(value, (bool, int, float, str)) and not hasattr(replacement, name):
            setattr(replacement, name, value)
    return replacement


class TorchAttention(nn.Module):
    """torch.nn.MultiheadAttention called the lab's way: ``attn(x_q, x_kv, mask) -> (out, weights)``.

    Its parameters are those of the wrapped layer (``self.mha``: ``in_proj_weight`` packs
    [W_q; W_k; W_v], ``out_proj`` is W_o).

    Args:
        d_model: model width, divisible by n_heads.
        n_heads: number of heads.
        bias: whether the projections have biases.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            x_q: (B, T_q, d_model); x_kv: (B, T_k, d_model).
            mask: None, or bool broadcastable to (B, H, T_q, T_k), True where attention is allowed.

        Returns:
            out (B, T_q, d_model) and the weights of every head (B, H, T_q, T_k).
        """
        blocked = None
        if mask is not None:
            B, T_q, T_k, H = x_q.shape[0], x_q.shape[1], x_kv.shape[1], self.mha.num_heads
            blocked = ~torch.broadcast_to(mask, (B, H, T_q, T_k)).reshape(B * H, T_q, T_k)  # torch: True = blocked
        return self.mha(x_q, x_kv, x_kv, attn_mask=blocked, need_weights=True, average_attn_weights=False)
