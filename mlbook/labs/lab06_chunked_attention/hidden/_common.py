"""What lab 6's checks share: inputs as tensors, the full-matrix reference, results validated."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ...kit import array, attention, causal_allowed, data_array, fail, items

__all__ = ["tensor", "f32", "scores", "reference", "floats", "out_lse", "grads"]


def tensor(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=dtype)


def f32(rng: np.random.Generator, *shape: int) -> torch.Tensor:
    """Standard normals of ``shape`` as a float32 tensor."""
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def scores(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """(T_q, T_k) scaled scores in float64, -inf where the causal mask blocks a key."""
    s = q @ k.T / math.sqrt(q.shape[1])  # (T_q, T_k)
    return np.where(causal_allowed(*s.shape), s, -np.inf) if causal else s


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Full-matrix attention in float64: (out (T_q, d_v), lse (T_q,))."""
    s = scores(q, k, causal)  # (T_q, T_k)
    m = s.max(axis=1, keepdims=True)  # (T_q, 1)
    lse = (m + np.log(np.exp(s - m).sum(axis=1, keepdims=True)))[:, 0]  # (T_q,)
    return attention(q, k, v, causal_allowed(*s.shape) if causal else None)[0], lse


def floats(x: Any, what: str, shape: tuple, dtype: torch.dtype, names: str, finite: bool = False) -> np.ndarray:
    """A student's array result as float64, after checking that it is one: floats (not integers,
    booleans, objects or strings), of ``shape``, not empty, and float64 when the inputs were float64.
    Non-finite entries are left to the comparison (it fails them) unless ``finite``."""
    hint = f"Return {names}, computed in the inputs' dtype."
    arr = array(x, what, shape=shape, kind="f", finite=finite, hint=hint)
    if dtype == torch.float64 and data_array(x).dtype.itemsize < 8:
        fail(what, f"got {data_array(x).dtype} for float64 inputs",
             "Create new tensors with the inputs' dtype (q.new_zeros, q.new_full, dtype=q.dtype) so float64 stays "
             "float64.")
    return arr


def out_lse(got: Any, what: str, T_q: int, d_v: int, dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray]:
    """chunked_attention's (out, lse), validated: float arrays of shapes (T_q, d_v) and (T_q,)."""
    out, lse = items(got, 2, what, "the pair (out, lse)")
    names = "out of shape (T_q, d_v) and lse of shape (T_q,)"
    return (floats(out, f"{what}: out", (T_q, d_v), dtype, names),
            floats(lse, f"{what}: lse", (T_q,), dtype, names))


def grads(got: Any, what: str, q_shape, k_shape, v_shape, dtype: torch.dtype) -> list[np.ndarray]:
    """attention_backward_from_lse's (dq, dk, dv), validated: float arrays of the shapes of q, k, v."""
    got = items(got, 3, what, "the tuple (dq, dk, dv)")
    names = "dq, dk, dv of the shapes of q, k, v"
    return [floats(g, f"{what}: {name}", tuple(shape), dtype, names)
            for g, name, shape in zip(got, ("dq", "dk", "dv"), (q_shape, k_shape, v_shape))]
