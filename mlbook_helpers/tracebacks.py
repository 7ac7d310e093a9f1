"""How a failed check shows under a notebook cell: the message first, then where.

Convention: a ``Misconception`` (``mlbook_helpers.checks``) shown by IPython (JupyterLab, nbgrader's
Validate button and ``nbgrader validate``, which print the cell's traceback) reads:
  Misconception: <the message, wrapped at WIDTH columns>
  <blank line>
  IPython's usual frames of the test cell (and of any student code) down to the call of the check
  (the check that failed: expect_close, in mlbook_helpers.checks)
IPython's default puts the message last, after two or three frames of the helpers' own code that
say nothing to a student; in the Validate dialog the message then sits below the fold, and
``nbgrader validate`` cuts every line at 90 characters, the message's one long line included.
The frames inside ``mlbook_helpers`` (and ``mlbook_kernel``, the grader's side) are left out; an
exception the check was handling (a student's function that raised) keeps its full traceback.

It is IPython's own hook for this (``_render_traceback_``, read by ``InteractiveShell.showtraceback``):
nothing is installed, and the error's ``ename`` and ``evalue`` are the usual ones, which is what
nbgrader's grading and ``mlbook validate`` read. Outside IPython, Python prints its usual traceback.
"""

from __future__ import annotations

import re
import textwrap
import types

__all__ = ["WIDTH", "message_first", "message_lines", "outside_helpers"]

WIDTH = 80  # nbgrader validate shows 82 characters of a line (Validator.width 90, indent 4, "...")
INTERNAL = ("mlbook_helpers", "mlbook_kernel")  # packages whose frames a student is not shown
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RED, _RESET = "\x1b[31m", "\x1b[39m"


def _internal(frame: types.FrameType) -> bool:
    name = str(frame.f_globals.get("__name__", ""))
    return any(name == p or name.startswith(p + ".") for p in INTERNAL)


def outside_helpers(tb: types.TracebackType | None) -> tuple[types.TracebackType | None, types.FrameType | None]:
    """The traceback down to (not into) the first frame of the helpers.

    Args:
        tb: an exception's traceback (outermost frame first).
    Returns:
        (a new traceback of the frames before the helpers', the first helper frame or None).
        ``tb`` itself is not changed.
    """
    kept = []
    while tb is not None and not _internal(tb.tb_frame):
        kept.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(kept):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new, (tb.tb_frame if tb is not None else None)


def message_lines(exc: BaseException, width: int = WIDTH) -> list[str]:
    """``Name: message`` wrapped at ``width`` columns (the name in red, as IPython shows it)."""
    name = type(exc).__name__
    lines = []
    for paragraph in f"{name}: {exc}".splitlines() or [name]:
        lines += textwrap.wrap(paragraph, width, break_long_words=True, break_on_hyphens=False) or [""]
    lines[0] = _RED + name + _RESET + lines[0][len(name):]
    return lines


def message_first(exc: BaseException) -> list[str]:
    """IPython's structured traceback of ``exc`` with the message first (see the module docstring)."""
    head = message_lines(exc)
    try:
        from IPython import get_ipython

        shell = get_ipython()
        kept, check = outside_helpers(exc.__traceback__)
        frames = shell.InteractiveTB.structured_traceback(type(exc), exc, kept) if shell is not None else []
    except Exception:  # never let the display hide the message
        frames, check = [], None
    if frames and _ANSI.sub("", frames[-1]).startswith(f"{type(exc).__name__}:"):
        frames = frames[:-1]  # IPython's last line is the message again
    where = [f"(the check that failed: {check.f_code.co_name}, in {check.f_globals.get('__name__')})"] if check else []
    return head + [""] + frames + where
