"""The copy task and a tiny decoder-only model for lab 5 (entropy collapse).

Conventions (stated once, relied on everywhere in lab 5):
- A sequence is ``x_0 .. x_{L-1}, SEP, x_0 .. x_{L-1}``: L random data tokens, a separator,
  then the same L tokens again. The model reads the sequence minus its last token
  (T = 2L inputs) and predicts the next token at every position. Only the L predictions
  after the separator are scored: they are fully determined by the first half, while the
  first half is random and cannot be predicted at all.
- The unigram baseline is ``log(vocab)`` nats: the loss of a model that predicts the
  uniform distribution over data tokens, i.e. one that has learnt nothing about copying.
- Attention weights are (B, H, T_q, T_k): ``attn[b, h, i, j]`` is how much query i of head h
  reads from key j. Attention is causal, so weights above the diagonal are exactly 0.
- Projection matrices follow PyTorch's (out, in) layout: ``q = x @ W_q.T``. Each block's
  ``torch.nn.MultiheadAttention`` packs W_q, W_k, W_v as the rows of ``in_proj_weight``
  (3 d_model, d_model), in that order; ``block.W_q``, ``block.W_k`` and ``block.W_v`` are
  views of those rows, so changing a view in place changes the model. No biases.

This module holds no lab solution: the attention itself is PyTorch's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["CopyTask", "TinyDecoder", "Block", "copy_loss", "causal_ceiling", "requires_grad"]


@dataclass(frozen=True)
class CopyTask:
    """Sizes of the copy task.

    Attributes:
        n_data: number of distinct data tokens (0 .. n_data-1); the separator is ``n_data``.
        length: L, the number of tokens to copy.
    """

    n_data: int = 16
    length: int = 8

    @property
    def vocab(self) -> int:
        """Data tokens plus the separator."""
        return self.n_data + 1

    @property
    def T(self) -> int:
        """Input length seen by the model (2 L)."""
        return 2 * self.length

    @property
    def unigram_baseline(self) -> float:
        """Loss in nats of predicting every data token with probability 1 / n_data."""
        return math.log(self.n_data)

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw a batch of copy sequences.

        Args:
            batch_size: B.
            generator: the torch generator the data tokens are drawn from.
        Returns:
            inputs: (B, T) int64 token ids.
            targets: (B, T) int64 next tokens; -100 (ignored by cross-entropy) at the first
                L positions, whose next token is random.
        """
        L = self.length
        data = torch.randint(0, self.n_data, (batch_size, L), generator=generator)  # (B, L)
        sep = torch.full((batch_size, 1), self.n_data, dtype=torch.long)  # (B, 1)
        seq = torch.cat([data, sep, data], dim=1)  # (B, 2L + 1)
        inputs = seq[:, :-1]  # (B, T)
        targets = seq[:, 1:].clone()  # (B, T)
        targets[:, :L] = -100  # the first half's next tokens are unpredictable
        return inputs, targets


def copy_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy in nats over the scored (copy) positions.

    Args:
        logits: (B, T, vocab).
        targets: (B, T) with -100 where a position is not scored.
    Returns:
        () scalar loss.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


def causal_ceiling(T: int) -> float:
    """Mean entropy in nats of uniform causal attention over T positions.

    Query i may read keys 0..i, so its largest possible entropy is log(i + 1); this is the
    mean of those ceilings, the causal counterpart of log T.
    """
    return sum(math.log(i + 1) for i in range(T)) / T


def requires_grad(model: nn.Module) -> dict[str, bool]:
    """Whether each parameter of ``model`` still requires grad.

    A model's weights read from outside its process arrive as plain arrays, without this
    flag (lab 5's grader reads a model that way); this reports the flags as data.

    Args:
        model: any module.
    Returns:
        parameter name (as in ``named_parameters``) -> its ``requires_grad``.
    """
    return {name: p.requires_grad for name, p in model.named_parameters()}


class Block(nn.Module):
    """Pre-LayerNorm decoder block: causal multi-head self-attention, then an optional GELU MLP.

    Args:
        d_model: width.
        n_heads: heads (d_head = d_model // n_heads).
        extra_scale: multiply the queries by this factor before the scores are taken;
            ``1 / sqrt(d_head)`` reproduces the bug of dividing by sqrt(d_head) twice.
        d_ff: hidden width of the MLP; 0 (the default) makes the block attention-only, which
            is all the copy task needs and keeps training fast.
    """

    def __init__(self, d_model: int, n_heads: int, extra_scale: float = 1.0, d_ff: int = 0):
        super().__init__()
        self.d_model, self.n_heads, self.extra_scale = d_model, n_heads, extra_scale
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True)
        self.mlp = None
        if d_ff:
            self.mlp = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    @property
    def W_q(self) -> torch.Tensor:
        """(d_model, d_model) query projection: a view of rows 0..d-1 of ``attn.in_proj_weight``."""
        return self.attn.in_proj_weight[: self.d_model]

    @property
    def W_k(self) -> torch.Tensor:
        """(d_model, d_model) key projection: a view of rows d..2d-1 of ``attn.in_proj_weight``."""
        return self.attn.in_proj_weight[self.d_model : 2 * self.d_model]

    @property
    def W_v(self) -> torch.Tensor:
        """(d_model, d_model) value projection: a view of rows 2d..3d-1 of ``attn.in_proj_weight``."""
        return self.attn.in_proj_weight[2 * self.d_model :]

    def forward(self, x: torch.Tensor, blocked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            x: (B, T, d_model) residual stream.
            blocked: (T, T) bool, True where attention is NOT allowed (PyTorch's convention
                for ``attn_mask``; here, the keys after each query).
        Returns:
            x: (B, T, d_model) updated stream.
            attn: (B, H, T, T) attention weights of every head.
        """
        h = self.ln1(x)  # (B, T, d_model)
        out, attn = self.attn(
            h * self.extra_scale, h, h, attn_mask=blocked, need_weights=True, average_attn_weights=False
        )  # (B, T, d_model), (B, H, T, T)
        x = x + out  # (B, T, d_model)
        if self.mlp is not None:
            x = x + self.mlp(x)  # (B, T, d_model)
        return x, attn


class TinyDecoder(nn.Module):
    """A tiny decoder-only transformer for the copy task (about 36k parameters by default).

    Token and learned position embeddings, ``n_layers`` pre-LayerNorm blocks, a final
    LayerNorm and a linear read-out.

    Args:
        task: the copy task (vocabulary and length).
        d_model: width. n_heads: heads per layer. n_layers: blocks.
        extra_scale: see ``Block`` (1.0 is the correct model).
        d_ff: see ``Block`` (0: attention-only).
    """

    def __init__(self, task: CopyTask, d_model: int = 64, n_heads: int = 2, n_layers: int = 2,
                 extra_scale: float = 1.0, d_ff: int = 0):
        super().__init__()
        self.task = task
        self.tok = nn.Embedding(task.vocab, d_model)
        self.pos = nn.Embedding(task.T, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, extra_scale, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, task.vocab)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Args:
            tokens: (B, T') int64 ids, T' <= task.T.
        Returns:
            logits: (B, T', vocab).
            attns: one (B, H, T', T') weight tensor per layer.
        """
        T = tokens.shape[1]
        positions = torch.arange(T, device=tokens.device)  # (T,)
        x = self.tok(tokens) + self.pos(positions)  # (B, T, d_model)
        blocked = torch.ones(T, T, dtype=torch.bool, device=tokens.device).triu(1)  # (T, T)
        attns = []
        for block in self.blocks:
            x, attn = block(x, blocked)  # (B, T, d_model), (B, H, T, T)
            attns.append(attn)
        return self.head(self.ln_f(x)), attns
