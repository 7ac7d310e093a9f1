"""How a hidden check, running in the grader, reaches the student's objects in the kernel.

A ``RemoteObject`` stands for an object that stays in the kernel (a student's function, class,
instance or module). Calling it, reading an attribute or an item sends the request over the
session's socket; the answer comes back as plain data (``mlbook_kernel.wire``) or as another
``RemoteObject``. An exception in the kernel comes back as ``RemoteError``.

The other way round, a check may ``lend(obj)`` a grader object to the student's code (a test
layer whose leak the student must find, say): the kernel gets a stand-in, and each call it
makes comes back here, where ``obj`` runs and its answer goes back as data. A test object that
carries a secret is always built here and lent, never built in the kernel.

``helper("module:attr")`` builds an object in the kernel (a torch layer the student's code
fills in): only for objects that carry nothing the verdict depends on, since the kernel may
have changed them. Checks are written once and run either way: without a session (the
seeded-draw tests, plain ``nbgrader autograde``) ``helper`` is the grader's own import and
``lend`` returns the object itself.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from mlbook_kernel import resolve, wire

_current = threading.local()

MAX_REPLY_BYTES = 64 * 2**20  # the largest answer a check accepts from the kernel (the labs need < 4 MiB)
MAX_LENT_CALLS = 20_000  # calls of lent objects per session (the labs need < 500)


class RemoteError(Exception):
    """An exception raised by the student's code in the kernel."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message = type_name, message


class RemoteSession:
    """The grader's end of one check's socket.

    Attributes:
        memory_root: host pid of the submission's sandbox (every process of the submission
            descends from it), for measurements taken from outside; None when unknown.
    """

    def __init__(self, conn: socket.socket, memory_root: int | None = None):
        self.conn = conn
        self.memory_root = memory_root
        self.lent: dict[int, Any] = {}
        self.lent_calls = 0

    def lend(self, obj: Any) -> "LentObject":
        gid = len(self.lent) + 1
        self.lent[gid] = obj
        return LentObject(gid)

    def request(self, op: str, target: "RemoteObject | None" = None, **fields: Any) -> Any:
        blobs: list[bytes] = []
        header = {"op": op, **({"target": target.handle_id} if target is not None else {})}
        for key, value in fields.items():
            header[key] = value if key == "name" else wire.encode(value, blobs, None)
        wire.send(self.conn, header, blobs)
        reply, blobs = wire.recv(self.conn, MAX_REPLY_BYTES)
        while reply.get("op") == "lent":  # the student's code calls a lent object before it answers
            self._serve_lent(reply, blobs)
            reply, blobs = wire.recv(self.conn, MAX_REPLY_BYTES)
        if "error" in reply:
            err = reply["error"]
            if not (isinstance(err, list) and len(err) == 2):
                raise wire.WireError("malformed error reply")
            raise RemoteError(str(err[0])[:200], str(err[1])[:2000])
        if "ok" not in reply:
            raise wire.WireError("reply without a result")
        return self._decode(reply["ok"], blobs)

    def _decode(self, tree: Any, blobs: list[bytes]) -> Any:
        return wire.decode(tree, blobs, lambda hid: RemoteObject(self, hid), from_lent=self._lent_object)

    def _lent_object(self, gid: int) -> Any:
        if gid not in self.lent:
            raise wire.WireError(f"unknown grader handle {gid}")
        return self.lent[gid]

    def _serve_lent(self, header: dict, blobs: list[bytes]) -> None:
        """Answer the kernel's call of a lent object: run it here, send back data only."""
        self.lent_calls += 1
        if self.lent_calls > MAX_LENT_CALLS:
            raise wire.WireError(f"more than {MAX_LENT_CALLS} calls of the grader's test objects in one check")
        target = self._lent_object(header.get("target"))
        out: list[bytes] = []
        try:
            if header.get("do") == "call":
                args = self._decode(header.get("args"), blobs)
                kwargs = self._decode(header.get("kwargs"), blobs)
                if not isinstance(args, list) or not isinstance(kwargs, dict):
                    raise TypeError("malformed call")
                value = target(*args, **kwargs)
            elif header.get("do") == "getattr" and not str(header.get("name", "_")).startswith("_"):
                value = getattr(target, str(header["name"]))
            else:
                raise AttributeError("not available on a test object")
            try:
                tree = wire.encode(value, out, None)
            except wire.UnsendableError:  # a method or a sub-object: lent in turn
                out, tree = [], wire.encode(self.lend(value), [], None)
        except wire.WireError:
            raise
        except Exception as exc:  # the student's call was wrong (a shape, say): their code sees it
            wire.send(self.conn, {"error": [type(exc).__name__, str(exc)[:500]]})
            return
        wire.send(self.conn, {"ok": tree}, out)

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


class LentObject(wire.Lent):
    """How a lent grader object is written on the wire (its id in the session)."""

    def __init__(self, gid: int):
        self.lend_id = gid


def lend(obj: Any) -> Any:
    """``obj`` as the student's code will see it: lent from the grader in a sandboxed check
    (the kernel can call it and read its public attributes, never look inside), the object
    itself otherwise."""
    current = session()
    return current.lend(obj) if current is not None else obj


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
