"""Shared machinery for the hidden checks of every lab.

Conventions:
- Inputs are drawn fresh for every grading run (``fresh_rng``); ``MLBOOK_SEED`` pins them so a
  TA can reproduce one run. The seed is printed in no message: it reveals nothing, but it is
  noise to a student.
- A check fails by raising ``Misconception`` with a message built from the student's own
  output; ``diagnose`` names the known mistake whose result the student's output matches.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import numpy as np

from mlbook_helpers.checks import Misconception, as_array

from mlbook_probe.wire import WireError

from ..sandbox.remote import RemoteError, RemoteObject, helper

__all__ = ["fresh_rng", "diagnose", "fail", "close", "call_student", "helper", "RemoteError"]


def fresh_rng() -> np.random.Generator:
    """A generator seeded from ``MLBOOK_SEED`` when set, from the OS otherwise."""
    seed = os.environ.get("MLBOOK_SEED")
    return np.random.default_rng(int(seed) if seed else None)


def close(a: Any, b: Any, atol: float = 1e-6, rtol: float = 1e-6) -> bool:
    """Same shape, all finite where ``b`` is finite, and equal within tolerance."""
    try:
        a, b = as_array(a), as_array(b)
    except (TypeError, ValueError):
        return False
    if a.shape != b.shape:
        return False
    return bool(np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def diagnose(actual: Any, variants: Mapping[str, Any], atol: float = 1e-6, rtol: float = 1e-6) -> str | None:
    """Return the message of the first known wrong variant that ``actual`` matches.

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
        if close(actual, value, atol=atol, rtol=rtol):
            return message
    return None


def fail(what: str, observed: str, hint: str | None = None) -> None:
    """Raise a Misconception in the ``what: observed. hint`` form of mlbook_helpers.checks."""
    raise Misconception(f"{what}: {observed}." + (f" {hint}" if hint else ""))


def _describe(arg: Any) -> str:
    """An argument's shape for a message; objects living in the kernel are not asked for one."""
    if isinstance(arg, RemoteObject):
        return "object"
    shape = getattr(arg, "shape", None)
    return str(tuple(shape)) if shape is not None else type(arg).__name__


def call_student(fn: Callable, *args: Any, what: str, **kwargs: Any) -> Any:
    """Call a student's function; turn a crash into a message that says which call failed."""
    try:
        return fn(*args, **kwargs)
    except (Misconception, WireError, EOFError, OSError, TimeoutError):
        raise  # a verdict, or the kernel went away: not the student's exception
    except Exception as exc:  # the student's error, reported without the grader's traceback
        # In a sandboxed check the student's exception arrives as a RemoteError.
        kind, text = (exc.type_name, exc.message) if isinstance(exc, RemoteError) else (type(exc).__name__, str(exc))
        if kind == "NotImplementedError":
            fail(what, "not implemented yet", "Replace `raise NotImplementedError()` with your code.")
        shapes = ", ".join(_describe(a) for a in args)
        fail(what, f"raised {kind}: {text} (called with arguments of shape {shapes})",
             "Check that your code works for other shapes than the lesson's (T_q != T_k, other d_k).")
