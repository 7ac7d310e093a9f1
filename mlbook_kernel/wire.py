"""The data format between a student's kernel and the grader: plain data only, never pickle.

Conventions (both sides rely on them):
- A message is one frame: 8-byte big-endian length, then a JSON header, a NUL byte, and the
  arrays the header refers to, each as an ``.npy`` blob (numeric and bool dtypes only, loaded
  with ``allow_pickle=False``).
- Values: None, bool, int, float, str as JSON; ``{"$t": [...]}`` tuple, ``{"$l": [...]}`` list,
  ``{"$d": {...}}`` dict with str keys, ``{"$a": i}`` array (``"torch"``: the tensor dtype it came
  from, ``"scalar"``: a NumPy scalar), ``{"$h": n}`` a handle to an object that stays in the
  kernel (a student's function, class or instance), ``{"$g": n}`` a handle to an object that
  stays in the grader (a test object lent to the student's code: calling it from the kernel
  asks the grader, whose answer is data; what is inside it never crosses).
- A receiver trusts nothing: sizes, nesting and dtypes are checked while decoding, and a frame
  larger than the receiver allows is refused from its length alone, before it is read.
"""

from __future__ import annotations

import io
import json
import socket
import struct
import sys
from typing import Any, Callable

import numpy as np

MAX_FRAME_BYTES = 256 * 2**20
MAX_DEPTH = 32
_ALLOWED_KINDS = set("biufc")


class WireError(ValueError):
    """A frame or value that does not follow the format."""


class FrameTooLarge(WireError):
    """A frame longer than the receiver accepts (refused before its body is read)."""


class UnsendableError(WireError):
    """The grader tried to send an object that is not data (a check that needs rewriting)."""


# --- values -------------------------------------------------------------------------------


def encode(value: Any, blobs: list[bytes], to_handle: Callable[[Any], int] | None, depth: int = 0) -> Any:
    """The JSON-able form of ``value``; arrays are appended to ``blobs``.

    Args:
        to_handle: turns an object that is not data into a handle id (kernel side); ``None``
            makes such an object an error (grader side sends data and handles only).
    """
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"$f": repr(value)} if isinstance(value, float) and not np.isfinite(value) else value
    if isinstance(value, Handle):
        return {"$h": value.handle_id}
    if isinstance(value, Lent):
        return {"$g": value.lend_id}
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
        if arr.dtype.kind in _ALLOWED_KINDS:
            blobs.append(_npy(arr))
            return {"$a": len(blobs) - 1, **({"scalar": True} if isinstance(value, np.generic) else {})}
    torch_dtype = _torch_dtype(value)
    if torch_dtype is not None:
        t = value.detach().cpu()
        if torch_dtype == "torch.bfloat16":
            t = t.float()
        blobs.append(_npy(t.numpy()))
        return {"$a": len(blobs) - 1, "torch": torch_dtype}
    if isinstance(value, np.random.Generator):  # sent as its state: the copy draws the same numbers
        return {"$rng": _json_safe(value.bit_generator.state)}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"$t": [encode(v, blobs, to_handle, depth + 1) for v in value]}
    if isinstance(value, list):
        return {"$l": [encode(v, blobs, to_handle, depth + 1) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$d": {k: encode(v, blobs, to_handle, depth + 1) for k, v in value.items()}}
    if to_handle is None:
        raise UnsendableError(f"cannot send a {type(value).__module__}.{type(value).__name__} to the kernel: "
                              "build it there (mlbook.judge.remote.helper) or send its data")
    return {"$h": to_handle(value)}


def decode(tree: Any, blobs: list[bytes], from_handle: Callable[[int], Any], depth: int = 0,
           from_lent: Callable[[int], Any] | None = None) -> Any:
    """The value ``encode`` described; ``from_handle`` resolves kernel handles, ``from_lent``
    grader handles (None: a grader handle is an error, as on the grader's own side)."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        raise WireError("bare list in a value")
    if not isinstance(tree, dict) or len(tree) == 0:
        raise WireError("malformed value")
    if "$f" in tree:
        if tree["$f"] not in ("nan", "inf", "-inf"):
            raise WireError("malformed float")
        return float(tree["$f"])
    if "$rng" in tree:
        state = tree["$rng"]
        if not isinstance(state, dict) or state.get("bit_generator") not in _BIT_GENERATORS:
            raise WireError("malformed random generator")
        bit_generator = getattr(np.random, state["bit_generator"])()
        bit_generator.state = state
        return np.random.Generator(bit_generator)
    if "$h" in tree:
        if not isinstance(tree["$h"], int):
            raise WireError("malformed handle")
        return from_handle(tree["$h"])
    if "$g" in tree:
        if not isinstance(tree["$g"], int) or from_lent is None:
            raise WireError("malformed or unexpected grader handle")
        return from_lent(tree["$g"])
    if "$a" in tree:
        index = tree["$a"]
        if not isinstance(index, int) or not 0 <= index < len(blobs):
            raise WireError("array reference out of range")
        arr = np.load(io.BytesIO(blobs[index]), allow_pickle=False)
        if arr.dtype.kind not in _ALLOWED_KINDS:
            raise WireError(f"array of dtype {arr.dtype} refused")
        if tree.get("torch"):
            import torch

            t = torch.from_numpy(arr.copy())
            wanted = getattr(torch, str(tree["torch"]).removeprefix("torch."), None)
            return t.to(wanted) if isinstance(wanted, torch.dtype) else t
        return arr[()] if tree.get("scalar") else arr
    for tag, kind in (("$t", tuple), ("$l", list)):
        if tag in tree:
            if not isinstance(tree[tag], list):
                raise WireError("malformed sequence")
            return kind(decode(v, blobs, from_handle, depth + 1, from_lent) for v in tree[tag])
    if "$d" in tree and isinstance(tree["$d"], dict):
        return {str(k): decode(v, blobs, from_handle, depth + 1, from_lent) for k, v in tree["$d"].items()}
    raise WireError("unknown value tag")


class Handle:
    """Base of objects that stand for something living in the kernel."""

    handle_id: int


class Lent:
    """Base of objects that stand, on the grader's side of a frame, for a grader object lent to
    the kernel for one session (``mlbook.judge``: ``lend``)."""

    lend_id: int


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _json_safe(state):
    if isinstance(state, dict):
        return {k: _json_safe(v) for k, v in state.items()}
    if isinstance(state, np.ndarray):
        return state.tolist()
    if isinstance(state, np.integer):
        return int(state)
    return state


def _npy(arr: np.ndarray) -> bytes:
    """``arr`` in NumPy's .npy format, shape kept (``np.ascontiguousarray`` would make a 0-d array 1-d)."""
    buf = io.BytesIO()
    np.save(buf, np.require(arr, requirements="C"), allow_pickle=False)
    return buf.getvalue()


def _torch_dtype(value: Any) -> str | None:
    torch = sys.modules.get("torch")  # never imported here: a tensor implies torch is loaded
    if torch is not None and isinstance(value, torch.Tensor):
        return str(value.dtype)
    return None


# --- frames -------------------------------------------------------------------------------


def send(sock: socket.socket, header: dict, blobs: list[bytes] = ()) -> None:
    """Send one message: ``header`` (JSON-able, with ``"blobs"`` lengths added) and its arrays."""
    header = {**header, "blobs": [len(b) for b in blobs]}
    head = json.dumps(header).encode()
    payload = head + b"\0" + b"".join(blobs)
    if len(payload) > MAX_FRAME_BYTES:
        raise WireError(f"message of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    sock.sendall(struct.pack(">Q", len(payload)) + payload)


def recv(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> tuple[dict, list[bytes]]:
    """Receive one message of at most ``max_bytes``; raises ``WireError`` on anything malformed
    (an oversized frame before reading it), EOFError on a closed peer."""
    (size,) = struct.unpack(">Q", _read(sock, 8))
    if size > max_bytes:
        raise FrameTooLarge(f"message of {size:,} bytes exceeds the {max_bytes:,} allowed here")
    payload = _read(sock, size)
    cut = payload.find(b"\0")
    if cut < 0:
        raise WireError("message without a header")
    try:
        header = json.loads(payload[:cut])
    except (ValueError, RecursionError) as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    lengths = header.get("blobs") if isinstance(header, dict) else None
    if not isinstance(lengths, list) or not all(isinstance(n, int) and n >= 0 for n in lengths):
        raise WireError("header without blob lengths")
    if sum(lengths) != size - cut - 1:
        raise WireError("blob lengths do not add up")
    blobs, at = [], cut + 1
    for n in lengths:
        blobs.append(payload[at:at + n])
        at += n
    return header, blobs


def _read(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
