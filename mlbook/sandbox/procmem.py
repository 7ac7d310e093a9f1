"""Peak resident memory of a process tree, measured from outside it (Linux ``/proc``).

Why from outside: a peak measured inside the student's kernel (``tracemalloc``, a torch
dispatch hook) is a number the student's code can change: patch the tool, detect that it is
running and behave differently, or allocate where it does not look. The kernel does not decide
what the operating system charges it, so the grader reads that instead, from the host's
``/proc``, for every process of the submission.

What is measured, for one call:
- the processes, scanned before and after the call: in a sandboxed check ``root`` is the
  sandbox's init (``RemoteSession.memory_root``) and every process of its pid namespace is
  measured (the runner, the kernel and anything they start, orphans included); for a check
  that runs in the grader's own process, ``root`` is ``os.getpid()`` and the processes are
  ``root`` and its descendants (parent pids from ``/proc/<pid>/stat``);
- before the call, each process's peak resident set is reset to its current size
  (``/proc/<pid>/clear_refs`` <- ``"5"``: ``VmHWM`` := ``VmRSS``) and ``VmRSS`` is read;
- after the call, ``VmHWM`` is read. The growth is the sum over processes of
  ``VmHWM_after - VmRSS_before``: what each process held at its own peak beyond what it held
  before. A process born during the call counts its whole ``VmHWM`` (a forked child counts the
  pages it shares with its parent too: an overestimate, never an underestimate). A child born
  and reaped during the call is gone by then; its page faults were added to its parent's
  ``cminflt``/``cmajflt`` counters, whose growth, times the page size, is counted for it (one
  fault per page: an upper bound of what it held, unless it used transparent huge pages).
  The processes' peaks are added, an upper bound of their joint peak.

The numbers are what the kernel charges, so they include the allocator's behaviour. Two
settings make resident memory track what a program holds: glibc must return large freed
blocks to the system and not serve later allocations from memory it kept. The sandbox sets
them at start (``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` in
``mlbook.sandbox.bwrap.environment``); when the tree includes the grader's own process,
``TreePeak`` sets the same with ``mallopt``, and a check measuring in-process should call
``settle_own_allocator(release=True)`` once, then warm the function up, before measuring.

With ``referenced`` (lab 6), each process is also charged the pages of its writable mappings
that the call READ OR WROTE, wherever they were allocated: before the call ``clear_refs`` <-
``"1"`` clears the referenced bits of all its pages, after it ``Referenced:`` is summed over
the writable mappings of ``/proc/<pid>/smaps``, and the larger of that and the peak growth
counts. A buffer made resident before the call (a global tensor, a numpy array, a bytearray,
an mmap, a C extension's or a child process's buffer) and reused during it is charged. So are
the bytes the call moved through ``read``/``write`` system calls (``rchar + wchar`` of
``/proc/<pid>/io``, a reaped child's added to its parent's): data kept outside every process's
memory (a file in the sandbox's tmpfs, a pipe's buffer) reaches the call only that way or mapped.

What this cannot show: data kept in kernel buffers and received with ``recv`` (a socket's, at
most its buffer size per socket; a grading kernel cannot make such buffers, nor the other kinds the
operating system keeps for it: ``mlbook_kernel.admission``), and code pages a call maps for the
first time (counted: warm a function up with one unmeasured call before measuring it).

Fail closed: a process of the tree that vanishes during the call, a file that cannot be read or
written, or a system without ``/proc`` raises ``MeasurementError`` (a grader error, not a
verdict on the student).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["MeasurementError", "TreePeak", "measure", "settle_own_allocator", "restore_own_allocator", "socket_peer",
           "require_in_tree",
           "PAGE_BYTES", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# glibc: blocks from MMAP_THRESHOLD up are mmapped and unmapped when freed, never kept for reuse; free
# memory at the top of the heap beyond TRIM_THRESHOLD goes back to the system (both must be small: glibc
# serves a large block from the top of its heap before it considers mmap). With 1 MiB, the blocks of
# 128 KiB to 1 MiB (tiles, (T, d) arrays, wire buffers) lived in a heap whose free, resident part changes
# from call to call, and lab 6's reference failed a memory check (a growth of 0 at one length, 4.6 MiB at
# the other). The price of 128 KiB is a system call and fresh pages for every such block: lab 5's
# notebook ran 12.3 s instead of 9.0 s (execution, cold kernel, this 2-core machine).
MMAP_THRESHOLD = 128 * 1024
TRIM_THRESHOLD = 128 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
DYNAMIC_MMAP_MAX = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems


class MeasurementError(RuntimeError):
    """Memory could not be measured: the grader's problem, never a verdict on the student."""


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    started: int  # start time in clock ticks since boot: tells a reused pid from the original
    faults: int  # minflt + majflt of the process itself
    child_faults: int  # cminflt + cmajflt: faults of its children that it has reaped


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def _proc_file(pid: int, name: str) -> str | None:
    """``/proc/<pid>/<name>``, or None when the process is gone. MeasurementError when it exists
    and cannot be read (the grader's failure, never the student's)."""
    try:
        return _read(f"/proc/{pid}/{name}")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        raise MeasurementError(f"cannot read /proc/{pid}/{name}: {exc}") from None


def _stat(pid: int) -> _Proc | None:
    """One process's /proc/<pid>/stat, or None when it no longer exists."""
    text = _proc_file(pid, "stat")
    if text is None:
        return None
    # "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt ... starttime"
    fields = text[text.rfind(")") + 2:].split()
    try:
        return _Proc(pid=pid, ppid=int(fields[1]), started=int(fields[19]),
                     faults=int(fields[7]) + int(fields[9]), child_faults=int(fields[8]) + int(fields[10]))
    except (IndexError, ValueError):
        raise MeasurementError(f"/proc/{pid}/stat is not in the expected format") from None


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _tree(root: int, pruned: frozenset[tuple[int, int]] = frozenset()) -> dict[int, _Proc]:
    """The measured processes now: every process of ``root``'s pid namespace when that is not
    the grader's own (a sandbox: whatever its processes do, none leaves its namespace, while a
    parent that entered it from outside leaves its orphans to be re-parented outside the tree),
    else ``root`` and all its descendants, except the subtrees of the processes in ``pruned``
    ((pid, start time) pairs)."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError as exc:
        raise MeasurementError(f"cannot list /proc ({exc}): memory is measured on Linux only") from None
    procs = {p.pid: p for p in map(_stat, pids) if p is not None}
    if root not in procs:
        raise MeasurementError(f"the measured process {root} does not exist")
    namespace = _pid_namespace(root)
    if namespace is None:
        raise MeasurementError(f"the pid namespace of process {root} cannot be read")
    if namespace != _pid_namespace("self"):
        return {pid: proc for pid, proc in procs.items() if _pid_namespace(pid) == namespace}
    children: dict[int, list[int]] = {}
    for p in procs.values():
        if p.pid != root:
            children.setdefault(p.ppid, []).append(p.pid)
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid not in found and (pid, procs[pid].started) not in pruned:
            found[pid] = procs[pid]
            todo.extend(children.get(pid, ()))
    return found


def _memory(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in bytes; None for a process without memory (a zombie) or one that is gone."""
    text = _proc_file(pid, "status")
    if text is None:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            parts = rest.split()
            if len(parts) != 2 or parts[1] != "kB" or not parts[0].isdigit():
                raise MeasurementError(f"/proc/{pid}/status has an unexpected {key} line")
            values[key] = int(parts[0]) * 1024
    if not values:
        return None
    if set(values) != {"VmRSS", "VmHWM"}:
        raise MeasurementError(f"/proc/{pid}/status lacks VmRSS or VmHWM")
    return values["VmRSS"], values["VmHWM"]


def _reset_peak(pid: int, referenced: bool = False) -> None:
    """Reset ``pid``'s peak resident set (``"5"``) and, with ``referenced``, first clear the referenced
    bits of all its pages (``"1"``), so that ``_referenced`` afterwards sees only what the call touched."""
    try:
        for code in (("1", "5") if referenced else ("5",)):
            with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as f:
                f.write(code)
    except OSError as exc:
        raise MeasurementError(f"cannot reset the peak of process {pid} (/proc/{pid}/clear_refs: {exc})") from None


def _referenced(pid: int) -> int | None:
    """Bytes of ``pid``'s WRITABLE mappings (anonymous or file-backed, private or shared) that were
    referenced (read or written) since its bits were cleared; None for a process that is gone.

    Writable only: code and read-only data of the interpreter and its libraries are touched by any
    call and hold no answer's buffer (a buffer a call fills must be writable). MeasurementError when
    ``/proc/<pid>/smaps`` cannot be read or has no ``Referenced:`` lines (a kernel without them)."""
    text = _proc_file(pid, "smaps")
    if text is None:
        return None
    total, writable, seen = 0, False, False
    for line in text.splitlines():
        head = line.split(None, 2)
        if not head:
            continue
        if "-" in head[0] and len(head) > 1 and len(head[1]) == 4:  # "start-end perms offset dev inode path"
            writable = head[1][1] == "w"
        elif head[0] == "Referenced:":
            seen = True
            if len(head) < 3 or head[2].strip() != "kB" or not head[1].isdigit():
                raise MeasurementError(f"/proc/{pid}/smaps has an unexpected Referenced line")
            if writable:
                total += int(head[1]) * 1024
    if not seen and text.strip():
        raise MeasurementError(f"/proc/{pid}/smaps has no Referenced lines: this kernel cannot show the pages a call "
                               f"touched")
    return total


def _io_bytes(pid: int) -> int | None:
    """Bytes ``pid`` has read and written through system calls (``rchar + wchar``, its reaped children's
    included); None for a process that is gone. MeasurementError when ``/proc/<pid>/io`` cannot be read."""
    text = _proc_file(pid, "io")
    if text is None:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["rchar"]) + int(fields["wchar"])
    except (KeyError, ValueError):
        if not text.strip():
            return None  # a zombie's io is empty
        raise MeasurementError(f"/proc/{pid}/io lacks rchar or wchar") from None


def socket_peer(conn: socket.socket) -> int:
    """The host pid of the process that connected the other end of the unix socket ``conn``.

    The operating system records it at ``connect`` (``SO_PEERCRED``), in this process's view of
    pids: the process that answers a check's calls cannot choose it.
    """
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", raw)[0]
    except (OSError, AttributeError, struct.error) as exc:
        raise MeasurementError(f"cannot read the pid of the process at the other end of the check's socket: {exc}") \
            from None
    if pid <= 0:
        raise MeasurementError("the process at the other end of the check's socket is not visible from here")
    return pid


def require_in_tree(root: int, pid: int) -> None:
    """MeasurementError unless ``pid`` is ``root`` or one of its descendants (so that measuring ``root``'s
    tree measures ``pid``)."""
    if pid not in _tree(root):
        raise MeasurementError(f"process {pid}, which runs the calls, is not in the measured tree of process {root}: "
                               f"the measurement would not see them")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


_libc: Any = None
_plugs: list[int] = []  # heap holes taken out of glibc's reach, for good (see settle_own_allocator)


def _glibc() -> Any:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else None
        except OSError:
            lib = None
        if lib is None or not all(hasattr(lib, f) for f in ("mallopt", "malloc_trim", "mallinfo2")):
            _libc = False  # not glibc (or older than 2.33)
        else:
            lib.malloc.restype = ctypes.c_void_p
            lib.malloc.argtypes = [ctypes.c_size_t]
            lib.free.argtypes = [ctypes.c_void_p]
            lib.mallinfo2.restype = _MallInfo2
            _libc = lib
    return _libc


def settle_own_allocator(release: bool = False) -> None:
    """Make this process's resident memory track what it holds, as the sandbox's does.

    Sets glibc's mmap and trim thresholds (which also stops glibc from raising them after a
    large block is freed). A process started without them (the grader, a test runner) may hold
    free heap chunks larger than the threshold, kept from blocks freed earlier, and glibc serves
    a large allocation from such a chunk before it considers mmap: once that chunk's pages are
    resident, the allocation does not show. ``release`` therefore also gives those pages back
    (``malloc_trim``) and then takes every free heap chunk of at least the mmap threshold out of
    glibc's reach: it allocates them and never frees them (untouched, they cost address space,
    not memory), so every large allocation after it is a fresh mapping. Release once per check,
    then run the function once unmeasured (its small allocations fault back in), then measure.
    No effect without glibc.
    """
    lib = _glibc()
    if not lib:
        return
    lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    lib.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if not release:
        return
    lib.malloc_trim(0)
    size = 1 << max(int(lib.mallinfo2().fordblks).bit_length() - 1, 0)
    while size >= MMAP_THRESHOLD:
        mapped = lib.mallinfo2().hblkhd
        block = lib.malloc(size)
        if not block:
            size //= 2
        elif lib.mallinfo2().hblkhd != mapped:  # no free chunk this big is left: it was mapped afresh
            lib.free(block)
            size //= 2
        else:
            _plugs.append(block)


def restore_own_allocator() -> None:
    """Undo ``settle_own_allocator`` for speed, after an in-process measurement: glibc's thresholds
    set to the largest values its own dynamic rule reaches (mmap 32 MiB, trim twice that), so that
    blocks freed and allocated again come from the heap, not from fresh, faulted-in mappings
    (with the measuring thresholds lab 5's training ran about 2x slower). The plugs stay."""
    lib = _glibc()
    if lib:
        lib.mallopt(_M_MMAP_THRESHOLD, DYNAMIC_MMAP_MAX)
        lib.mallopt(_M_TRIM_THRESHOLD, 2 * DYNAMIC_MMAP_MAX)


@dataclass
class TreePeak:
    """Context manager: the peak memory growth of ``root``'s process tree during the block.

    ``bytes`` (after the block): the growth described in the module's docstring.
    ``only_new_descendants``: for a ``root`` in the grader's own pid namespace, measure ``root``
    and what is born under it during the block, not the descendants it had before (with their
    subtrees). For a call made in this very process, whose other children are not the call's:
    a test runner's browser or server, whose memory moves by megabytes on its own, once failed
    a correct answer's memory check. Never for a sandbox, where every process is the submission's.
    """

    root: int
    only_new_descendants: bool = False
    referenced: bool = False
    bytes: int = field(default=0, init=False)
    _before: dict[int, _Proc] = field(default_factory=dict, init=False, repr=False)
    _base: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _idle: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _io: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _pruned: frozenset[tuple[int, int]] = field(default=frozenset(), init=False, repr=False)

    def __enter__(self) -> "TreePeak":
        if self.root == os.getpid() or os.getpid() in _tree(self.root):
            settle_own_allocator()
        tree = _tree(self.root)
        if self.only_new_descendants and _pid_namespace(self.root) == _pid_namespace("self"):
            self._pruned = frozenset((pid, proc.started) for pid, proc in tree.items()
                                     if proc.ppid == self.root and pid != self.root)
            tree = _tree(self.root, self._pruned)
        # a zombie (ended, not yet reaped) holds no memory: it is not measured, before or after
        self._idle = {pid: proc.started for pid, proc in tree.items() if _memory(pid) is None}
        self._before = {pid: proc for pid, proc in tree.items() if pid not in self._idle}
        for pid in self._before:
            _reset_peak(pid, self.referenced)
        for pid, proc in self._before.items():
            mem = _memory(pid)
            if mem is None:
                raise MeasurementError(f"process {pid} of the measured tree ended during the measurement")
            self._base[pid] = mem[0]
        # re-read the counters after the resets: faults of children reaped until now are not the call's
        self._before = {pid: self._same(proc) for pid, proc in self._before.items()}
        if self.referenced:
            self._io = {pid: _io_bytes(pid) or 0 for pid in self._before}
        return self

    def _same(self, proc: _Proc) -> _Proc:
        """The process ``proc`` now; MeasurementError when it is gone (or its pid was reused)."""
        now = _stat(proc.pid)
        if now is None or now.started != proc.started:
            raise MeasurementError(f"process {proc.pid} of the measured tree ended during the measurement")
        return now

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            return  # the call's own error goes on; there is nothing to measure
        after = _tree(self.root, self._pruned)
        per: dict[int, int] = {}  # pid -> its part of the growth (reaped children under the pid that reaped them)
        for pid, proc in self._before.items():
            now = self._same(proc)
            mem = _memory(pid)
            if mem is None:
                raise MeasurementError(f"process {pid} of the measured tree ended during the measurement")
            per[pid] = max(0, mem[1] - self._base[pid]) + PAGE_BYTES * max(0, now.child_faults - proc.child_faults)
            if self.referenced:
                touched, moved = _referenced(pid), _io_bytes(pid)
                if touched is None or moved is None:
                    raise MeasurementError(f"process {pid} of the measured tree ended during the measurement")
                per[pid] = max(per[pid], touched + max(0, moved - self._io[pid]))
        for pid, proc in after.items():
            if pid in self._before and proc.started == self._before[pid].started:
                continue
            if self._idle.get(pid) == proc.started:
                continue  # a zombie already before the call
            mem = _memory(pid)  # born during the call: all of it is the call's
            peak = mem[1] if mem is not None else PAGE_BYTES * proc.faults  # a zombie: its faults
            per[pid] = peak + PAGE_BYTES * proc.child_faults
            if self.referenced:
                per[pid] += _io_bytes(pid) or 0  # everything it moved, it moved during the call
        self.bytes = sum(per.values())


def measure(root: int, call: Callable, *args: Any, only_new_descendants: bool = False, referenced: bool = False,
            **kwargs: Any) -> tuple[Any, int]:
    """Run ``call(*args, **kwargs)``; return (its result, the peak memory growth of ``root``'s tree in bytes).

    Raises:
        MeasurementError: the tree could not be measured (see the module's docstring).
    """
    with TreePeak(root, only_new_descendants=only_new_descendants, referenced=referenced) as peak:
        result = call(*args, **kwargs)
    return result, peak.bytes
