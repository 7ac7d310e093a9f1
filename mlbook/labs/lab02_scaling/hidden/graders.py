"""The grader's versions of lab 2's answers that other answers call, lent by ``kit.given`` (one
mistake, one loss): ``effective_keys`` is judged calling these for ``row_entropy``, and
``mean_effective_keys`` for ``attention_scores`` and ``effective_keys``, so a mistake in one of
those costs its own cells alone. Each takes what a student's code may pass (lists, arrays,
tensors) and answers in the kind and float precision it was given (``kit.like``)."""

from __future__ import annotations

import math

import numpy as np

from ...kit import data_array, entropy, like


def _values(x, name: str) -> np.ndarray:
    """``x`` as float64 data, or a TypeError the student's function raises (it passed no data)."""
    arr = data_array(x)
    if arr is None or arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} expects an array of numbers, got {type(x).__name__}")
    return arr.astype(np.float64)


def graders_attention_scores(Q, K, scaled=True):
    """attention_scores: (..., T_q, d_k), (..., T_k, d_k) -> (..., T_q, T_k), divided by sqrt(d_k) when scaled."""
    q, k = _values(Q, "attention_scores"), _values(K, "attention_scores")
    scores = q @ np.swapaxes(k, -2, -1)  # (..., T_q, T_k)
    return like(scores / math.sqrt(q.shape[-1]) if scaled else scores, Q)


def graders_row_entropy(weights, base):
    """row_entropy: (..., T_k) rows -> (...) entropies in ``base``, 0 log 0 = 0."""
    return like(entropy(_values(weights, "row_entropy"), base=float(base)), weights)


def graders_effective_keys(weights):
    """effective_keys: (..., T_k) rows -> (...) 2 ** (entropy in bits)."""
    return like(2.0 ** entropy(_values(weights, "effective_keys"), base=2.0), weights)
