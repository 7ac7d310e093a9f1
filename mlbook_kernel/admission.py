"""The student's kernel closes the operating system's buffers to itself before its first cell.

Loaded by every grading kernel as an IPython extension (``polling.SANDBOX_KERNEL_ARGS``: a
sandbox's, warm or cold, and the unsandboxed opt-out's; not a student's own ``mlbook validate``,
which may run on a machine without seccomp): on the first ``pre_execute`` event, before any code
of the notebook runs and after the kernel's own ZeroMQ sockets and event loops exist, it stacks ``seccomp.admitted_program()`` on the
sandbox's filter for every thread of the kernel (and so for every process it starts). What that
filter refuses, and why, is ``mlbook_kernel.seccomp``'s docstring; a refusal reaches the cell as
``OSError`` ENOSYS, to which the extension adds a note saying so. Fail closed: IPython reports an
exception of an event callback and runs the cell anyway, so a kernel that cannot stack the filter
ends itself (its notebook is never run without it).

Kernel-side: imports only the standard library and ``mlbook_kernel``.
"""

from __future__ import annotations

import ctypes
import errno
import os

from mlbook_kernel import seccomp

NOTE = ("The grading sandbox refuses this system call (ENOSYS): a graded notebook may not keep data in the "
        "operating system's own buffers (new socket pairs or network sockets, listening sockets, larger socket "
        "buffers, SysV or POSIX message queues, semaphore sets, splice/vmsplice/tee, extended attributes, symbolic "
        "links). Keep your data in Python, NumPy or torch objects.")
_PR_SET_NO_NEW_PRIVS = 38


def admit() -> None:
    """Stack the admitted filter on every thread of this process, for good.

    Raises:
        OSError: the operating system refused it.
        seccomp.Unsupported: not an x86_64 or aarch64 machine.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # already set in a sandbox; needed outside one
        raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
    seccomp.install(seccomp.admitted_program())


def _explain(shell, etype, value, tb, tb_offset=None) -> None:
    """IPython's handler for OSError in a cell (it must show the error itself): the usual
    traceback, with ``NOTE`` added to an ENOSYS."""
    if getattr(value, "errno", None) == errno.ENOSYS and NOTE not in getattr(value, "__notes__", ()):
        value.add_note(NOTE)
    shell._showtraceback(etype, value, shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset))


def load_ipython_extension(shell) -> None:
    """IPython's entry point: admit the kernel on its first execution; explain refusals."""
    def first_execute() -> None:
        shell.events.unregister("pre_execute", first_execute)
        try:
            admit()
        except Exception as exc:  # an event callback's exception would not stop the cell
            os.write(2, f"mlbook: the kernel cannot stack its admission filter ({exc!r}); stopping\n".encode())
            os._exit(1)

    shell.events.register("pre_execute", first_execute)
    shell.set_custom_exc((OSError,), _explain)
