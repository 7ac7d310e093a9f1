"""How close a correct answer must come, by the precision it was computed in.

A correct student may compute in float32 (torch's default) or float64 (NumPy's); a tolerance
that fits float64 fails a correct float32 answer on some draws, one that fits float32 lets a
float64 mistake of the same size through. So the tolerance follows the answer's own dtype.
``close`` is the one comparison every check and diagnosis makes, failing closed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlbook_helpers.checks import data_array

__all__ = ["TORCH_ATOL", "close", "dtype_name", "float_tolerance", "weight_tolerance"]

# Absolute tolerance on results of size about 1 (attention outputs and weights), per dtype name.
TORCH_ATOL = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 1e-5, "float64": 1e-10}


def dtype_name(x: Any) -> str:
    """The name of a dtype, or of an array's or tensor's dtype, without "torch." ("float32"): how a
    message names it, and its key in ``TORCH_ATOL``."""
    return str(getattr(x, "dtype", x)).replace("torch.", "")


def float_tolerance(dtype: Any, loose: bool = False) -> dict[str, float]:
    """``atol``/``rtol`` for an answer computed in ``dtype`` (a torch or NumPy dtype, or its name),
    against a float64 reference. ``loose``: after many accumulations (a long online softmax)."""
    if dtype_name(dtype) == "float64":
        return dict(atol=1e-9, rtol=1e-9)
    return dict(atol=2e-3, rtol=2e-3) if loose else dict(atol=2e-4, rtol=2e-4)


def weight_tolerance(got: Any, spread: float) -> float:
    """Absolute tolerance for attention weights the student computed, from the answer's dtype.

    float32 answers are correct too: a score of size ~3000 carries a rounding error of
    ~3000 * 6e-8 = 2e-4 (more after accumulating d_k terms), which moves a weight by up to
    about that much, so low-precision results get 5e-3 when the scores are large (spread > 10)
    and 1e-5 otherwise; float64 answers get 1e-6.
    """
    low_precision = dtype_name(getattr(got, "dtype", "")) in ("float32", "float16", "bfloat16")
    return (5e-3 if spread > 10 else 1e-5) if low_precision else 1e-6


def close(a: Any, b: Any, atol: float = 1e-6, rtol: float = 1e-6, equal_nan: bool = False) -> bool:
    """True only when ``a`` is data of ``b``'s shape and equal to it within ``atol + rtol * |b|``.

    Fails closed: False when ``a`` is not real numeric data (None, a string, a complex or object
    array, an object), when only one of the two is boolean, or when the shapes differ. A
    non-finite entry of ``a`` counts as equal only where ``b`` holds the same infinity, or, with
    ``equal_nan`` (for a check whose reference means NaN there), where both are NaN. A NaN in
    ``b`` that the check does not mean matches nothing.
    """
    x, y = data_array(a), data_array(b)
    if x is None or y is None or x.shape != y.shape:
        return False
    if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf" or (x.dtype.kind == "b") != (y.dtype.kind == "b"):
        return False
    x, y = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        # Where y is not finite, its tolerance would be inf or nan: only the same infinity is equal.
        ok = np.where(np.isfinite(y), np.abs(x - y) <= atol + rtol * np.abs(y), x == y)
    if equal_nan:
        ok |= np.isnan(x) & np.isnan(y)
    return bool(ok.all())
