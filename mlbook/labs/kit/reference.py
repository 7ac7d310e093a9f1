"""The grader's own maths, in float64: what every lab's hidden checks compare against.

Each function is the textbook definition written plainly, with the known mistakes a check needs
as explicit options (``scale``, ``axis``) rather than copies. Convention: a mask is True where
attention is allowed. A row whose keys are all masked is NaN here (0 / 0): the checks decide
what a correct answer does there, and a NaN matches no answer unless a check says so.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["softmax", "entropy", "causal_allowed", "attention", "attention_grads"]


def softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(s) / sum exp(s) along ``axis``, shifted by the max so large scores do not overflow.

    Args:
        s: scores of any shape; -inf where a key is masked.
    Returns:
        weights of the same shape; NaN on a slice whose scores are all -inf.
    """
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=axis, keepdims=True))  # (..., T_k)
        return e / e.sum(axis=axis, keepdims=True)


def entropy(w: np.ndarray, axis: int = -1, base: float = math.e) -> np.ndarray:
    """-sum w log w along ``axis``, with 0 log 0 = 0, in nats (or in ``base``).

    Args:
        w: attention weights, rows along ``axis`` summing to 1.
    Returns:
        w's shape without ``axis``.
    """
    logs = np.log(np.where(w > 0, w, 1.0))  # log 1 = 0 where the weight is 0
    return -(w * logs).sum(axis=axis) / math.log(base)


def causal_allowed(T_q: int, T_k: int | None = None) -> np.ndarray:
    """(T_q, T_k) bool: query i may attend to keys 0 .. i + (T_k - T_q), the last T_q of T_k
    being the queries' own positions (T_k > T_q when earlier tokens are cached)."""
    T_k = T_q if T_k is None else T_k
    return np.arange(T_k)[None, :] <= np.arange(T_q)[:, None] + (T_k - T_q)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None,
              bias: np.ndarray | None = None, scale: float | None = None, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention, batched over any leading axes.

    Args:
        q: (..., T_q, d_k); k: (..., T_k, d_k); v: (..., T_k, d_v).
        allowed: bool broadcastable to (..., T_q, T_k), or None for no mask.
        bias: added to the scaled scores before the mask (a relative-position bias, ALiBi), or None.
        scale: what the scores are divided by (default sqrt(d_k); a mistake's d_k or 1.0).
        axis: the softmax axis (-1, the keys; a mistake's -2, the queries).
    Returns:
        out: (..., T_q, d_v); weights: (..., T_q, T_k).
    """
    s = q @ np.swapaxes(k, -1, -2) / (math.sqrt(q.shape[-1]) if scale is None else scale)  # (..., T_q, T_k)
    if bias is not None:
        s = s + bias
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)  # (..., T_q, T_k)
    w = softmax(s, axis=axis)  # (..., T_q, T_k)
    return w @ v, w  # (..., T_q, d_v), (..., T_q, T_k)


def attention_grads(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray,
                    allowed: np.ndarray | None = None, bias: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The output and its gradients by torch autograd through ``attention``'s formula, in float64.

    Args:
        q: (..., T_q, d_k); k: (..., T_k, d_k); v: (..., T_k, d_v); dout: (..., T_q, d_v), the
            gradient of the loss with respect to the output.
        allowed, bias: as for ``attention``.
    Returns:
        {"out", "dq", "dk", "dv"}, plus "dbias" when ``bias`` is given.
    """
    import torch  # only the labs with a backward pass need it

    leaves = {n: torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)
              for n, a in (("q", q), ("k", k), ("v", v)) + ((("bias", bias),) if bias is not None else ())}
    s = leaves["q"] @ leaves["k"].transpose(-1, -2) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if bias is not None:
        s = s + leaves["bias"]
    if allowed is not None:
        s = s.masked_fill(~torch.as_tensor(np.asarray(allowed, dtype=bool)), float("-inf"))
    out = s.softmax(-1) @ leaves["v"]  # (..., T_q, d_v)
    out.backward(torch.as_tensor(np.asarray(dout, dtype=np.float64)))
    return {"out": out.detach().numpy(), **{f"d{n}": t.grad.numpy() for n, t in leaves.items()}}
