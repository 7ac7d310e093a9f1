"""Student-facing checks whose failures name the likely misconception.

Conventions (stated once, relied on everywhere):
- Every failed check raises ``Misconception``, an ``AssertionError`` whose message has two
  parts: what was observed *on the student's own output* ("rows sum to 0.73"), then the
  likely cause ("was the mask applied after the softmax?"). Never a bare AssertionError.
- Messages quote the student's values and the lesson's published numbers only. They never
  quote a hidden reference result, so the same helpers serve visible and hidden tests.
- Arrays may be NumPy arrays, torch tensors or nested lists; they are compared as float64.
- Every check fails closed: an answer that is not real numeric data (None, a string, a complex
  or object array, a ragged list, an object), that has NaN or inf where numbers are expected, or
  whose comparison cannot be made, fails with a message saying what came back. Comparisons are
  written ``not (error <= tolerance)``, which is True for NaN, never ``error > tolerance``.
- Under a notebook cell a failure reads message first, then the cell's line; the helpers' own
  frames are left out (``mlbook_helpers.tracebacks``).

This module holds no lab solutions: it compares, it does not compute attention.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

__all__ = [
    "Misconception",
    "as_array",
    "data_array",
    "describe",
    "expect",
    "expect_shape",
    "expect_close",
    "expect_finite",
    "expect_rows_sum_to_one",
    "expect_in_convex_hull",
    "expect_zero_where_masked",
    "called_with",
    "called_given",
]


class Misconception(AssertionError):
    """A failed check, carrying a message a student can act on."""

    def _render_traceback_(self) -> list[str]:
        """How IPython shows it under a cell: the message first (``mlbook_helpers.tracebacks``)."""
        from .tracebacks import message_first

        return message_first(self)


_REAL = "biuf"  # dtype kinds of real numbers and booleans
_MAX_DEPTH = 32


def data_array(x: Any, _depth: int = 0) -> np.ndarray | None:
    """``x`` as a NumPy array of its own dtype when it is data, else None.

    Data is a NumPy array or scalar, a torch tensor (detached, on the CPU; bfloat16 as float32),
    a Python bool, int, float or complex, or a list/tuple of those that nests to one regular
    shape. Anything else (None, a string, a dict, an object, a ragged list) is None: nothing is
    converted by guessing, and no attribute of an unknown object is read.
    """
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (np.generic, bool, int, float, complex)):
        return np.asarray(x)
    torch = sys.modules.get("torch")  # never imported here: a tensor implies torch is loaded
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        try:
            return t.resolve_conj().numpy()
        except (TypeError, RuntimeError):  # a dtype NumPy has no counterpart for
            return None
    if isinstance(x, (list, tuple)) and _depth < _MAX_DEPTH:
        if all(type(v) in (bool, int, float) for v in x):  # the common case, in one step
            return np.array(x) if x else np.zeros((0,))
        parts = [data_array(v, _depth + 1) for v in x]
        if any(p is None for p in parts) or len({p.shape for p in parts}) != 1:
            return None
        return np.stack(parts)
    return None


_NONE_FOUND = object()


def _first_non_number(x: list | tuple, depth: int = 0) -> Any:
    """The first item of a nested list that is not a number, an array or a tensor (``_NONE_FOUND``
    when every one is)."""
    for v in x:
        if isinstance(v, (list, tuple)) and depth < _MAX_DEPTH:
            odd = _first_non_number(v, depth + 1)
            if odd is not _NONE_FOUND:
                return odd
        elif data_array(v) is None:
            return v
    return _NONE_FOUND


def _count(arr: np.ndarray, test) -> int:
    with np.errstate(invalid="ignore"):
        return int(test(arr).sum())


def describe(x: Any) -> str:
    """What ``x`` is, for a failure message: a number, or a kind, dtype and shape, and how many
    entries are NaN or inf. Safe on anything: an object that is not data (one living in a
    student's kernel included) is described without being asked anything."""
    if x is None:
        return "None"
    if isinstance(x, str):
        return f"the string {x[:40]!r}"
    arr = data_array(x)
    if arr is None:
        if isinstance(x, (list, tuple)):
            odd = _first_non_number(x)
            holding = "rows of different lengths" if odd is _NONE_FOUND else describe(odd)
            return (f"a {type(x).__name__} of {len(x)} item{'s' if len(x) != 1 else ''} holding {holding}, "
                    "not a regular array of numbers")
        if isinstance(x, dict):
            return f"a dict with keys {sorted(map(str, x))[:6]}"
        return "an object that is not data (not a number, an array or a tensor)"
    kind = arr.dtype.kind
    if arr.ndim == 0 and kind == "b":
        return f"the bool {bool(arr)}"
    if arr.ndim == 0 and kind in "iuf":
        value = float(arr)
        return "NaN" if value != value else "inf" if value == np.inf else "-inf" if value == -np.inf else f"{value:.6g}"
    if arr.ndim == 0 and kind == "c":
        return f"the complex number {complex(arr):.4g}"
    dtype = "" if kind == "f" else f"{arr.dtype} "
    article = "an" if (dtype or "array")[0] in "aeiou" else "a"
    if arr.size == 0:
        return f"an empty {dtype}array of shape {arr.shape}"
    if kind == "f":
        n_nan, n_inf = _count(arr, np.isnan), _count(arr, np.isinf)
        if n_nan == arr.size:
            return f"an array of shape {arr.shape}, all NaN"
        if n_inf == arr.size:
            return f"an array of shape {arr.shape}, all inf"
        bad = [f"{n} NaN" for n in (n_nan,) if n] + [f"{n} inf" for n in (n_inf,) if n]
        if bad:
            return f"an array of shape {arr.shape} with {' and '.join(bad)} among its {arr.size} entries"
    return f"{article} {dtype}array of shape {arr.shape}"


def as_array(x: Any) -> np.ndarray:
    """Return ``x`` as a float64 NumPy array (torch tensors are detached and moved to CPU).

    Raises:
        TypeError: ``x`` is not real numeric data (see ``data_array``): None, a string, a complex
            or object array, a ragged list or an object.
    """
    arr = data_array(x)
    if arr is None or arr.dtype.kind not in _REAL:
        raise TypeError(f"expected an array of real numbers, got {describe(x)}")
    return arr.astype(np.float64)


def _numbers(x: Any, what: str, hint: str | None, booleans: bool = False) -> np.ndarray:
    """``x`` as float64 for a check, or a failure saying what it is (bool only when ``booleans``)."""
    arr = data_array(x)
    if arr is None or arr.dtype.kind not in (_REAL if booleans else "iuf"):
        _fail(what, f"got {describe(x)}, not an array of real numbers", hint)
    return arr.astype(np.float64)


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
    """Fail with ``what: observed. hint`` unless ``condition`` is True.

    ``condition`` must be a truth value (a bool, or a one-entry boolean array or tensor): a
    number, NaN included, is not True, so write ``x < limit``, never a bare value.
    """
    arr = data_array(condition)
    if arr is None or arr.dtype.kind != "b" or arr.size != 1 or not bool(arr.reshape(())):
        _fail(what, observed, hint)


def expect_shape(actual: Any, shape: Sequence[int], what: str, hint: str | None = None) -> None:
    """Check that ``actual`` is an array (or tensor, or regular nested list) of exactly ``shape``."""
    arr = data_array(actual)
    if arr is None:
        _fail(what, f"got {describe(actual)}, expected an array of shape {tuple(shape)}", hint)
    if arr.shape != tuple(shape):
        _fail(what, f"shape is {arr.shape}, expected {tuple(shape)}", hint)


def expect_close(
    actual: Any,
    expected: Any,
    what: str,
    hint: str | None = None,
    atol: float = 1e-3,
    rtol: float = 0.0,
) -> None:
    """Check ``actual`` against ``expected`` within ``atol + rtol * |expected|`` elementwise."""
    expected_is_bool = getattr(data_array(expected), "dtype", np.dtype(float)).kind == "b"
    e = as_array(expected)  # the lesson's own numbers
    a = _numbers(actual, what, hint, booleans=expected_is_bool)
    if a.shape != e.shape:
        _fail(what, f"shape is {a.shape}, expected {e.shape}", hint)
    if not np.all(np.isfinite(a)):
        _fail(what, f"contains nan or inf ({_fmt(a)})", hint)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~(np.isfinite(e) & (np.abs(a - e) <= atol + rtol * np.abs(e)))  # a is finite: e must be too
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" at index {idx}" if a.ndim else ""
        _fail(what, f"got {a[idx]:.4g}{where}, expected {e[idx]:.4g} (tolerance {atol:g})", hint)


def expect_finite(actual: Any, what: str, hint: str | None = None) -> None:
    """Check that ``actual`` is real numeric data with at least one entry and none nan or inf."""
    a = _numbers(actual, what, hint, booleans=True)
    if a.size == 0:
        _fail(what, "is empty", hint)
    n_bad = int((~np.isfinite(a)).sum())
    if n_bad:
        _fail(what, f"{n_bad} of {a.size} entries are nan or inf", hint)


def expect_rows_sum_to_one(weights: Any, what: str, hint: str | None = None, atol: float = 1e-6) -> None:
    """Check that every row (last axis) of ``weights`` is a probability distribution."""
    w = _numbers(weights, what, hint)
    if w.ndim == 0:
        _fail(what, f"got {describe(weights)}, not rows of weights", hint)
    expect_finite(w, what, hint)
    if not (w >= -atol).all():
        _fail(what, f"has negative weights (min {w.min():.4g})", hint)
    sums = w.sum(axis=-1)  # (..., T_q)
    off = ~(np.abs(sums - 1.0) <= atol)
    if off.any():
        _fail(what, f"rows sum to {_fmt(sums[off])}, not 1{_normalised_over(w, atol)}", hint)


def _normalised_over(w: np.ndarray, atol: float) -> str:
    """What the sums of ``w`` (..., T_q, T_k) show a softmax normalised over instead of each row, or ''.

    Read from the student's weights alone: columns that each sum to 1 were normalised over the
    queries; a matrix whose entries sum to 1 was normalised over all of them at once.
    """
    if w.ndim < 2 or w.shape[-2] < 2:
        return ""
    if np.all(np.abs(w.sum(axis=-2) - 1.0) <= atol):  # (..., T_k)
        return "; its columns sum to 1 instead (normalised over the queries, axis -2, not the keys)"
    if np.all(np.abs(w.sum(axis=(-2, -1)) - 1.0) <= atol):  # (...,)
        return "; the whole matrix sums to 1 instead (normalised over every entry at once, not row by row)"
    return ""


def expect_in_convex_hull(outputs: Any, values: Any, what: str, hint: str | None = None, atol: float = 1e-9) -> None:
    """Check that each output row lies within the per-column range of the value rows.

    Args:
        outputs: (..., T_q, d_v) attention outputs.
        values: (..., T_k, d_v) the value rows they were mixed from.
    """
    o, v = _numbers(outputs, what, hint), as_array(values)
    if o.ndim < 1 or o.shape[-1:] != v.shape[-1:] or o.size == 0:
        _fail(what, f"got {describe(outputs)}, expected rows of width {v.shape[-1]}", hint)
    lo = v.min(axis=-2, keepdims=True)  # (..., 1, d_v)
    hi = v.max(axis=-2, keepdims=True)  # (..., 1, d_v)
    try:
        outside = ~((o >= lo - atol) & (o <= hi + atol))  # a nan lies outside every range
    except ValueError:  # batch axes that do not broadcast
        _fail(what, f"shape is {o.shape}, which does not line up with values of shape {v.shape}", hint)
    if outside.any():
        _fail(what, f"{int(outside.sum())} output entries lie outside the range of the values", hint)


def expect_zero_where_masked(weights: Any, allowed: Any, what: str, hint: str | None = None, atol: float = 1e-9) -> None:
    """Check that weights are exactly 0 wherever ``allowed`` is False (broadcast against weights).

    A mask is True where attention is allowed; weight on a forbidden key means the mask was
    ignored or its polarity inverted.
    """
    w = _numbers(weights, what, hint)
    try:
        forbidden = ~np.broadcast_to(np.asarray(allowed, dtype=bool), w.shape)
    except ValueError:
        _fail(what, f"shape is {w.shape}, which does not line up with the mask", hint)
    leaked = forbidden & ~(np.abs(w) <= atol)  # nan where a weight must be 0 is not 0 either
    if leaked.any():
        _fail(what, f"{int(leaked.sum())} forbidden entries have non-zero weight (largest {np.abs(w[leaked]).max():.3g})", hint)


def called_with(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, tuple]:
    """``(fn(*args, **kwargs), args)``: the result, and the arguments as the call left them.

    A check that must know whether a function changed its input in place calls it through this,
    where the function runs (in grading, the kernel: the inputs it changed are the ones returned).
    """
    return fn(*args, **kwargs), args


def called_given(fn: Any, names: dict, /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the global names it reads bound to ``names``'s values for the call.

    A check of a function that calls another answer (a training loop logging ``attention_entropy``)
    judges it given the grader's version of that answer, so a mistake in the other answer is
    charged once, in its own cells. The names are restored after the call, whatever it raised.
    """
    space = getattr(fn, "__globals__", None)
    if not isinstance(space, dict):  # not a plain function (a callable object): called as it is
        return fn(*args, **kwargs)
    missing = object()
    saved = {name: space.get(name, missing) for name in names}
    space.update(names)
    try:
        return fn(*args, **kwargs)
    finally:
        for name, old in saved.items():
            if old is missing:
                space.pop(name, None)
            else:
                space[name] = old
