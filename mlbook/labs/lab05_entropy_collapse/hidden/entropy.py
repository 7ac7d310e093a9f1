"""Check of attention_entropy: the mean row entropy per head, in nats, finite where weights are 0."""

from __future__ import annotations

import math

import numpy as np
import torch

from ...kit import array, call_student, close, diagnose, entropy, fail, fresh_rng, softmax

__all__ = ["check_attention_entropy", "entropy_per_head", "graders_attention_entropy"]


# How close a correct entropy must come, in nats, whatever the dtype: float32 rounding moves it by about 1e-6,
# and an epsilon of at most 1e-5 inside the log (log(A + eps) or log(clamp(A, eps)), common ways to count
# 0 log 0 as 0) lowers each term by at most eps (A log(1 + eps / A) <= eps), a row by at most T_k * eps:
# 1.1e-4 here. Every known mistake is off by far more (a factor, or a whole term).
_EPS = 1e-5
_FLOAT = 5e-5
_NEAR = 0.05  # within this, and low everywhere: an epsilon inside the log too large


def entropy_per_head(w: np.ndarray) -> np.ndarray:
    """(B, H, T_q, T_k) -> (H,): row entropies in nats, averaged over batch and queries."""
    return entropy(w).mean(axis=(0, 2))


def graders_attention_entropy(attn: torch.Tensor) -> torch.Tensor:
    """The grader's ``attention_entropy``, lent to the checks of the answers that call it (the training
    loop): (B, H, T_q, T_k) weights -> (H,), in the weights' dtype, computed in float64."""
    w = torch.as_tensor(attn)
    return torch.from_numpy(entropy_per_head(w.detach().double().numpy())).to(w.dtype)  # (H,)


def _random_weights(rng: np.random.Generator, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Random attention rows with exact zeros, one one-hot row and one uniform row."""
    B, H, T_q, T_k = shape
    logits = rng.normal(size=shape) * rng.uniform(0.5, 3.0)  # (B, H, T_q, T_k)
    keep = rng.random(shape) > 0.35  # (B, H, T_q, T_k): about a third of the keys masked
    keep[..., 0] |= ~keep.any(axis=-1)  # every row keeps at least one key
    w = softmax(np.where(keep, logits, -np.inf))  # (B, H, T_q, T_k), exactly 0 where masked
    w[0, 0, 0] = np.eye(T_k)[rng.integers(T_k)]  # a one-hot row
    w[-1, -1, -1] = 1.0 / T_k  # a uniform row
    return w


def check_attention_entropy(attention_entropy) -> None:
    rng = fresh_rng()
    shapes = [(3, 4, 5, 7), (2, 3, 9, 6), (4, 2, 1, 11)]  # B, H, T_q, T_k all distinct within each
    for shape, dtype in zip(shapes, (torch.float64, torch.float32, torch.float64)):
        B, H, T_q, T_k = shape
        w = _random_weights(rng, shape)
        attn = torch.tensor(w, dtype=dtype)
        w = attn.double().numpy()  # the reference sees exactly the values the student sees
        pristine = attn.clone()
        what = f"attention_entropy on {dtype} weights of shape (B, H, T_q, T_k) = {shape}"
        got = call_student(attention_entropy, attn, what=what)
        # Seen only when the check runs in the student's process: a sandboxed call receives a
        # copy of `attn`, and a change to it stays in the kernel.
        if not torch.equal(attn, pristine):
            fail(what, "the input weights were changed in place",
                 "Compute on a copy (torch.where, clamp without the underscore), never modify attn.")
        got = array(got, what, finite=False, hint="Return a tensor with one entropy per head.")  # nan: below
        if not np.isfinite(got).all():
            fail(what, "the result contains nan or inf",
                 "Some weights are exactly 0, and 0 * log 0 is nan in floating point (log of zero is -inf): "
                 "count those terms as 0, their limit.")
        if got.shape != (H,):
            axes = {(T_q,): "the batch and the heads", (B,): "the heads and the queries",
                    (B, H): "the queries only", (H, T_q): "the batch only", (): "everything"}
            averaged = axes.get(got.shape)
            fail(what, f"shape is {got.shape}, expected one value per head, ({H},)",
                 (f"It looks averaged over {averaged}: wrong axis. " if averaged else "Wrong axes. ")
                 + "Sum over the keys (axis -1), then average over the batch (axis 0) and the queries (axis 2).")
        ref = entropy_per_head(w)  # (H,)
        _ATOL = _FLOAT + _EPS * T_k
        if close(got, ref, atol=_ATOL, rtol=0):
            continue
        hint = diagnose(got, {
            "The values are in bits (log base 2): the lab asks for nats, the natural log.": ref / math.log(2),
            "The values use log base 10: the lab asks for nats, the natural log.": ref / math.log(10),
            "Each row's entropy was divided by log T_k (a normalised entropy between 0 and 1): the lab asks for the "
            "entropy itself, in nats.": ref / math.log(T_k),
            "The row entropies are summed over the queries instead of averaged.": ref * T_q,
            "Each row's terms are averaged over the keys instead of summed.": ref / T_k,
            "The sign is wrong: entropy is MINUS the sum of p log p.": -ref,
            "Entropy taken down the columns (over the queries, axis -2) instead of along each row "
            "(over the keys, axis -1): wrong axis.": entropy(w, axis=-2).mean(axis=(0, 2)),
        }, atol=_ATOL, rtol=1e-5)
        if hint is None and close(got, ref, atol=_NEAR, rtol=0) and (got < ref).all():
            hint = (f"Close, but every value is a little low: an epsilon inside the log, log(A + eps), lowers each "
                    f"nonzero term by about eps, so a row of {T_k} keys by up to {T_k} eps. Keep eps at 1e-5 or below, "
                    f"or count the exact zeros as 0 without one (torch.where, torch.xlogy, torch.special.entr).")
        fail(what, f"got {np.round(got, 4).tolist()}, which is not the mean row entropy per head",
             hint or "Uniform rows must give log T_k and one-hot rows 0; average over batch and queries only.")
