"""How close a correct answer must come, by the precision it was computed in.

A correct student may compute in float32 (torch's default) or float64 (NumPy's); a tolerance
that fits float64 fails a correct float32 answer on some draws, one that fits float32 lets a
float64 mistake of the same size through. So the tolerance follows the answer's own dtype.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TORCH_ATOL", "dtype_name", "float_tolerance", "weight_tolerance"]

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
