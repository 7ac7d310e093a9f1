"""The grader's versions of lab 4's answers that other answers call, lent by ``kit.given`` (one
mistake, one loss): ``rope_step_scores`` is judged calling the grader's ``apply_rope``, so a mistake
in apply_rope costs apply_rope's cells alone. It takes what a student's code may pass and answers in
the kind and float precision it was given (``kit.like``)."""

from __future__ import annotations

import numpy as np

from ...kit import data_array, like
from .rope import rope_reference


def graders_apply_rope(x, positions, layout="interleaved", base=10000.0):
    """apply_rope: (..., T, d) x, (T,) integer positions -> (..., T, d) rotated, in x's dtype."""
    if layout not in ("interleaved", "half"):
        raise ValueError(f"layout must be 'interleaved' or 'half', not {layout!r}")
    values, pos = data_array(x), data_array(positions)
    if values is None or pos is None:
        raise TypeError("apply_rope expects a tensor x and a tensor of positions")
    return like(rope_reference(values.astype(np.float64), pos.reshape(-1), layout, float(base)), x)
