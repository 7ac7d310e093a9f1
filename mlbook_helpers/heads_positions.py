"""Support code for lab 4's extension: a toy that needs two attention patterns at once, tools that
measure how far information travels in a layer, T5's relative-position buckets, and a timer.

Nothing here is an answer to a graded question: the toy trains whatever attention module it is
given, the measuring tools run PyTorch's own layers, and ``t5_relative_bucket`` is given code.
Shapes follow the lab: a batch of token rows is (B, T, d_model); attention weights are
(B, H, T_q, T_k).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import torch
from torch import nn

__all__ = ["relation_batch", "train_relation_toy", "conv_stack_reaches", "gradient_by_distance",
           "t5_relative_bucket", "diagonal_spread", "median_seconds"]

MEASURED_DISTANCE_LIMIT = 64  # the measuring tools are for the lab's small pictures, not for answers


def relation_batch(generator: torch.Generator, batch: int, T: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences whose target needs two relations: the previous token and the next one.

    Token t of a sequence is ``[one-hot of its word (vocab), one-hot of its position (T)]``; its
    target is ``[one-hot of the word at t - 1, one-hot of the word at t + 1]`` (positions wrap
    around, so every token has both neighbours).

    Args:
        generator: a seeded torch.Generator.
        batch: B.
        T: sequence length.
        vocab: number of words V.

    Returns:
        x: (B, T, V + T) inputs, y: (B, T, 2 V) targets, both float32.
    """
    words = torch.randint(vocab, (batch, T), generator=generator)  # (B, T)
    word_code = nn.functional.one_hot(words, vocab).float()  # (B, T, V)
    position_code = torch.eye(T).expand(batch, T, T)  # (B, T, T)
    x = torch.cat([word_code, position_code], dim=-1)  # (B, T, V + T)
    before = nn.functional.one_hot(words.roll(1, dims=1), vocab)  # (B, T, V): the word at t - 1
    after = nn.functional.one_hot(words.roll(-1, dims=1), vocab)  # (B, T, V): the word at t + 1
    return x, torch.cat([before, after], dim=-1).float()  # (B, T, V + T), (B, T, 2 V)


def train_relation_toy(attn: nn.Module, steps: int = 200, batch: int = 32, lr: float = 3e-2,
                       seed: int = 0, T: int = 8, vocab: int = 8) -> dict:
    """Train one attention layer alone (no FFN, no residual) on ``relation_batch``, then measure it.

    Args:
        attn: a module called as ``attn(x_q, x_kv) -> (out, weights)`` with d_model = vocab + T
            inputs and outputs; its output is read as the prediction of the 2 V target channels
            (so d_model must be 2 * vocab, which vocab = T gives).
        steps, batch, lr: Adam's training run.
        seed: seeds the data; seed torch yourself before building ``attn`` for its weights.
        T, vocab: the toy's sizes.

    Returns:
        dict with "loss" (mean squared error on 512 fresh sequences), "weights" (H, T, T) the
        weights averaged over those sequences, "to_previous" and "to_next" ((H,) the mean weight
        each head puts on the token before and the token after).
    """
    data = torch.Generator().manual_seed(seed)
    params = [p for p in attn.parameters() if p.requires_grad]
    attn.train()
    step = _adam(params, lr)
    for _ in range(steps):
        x, y = relation_batch(data, batch, T, vocab)  # (B, T, d), (B, T, 2V)
        loss = ((attn(x, x)[0] - y) ** 2).mean()
        step(torch.autograd.grad(loss, params))
    attn.eval()
    x, y = relation_batch(torch.Generator().manual_seed(seed + 1), 512, T, vocab)  # held-out sequences
    with torch.no_grad():
        out, weights = attn(x, x)  # (512, T, d), (512, H, T, T)
    mean_map = weights.mean(0)  # (H, T, T)
    rows = torch.arange(T)  # (T,)
    return {
        "loss": float(((out - y) ** 2).mean()),
        "weights": mean_map,
        "to_previous": mean_map[:, rows, (rows - 1) % T].mean(-1),  # (H,)
        "to_next": mean_map[:, rows, (rows + 1) % T].mean(-1),  # (H,)
    }


def _adam(params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8) -> Callable[[tuple[torch.Tensor, ...]], None]:
    """Adam's update, as torch.optim.Adam computes it, without torch.optim.

    torch.optim's first use imports torch._dynamo, which takes seconds; this toy needs none of it.

    Returns:
        step(grads): one update of ``params`` in place.
    """
    first = [torch.zeros_like(p) for p in params]
    second = [torch.zeros_like(p) for p in params]
    count = [0]

    def step(grads: tuple[torch.Tensor, ...]) -> None:
        count[0] += 1
        fix1, fix2 = 1 - betas[0] ** count[0], 1 - betas[1] ** count[0]
        with torch.no_grad():
            for p, g, m, v in zip(params, grads, first, second):
                m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
                v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                p.addcdiv_(m, (v.sqrt() / math.sqrt(fix2)).add_(eps), value=-lr / fix1)

    return step


def _check_distance(distance: int) -> None:
    if not 1 <= distance <= MEASURED_DISTANCE_LIMIT:
        raise ValueError(f"the measuring tools take distances 1..{MEASURED_DISTANCE_LIMIT}")


def conv_stack_reaches(distance: int, width: int, layers: int, dilated: bool = False) -> bool:
    """Measured with autograd: does output position ``distance`` of a stack of 1-D convolutions
    depend on input position 0?

    The stack is ``layers`` torch.nn.Conv1d layers of kernel ``width`` with positive weights (so
    no path cancels), causal padding, and dilations 1, 1, ... or 1, width, width^2, ... when
    ``dilated``.

    Args:
        distance: 1..64 positions between the two tokens.
        width: kernel width w >= 2.
        layers: number of stacked layers.
        dilated: dilation width^l in layer l.

    Returns:
        True when the gradient of the output at ``distance`` reaches input 0.
    """
    _check_distance(distance)
    x = torch.zeros(1, 1, distance + 1, dtype=torch.float64, requires_grad=True)  # (1, channels, T)
    h = x
    for layer in range(layers):
        dilation = width**layer if dilated else 1
        conv = nn.Conv1d(1, 1, width, dilation=dilation, bias=False).double()
        nn.init.constant_(conv.weight, 1.0)
        h = conv(nn.functional.pad(h, ((width - 1) * dilation, 0)))  # (1, 1, T): causal, same length
    h[0, 0, distance].backward()
    return bool(x.grad[0, 0, 0] != 0)


def gradient_by_distance(kind: str, T: int = 48, d_model: int = 16, seed: int = 0) -> np.ndarray:
    """Measured with autograd: how strongly the last token's output depends on each earlier input.

    Args:
        kind: "rnn" (torch.nn.RNN, tanh, read left to right) or "attention" (one
            torch.nn.MultiheadAttention layer, every token reads every token).
        T: sequence length, at most 65.
        d_model: width.
        seed: the layer's random initialisation.

    Returns:
        (T,) the norm of d output[T - 1] / d input[j] for j = 0..T-1, at initialisation.
    """
    _check_distance(T - 1)
    torch.manual_seed(seed)
    x = torch.randn(1, T, d_model, requires_grad=True)  # (1, T, d_model)
    if kind == "rnn":
        y = nn.RNN(d_model, d_model, batch_first=True)(x)[0]  # (1, T, d_model)
    elif kind == "attention":
        y = nn.MultiheadAttention(d_model, 2, batch_first=True)(x, x, x, need_weights=False)[0]  # (1, T, d_model)
    else:
        raise ValueError("kind is 'rnn' or 'attention'")
    rows = [torch.autograd.grad(y[0, -1, c], x, retain_graph=True)[0][0] for c in range(d_model)]  # d x (T, d)
    jacobian = torch.stack(rows)  # (d_model, T, d_model): d y[T-1, c] / d x[j, c']
    return jacobian.pow(2).sum(dim=(0, 2)).sqrt().numpy()  # (T,)


def t5_relative_bucket(relative_position: np.ndarray, bidirectional: bool = True, num_buckets: int = 32,
                       max_distance: int = 128) -> np.ndarray:
    """T5's relative-position buckets (Raffel et al., 2020): one learned bias per bucket and head.

    Half the buckets (of each direction, when bidirectional) are exact offsets 0, 1, 2, ...;
    the rest are spaced logarithmically up to ``max_distance``, and every farther offset shares
    the last bucket.

    Args:
        relative_position: integer array of offsets key - query, any shape.
        bidirectional: separate buckets for keys before and after the query (an encoder);
            False for a decoder, where only keys at or before the query exist.
        num_buckets: buckets per head (T5 uses 32).
        max_distance: the offset where the last bucket starts (T5 uses 128).

    Returns:
        integer array of the same shape, entries in [0, num_buckets).
    """
    rel = np.asarray(relative_position, dtype=np.int64)
    bucket = np.zeros(rel.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        bucket += (rel > 0) * num_buckets  # keys after the query use the upper half
        distance = np.abs(rel)
    else:
        distance = np.maximum(-rel, 0)  # a decoder never sees keys after the query
    exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.maximum(distance, 1) / exact) / math.log(max_distance / exact)
    far = exact + (log_ratio * (num_buckets - exact)).astype(np.int64)
    far = np.minimum(far, num_buckets - 1)
    return bucket + np.where(distance < exact, distance, far)


def diagonal_spread(matrix: np.ndarray | torch.Tensor) -> float:
    """How far a (T, T) matrix is from depending on the offset j - i alone.

    Returns:
        the largest max - min over the entries of any one diagonal: 0 when every diagonal is
        constant (a function of the offset only).
    """
    m = np.asarray(matrix, dtype=np.float64)
    return max(float(np.ptp(np.diagonal(m, offset))) for offset in range(-m.shape[0] + 1, m.shape[1]))


def median_seconds(fn: Callable[[], object], repeats: int = 15, warmup: int = 3) -> float:
    """The median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
