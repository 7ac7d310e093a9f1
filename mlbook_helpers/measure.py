"""Measuring one call: its peak memory and its wall-clock time (lab 6).

Conventions (stated once, relied on by every measurement in lab 6):
- Peak memory is *measured*, never computed from shapes: it is the largest number of bytes
  that the call had allocated at any one time, counting only memory allocated during the
  call. Arrays that existed before the call (its inputs) are not counted; its result is.
- Two allocators are watched at once and their peaks are added:
  * NumPy buffers (and every other Python allocation) through the standard library's
    ``tracemalloc``, to which NumPy reports each buffer it allocates and frees;
  * torch tensors through a ``torch.overrides.TorchFunctionMode`` that sees every tensor a
    torch function or operator returns and counts each new storage until it is freed.
  A tensor that shares the storage of an argument of the torch call that made it (a view,
  a slice, an in-place result) is not new memory and is not counted.
- What is not seen: scratch space that a single torch kernel allocates and frees inside
  itself (for example inside ``torch.softmax`` or ``scaled_dot_product_attention``), and
  memory shared between a NumPy array and a tensor (``torch.from_numpy``), which is counted
  once by each allocator. The numbers are therefore the bytes held by arrays and tensors,
  the quantity that grows as T x T when attention stores its weight matrix.
- Times are wall-clock seconds measured with ``time.perf_counter``; ``best_time`` reports
  the fastest of several runs, the estimate least disturbed by other work on the machine.
- Probes (``square_probe``, ``copy_probe``) are stand-ins for an attention function whose
  peak is known in advance: measuring them tests a measurement, such as a memory sweep.
  Each factory returns a function called as ``probe(q, k, v)``.

This module measures; it computes no attention.
"""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

__all__ = ["PeakMemory", "peak_memory", "best_time", "format_bytes", "square_probe", "copy_probe"]


@dataclass(frozen=True)
class PeakMemory:
    """The measured peak of one call.

    Attributes:
        bytes: the peak, NumPy and torch together (their sum, an upper bound on the joint peak).
        numpy_bytes: peak bytes allocated through Python's allocator (NumPy arrays included).
        torch_bytes: peak bytes held by torch tensor storages created during the call.
    """

    bytes: int
    numpy_bytes: int
    torch_bytes: int

    def __str__(self) -> str:
        parts = f"numpy {format_bytes(self.numpy_bytes)}, torch {format_bytes(self.torch_bytes)}"
        return f"{format_bytes(self.bytes)} ({parts})"


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: a byte count in the largest binary unit below it."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # unreachable, keeps type checkers content


def _tensors_in(obj: Any):
    """Yield every tensor inside a torch function's result (a tensor, tuple, list or dict)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors_in(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors_in(item)


def _storage_id(t: torch.Tensor) -> int | None:
    """The address of a tensor's storage (shared by all its views), or None if it has none."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # sparse, meta or other storage-less tensors
        return None


class _TensorStorageTracker(TorchFunctionMode):
    """Counts the bytes of tensor storages created while the mode is active.

    A storage is new when a torch function returns a tensor whose storage is neither one of
    that function's own tensor arguments (a view or an in-place result) nor already counted.
    It stops counting once it has been freed, which is checked after every torch call.
    """

    def __init__(self, known: list[torch.Tensor]):
        super().__init__()
        self._known = {_storage_id(t) for t in known}  # storages that existed before the call
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}  # storage id -> (weak ref, bytes)
        self.current = 0
        self.peak = 0

    # The hooks below run after every torch call, under tracemalloc: they avoid creating Python
    # objects (generators, lists) on the common path, because each one is traced and slow.

    def _forget_freed(self) -> None:
        expired = torch.UntypedStorage._expired
        for ref, _ in self._live.values():
            if expired(ref.cdata):
                break
        else:
            return
        for sid in [sid for sid, (ref, _) in self._live.items() if expired(ref.cdata)]:
            self.current -= self._live.pop(sid)[1]

    def _is_argument_storage(self, sid: int, args: tuple, kwargs: dict) -> bool:
        """True when a result shares the storage of one of the call's own tensor arguments."""
        for a in args:
            if isinstance(a, torch.Tensor):
                if _storage_id(a) == sid:
                    return True
            elif isinstance(a, (tuple, list)) and any(_storage_id(t) == sid for t in _tensors_in(a)):
                return True
        return bool(kwargs) and any(_storage_id(t) == sid for t in _tensors_in(kwargs))

    def _count(self, t: torch.Tensor, args: tuple, kwargs: dict) -> None:
        sid = _storage_id(t)
        if sid is None or sid in self._live or sid in self._known or self._is_argument_storage(sid, args, kwargs):
            return
        storage = t.untyped_storage()
        self._live[sid] = (StorageWeakRef(storage), storage.nbytes())
        self.current += storage.nbytes()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **kwargs) if kwargs else func(*args)
        if self._live:
            self._forget_freed()
        if isinstance(result, torch.Tensor):
            self._count(result, args, kwargs)
        elif isinstance(result, (tuple, list, dict)):
            for t in _tensors_in(result):
                self._count(t, args, kwargs)
        if self.current > self.peak:
            self.peak = self.current
        return result


def peak_memory(fn: Callable, *args: Any, **kwargs: Any) -> PeakMemory:
    """Run ``fn(*args, **kwargs)`` once and measure the peak memory it allocated.

    Create the inputs *before* calling this, so that only the call itself is measured.

    Args:
        fn: the function to measure (NumPy, torch, or both).
        *args, **kwargs: passed to ``fn``; tensors among them count as already allocated.

    Returns:
        A ``PeakMemory``; ``.bytes`` is the number to report.
    """
    inputs = list(_tensors_in(list(args))) + list(_tensors_in(dict(kwargs)))
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracker = _TensorStorageTracker(inputs)
    try:
        tracemalloc.reset_peak()
        python_before, _ = tracemalloc.get_traced_memory()
        with tracker:
            result = fn(*args, **kwargs)
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    del result
    numpy_bytes = max(python_peak - python_before, 0)
    return PeakMemory(bytes=numpy_bytes + tracker.peak, numpy_bytes=numpy_bytes, torch_bytes=tracker.peak)


def best_time(fn: Callable, *args: Any, repeat: int = 3, warmup: int = 1, **kwargs: Any) -> float:
    """The fastest wall-clock time of ``fn(*args, **kwargs)`` over ``repeat`` runs, in seconds.

    Args:
        fn: the function to time.
        *args, **kwargs: passed to ``fn``.
        repeat: timed runs; the minimum is returned.
        warmup: untimed runs first (caches, lazy initialisation, thread pools).

    Returns:
        Seconds, as a float.
    """
    for _ in range(warmup):
        fn(*args, **kwargs)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best


def square_probe(dtype: str = "float32") -> Callable:
    """A probe that allocates one (T, T) tensor, T = q.shape[0]: its peak is T * T entries.

    Args:
        dtype: name of the torch dtype of the tensor ("float32": 4 bytes an entry, "float64": 8).

    Returns:
        ``probe(q, k, v)``, which returns the new (T, T) tensor.
    """
    torch_dtype = getattr(torch, dtype)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"{dtype!r} is not a torch dtype")

    def allocate_square(q, k, v):
        return torch.empty(q.shape[0], q.shape[0], dtype=torch_dtype)  # (T, T)

    return allocate_square


def copy_probe(extra_entries: int) -> Callable:
    """A probe that copies q and allocates a fixed float32 buffer: its peak is q's bytes + 4 * extra_entries.

    Args:
        extra_entries: float32 entries of the buffer, whatever T is.

    Returns:
        ``probe(q, k, v)``, which returns (the copy of q, the buffer).
    """
    extra_entries = int(extra_entries)

    def copy_and_buffer(q, k, v):
        return q.clone(), torch.empty(extra_entries)  # (T, d), (extra_entries,)

    return copy_and_buffer
