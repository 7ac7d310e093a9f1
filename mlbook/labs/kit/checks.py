"""Whole steps of a hidden check, each written once.

``compare`` is the usual end of a check on an array: pass when the student's result is close
to the reference; otherwise fail with, in this order, a wrong shape, non-finite entries, the
known mistake the result matches (``messages.diagnose``) or else where it first goes wrong
(``messages.first_bad``). ``reproducible`` checks that a function drawing random numbers takes
them all from the generator it is given: the same seed gives the same result, another seed
another one. Both quote the student's values only.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from mlbook.labs.kit.inputs import seed
from mlbook.labs.kit.messages import diagnose, fail, first_bad
from mlbook.labs.kit.tolerance import close

__all__ = ["compare", "reproducible"]

Hint = str | Callable[[tuple[int, ...]], str] | None


def compare(got: np.ndarray, want: np.ndarray, what: str, hint: str, *, atol: float = 1e-6, rtol: float = 1e-6,
            mistakes: Mapping[str, Any] | None = None, mistake_tol: tuple[float, float] | None = None,
            shape_hint: Hint = None, nonfinite: tuple[str, str] | Callable[[np.ndarray], tuple[str, str]] | None = None,
            observed: Callable[[np.ndarray], str] | None = None) -> None:
    """Fail unless ``got`` is within ``atol + rtol * |want|`` of ``want``, saying why it is not.

    Args:
        got: the student's result, already read with ``results.array`` (float64).
        want: the grader's reference, of the shape ``got`` must have.
        what: the call, for the message.
        hint: the advice when no known mistake matches.
        mistakes: message -> the result that mistake gives (or a zero-argument callable computing
            it), as for ``messages.diagnose``; the first match names the misconception.
        mistake_tol: (atol, rtol) for recognising a mistake; default (atol, rtol).
        shape_hint: the advice for a result of another shape, or a function of that shape giving
            it (a transposed result deserves its own advice).
        nonfinite: (observed, hint), or a function of ``got`` giving them, for a result of the
            right shape with a NaN or inf entry; None leaves such a result to the diagnosis.
        observed: what the message says of the result; default ``first_bad``'s
            "3 of 40 entries are off, e.g. 0.1234 at index (3, 1)".
    Raises:
        Misconception: ``got`` is not close to ``want``.
    """
    if close(got, want, atol=atol, rtol=rtol):
        return
    if got.shape != want.shape:
        fail(what, f"shape is {got.shape}, expected {want.shape}",
             shape_hint(got.shape) if callable(shape_hint) else shape_hint)
    if nonfinite is not None and not np.isfinite(got).all():
        fail(what, *(nonfinite(got) if callable(nonfinite) else nonfinite))
    d_atol, d_rtol = mistake_tol if mistake_tol is not None else (atol, rtol)
    message = diagnose(got, mistakes, atol=d_atol, rtol=d_rtol) if mistakes else None
    fail(what, observed(got) if observed is not None else first_bad(got, want, atol=atol, rtol=rtol),
         message or hint)


_SAME_SEED = ("Draw every random number from the rng argument (rng.standard_normal), not from np.random.* or "
              "torch's global generator, so that a seed reproduces the result.")
_OTHER_SEED = "The rng argument seems to be ignored: draw every random number from it."


def reproducible(run: Callable[[np.random.Generator], float], what: str, rng: np.random.Generator, *,
                 same_seed_hint: str = _SAME_SEED, other_seed_hint: str = _OTHER_SEED) -> None:
    """Fail unless ``run`` gives one number for two generators seeded alike and another for another seed.

    Args:
        run: calls the student's function with the generator it is given and reads its number
            (``ask_number``): ``lambda g: ask_number(f, 7, 500, g, what=what)``.
        what: that call, for the message.
        rng: the check's own generator, which draws the seed.
    """
    first_seed = seed(rng)
    first, again, other = (run(np.random.default_rng(s)) for s in (first_seed, first_seed, first_seed + 1))
    if not first == again:
        fail(what, f"two calls with generators seeded alike returned {first:.6g} and {again:.6g}", same_seed_hint)
    if first == other:
        fail(what, f"generators with different seeds both gave {first:.6g}", other_seed_hint)
