"""Calling the student's code.

In grading, the student's functions live in the kernel and the checks run in the grader: a
function or class reaches a check as a ``RemoteObject`` whose calls cross the judge's data-only
channel (arrays and numbers, never pickle). ``helper`` builds a given object in the kernel (one
without secrets, which the student's code fills in); ``lend`` lends the kernel an object built
here, which it may call but never look inside. Outside grading (the in-process draw tests) the
same checks get plain functions.

A student's exception is reported as a failure that names the call; the grader's own errors and
a kernel that went away (``WireError``, ``OSError``, ...) pass through untouched, so they are
never a student's lost points.

``ask_array``, ``ask_number``, ``ask_boolean`` and ``ask_items`` are the usual whole step of a
check: call the student's function quietly and read its result, failing closed.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from mlbook_helpers.checks import Misconception
from mlbook_kernel.wire import Handle, WireError

# Up a stage, one of the two (scripts/import_graph.py): a check reaches the student's code only
# through the judge's session with the kernel, which the judge opens before it runs the check.
from mlbook.judge.remote import RemoteError, RemoteObject, helper, lend, session
from mlbook.labs.kit.messages import fail
from mlbook.labs.kit.results import array, boolean, items, number

__all__ = ["Handle", "RemoteError", "RemoteObject", "WireError", "helper", "lend", "session", "call_student",
           "call_seeing_args", "given", "like", "student_error", "reraise", "quiet", "ask_array", "ask_number", "ask_boolean", "ask_items",
           "NOT_THE_STUDENTS"]

# Exceptions that are not the student's: a verdict already reached, or the kernel went away.
NOT_THE_STUDENTS = (Misconception, WireError, EOFError, OSError, TimeoutError)


def student_error(exc: Exception) -> tuple[str, str]:
    """(type name, message) of a student's exception, raised here or, as a RemoteError, in the kernel."""
    return (exc.type_name, exc.message) if isinstance(exc, RemoteError) else (type(exc).__name__, str(exc))


def reraise(exc: Exception) -> Callable[..., Any]:
    """A function that raises ``exc``: hands an exception already caught back to ``call_student``."""
    def raiser(*_args: Any, **_kwargs: Any) -> Any:
        raise exc

    return raiser


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence warnings and NumPy's floating-point warnings around a student's call.

    A correct answer such as ``w * np.log(w)`` followed by ``np.nansum`` warns about log(0);
    nbgrader zeroes a test cell that writes to stderr, so such a warning must not escape.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _describe(arg: Any) -> str:
    """An argument's shape for a message; objects living in the kernel are not asked for one."""
    if isinstance(arg, (RemoteObject, Handle)):
        return "object"
    shape = getattr(arg, "shape", None)
    return str(tuple(shape)) if shape is not None else type(arg).__name__


def call_student(fn: Callable, *args: Any, what: str, named: Callable[[str, str], tuple[str, str] | None] | None = None,
                 **kwargs: Any) -> Any:
    """Call a student's function; turn its exception into a failure that says which call failed.

    Args:
        fn: the student's function or class (a RemoteObject in grading).
        args, kwargs: data, or objects living in the kernel.
        what: the call as the student should read it in a failure message.
        named: a lab's known errors: (type name, message) -> (observed, hint) for an error the
            lab can name precisely (a ``.view`` on a non-contiguous tensor, a float16 overflow),
            or None to report it as usual.
    """
    try:
        return fn(*args, **kwargs)
    except NOT_THE_STUDENTS:
        raise
    except Exception as exc:  # the student's error, reported without the grader's traceback
        kind, text = student_error(exc)
        if kind == "NotImplementedError":
            fail(what, "not implemented yet", "Replace `raise NotImplementedError()` with your code.")
        if named is not None and (known := named(kind, text)) is not None:
            fail(what, *known)
        shapes = ", ".join(_describe(a) for a in args)
        fail(what, f"raised {kind}: {text} (called with arguments of shape {shapes})", _error_hint(kind, text))


def call_seeing_args(fn: Callable, *args: Any, what: str,
                     named: Callable[[str, str], tuple[str, str] | None] | None = None) -> tuple[Any, tuple]:
    """``call_student``, returning also the arguments as the call left them: (result, args after).

    In grading the student's function gets copies of what the check sends, so a change it makes
    to an input in place happens in the kernel; ``mlbook_helpers.checks.called_with`` runs the call
    there and sends the arguments back with the result. Compare them with what was sent.
    """
    called = helper("mlbook_helpers.checks:called_with")
    result, after = items(call_student(lambda *a: called(fn, *a), *args, what=what, named=named), 2, what,
                          "the pair (result, arguments)")
    return result, tuple(after)


def given(fn: Callable, **answers: Callable) -> Callable:
    """``fn`` judged on its own: every call runs it with the other answers it reads by name (a
    training loop's ``attention_entropy``) bound to the grader's versions, ``answers``, lent to
    the kernel (``mlbook_helpers.checks.called_given``). A mistake in one of those answers then
    costs its own cells only, not also those of every function that calls it."""
    called = helper("mlbook_helpers.checks:called_given")
    lent = {name: lend(answer) for name, answer in answers.items()}
    return lambda *args, **kwargs: called(fn, lent, *args, **kwargs)


def like(value: np.ndarray, template: Any) -> Any:
    """``value`` (the grader's float64 result) in the kind ``template`` came as: a torch tensor of its
    float dtype when ``template`` is one, else a NumPy array of ``template``'s float dtype (float64
    for anything else). What a grader's version lent by ``given`` returns, so the student's function
    that calls it computes on in the precision and library it chose."""
    torch = sys.modules.get("torch")  # never imported here: a tensor implies torch is loaded
    if torch is not None and isinstance(template, torch.Tensor):
        dtype = template.dtype if template.is_floating_point() else torch.float64
        return torch.as_tensor(np.asarray(value), dtype=dtype)
    kind = getattr(np.asarray(template) if not isinstance(template, np.ndarray) else template, "dtype", None)
    return np.asarray(value, dtype=kind if kind is not None and kind.kind == "f" else np.float64)


_SHAPE_WORDS = ("shape", "size", "dimension", "broadcast", "must match", "axis", "index", "out of range", "expand")


def _error_hint(kind: str, text: str) -> str:
    """The advice for a student's exception no lab names: by what the error is about."""
    if kind in ("IndexError", "ValueError", "RuntimeError") and any(w in text.lower() for w in _SHAPE_WORDS):
        return "Check that your code works for other shapes than the lesson's (T_q != T_k, other d_k, a batch axis)."
    if kind == "TypeError":
        return ("Check what your code is given and what it returns: a tensor where NumPy is used (or the other way "
                "round), or a missing argument, are common causes.")
    if kind == "NameError":
        return "Define every name your function uses inside it, or in a cell above it that you have run."
    return "Call your function on inputs like these in the notebook to see where it fails."


def ask_array(fn: Callable, *args: Any, what: str, shape: Sequence[int] | None = None, kind: str = "f",
              finite: bool = True, hint: str | None = None,
              named: Callable[[str, str], tuple[str, str] | None] | None = None, **kwargs: Any) -> np.ndarray:
    """Call a student's function quietly and read its result as an array: ``quiet``,
    ``call_student`` and ``results.array`` in one step.

    Args:
        fn, args, kwargs: the call (``kwargs`` go to ``fn``; ``what``, ``shape``, ``kind``,
            ``finite``, ``hint`` and ``named`` are this function's own).
        what: the call as the student should read it in a failure message.
        shape, kind, finite, hint: as for ``results.array``.
        named: as for ``call_student``.
    Returns:
        float64 (boolean when ``kind`` is "b"), never empty.
    """
    with quiet():
        got = call_student(fn, *args, what=what, named=named, **kwargs)
    return array(got, what, shape=shape, kind=kind, finite=finite, hint=hint)


def ask_number(fn: Callable, *args: Any, what: str, hint: str | None = None,
               named: Callable[[str, str], tuple[str, str] | None] | None = None, **kwargs: Any) -> float:
    """Call a student's function quietly and read its result as one finite real number:
    ``quiet``, ``call_student`` and ``results.number`` in one step (arguments as for ``ask_array``)."""
    with quiet():
        got = call_student(fn, *args, what=what, named=named, **kwargs)
    return number(got, what, hint)


def ask_boolean(fn: Callable, *args: Any, what: str, hint: str | None = None,
                named: Callable[[str, str], tuple[str, str] | None] | None = None, **kwargs: Any) -> bool:
    """Call a student's function quietly and read its result as a truth value: ``quiet``,
    ``call_student`` and ``results.boolean`` in one step (arguments as for ``ask_array``)."""
    with quiet():
        got = call_student(fn, *args, what=what, named=named, **kwargs)
    return boolean(got, what, hint)


def ask_items(fn: Callable, *args: Any, n: int, what: str, names: str,
              named: Callable[[str, str], tuple[str, str] | None] | None = None, **kwargs: Any) -> tuple:
    """Call a student's function quietly and read its result as a tuple of ``n`` items: ``quiet``,
    ``call_student`` and ``results.items`` in one step (arguments as for ``ask_array``).

    Args:
        n: how many items the result must hold.
        names: what the items are, for the message: "the pair (out, weights)".
    Returns:
        the items, each still to be read (``results.array``, ``number``).
    """
    with quiet():
        got = call_student(fn, *args, what=what, named=named, **kwargs)
    return items(got, n, what, names)
