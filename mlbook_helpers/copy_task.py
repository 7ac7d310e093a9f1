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

- Masks passed to ``TinyDecoder.forward`` as ``allowed`` are (T, T) bool, True where query i
  may read key j (the labs' convention; ``nn.MultiheadAttention`` itself wants the opposite).

This module holds no lab solution: the attention itself is PyTorch's (``nn.MultiheadAttention``,
or ``F.scaled_dot_product_attention`` in the variant with a QK-normalisation or a learned
temperature, whose weights are read off by attending to an identity matrix of values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["CopyTask", "LookbackTask", "TinyDecoder", "Block", "copy_loss", "causal_ceiling", "requires_grad",
           "train_adam"]


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


@dataclass(frozen=True)
class LookbackTask:
    """A labelling task on long sequences in which most queries need no attention at all.

    A sequence is ``BOS, x_1 .. x_{T-1}``: a fixed first token (id ``n_data``), then random data
    tokens. At position i the target is ``x_{i - lag}`` when ``x_i`` is a *flag* (a token id
    below ``n_flags``), and ``x_i`` itself otherwise: only flagged positions need to read
    another token, every other query has nothing to fetch. The first ``lag + 1`` positions are
    not scored.

    Attributes:
        n_data: distinct data tokens. T: sequence length, BOS included. lag: how far back a flag
        reads. n_flags: how many token ids are flags (n_flags / n_data of the positions).
    """

    n_data: int = 16
    T: int = 32
    lag: int = 4
    n_flags: int = 8

    @property
    def vocab(self) -> int:
        """Data tokens plus BOS."""
        return self.n_data + 1

    @property
    def bos(self) -> int:
        """The id of the first token of every sequence."""
        return self.n_data

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw a batch.

        Returns:
            inputs: (B, T) int64, ``inputs[:, 0] == bos``.
            targets: (B, T) int64; -100 at the first ``lag + 1`` positions.
        """
        data = torch.randint(0, self.n_data, (batch_size, self.T - 1), generator=generator)  # (B, T - 1)
        inputs = torch.cat([torch.full((batch_size, 1), self.bos, dtype=torch.long), data], dim=1)  # (B, T)
        back = torch.roll(inputs, self.lag, dims=1)  # (B, T): back[:, i] = inputs[:, i - lag]
        targets = torch.where(inputs < self.n_flags, back, inputs)  # (B, T)
        targets[:, : self.lag + 1] = -100
        return inputs, targets


def train_adam(model: nn.Module, steps: int, lr: float = 3e-3, batch_size: int = 32, seed: int = 0) -> float:
    """Train ``model`` on ``model.task`` with Adam (as language models are trained); return the last loss.

    Args:
        model: a TinyDecoder. steps: updates. lr: Adam's learning rate. batch_size: sequences per step.
        seed: seeds the torch.Generator that draws every batch.
    Returns:
        The training loss of the last batch (nats).
    """
    draws = torch.Generator()
    draws.manual_seed(seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        x, y = model.task.batch(batch_size, draws)  # (B, T), (B, T)
        loss = copy_loss(model(x)[0], y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return loss.item()


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
        qk_norm: None, or a function ``(q, k) -> (q, k)`` applied to the per-head queries and
            keys, each (B, H, T, d_head), before the scores are taken (QK-normalisation).
        learn_temperature: give each head a learned score multiplier ``exp(log_temperature[h])``
            (starts at 1).
    """

    def __init__(self, d_model: int, n_heads: int, extra_scale: float = 1.0, d_ff: int = 0,
                 qk_norm=None, learn_temperature: bool = False):
        super().__init__()
        self.d_model, self.n_heads, self.extra_scale = d_model, n_heads, extra_scale
        self.qk_norm = qk_norm
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True)
        self.log_temperature = nn.Parameter(torch.zeros(n_heads)) if learn_temperature else None
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
        if self.qk_norm is None and self.log_temperature is None:
            out, attn = self.attn(
                h * self.extra_scale, h, h, attn_mask=blocked, need_weights=True, average_attn_weights=False
            )  # (B, T, d_model), (B, H, T, T)
        else:
            out, attn = self._variant(h, blocked)
        x = x + out  # (B, T, d_model)
        if self.mlp is not None:
            x = x + self.mlp(x)  # (B, T, d_model)
        return x, attn

    def _variant(self, h: torch.Tensor, blocked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The same attention with qk_norm and/or a learned temperature, through SDPA.

        Args:
            h: (B, T, d_model) normalised stream. blocked: (T, T) bool, True where NOT allowed.
        Returns:
            (B, T, d_model) output and (B, H, T, T) weights.
        """
        B, T, _ = h.shape
        heads = lambda t: t.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # (B, T, d) -> (B, H, T, d_head)
        q, k, v = (heads(t) for t in F.linear(h, self.attn.in_proj_weight).chunk(3, dim=-1))  # (B, H, T, d_head)
        q = q * self.extra_scale  # (B, H, T, d_head)
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)  # (B, H, T, d_head) each
        if self.log_temperature is not None:
            q = q * self.log_temperature.exp()[:, None, None]  # (B, H, T, d_head): scores times exp(log_temperature)
        identity = torch.eye(T, dtype=h.dtype, device=h.device).expand(B, self.n_heads, T, T)  # (B, H, T, T)
        attn = F.scaled_dot_product_attention(q, k, identity, attn_mask=~blocked)  # (B, H, T, T): the weights
        mixed = (attn @ v).transpose(1, 2).flatten(-2)  # (B, T, d_model)
        return self.attn.out_proj(mixed), attn


class TinyDecoder(nn.Module):
    """A tiny decoder-only transformer for the copy task (about 36k parameters by default).

    Token and learned position embeddings, ``n_layers`` pre-LayerNorm blocks, a final
    LayerNorm and a linear read-out.

    Args:
        task: the copy task (vocabulary and length).
        d_model: width. n_heads: heads per layer. n_layers: blocks.
        extra_scale: see ``Block`` (1.0 is the correct model).
        d_ff: see ``Block`` (0: attention-only).
        qk_norm, learn_temperature: see ``Block`` (None / False: plain ``nn.MultiheadAttention``).
    """

    def __init__(self, task: CopyTask, d_model: int = 64, n_heads: int = 2, n_layers: int = 2,
                 extra_scale: float = 1.0, d_ff: int = 0, qk_norm=None, learn_temperature: bool = False):
        super().__init__()
        self.task = task
        self.tok = nn.Embedding(task.vocab, d_model)
        self.pos = nn.Embedding(task.T, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, extra_scale, d_ff, qk_norm, learn_temperature)
                                    for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, task.vocab)

    def forward(self, tokens: torch.Tensor, allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Args:
            tokens: (B, T') int64 ids, T' <= task.T.
            allowed: optional (T', T') bool, True where query i may read key j, used by every
                layer (a sliding window, say); default: causal.
        Returns:
            logits: (B, T', vocab).
            attns: one (B, H, T', T') weight tensor per layer.
        """
        T = tokens.shape[1]
        positions = torch.arange(T, device=tokens.device)  # (T,)
        x = self.tok(tokens) + self.pos(positions)  # (B, T, d_model)
        if allowed is None:
            blocked = torch.ones(T, T, dtype=torch.bool, device=tokens.device).triu(1)  # (T, T)
        else:
            blocked = ~torch.as_tensor(allowed, dtype=torch.bool, device=tokens.device)  # (T, T)
        attns = []
        for block in self.blocks:
            x, attn = block(x, blocked)  # (B, T, d_model), (B, H, T, T)
            attns.append(attn)
        return self.head(self.ln_f(x)), attns
