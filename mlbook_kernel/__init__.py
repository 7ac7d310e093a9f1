"""The kernel side of grading: what runs inside the sandbox, beside the student's code.

It holds no reference solution and decides nothing. Modules:
- ``wire``           the data-only frames between kernel and judge (arrays and numbers, never pickle);
- ``runner``         the in-sandbox runner: drives the kernel through the notebook and reports
                     each cell's start and end to the judge on a channel the kernel cannot reach;
- ``forkserver``     the fork server (started outside, torch pre-imported) whose forks enter each
                     sandbox as the runner and the kernel; ``forked_kernel`` is its kernel side;
- ``seccomp``        the sandbox's syscall filter;
- ``polling``        kernel clients that wait in short slices; every Jupyter client of the course
                     uses them (the runner, ``mlbook validate``, nbgrader's Validate button), so
                     they live here, where a student's install has them too;
- this module        ``probe_cell``: hands a test cell to the grader, and ``Borrowed`` objects.

What a graded test cell runs in the student's kernel: hand the cell to the grader.

When a submission is graded in the sandbox, every test cell ends with
``probe_cell("<lab>", "<grade_id>")`` (added by the grader; the hidden block itself is not run
here). The grader then re-runs that cell's trusted source in its own process, outside the
sandbox; from there it can only read names from this kernel and ask it to call the student's
functions on inputs it sends, getting results back as plain data (``mlbook_kernel.wire``). This
package holds no reference solution and decides nothing: the grader finally says whether the
cell passed and with which message, and ``probe_cell`` raises that message here, so the student
sees it under the cell.

The grader also lends test objects to the student's code (a layer with a hidden leak, say):
they arrive here as ``Borrowed`` stand-ins, and calling one asks the grader, over the same
connection, for the result as data. What the object holds never reaches this kernel.

Which cell a connection is for is not this package's to say: the grader admits one connection
while the runner (a process this kernel cannot inspect) reports that cell running, and refuses
any other. Whatever answers on that connection answers for the student's kernel.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
from typing import Any

from mlbook_kernel import wire

__all__ = ["probe_cell", "resolve", "KernelSession", "SOCKET_ENV"]

SOCKET_ENV = "MLBOOK_PROBE_SOCKET"
# What the grader may import here to run on the student's side (helpers students have too).
IMPORTABLE = ("mlbook_helpers", "torch", "numpy", "math")


def probe_cell(lab: str, grade_id: str) -> None:
    """Let the grader judge test cell ``grade_id`` of ``lab`` against this kernel's state.

    Raises:
        AssertionError (mlbook_helpers.checks.Misconception): the cell failed; the message names
            the likely misconception.
    """
    path = os.environ.get(SOCKET_ENV)
    if not path:
        raise RuntimeError("this cell is judged only when the notebook is graded")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    passed, message = KernelSession(sock).serve({"op": "hello", "lab": lab, "cell": grade_id})
    if not passed:
        from mlbook_helpers.checks import Misconception

        raise Misconception(message)


def resolve(qualname: str) -> Any:
    """The object named ``"module:attr.path"`` (both sides of the wire name objects this way)."""
    module, _, attr = qualname.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


class KernelSession:
    """The kernel's end of one check's conversation with the grader, answered until it says ``done``.

    Args:
        sock: connected to the grader (``mlbook.judge.remote.RemoteSession`` at the other end).
        namespace: where the grader's ``global`` lookups read; default the kernel's user namespace.
            (The seeded-draw tests answer from their own namespace, over a socket pair.)
    """

    def __init__(self, sock: socket.socket, namespace: dict | None = None):
        self.sock = sock
        self.namespace = namespace
        self.objects: dict[int, Any] = {}

    def handle(self, obj: Any) -> int:
        hid = len(self.objects) + 1
        self.objects[hid] = obj
        return hid

    def resolve(self, hid: int) -> Any:
        if hid not in self.objects:
            raise wire.WireError(f"unknown handle {hid}")
        return self.objects[hid]

    def decode(self, tree: Any, blobs: list[bytes]) -> Any:
        return wire.decode(tree, blobs, self.resolve, from_lent=lambda gid: Borrowed(self, gid))

    def ask_grader(self, gid: int, op: str, **fields: Any) -> Any:
        """A request about a borrowed grader object; its answer comes back as data."""
        blobs: list[bytes] = []
        header = {"op": "lent", "do": op, "target": gid}
        for key, value in fields.items():
            header[key] = value if key == "name" else wire.encode(value, blobs, _refuse_objects)
        wire.send(self.sock, header, blobs)
        reply, blobs = wire.recv(self.sock)
        if "error" in reply:
            kind, text = (list(reply["error"]) + ["", ""])[:2]
            raise _RAISED_AS.get(str(kind), RuntimeError)(str(text))
        return self.decode(reply.get("ok"), blobs)

    def serve(self, hello: dict) -> tuple[bool, str]:
        try:
            wire.send(self.sock, hello)
            while True:
                header, blobs = wire.recv(self.sock)
                if header.get("op") == "done":
                    return bool(header.get("passed")), str(header.get("message", ""))
                self._answer(header, blobs)
        except EOFError:
            return False, "the grader closed the connection before the check finished"
        finally:
            self.sock.close()

    def _answer(self, header: dict, blobs: list[bytes]) -> None:
        try:
            result = self._do(header, blobs)
            out: list[bytes] = []
            tree = wire.encode(result, out, self.handle)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # the student's error travels back as data
            wire.send(self.sock, {"error": [type(exc).__name__, str(exc)[:2000]]})
            return
        wire.send(self.sock, {"ok": tree}, out)

    def _do(self, header: dict, blobs: list[bytes]) -> Any:
        op = header.get("op")
        value = lambda key: self.decode(header.get(key), blobs)  # noqa: E731
        if op == "import":
            qualname = str(header.get("name", ""))
            if qualname.split(":")[0].split(".")[0] not in IMPORTABLE:
                raise PermissionError(f"{qualname} is not importable from a check")
            return resolve(qualname)
        if op == "global":
            namespace = self.namespace if self.namespace is not None else _user_namespace()
            name = str(header.get("name"))
            if name not in namespace:
                raise NameError(name)
            return namespace[name]
        target = self.resolve(header.get("target"))
        if op == "call":
            return target(*value("args"), **value("kwargs"))
        if op == "getattr":
            return getattr(target, str(header.get("name")))
        if op == "setattr":
            setattr(target, str(header.get("name")), value("value"))
            return None
        if op == "getitem":
            return target[value("key")]
        if op == "len":
            return len(target)
        if op == "iter":
            return list(target)
        raise wire.WireError(f"unknown operation {op!r}")


def _user_namespace() -> dict:
    """The kernel's user namespace (IPython's), or ``__main__``'s outside IPython."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


# A borrowed object's error is raised here as the same built-in kind (a wrong shape, say).
_RAISED_AS = {"ValueError": ValueError, "TypeError": TypeError, "IndexError": IndexError, "KeyError": KeyError,
              "AttributeError": AttributeError}


def _refuse_objects(obj: Any) -> int:
    raise TypeError(f"a {type(obj).__name__} cannot be passed to a grader object: pass arrays, tensors or numbers")


class Borrowed(wire.Lent):
    """A grader object lent to the student's code for one check: calls go to the grader."""

    def __init__(self, session: KernelSession, gid: int):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "lend_id", gid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.ask_grader(self.lend_id, "call", args=list(args), kwargs=kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._session.ask_grader(self.lend_id, "getattr", name=name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a test object lent by the grader cannot be changed")

    def __repr__(self) -> str:
        return "<a test object lent by the grader>"
