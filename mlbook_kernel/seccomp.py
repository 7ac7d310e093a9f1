"""The sandbox's syscall filter: what no process in a sandbox may ask of the kernel, and why.

Every process of a submission (the runner, its kernel and anything they start) runs under this
seccomp filter, installed after ``no_new_privs`` and before any student code: on the cold path
bubblewrap loads it (``--seccomp FD``, from ``mlbook.sandbox.bwrap``) just before it executes the
sandbox's first command; on the warm path the fork server's runner installs it itself
(``forkserver._drop_privileges``) once it has become the sandbox user. Filters are inherited by
children and can never be removed, only stacked.

The convention: the sandbox's namespaces (mount, process, network, IPC, UTS, cgroup) end with
the submission, so nothing kept *inside* them can reach the next one. A syscall is denied when
its state lives *outside* them (it outlives the sandbox, or it is keyed by a user id rather than
by a namespace), when it reaches into another process, or when it changes the machine. All
others are allowed: this is a deny list, so Python, ZeroMQ, torch and friends run unchanged.

Denied with EPERM (as if the sandbox user lacked the right):
- kernel keyrings: ``add_key``, ``request_key``, ``keyctl``. A user's keyring is keyed by its
  uid, not by a namespace, and outlives every process (a submission once left working code
  there for the next one in its slot to run);
- reaching into another process: ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_getfd``,
  ``kcmp``, ``process_madvise``, ``process_mrelease``;
- ``madvise`` with ``MADV_FREE``, ``MADV_COLD`` or ``MADV_PAGEOUT``: they would let a process
  keep a buffer while moving it out of what lab 6's memory measurement sees (other advice runs);
- new namespaces or leaving these: ``unshare``, ``setns``, and ``clone`` with any namespace
  flag (CLONE_NEWNS/NEWUTS/NEWIPC/NEWUSER/NEWPID/NEWNET/NEWCGROUP/NEWTIME; checked on clone's
  flags argument, whose low 32 bits are all the kernel reads); ``clone3`` fails with ENOSYS
  instead, since its flags sit in memory a filter cannot read, and libc then falls back to
  ``clone``;
- mounts: ``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new mount API
  (``open_tree``, ``open_tree_attr``, ``move_mount``, ``fsopen``, ``fsconfig``, ``fsmount``,
  ``fspick``, ``mount_setattr``);
- in-kernel programs and hooks that outlive or watch beyond the sandbox: ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``fanotify_init``, and io_uring (``io_uring_setup``,
  ``_enter``, ``_register``: its operations would bypass this very filter);
- the machine itself: ``init_module``, ``finit_module``, ``delete_module``, ``kexec_load``,
  ``kexec_file_load``, ``reboot``, ``swapon``, ``swapoff``, ``acct``, ``quotactl``,
  ``quotactl_fd``, ``syslog``, ``settimeofday``, ``clock_settime``, ``clock_adjtime``,
  ``adjtimex``, ``vhangup``, ``lookup_dcookie``, ``nfsservctl``, and on x86_64 ``iopl``,
  ``ioperm``, ``uselib``, ``_sysctl``;
- file handles, which name files beyond the sandbox's mounts: ``open_by_handle_at``,
  ``name_to_handle_at``.
Most of these also need a capability the sandbox user does not have; the filter does not rely
on that.

Sockets: ``socket`` and ``socketpair`` only for AF_UNIX, AF_INET and AF_INET6 (jupyter's ZeroMQ
channels, the judge's socket; the network namespace holds only loopback) and AF_NETLINK with
NETLINK_ROUTE alone (how glibc's getifaddrs lists interfaces, which libzmq calls on every bind
and aborts the kernel if it fails; it shows and, without capabilities, can change only the
sandbox's own network namespace). Every other family or netlink protocol (packet, vsock, key,
alg, audit, uevents, ...) fails with EAFNOSUPPORT, as on a kernel built without it. AF_VSOCK,
for one, is not confined by a network namespace.

Left allowed on purpose: SysV and POSIX IPC (``--unshare-ipc`` gives each sandbox its own IPC
namespace and ``/dev/shm`` is the sandbox's own tmpfs; ``tests/test_sandbox.py`` checks that a
queue or segment left by one submission is invisible to the next), ``pidfd_open`` and
``pidfd_send_signal`` (they reach only processes the sandbox's process namespace shows, no more
than ``kill``), ``inotify`` (it watches only what the sandbox sees, and ends with it),
``personality``, ``seccomp`` (a further filter can only deny more), ``setpriority`` and the
scheduler calls (their per-user forms see only the sandbox's processes).

The *admitted* filter (``admitted_program``), stacked on this one by the student's kernel itself
just before it runs its first cell (``mlbook_kernel.admission``, an IPython extension every
grading kernel loads, warm or cold): it closes the buffers the operating system holds for a process, which neither
its pages nor its ``read``/``write`` byte counters show (lab 6 charges what a call touches,
``mlbook.sandbox.procmem``; measured on Linux 6.18, each of these moved 1 MiB and counted about
100 bytes in ``rchar + wchar``). Refused with ENOSYS, which the extension explains in the cell:
- new socket loops: ``socketpair``; ``socket`` for anything but an AF_UNIX stream (the judge's
  connection, which the kernel opens for every test cell); ``listen`` (without it an AF_UNIX
  stream can reach only listeners outside the kernel: the judge, which closes every connection it
  did not admit unread). ``send``/``recv``/``sendmsg``/``recvmsg``/``sendmmsg``/``recvmmsg`` stay
  (ZeroMQ uses them), but only on sockets whose other end is not the student's;
- growing the socket pairs the kernel already has (asyncio's self-pipes): ``setsockopt`` of
  SO_SNDBUF, SO_RCVBUF and their FORCE forms; at the default 208 KiB a direction they hold far
  less than the 8 MiB lab 6's round-trip allowance;
- SysV message queues and semaphore sets (``msgget``, ``msgsnd``, ``msgrcv``, ``msgctl``,
  ``semget``, ``semop``, ``semtimedop``, ``semctl``: ``semctl(SETALL)`` stores 64 KB a call) and
  POSIX message queues (``mq_open``, ``mq_timedsend``, ``mq_timedreceive``, ``mq_notify``,
  ``mq_getsetattr``, ``mq_unlink``). SysV and POSIX shared memory stay: they are mapped pages;
- moving pages without a copy: ``vmsplice``, ``splice``, ``tee`` (a pipe filled and drained by
  ``vmsplice`` counts nothing; ``write``/``read`` on a pipe, ``sendfile`` and ``copy_file_range``
  are counted and stay);
- data kept in file metadata: ``setxattr``, ``lsetxattr``, ``fsetxattr``, ``setxattrat``, and
  ``symlink``, ``symlinkat`` (a link's target holds 4 KiB that ``readlink`` reads back uncounted).

Any syscall made through another ABI than the machine's own (the 32-bit ``int 0x80`` on
x86_64, x32, AArch32) kills the process: nothing the sandbox runs needs it, and this filter's
numbers are the native ones. Architectures: x86_64 and aarch64; on any other machine
``program`` raises ``Unsupported`` and no sandbox starts.

This module is kernel-side (it is imported by the fork server, outside any sandbox, before any
grader code) and imports only the standard library.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# Syscall numbers: (x86_64, aarch64); None where the architecture has no such call.
DENIED: dict[str, tuple[int | None, int | None]] = {
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "kcmp": (312, 272), "process_madvise": (440, 440), "process_mrelease": (448, 448),
    "unshare": (272, 97), "setns": (308, 268),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442), "open_tree_attr": (467, 467),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282), "fanotify_init": (300, 262),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    "syslog": (103, 116), "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266),
    "adjtimex": (159, 171), "vhangup": (153, 58), "lookup_dcookie": (212, 18), "nfsservctl": (180, 42),
    "iopl": (172, None), "ioperm": (173, None), "uselib": (134, None), "_sysctl": (156, None),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
}
CLONE, CLONE3, SOCKET, SOCKETPAIR, SECCOMP = (56, 220), (435, 435), (41, 198), (53, 199), (317, 277)
MADVISE = (28, 233)
# madvise advice that keeps a page's contents while pushing it out of the referenced/resident view
# (lab 6 charges the pages a call references, mlbook.sandbox.procmem): denied, EPERM
DENIED_ADVICE = {"MADV_FREE": 8, "MADV_COLD": 20, "MADV_PAGEOUT": 21}
NAMESPACE_FLAGS = {"CLONE_NEWTIME": 0x80, "CLONE_NEWNS": 0x20000, "CLONE_NEWCGROUP": 0x02000000,
                   "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000,
                   "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000}
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
AF_NETLINK, NETLINK_ROUTE = 16, 0  # the one netlink protocol allowed
# machine (uname -m) -> (column of the number pairs above, AUDIT_ARCH_*, first number of a foreign ABI: x32)
ARCHES = {"x86_64": (0, 0xC000003E, 0x40000000), "aarch64": (1, 0xC00000B7, None)}

# The admitted filter (see the module docstring): syscall -> (x86_64, aarch64), refused with ENOSYS
ADMITTED_DENIED: dict[str, tuple[int | None, int | None]] = {
    "socketpair": (53, 199), "listen": (50, 201),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182), "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
    "vmsplice": (278, 75), "splice": (275, 76), "tee": (276, 77),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "setxattrat": (463, 463),
    "symlink": (88, None), "symlinkat": (266, 36),
}
SETSOCKOPT, SOL_SOCKET, SOCK_STREAM, SOCK_TYPE_MASK = (54, 208), 1, 1, 0xF
BUFFER_OPTIONS = {"SO_SNDBUF": 7, "SO_RCVBUF": 8, "SO_SNDBUFFORCE": 32, "SO_RCVBUFFORCE": 33}

SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET, _ALU_AND = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54  # BPF_LD|W|ABS, BPF_JMP|J*|K, BPF_RET|K, BPF_ALU|AND|K
_NR, _ARCH, _ARG0_LOW, _ARG1_LOW, _ARG2_LOW = 0, 4, 16, 24, 32  # offsets in struct seccomp_data (little-endian: low words first)


class Unsupported(RuntimeError):
    """This machine's architecture has no filter here: the sandbox must not start."""


def _arch(machine: str | None) -> tuple[int, int, int | None]:
    machine = machine or os.uname().machine
    if machine not in ARCHES:
        raise Unsupported(f"the sandbox's syscall filter knows x86_64 and aarch64 only, and this machine is {machine}; "
                          "grading cannot be sandboxed here")
    return ARCHES[machine]


def program(machine: str | None = None) -> bytes:
    """The compiled filter: an array of ``struct sock_filter`` (what bubblewrap's ``--seccomp``
    reads and ``seccomp(2)`` takes), for this machine or for ``machine`` (an ``uname -m``)."""
    column, audit_arch, foreign_from = _arch(machine)
    code: list[tuple[int, int | str, int | str, int]] = []  # (opcode, jump if true, jump if false, k)

    def op(opcode: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        code.append((opcode, jt, jf, k))

    def label(name: str) -> None:
        code.append(("label", name, 0, 0))  # type: ignore[arg-type]

    op(_LD_W_ABS, _ARCH)
    op(_JEQ, audit_arch, 0, "kill")
    op(_LD_W_ABS, _NR)
    if foreign_from is not None:
        op(_JGE, foreign_from, "kill", 0)  # x32 numbers on x86_64
    op(_JEQ, CLONE[column], "clone", 0)
    op(_JEQ, SOCKET[column], "family", 0)
    op(_JEQ, SOCKETPAIR[column], "family", 0)
    op(_JEQ, CLONE3[column], "enosys", 0)
    op(_JEQ, MADVISE[column], "advice", 0)
    for numbers in DENIED.values():
        if numbers[column] is not None:
            op(_JEQ, numbers[column], "eperm", 0)
    op(_RET, SECCOMP_RET_ALLOW)
    label("clone")
    op(_LD_W_ABS, _ARG0_LOW)
    op(_JSET, sum(NAMESPACE_FLAGS.values()), "eperm", 0)
    op(_RET, SECCOMP_RET_ALLOW)
    label("advice")
    op(_LD_W_ABS, _ARG2_LOW)
    for advice in DENIED_ADVICE.values():
        op(_JEQ, advice, "eperm", 0)
    op(_RET, SECCOMP_RET_ALLOW)
    label("family")
    op(_LD_W_ABS, _ARG0_LOW)
    for family in SOCKET_FAMILIES.values():
        op(_JEQ, family, "allow", 0)
    op(_JEQ, AF_NETLINK, 0, "no family")
    op(_LD_W_ABS, _ARG2_LOW)  # the protocol
    op(_JEQ, NETLINK_ROUTE, "allow", 0)
    label("no family")
    op(_RET, SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT)
    label("allow")
    op(_RET, SECCOMP_RET_ALLOW)
    label("eperm")
    op(_RET, SECCOMP_RET_ERRNO | errno.EPERM)
    label("enosys")
    op(_RET, SECCOMP_RET_ERRNO | errno.ENOSYS)
    label("kill")
    op(_RET, SECCOMP_RET_KILL_PROCESS)
    return _assemble(code)


def admitted_program(machine: str | None = None) -> bytes:
    """The admitted filter (module docstring), stacked on ``program()``'s by the student's kernel
    before its first cell: the syscalls that keep data in the operating system's buffers fail with
    ENOSYS. Other architectures' and ABIs' calls are left to ``program()``'s filter (it kills them)."""
    column, audit_arch, _ = _arch(machine)
    code: list = []

    def op(opcode: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        code.append((opcode, jt, jf, k))

    def label(name: str) -> None:
        code.append(("label", name, 0, 0))

    op(_LD_W_ABS, _ARCH)
    op(_JEQ, audit_arch, 0, "allow")
    op(_LD_W_ABS, _NR)
    op(_JEQ, SOCKET[column], "socket", 0)
    op(_JEQ, SETSOCKOPT[column], "setsockopt", 0)
    for numbers in ADMITTED_DENIED.values():
        if numbers[column] is not None:
            op(_JEQ, numbers[column], "enosys", 0)
    label("allow")
    op(_RET, SECCOMP_RET_ALLOW)
    label("socket")
    op(_LD_W_ABS, _ARG0_LOW)
    op(_JEQ, SOCKET_FAMILIES["AF_UNIX"], 0, "enosys")
    op(_LD_W_ABS, _ARG1_LOW)  # the type, with SOCK_NONBLOCK / SOCK_CLOEXEC in its high bits
    op(_ALU_AND, SOCK_TYPE_MASK)
    op(_JEQ, SOCK_STREAM, "allow2", "enosys")
    label("setsockopt")
    op(_LD_W_ABS, _ARG1_LOW)
    op(_JEQ, SOL_SOCKET, 0, "allow2")
    op(_LD_W_ABS, _ARG2_LOW)
    for option in BUFFER_OPTIONS.values():
        op(_JEQ, option, "enosys", 0)
    label("allow2")
    op(_RET, SECCOMP_RET_ALLOW)
    label("enosys")
    op(_RET, SECCOMP_RET_ERRNO | errno.ENOSYS)
    return _assemble(code)


def _assemble(code: list) -> bytes:
    """Resolve jump labels into forward offsets and pack the instructions."""
    labels, instructions = {}, []
    for entry in code:
        if entry[0] == "label":
            labels[entry[1]] = len(instructions)
        else:
            instructions.append(entry)
    out = []
    for at, (opcode, jt, jf, k) in enumerate(instructions):
        offsets = [labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= o <= 255 for o in offsets):
            raise ValueError("the filter grew past BPF's 255-instruction jumps")
        out.append(struct.pack("=HBBI", opcode, offsets[0], offsets[1], k))
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(filter_bytes: bytes | None = None) -> None:
    """Install the filter on every thread of the calling process, for good (it needs
    ``no_new_privs`` or CAP_SYS_ADMIN). Raises OSError if the kernel refuses."""
    filter_bytes = program() if filter_bytes is None else filter_bytes
    column = _arch(None)[0]
    buffer = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    prog = _SockFprog(len(filter_bytes) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    done = libc.syscall(ctypes.c_long(SECCOMP[column]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if done != 0:
        code = ctypes.get_errno() if done < 0 else errno.EBUSY  # > 0: a thread that could not be synced
        raise OSError(code, f"cannot install the sandbox's syscall filter: {os.strerror(code)}")
