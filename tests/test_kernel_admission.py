"""A grading kernel closes the operating system's buffers to itself before its first cell.

``mlbook_kernel.admission`` stacks ``seccomp.admitted_program()`` in every grading kernel: the system
calls that keep data where neither a process's pages nor its ``read``/``write`` byte counters show it
(lab 6's touched-pages rule, ``mlbook.sandbox.procmem``) fail with ENOSYS, and the cell's error says
why. These run real sandboxes (warm from the fork server, cold, and the unsandboxed opt-out) and a
real lab 6 reference graded beside the refusals. The calls are made through Python's and the C
library's own functions, not by the numbers the filter uses, so a wrong number in the filter shows.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from harness import REPO

# Each refused family, by the library functions a notebook would use; every call's arguments would
# be valid or fail with another errno (EINVAL, EBADF) if the call reached the operating system.
REFUSED = r'''
import ctypes, errno, json, os, platform, socket
libc = ctypes.CDLL(None, use_errno=True)

def outcome(call):
    """"OK" or the errno's name, of a Python call or of a C call returning -1."""
    ctypes.set_errno(0)
    try:
        r = call()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    if isinstance(r, int) and r == -1:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return "OK"

unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
unix.bind("\0mlbook-admission-probe")  # an abstract name: no file
piper, pipew = os.pipe()
with open("plain", "w") as f:
    f.write("x")
SETXATTRAT = {"x86_64": 463, "aarch64": 463}[platform.machine()]
refused = {
    "socketpair": outcome(lambda: socket.socketpair()),
    "socketpair(SOCK_DGRAM)": outcome(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)),
    "socket(AF_INET)": outcome(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
    "socket(AF_INET6, SOCK_DGRAM)": outcome(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
    "socket(AF_UNIX, SOCK_DGRAM)": outcome(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
    "socket(AF_UNIX, SOCK_SEQPACKET)": outcome(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)),
    "socket(AF_NETLINK)": outcome(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
    "listen": outcome(lambda: unix.listen(1)),
    "msgget": outcome(lambda: libc.msgget(0, 0o1600)),  # IPC_PRIVATE | IPC_CREAT
    "msgsnd": outcome(lambda: libc.msgsnd(-1, None, 0, 0)),
    "msgrcv": outcome(lambda: libc.msgrcv(-1, None, 0, 0, 0)),
    "msgctl": outcome(lambda: libc.msgctl(-1, 0, None)),
    "semget": outcome(lambda: libc.semget(0, 1, 0o1600)),
    "semop": outcome(lambda: libc.semop(-1, None, 0)),
    "semtimedop": outcome(lambda: libc.semtimedop(-1, None, 0, None)),
    "semctl": outcome(lambda: libc.semctl(-1, 0, 0)),
    "mq_open": outcome(lambda: libc.mq_open(b"/mlbook-admission", os.O_CREAT | os.O_RDWR, 0o600, None)),
    "mq_unlink": outcome(lambda: libc.mq_unlink(b"/mlbook-admission")),
    "mq_timedsend": outcome(lambda: libc.mq_timedsend(-1, b"x", 1, 0, None)),
    "mq_timedreceive": outcome(lambda: libc.mq_timedreceive(-1, None, 0, None, None)),
    "mq_notify": outcome(lambda: libc.mq_notify(-1, None)),
    "mq_getattr": outcome(lambda: libc.mq_getattr(-1, ctypes.create_string_buffer(64))),
    "splice": outcome(lambda: os.splice(piper, pipew, 1)),
    "vmsplice": outcome(lambda: libc.vmsplice(pipew, None, 0, 0)),
    "tee": outcome(lambda: libc.tee(piper, pipew, 1, 0)),
    "setxattr": outcome(lambda: os.setxattr("plain", "user.kept", b"data")),
    "lsetxattr": outcome(lambda: os.setxattr("plain", "user.kept", b"data", follow_symlinks=False)),
    "fsetxattr": outcome(lambda: os.setxattr(pipew, "user.kept", b"data")),
    "setxattrat": outcome(lambda: libc.syscall(SETXATTRAT, -100, b"plain", 0, b"user.kept", None, 0)),
    "symlink": outcome(lambda: libc.symlink(b"a" * 4000, b"link")),
    "symlinkat": outcome(lambda: os.symlink("a" * 4000, "link2", dir_fd=os.open(".", os.O_RDONLY))),
}
for option in ("SO_SNDBUF", "SO_RCVBUF", "SO_SNDBUFFORCE", "SO_RCVBUFFORCE"):
    refused[f"setsockopt({option})"] = outcome(
        lambda: unix.setsockopt(socket.SOL_SOCKET, getattr(socket, option, {"SO_SNDBUFFORCE": 32,
                                                                                  "SO_RCVBUFFORCE": 33}.get(option)),
                                4 << 20))
print("REFUSED" + json.dumps(refused))
'''

# What a notebook and the kernel itself still need.
ALLOWED = r'''
import io, mmap, subprocess, sys
import mlbook_kernel
allowed = {}
data = bytes(range(256)) * 128  # 32 KiB: under a pipe's buffer
allowed["pipe write/read"] = outcome(lambda: os.write(pipew, data))
allowed["pipe write/read"] += "" if os.read(piper, len(data)) == data else " (different bytes)"
judge = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # the judge's listener, outside the kernel
allowed["socket(AF_UNIX, SOCK_STREAM) connect"] = outcome(lambda: judge.connect(os.environ[mlbook_kernel.SOCKET_ENV]))
judge.close()
allowed["setsockopt(SO_KEEPALIVE)"] = outcome(lambda: unix.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
libc.shmat.restype = ctypes.c_void_p
def sysv_shm():
    shm = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, 1 MiB
    if shm < 0:
        return -1
    address = libc.shmat(shm, None, 0)
    ctypes.memset(address, 7, 1 << 20)
    kept = ctypes.string_at(address + 12345, 1)
    libc.shmdt(ctypes.c_void_p(address))
    libc.shmctl(shm, 0, None)  # IPC_RMID
    return 0 if kept == b"\7" else -2
allowed["SysV shm"] = outcome(sysv_shm)
libc.shm_open.restype = ctypes.c_int
posix = libc.shm_open(b"/mlbook-admission", os.O_CREAT | os.O_RDWR, 0o600)
allowed["POSIX shm_open"] = "OK" if posix >= 0 else errno.errorcode[ctypes.get_errno()]
def memfd_shared():
    fd = os.memfd_create("mlbook-admission")
    os.ftruncate(fd, 1 << 20)
    shared = mmap.mmap(fd, 1 << 20)
    shared[:4] = b"kept"
    return 0 if os.pread(fd, 4, 0) == b"kept" else -2
allowed["memfd + shared mmap"] = outcome(memfd_shared)
allowed["sendfile"] = outcome(lambda: os.sendfile(pipew, os.open("plain", os.O_RDONLY), 0, 1))
import matplotlib.pyplot as plt, seaborn, torch
figure = plt.figure()
seaborn.heatmap(torch.softmax(torch.randn(4, 4), dim=-1).numpy())  # (4, 4)
png = io.BytesIO()
figure.savefig(png, format="png")
allowed["matplotlib, seaborn, torch"] = "OK" if png.getvalue().startswith(b"\x89PNG") else "no image"
child = subprocess.run([sys.executable, "-c", "import socket; socket.socketpair()"], capture_output=True, text=True)
allowed["a child's socketpair"] = "ENOSYS" if "[Errno 38]" in child.stderr else child.stderr[-300:]
status = open("/proc/self/status").read()
allowed["filters"] = next(line.split()[1] for line in status.splitlines() if line.startswith("Seccomp_filters:"))
print("ALLOWED" + json.dumps(allowed))
'''

UNCAUGHT = "import socket\nsocket.socketpair()  # a student's own call\n"
REFUSED_NAMES = ("socketpair", "socketpair(SOCK_DGRAM)", "socket(AF_INET)", "socket(AF_INET6, SOCK_DGRAM)",
                 "socket(AF_UNIX, SOCK_DGRAM)", "socket(AF_UNIX, SOCK_SEQPACKET)", "socket(AF_NETLINK)", "listen",
                 "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "mq_open",
                 "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getattr", "splice", "vmsplice",
                 "tee", "setxattr", "lsetxattr", "fsetxattr", "setxattrat", "symlink", "symlinkat",
                 "setsockopt(SO_SNDBUF)", "setsockopt(SO_RCVBUF)", "setsockopt(SO_SNDBUFFORCE)",
                 "setsockopt(SO_RCVBUFFORCE)")


def _probe_cells() -> list:
    return [nbformat.v4.new_code_cell(REFUSED), nbformat.v4.new_code_cell(ALLOWED), nbformat.v4.new_code_cell(UNCAUGHT)]


def _run(nb, lab: str, **how):
    from mlbook.judge.plan import lab_plan
    from mlbook.sandbox.limits import GiB, Limits
    from mlbook.sandbox.notebook import execute_sandboxed

    result = execute_sandboxed(nb, lab_plan(lab, REPO.source(lab)), Limits(memory_bytes=3 * GiB), **how)
    assert result.error is None, result.log
    return result


def _read(result) -> tuple[dict, dict, dict]:
    """The refused and allowed calls the probe cells report, and the uncaught refusal's error output."""
    def printed(cell, mark):
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert mark in text, cell.outputs
        return json.loads(text.split(mark, 1)[1].splitlines()[0])

    cells = result.notebook.cells
    error = next((o for o in cells[2].outputs if o.output_type == "error"), None)
    assert error is not None, f"a refused call must fail its cell: {cells[2].outputs}"
    return printed(cells[0], "REFUSED"), printed(cells[1], "ALLOWED"), error


def _assert_admitted(refused: dict, allowed: dict, error: dict, filters: str = "2") -> None:
    """``filters``: how many seccomp filters the kernel runs under (the sandbox's and the admitted one)."""
    assert set(refused) == set(REFUSED_NAMES)
    assert {name: got for name, got in refused.items() if got != "ENOSYS"} == {}
    assert allowed.pop("POSIX shm_open") != "ENOSYS", "POSIX shared memory is mapped pages: not refused"
    assert allowed == {"pipe write/read": "OK", "socket(AF_UNIX, SOCK_STREAM) connect": "OK",
                       "setsockopt(SO_KEEPALIVE)": "OK", "SysV shm": "OK", "memfd + shared mmap": "OK",
                       "sendfile": "OK", "matplotlib, seaborn, torch": "OK", "a child's socketpair": "ENOSYS",
                       "filters": filters}, allowed
    from mlbook_kernel.admission import NOTE

    said = " ".join([error["evalue"], *error["traceback"]])
    assert error["ename"] == "OSError" and "Errno 38" in said, error
    assert NOTE in said, "the student's message must say why the call was refused"


def test_a_kernel_cannot_open_new_socket_buffers_and_its_own_work_still_runs():
    """Warm, in front of a correct lab 6 reference: every refused family fails with ENOSYS and the
    note, what stays allowed works, and the judge still grades the reference at full marks (its
    connections, and the memory check measured from outside)."""
    from mlbook.authoring.notebooks import fill_answers, read_nb, reference_answers

    lab = "lab06_chunked_attention"
    nb = fill_answers(read_nb(REPO.release(lab)), reference_answers(read_nb(REPO.source(lab))))
    nb.cells[0:0] = _probe_cells()
    result = _run(nb, lab, warm=True)
    _assert_admitted(*_read(result))
    assert result.verdicts and {gid: v.message for gid, v in result.verdicts.items() if not v.passed} == {}


@pytest.mark.parametrize("how, filters", [({"warm": False}, "2"), ({"sandboxed": False}, "1")],
                         ids=["cold", "unsandboxed-opt-out"])
def test_every_grading_kernel_is_admitted(how, filters):
    """A cold sandbox's kernel, and the opt-out's (no sandbox filter under the admitted one)."""
    nb = nbformat.v4.new_notebook(cells=_probe_cells())
    _assert_admitted(*_read(_run(nb, "lab02_scaling", **how)), filters=filters)


def test_the_admitted_filter_is_built_for_x86_64_and_aarch64():
    from mlbook_kernel import seccomp

    for machine in ("x86_64", "aarch64"):
        program = seccomp.admitted_program(machine)
        assert program and len(program) % 8 == 0
    with pytest.raises(seccomp.Unsupported):
        seccomp.admitted_program("riscv64")
