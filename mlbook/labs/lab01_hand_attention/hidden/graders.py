"""The grader's versions of lab 1's answers that other answers call, lent by ``kit.given`` (one
mistake, one loss): ``attention`` and ``row_attention`` are judged calling these, so a wrong
``softmax_rows`` costs softmax_rows's cells alone. Each takes what a student's code may pass
(lists, arrays, tensors) and answers in the kind and float precision it was given (``kit.like``)."""

from __future__ import annotations

import numpy as np

from ...kit import data_array, like, softmax
from ...kit import attention as reference_attention


def _values(x, name: str) -> np.ndarray:
    """``x`` as float64 data, or a TypeError the student's function raises (it passed no data)."""
    arr = data_array(x)
    if arr is None or arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} expects an array of numbers, got {type(x).__name__}")
    return arr.astype(np.float64)


def graders_softmax_rows(S):
    """softmax_rows: (T_q, T_k) scores -> (T_q, T_k) weights over the last axis."""
    return like(softmax(_values(S, "softmax_rows")), S)


def graders_attention(Q, K, V, mask=None):
    """attention: (T_q, d_k), (T_k, d_k), (T_k, d_v), optional (T_q, T_k) mask -> (out, weights)."""
    allowed = None if mask is None else _values(mask, "attention's mask").astype(bool)  # (T_q, T_k)
    out, weights = reference_attention(_values(Q, "attention"), _values(K, "attention"), _values(V, "attention"),
                                       allowed)  # (T_q, d_v), (T_q, T_k)
    return like(out, Q), like(weights, Q)
