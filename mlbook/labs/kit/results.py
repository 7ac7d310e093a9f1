"""Reading what a student's function returned, failing closed.

What a student's function returns is validated first, with ``number``, ``boolean``, ``array``
or ``items``: each accepts only the data it names (a finite real number, a truth value, a real
array of the right kind, shape and size with finite entries, a tuple of n items) and otherwise
raises a Misconception that says what came back ("got NaN", "got the string '0.5'", "got an
object that is not data"). Then values are compared with ``close`` (defined in ``tolerance``,
re-exported here), False whenever the comparison cannot be made, or written
``not (err <= tol)``, which is True for NaN: never ``err > tol``, which is False for NaN and
passes it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from mlbook_helpers.checks import data_array, describe

from mlbook.labs.kit.messages import fail
from mlbook.labs.kit.tolerance import close

__all__ = ["close", "number", "boolean", "array", "items"]


def number(x: Any, what: str, hint: str | None = None) -> float:
    """``x`` as a float when it is one finite real number, else a Misconception saying what it is.

    A number is a Python int or float, a NumPy scalar or 0-d array, or a 0-d torch tensor, of an
    integer or floating dtype. Not a bool, a string, a one-entry array, None or an object.
    """
    if isinstance(x, int) and not isinstance(x, bool):  # Python ints may exceed int64
        try:
            value = float(x)
        except OverflowError:
            fail(what, f"got the integer {x:.3e}, too large for a float", hint)
    else:
        arr = data_array(x)
        if arr is None or arr.ndim != 0 or arr.dtype.kind not in "iuf":
            fail(what, f"got {describe(x)}, not one real number",
                 hint or "Return a single number: a float (float(...) or .item() turns a one-entry array into one).")
        value = float(arr)
    if not math.isfinite(value):
        fail(what, f"got {describe(value)}", hint or "Look for a log of 0, a division by 0 or an exp that overflows.")
    return value


def boolean(x: Any, what: str, hint: str | None = None) -> bool:
    """``x`` as a bool when it is a truth value (a bool, or a 0-d boolean array or tensor), else a
    Misconception. A number is not a truth value: NaN and 0.5 are not True."""
    arr = None if isinstance(x, (list, tuple)) else data_array(x)
    if arr is None or arr.ndim != 0 or arr.dtype.kind != "b":
        fail(what, f"returned {describe(x)}, not True or False", hint or "Return a bool: True or False.")
    return bool(arr)


_KINDS = {"f": "floats", "i": "integers", "u": "integers", "b": "booleans"}


def array(x: Any, what: str, *, shape: Sequence[int] | None = None, kind: str = "f", finite: bool = True,
          hint: str | None = None) -> np.ndarray:
    """``x`` as a NumPy array, after checking that it is the array a check expects.

    Args:
        x: a student's result: a NumPy array, a torch tensor or a nested list of numbers.
        what: the call, for the message.
        shape: the exact shape expected (None: any shape, checked by the caller).
        kind: the dtype kinds accepted, NumPy's letters: "f" floats, "iuf" any real number,
            "b" booleans. Complex values are never accepted.
        finite: reject NaN and inf entries (False for a check that diagnoses them itself).
        hint: the message's advice when ``x`` is rejected.
    Returns:
        float64 (a boolean array when ``kind`` is "b"), never empty.
    Raises:
        Misconception: ``x`` is not data, of another kind, shape, empty, or not finite, with
        what came back ("got an array of shape (4,) with 1 NaN among its 4 entries").
    """
    arr = data_array(x)
    wanted = " or ".join(dict.fromkeys(_KINDS[k] for k in kind))
    if arr is None or arr.dtype.kind not in kind:
        fail(what, f"got {describe(x)}, expected an array of {wanted}",
             hint or f"Return a NumPy array or a torch tensor of {wanted}.")
    if shape is not None and arr.shape != tuple(shape):
        fail(what, f"shape is {arr.shape}, expected {tuple(shape)}", hint)
    if arr.size == 0:
        fail(what, f"got {describe(x)}", hint or "The result has no entries.")
    if kind == "b":
        return arr.astype(bool)
    out = arr.astype(np.float64)
    if finite and not np.isfinite(out).all():
        fail(what, f"got {describe(x)}", hint or "Every entry must be a finite number: look for a log of 0, "
             "a division by 0 or an exp that overflows.")
    return out


def items(x: Any, n: int, what: str, names: str) -> tuple:
    """``x`` as a tuple when it is a tuple or list of exactly ``n`` items, else a Misconception.

    Args:
        names: what the items are, for the message: "(out, weights)".
    """
    if not isinstance(x, (tuple, list)) or len(x) != n:
        got = f"a {type(x).__name__} of {len(x)} items" if isinstance(x, (tuple, list)) else describe(x)
        fail(what, f"returned {got}, not {n} items", f"Return {names}.")
    return tuple(x)
