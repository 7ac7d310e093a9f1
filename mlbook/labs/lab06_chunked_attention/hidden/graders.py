"""The grader's versions of lab 6's answers that other answers call, lent by ``kit.given`` (one
mistake, one loss): ``chunked_attention`` is judged calling the grader's ``online_softmax_update``,
so a mistake in the update costs the update's cells alone. It answers in the kind and float
precision it was given (``kit.like``)."""

from __future__ import annotations

import numpy as np

from ...kit import data_array, like
from .online_softmax import update


def _values(x, name: str) -> np.ndarray:
    """``x`` as float64 data, or a TypeError the student's function raises (it passed no data)."""
    arr = data_array(x)
    if arr is None or arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} expects tensors of numbers, got {type(x).__name__}")
    return arr.astype(np.float64)


def graders_online_softmax_update(m, l, acc, scores_block, v_block):
    """online_softmax_update: (n_q,) m, (n_q,) l, (n_q, d_v) acc, (n_q, n_k) scores, (n_k, d_v) values ->
    (m_new, l_new, acc_new) with the shapes and dtypes of (m, l, acc)."""
    name = "online_softmax_update"
    m_new, l_new, acc_new = update(_values(m, name), _values(l, name), _values(acc, name),
                                   _values(scores_block, name), _values(v_block, name))  # (n_q,), (n_q,), (n_q, d_v)
    return like(m_new, m), like(l_new, l), like(acc_new, acc)
