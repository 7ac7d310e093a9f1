"""Student-facing checks whose failures name the likely misconception.

Conventions (stated once, relied on everywhere):
- Every failed check raises ``Misconception``, an ``AssertionError`` whose message has two
  parts: what was observed *on the student's own output* ("rows sum to 0.73"), then the
  likely cause ("was the mask applied after the softmax?"). Never a bare AssertionError.
- Messages quote the student's values and the lesson's published numbers only. They never
  quote a hidden reference result, so the same helpers serve visible and hidden tests.
- Arrays may be NumPy arrays, torch tensors or nested lists; they are compared as float64.

This module holds no lab solutions: it compares, it does not compute attention.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = [
    "Misconception",
    "as_array",
    "expect",
    "expect_shape",
    "expect_close",
    "expect_finite",
    "expect_rows_sum_to_one",
    "expect_in_convex_hull",
    "expect_zero_where_masked",
]


class Misconception(AssertionError):
    """A failed check, carrying a message a student can act on."""


def as_array(x: Any) -> np.ndarray:
    """Return ``x`` as a float64 NumPy array (torch tensors are detached and moved to CPU)."""
    if hasattr(x, "detach"):  # a torch tensor, without importing torch here
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _fmt(x: Any, limit: int = 6) -> str:
    arr = np.atleast_1d(np.asarray(x, dtype=np.float64)).ravel()
    shown = ", ".join(f"{v:.4g}" for v in arr[:limit])
    return f"[{shown}{', ...' if arr.size > limit else ''}]" if arr.size > 1 else shown.strip("[]")


def _fail(what: str, observed: str, hint: str | None) -> None:
    message = f"{what}: {observed}."
    if hint:
        message += f" {hint}"
    raise Misconception(message)


def expect(condition: bool, what: str, observed: str, hint: str | None = None) -> None:
    """Fail with ``what: observed. hint`` unless ``condition`` holds."""
    if not condition:
        _fail(what, observed, hint)


def expect_shape(actual: Any, shape: Sequence[int], what: str, hint: str | None = None) -> None:
    """Check that ``actual`` has exactly ``shape``."""
    got = tuple(np.shape(actual)) if not hasattr(actual, "shape") else tuple(actual.shape)
    if got != tuple(shape):
        _fail(what, f"shape is {got}, expected {tuple(shape)}", hint)


def expect_close(
    actual: Any,
    expected: Any,
    what: str,
    hint: str | None = None,
    atol: float = 1e-3,
    rtol: float = 0.0,
) -> None:
    """Check ``actual`` against ``expected`` within ``atol + rtol * |expected|`` elementwise."""
    a, e = as_array(actual), as_array(expected)
    if a.shape != e.shape:
        _fail(what, f"shape is {a.shape}, expected {e.shape}", hint)
    if not np.all(np.isfinite(a)):
        _fail(what, f"contains nan or inf ({_fmt(a)})", hint)
    bad = np.abs(a - e) > atol + rtol * np.abs(e)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" at index {idx}" if a.ndim else ""
        _fail(what, f"got {a[idx]:.4g}{where}, expected {e[idx]:.4g} (tolerance {atol:g})", hint)


def expect_finite(actual: Any, what: str, hint: str | None = None) -> None:
    """Check that no entry is nan or inf."""
    a = as_array(actual)
    n_bad = int((~np.isfinite(a)).sum())
    if n_bad:
        _fail(what, f"{n_bad} of {a.size} entries are nan or inf", hint)


def expect_rows_sum_to_one(weights: Any, what: str, hint: str | None = None, atol: float = 1e-6) -> None:
    """Check that every row (last axis) of ``weights`` is a probability distribution."""
    w = as_array(weights)
    expect_finite(w, what, hint)
    if (w < -atol).any():
        _fail(what, f"has negative weights (min {w.min():.4g})", hint)
    sums = w.sum(axis=-1)
    off = np.abs(sums - 1.0) > atol
    if off.any():
        _fail(what, f"rows sum to {_fmt(sums[off])}, not 1", hint)


def expect_in_convex_hull(outputs: Any, values: Any, what: str, hint: str | None = None, atol: float = 1e-9) -> None:
    """Check that each output row lies within the per-column range of the value rows.

    Args:
        outputs: (..., T_q, d_v) attention outputs.
        values: (..., T_k, d_v) the value rows they were mixed from.
    """
    o, v = as_array(outputs), as_array(values)
    lo = v.min(axis=-2, keepdims=True)  # (..., 1, d_v)
    hi = v.max(axis=-2, keepdims=True)  # (..., 1, d_v)
    outside = (o < lo - atol) | (o > hi + atol)
    if outside.any():
        _fail(what, f"{int(outside.sum())} output entries lie outside the range of the values", hint)


def expect_zero_where_masked(weights: Any, allowed: Any, what: str, hint: str | None = None, atol: float = 1e-9) -> None:
    """Check that weights are exactly 0 wherever ``allowed`` is False (broadcast against weights).

    A mask is True where attention is allowed; weight on a forbidden key means the mask was
    ignored or its polarity inverted.
    """
    w = as_array(weights)
    forbidden = ~np.broadcast_to(np.asarray(allowed, dtype=bool), w.shape)
    leaked = forbidden & (np.abs(np.nan_to_num(w, nan=0.0)) > atol)
    if leaked.any():
        _fail(what, f"{int(leaked.sum())} forbidden entries have non-zero weight (largest {np.abs(w[leaked]).max():.3g})", hint)
