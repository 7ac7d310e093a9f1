"""Support code for lab 4 (the transformer block): toy inputs and output statistics.

Nothing here computes attention or a block: these helpers make inputs and measure outputs.
Shapes follow the lab: a batch of token rows is (B, T, d_model).
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import torch

__all__ = ["toy_embeddings", "output_statistics", "head_owner_maps"]


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
