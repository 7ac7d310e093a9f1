"""Failures a student can act on.

A check fails by raising ``Misconception`` with a message in the ``what: observed. hint`` form
of ``mlbook_helpers.checks``, built from the student's own output; ``diagnose`` names the known
mistake whose result the student's output matches. Messages quote the student's values, never
the reference's: a failing hidden check must not hand out the answer.
"""

from __future__ import annotations

from typing import Any, Mapping, NoReturn

import numpy as np

from mlbook_helpers.checks import Misconception, data_array, describe

from mlbook.labs.kit.tolerance import close

__all__ = ["fail", "sentence", "diagnose", "first_bad"]


def fail(what: str, observed: str, hint: str | None = None) -> NoReturn:
    """Raise a Misconception in the ``what: observed. hint`` form of mlbook_helpers.checks."""
    raise Misconception(f"{what}: {observed}." + (f" {sentence(hint)}" if hint else ""))


def sentence(text: str) -> str:
    """``text`` as a sentence: capitalised, ending with a full stop (diagnoses are written lower-case)."""
    text = text.strip()
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text[-1] in ".!?" else ".")


def diagnose(actual: Any, variants: Mapping[str, Any], atol: float = 1e-6, rtol: float = 1e-6,
             equal_nan: bool = True) -> str | None:
    """Return the message of the first known wrong variant that ``actual`` matches.

    A diagnosis only names the mistake behind an answer a check has already failed, so by
    default a NaN counts as matching where the mistake itself produces NaN (an inverted mask
    that blocks a whole row, say): that is part of the mistake's signature. It never decides a
    pass; ``close`` does, and there a NaN matches nothing unless the check says so.

    Args:
        actual: the student's result.
        variants: message -> the result that mistake would produce (or a zero-argument
            callable computing it, evaluated only when needed).
    """
    for message, value in variants.items():
        if callable(value):
            try:
                value = value()
            except Exception:  # a variant that cannot be computed here simply does not match
                continue
        if close(actual, value, atol=atol, rtol=rtol, equal_nan=equal_nan):
            return message
    return None


def first_bad(actual: Any, expected: Any, atol: float, rtol: float) -> str:
    """Where the student's array goes wrong, quoting the student's values only.

    "3 of 40 entries are off, e.g. 0.1234 at index (3, 1)"; or what is wrong with it as a whole
    (not numbers, another shape, "2 of 40 entries are nan or inf").
    """
    a, e = data_array(actual), np.asarray(expected, dtype=np.float64)
    if a is None or a.dtype.kind not in "biuf":
        return f"got {describe(actual)}"
    a = a.astype(np.float64)
    if a.shape != e.shape:
        return f"shape is {a.shape}, expected {e.shape}"
    n_bad = int((~np.isfinite(a)).sum())
    if n_bad:
        return f"{n_bad} of {a.size} entries are nan or inf"
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~(np.abs(a - e) <= atol + rtol * np.abs(e))  # a NaN in the reference counts as wrong
    if not bad.any():
        return "every entry within tolerance"
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} of {a.size} entries are off, e.g. {a[idx]:.6g} at index {idx}"
