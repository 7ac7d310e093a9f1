"""The grader's versions of lab 3's answers that other answers call, lent by ``kit.given`` (one
mistake, one loss): ``scaled_dot_product_attention`` is judged calling these for ``apply_mask``,
and the teacher-forcing pair for ``causal_mask``, so a mistake in one of those costs its own cells
alone. Convention: a mask is True where attention is allowed."""

from __future__ import annotations

import torch

from ...kit import causal_allowed


def graders_causal_mask(T):
    """causal_mask: T -> (1, 1, T, T) bool, True where key j <= query i."""
    return torch.from_numpy(causal_allowed(int(T)))[None, None]  # (1, 1, T, T)


def graders_apply_mask(scores, mask):
    """apply_mask: (B, H, T_q, T_k) scores, a bool mask broadcastable to them (or None) -> the scores with
    every disallowed entry the most negative finite value of their dtype."""
    if mask is None:
        return scores
    scores = torch.as_tensor(scores)  # (B, H, T_q, T_k)
    return scores.masked_fill(~torch.as_tensor(mask, dtype=torch.bool), torch.finfo(scores.dtype).min)
