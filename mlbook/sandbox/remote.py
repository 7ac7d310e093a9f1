"""How a hidden check, running in the grader, reaches the student's objects in the kernel.

A ``RemoteObject`` stands for an object that stays in the kernel (a student's function, class,
instance or module). Calling it, reading an attribute or an item sends the request over the
session's socket; the answer comes back as plain data (``mlbook_probe.wire``) or as another
``RemoteObject``. An exception in the kernel comes back as ``RemoteError``.

Checks are written once and run either way: ``helper("mlbook_helpers.measure:peak_memory")``
gives the kernel's copy during a sandboxed session and the grader's own import otherwise
(``mlbook run --local``, plain ``nbgrader autograde``).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from mlbook_probe import resolve, wire

_current = threading.local()


class RemoteError(Exception):
    """An exception raised by the student's code in the kernel."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message = type_name, message


class RemoteSession:
    """The grader's end of one check's socket."""

    def __init__(self, conn: socket.socket):
        self.conn = conn

    def request(self, op: str, target: "RemoteObject | None" = None, **fields: Any) -> Any:
        blobs: list[bytes] = []
        header = {"op": op, **({"target": target.handle_id} if target is not None else {})}
        for key, value in fields.items():
            header[key] = value if key == "name" else wire.encode(value, blobs, None)
        wire.send(self.conn, header, blobs)
        reply, blobs = wire.recv(self.conn)
        if "error" in reply:
            err = reply["error"]
            if not (isinstance(err, list) and len(err) == 2):
                raise wire.WireError("malformed error reply")
            raise RemoteError(str(err[0])[:200], str(err[1])[:2000])
        if "ok" not in reply:
            raise wire.WireError("reply without a result")
        return wire.decode(reply["ok"], blobs, lambda hid: RemoteObject(self, hid))

    def lookup(self, name: str) -> Any:
        """The value of a global ``name`` in the kernel (KeyError when it has none)."""
        try:
            return self.request("global", name=name)
        except RemoteError as exc:
            if exc.type_name == "NameError":
                raise KeyError(name) from None
            raise

    def __enter__(self) -> "RemoteSession":
        _current.session = self
        return self

    def __exit__(self, *exc) -> None:
        _current.session = None


class RemoteObject(wire.Handle):
    """An object living in the student's kernel."""

    def __init__(self, session: RemoteSession, handle_id: int):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "handle_id", handle_id)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.request("call", self, args=list(args), kwargs=kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        try:
            return self._session.request("getattr", self, name=name)
        except RemoteError as exc:  # keep hasattr() and getattr(x, name, default) working
            if exc.type_name == "AttributeError":
                raise AttributeError(name) from None
            raise

    def __setattr__(self, name: str, value: Any) -> None:
        self._session.request("setattr", self, name=name, value=value)

    def __getitem__(self, key: Any) -> Any:
        return self._session.request("getitem", self, key=key)

    def __len__(self) -> int:
        try:
            n = self._session.request("len", self)
        except RemoteError as exc:  # keep list(obj) working for objects without a length
            if exc.type_name == "TypeError":
                raise TypeError(exc.message) from None
            raise
        if not isinstance(n, int) or n < 0:
            raise wire.WireError("len() returned a non-integer")
        return n

    def __iter__(self):
        items = self._session.request("iter", self)
        if not isinstance(items, list):
            raise wire.WireError("iteration returned no list")
        return iter(items)

    def __repr__(self) -> str:
        return f"<object #{self.handle_id} in the student's kernel>"


def session() -> RemoteSession | None:
    """The session of the check running in this thread, if it runs sandboxed."""
    return getattr(_current, "session", None)


def helper(qualname: str) -> Any:
    """``"module:attr.path"`` from the student's side: the kernel's object in a sandboxed check,
    the grader's own import otherwise. Only mlbook_helpers, torch, numpy and math are reachable."""
    current = session()
    if current is not None:
        return current.request("import", name=qualname)
    return resolve(qualname)
