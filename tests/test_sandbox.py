"""The sandbox's own promises, without nbgrader: data-only wire, clear failure when bubblewrap
is missing, and the opt-out still judged outside the kernel."""

from __future__ import annotations

import io
import os
import socket
import struct
import subprocess
import sys

import numpy as np
import pytest

from harness import REPO
from mlbook_kernel import wire


def _roundtrip(value):
    blobs: list[bytes] = []
    tree = wire.encode(value, blobs, lambda obj: 7)
    return wire.decode(tree, blobs, lambda hid: ("handle", hid))


def test_data_crosses_the_wire_and_objects_become_handles():
    import torch

    value = {"a": np.arange(6.0).reshape(2, 3), "t": torch.ones(2, dtype=torch.float16), "n": (1, 2.5, None, "x"),
             "f": float("nan"), "obj": object()}
    back = _roundtrip(value)
    assert np.array_equal(back["a"], value["a"]) and back["t"].dtype == torch.float16
    assert back["n"] == (1, 2.5, None, "x") and np.isnan(back["f"]) and back["obj"] == ("handle", 7)


def test_the_grader_refuses_pickled_arrays_and_malformed_frames():
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises((wire.WireError, ValueError)):
        wire.decode({"$a": 0}, [buf.getvalue()], lambda h: None)
    a, b = socket.socketpair()
    a.sendall(struct.pack(">Q", wire.MAX_FRAME_BYTES + 1))
    with pytest.raises(wire.WireError):
        wire.recv(b)
    a.sendall(struct.pack(">Q", 3) + b"{}x")
    with pytest.raises(wire.WireError):
        wire.recv(b)


def test_the_grader_never_sends_an_object_it_cannot_express_as_data():
    with pytest.raises(wire.UnsendableError):
        wire.encode(object(), [], None)


def test_without_bubblewrap_autograde_refuses_with_a_clear_message(tmp_path):
    from harness import scratch_course
    from mlbook.authoring import submissions

    course = scratch_course("lab02_scaling", tmp_path / "course")
    submissions.submit(course, "someone", "lab02_scaling", submissions.untouched(course, "lab02_scaling"))
    (tmp_path / "bin").mkdir()
    env = {**os.environ, "PATH": str(tmp_path / "bin")}  # no bwrap on this PATH
    done = subprocess.run([sys.executable, "-m", "mlbook.cli", "--course", str(course.root), "autograde", "lab02",
                           "--quiet"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bubblewrap" in done.stderr and "--unsandboxed" in done.stderr and "Traceback" not in done.stderr


def test_the_unsandboxed_opt_out_still_judges_outside_the_kernel():
    from mlbook.authoring.notebooks import fill_answers, read_nb, reference_answers
    from mlbook.sandbox.limits import Limits
    from mlbook.judge.plan import lab_plan
    from mlbook.sandbox.notebook import execute_sandboxed

    lab = "lab02_scaling"
    plan = lab_plan(lab, REPO.source(lab))
    nb = fill_answers(read_nb(REPO.release(lab)), reference_answers(read_nb(REPO.source(lab))))
    result = execute_sandboxed(nb, plan, Limits(), sandboxed=False)
    assert result.error is None, result.log
    assert set(result.verdicts) == set(plan.cells) and all(v.passed for v in result.verdicts.values())


# ---- Nothing of one submission survives into the next ----------------------------------------------
# Each sandbox runs under its own fresh user id and a syscall filter (``mlbook_kernel.seccomp``), its
# kernel under the admission filter too (``mlbook_kernel.admission``).
# These run real sandboxes, warm (forked from the fork server, when the grader is root) and cold.

SYSCALLS = """\
import ctypes, errno, json, os, platform
NR = {"x86_64": dict(add_key=248, request_key=249, keyctl=250, ptrace=101, process_vm_readv=310, pidfd_open=434,
                     pidfd_getfd=438, kcmp=312, bpf=321, perf_event_open=298, userfaultfd=323, unshare=272,
                     setns=308, clone=56, clone3=435, mount=165, io_uring_setup=425, init_module=175,
                     open_by_handle_at=304, socket=41, madvise=28),
      "aarch64": dict(add_key=217, request_key=218, keyctl=219, ptrace=117, process_vm_readv=270, pidfd_open=434,
                      pidfd_getfd=438, kcmp=272, bpf=280, perf_event_open=241, userfaultfd=282, unshare=97,
                      setns=268, clone=220, clone3=435, mount=40, io_uring_setup=425, init_module=105,
                      open_by_handle_at=265, socket=198, madvise=233)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[a if isinstance(a, bytes) else ctypes.c_long(a) for a in args])
    if r == 0 and name == "clone":
        os._exit(0)  # the child of a clone the filter let through
    if r >= 0 and name in ("pidfd_open", "pidfd_getfd", "socket"):
        os.close(r)
    return "OK" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
"""

ATTEMPTS = SYSCALLS + """\
import subprocess, sys, threading
runner = os.getppid()  # the notebook runner, same user: what a kernel would tamper with
pidfd = os.pidfd_open(runner)
got = {
    "add_key": call("add_key", b"user", b"mlbook-probe", b"x", 1, -4),  # KEY_SPEC_USER_KEYRING
    "request_key": call("request_key", b"user", b"mlbook-probe", 0, 0),
    "keyctl": call("keyctl", 0, -4, 1),  # KEYCTL_GET_KEYRING_ID of the user keyring, creating it
    "ptrace": call("ptrace", 0x4206, runner, 0, 0),  # PTRACE_SEIZE (does not stop the runner)
    "process_vm_readv": call("process_vm_readv", runner, 0, 0, 0, 0, 0),
    "pidfd_getfd": call("pidfd_getfd", pidfd, 0, 0),
    "kcmp": call("kcmp", os.getpid(), runner, 0, 0, 0),
    "bpf": call("bpf", 0, 0, 0), "perf_event_open": call("perf_event_open", 0, 0, -1, -1, 0),
    "userfaultfd": call("userfaultfd", 0), "unshare(CLONE_NEWUSER)": call("unshare", 0x10000000),
    "clone(CLONE_NEWUSER)": call("clone", 0x10000000 | 17, 0, 0, 0, 0), "setns": call("setns", 0, 0),
    "clone3": call("clone3", 0, 0), "mount": call("mount", 0, 0, 0, 0, 0),
    "io_uring_setup": call("io_uring_setup", 1, 0),
    "init_module": call("init_module", 0, 0, 0), "open_by_handle_at": call("open_by_handle_at", -1, 0, 0),
    "socket(AF_VSOCK)": call("socket", 40, 1, 0), "socket(AF_PACKET)": call("socket", 17, 3, 0),
    "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)": call("socket", 16, 3, 15),
    "socket(AF_NETLINK, NETLINK_ROUTE)": call("socket", 16, 3, 0), "socket(AF_INET)": call("socket", 2, 1, 0),
    "socket(AF_INET6)": call("socket", 10, 1, 0), "socket(AF_UNIX)": call("socket", 1, 1, 0),
    "pidfd_open": call("pidfd_open", runner, 0),
}
import mmap
page = mmap.mmap(-1, 4096)  # one anonymous page, to advise
page[0] = 1
address = ctypes.addressof(ctypes.c_char.from_buffer(page))
for advice, number in (("MADV_FREE", 8), ("MADV_COLD", 20), ("MADV_PAGEOUT", 21), ("MADV_DONTNEED", 4)):
    got[f"madvise({advice})"] = call("madvise", address, 4096, number)
try:  # /proc is read-only: no process can clear the referenced bits or the peak the grader reads
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("1")
    got["clear_refs"] = "OK"
except OSError as exc:
    got["clear_refs"] = errno.errorcode[exc.errno]
done = []
thread = threading.Thread(target=lambda: done.append(1)); thread.start(); thread.join()
child = subprocess.Popen(["sleep", "30"])
got["thread"], got["subprocess"] = bool(done), subprocess.run([sys.executable, "-c", "print(6 * 7)"],
                                                              capture_output=True, text=True).stdout.strip()
def seccomp(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(line.split()[1] for line in status if line.startswith("Seccomp:"))
got["unfiltered"] = [p for p in os.listdir("/proc") if p.isdigit() and p != "1" and seccomp(p) != "2"]
got["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
child.kill()
print("PROBE" + json.dumps(got))
"""

LEAVE_KEY = SYSCALLS + """\
code = b"print('working code from an earlier student')"
print("PROBE" + json.dumps({"user": call("add_key", b"user", b"mlbook-left-behind", code, len(code), -4),
                            "session": call("add_key", b"user", b"mlbook-left-behind", code, len(code), -3)}))
"""

FIND_KEY = SYSCALLS + """\
found = {}
for name, ring in (("user", -4), ("session", -3)):
    ctypes.set_errno(0)
    serial = libc.syscall(ctypes.c_long(NR["keyctl"]), ctypes.c_long(10), ctypes.c_long(ring), b"user",
                          b"mlbook-left-behind", ctypes.c_long(0))  # KEYCTL_SEARCH
    found[name] = errno.errorcode.get(ctypes.get_errno(), "?") if serial < 0 else "FOUND"
    if serial >= 0:
        buffer = ctypes.create_string_buffer(4096)
        libc.syscall(ctypes.c_long(NR["keyctl"]), ctypes.c_long(11), ctypes.c_long(serial), buffer, ctypes.c_long(4096))
        exec(buffer.value.decode())  # what the attack did
found["request_key"] = call("request_key", b"user", b"mlbook-left-behind", 0, 0)
print("PROBE" + json.dumps(found))
"""

IPC_KEY = 0x4D4C4B59
LEAVE_IPC = f"""\
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def made(r):
    return "OK" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
got = {{"msg": made(libc.msgget({IPC_KEY}, 0o1666)), "shm": made(libc.shmget({IPC_KEY}, 4096, 0o1666)),
        "sem": made(libc.semget({IPC_KEY}, 1, 0o1666))}}
libc.mq_open.restype = ctypes.c_int
got["mq"] = made(libc.mq_open(b"/mlbook-left-behind", os.O_CREAT | os.O_RDWR, 0o666, None))
try:  # /dev/shm is the sandbox's own (bubblewrap's --dev), and not writable by its user
    os.close(os.open("/dev/shm/mlbook-left-behind", os.O_CREAT | os.O_WRONLY, 0o666))
    got["posix_shm"] = "OK"
except OSError as exc:
    got["posix_shm"] = errno.errorcode[exc.errno]
got["sysvipc"] = {{k: len(open(f"/proc/sysvipc/{{k}}").read().splitlines()) - 1 for k in ("msg", "shm", "sem")}}
print("PROBE" + json.dumps(got))
"""

FIND_IPC = f"""\
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def found(r):
    return "FOUND" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
got = {{"msg": found(libc.msgget({IPC_KEY}, 0)), "shm": found(libc.shmget({IPC_KEY}, 0, 0)),
        "sem": found(libc.semget({IPC_KEY}, 0, 0))}}
libc.mq_open.restype = ctypes.c_int
got["mq"] = found(libc.mq_open(b"/mlbook-left-behind", os.O_RDONLY))
got["posix_shm"] = "FOUND" if os.path.exists("/dev/shm/mlbook-left-behind") else "ENOENT"
got["sysvipc"] = {{k: len(open(f"/proc/sysvipc/{{k}}").read().splitlines()) - 1 for k in ("msg", "shm", "sem")}}
print("PROBE" + json.dumps(got))
"""


def _probe_run(source: str, warm: bool) -> tuple[dict, str]:
    """Run a one-cell notebook in a sandbox; its PROBE line and all its output."""
    import json

    import nbformat

    from mlbook.sandbox.limits import Limits
    from mlbook.judge.plan import lab_plan
    from mlbook.sandbox.notebook import execute_sandboxed

    lab = "lab02_scaling"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    result = execute_sandboxed(nb, lab_plan(lab, REPO.source(lab)), Limits(), warm=warm)
    assert result.error is None, result.log
    outputs = result.notebook.cells[0].outputs
    text = "".join(o.get("text", "") for o in outputs)
    assert "PROBE" in text, outputs
    return json.loads(text.split("PROBE", 1)[1].splitlines()[0]), text


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_the_sandbox_denies_syscalls_whose_state_outlives_it(warm):
    got, _ = _probe_run(ATTEMPTS, warm)
    denied = ["add_key", "request_key", "keyctl", "ptrace", "process_vm_readv", "pidfd_getfd", "kcmp", "bpf",
              "perf_event_open", "userfaultfd", "unshare(CLONE_NEWUSER)", "clone(CLONE_NEWUSER)", "setns", "mount",
              "io_uring_setup", "init_module", "open_by_handle_at"]
    assert {name: got[name] for name in denied} == {name: "EPERM" for name in denied}
    for advice in ("MADV_FREE", "MADV_COLD", "MADV_PAGEOUT"):
        assert got[f"madvise({advice})"] == "EPERM", advice
    assert got["madvise(MADV_DONTNEED)"] == "OK", "advice that drops a page's contents stays allowed"
    assert got["clear_refs"] == "EROFS", "the sandbox's /proc must be read-only"
    assert got["clone3"] == "ENOSYS", "clone3 must fail so that libc falls back to clone, whose flags are checked"
    # the kernel's admission filter, stacked on the sandbox's, refuses every socket but an AF_UNIX stream
    # (ENOSYS: the newer filter's errno wins); the sandbox's own family rules are the next test's
    for family in ("AF_VSOCK", "AF_PACKET", "AF_NETLINK, NETLINK_KOBJECT_UEVENT", "AF_NETLINK, NETLINK_ROUTE",
                   "AF_INET", "AF_INET6"):
        assert got[f"socket({family})"] == "ENOSYS", family
    assert got["socket(AF_UNIX)"] == "OK"
    assert got["pidfd_open"] == "OK" and got["thread"] and got["subprocess"] == "42"
    assert got["unfiltered"] == [] and got["processes"] >= 4, \
        f"processes in the sandbox without the syscall filter: {got['unfiltered']}"


FAMILIES = SYSCALLS + """\
from mlbook_kernel import seccomp
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
seccomp.install(seccomp.program())
print("PROBE" + json.dumps({"AF_VSOCK": call("socket", 40, 1, 0), "AF_PACKET": call("socket", 17, 3, 0),
                            "AF_NETLINK, NETLINK_KOBJECT_UEVENT": call("socket", 16, 3, 15),
                            "AF_NETLINK, NETLINK_ROUTE": call("socket", 16, 3, 0), "AF_INET": call("socket", 2, 1, 0),
                            "AF_INET6": call("socket", 10, 1, 0), "AF_UNIX": call("socket", 1, 1, 0)}))
"""


def test_the_sandbox_filter_alone_refuses_socket_families_a_kernel_build_may_lack():
    """Under the admission filter (above) no family but AF_UNIX reaches it: the sandbox's own filter,
    installed alone in a process of the grader's, as every process of a sandbox runs under it."""
    import json

    done = subprocess.run([sys.executable, "-c", FAMILIES], capture_output=True, text=True, timeout=60,
                          cwd=str(REPO.root))
    got = json.loads(done.stdout.split("PROBE", 1)[1])
    assert got == {"AF_VSOCK": "EAFNOSUPPORT", "AF_PACKET": "EAFNOSUPPORT",
                   "AF_NETLINK, NETLINK_KOBJECT_UEVENT": "EAFNOSUPPORT", "AF_NETLINK, NETLINK_ROUTE": "OK",
                   "AF_INET": "OK", "AF_INET6": "OK", "AF_UNIX": "OK"}, done.stderr


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_keyring_entry_left_by_one_submission_is_unreachable_from_the_next(warm):
    left, _ = _probe_run(LEAVE_KEY, warm)
    assert left == {"user": "EPERM", "session": "EPERM"}
    found, text = _probe_run(FIND_KEY, warm)
    assert "earlier student" not in text
    assert found == {"user": "EPERM", "session": "EPERM", "request_key": "EPERM"}


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_sysv_and_posix_ipc_left_by_one_submission_is_invisible_to_the_next(warm):
    """SysV message queues and semaphore sets and POSIX message queues cannot be made (the kernel's
    admission filter refuses them: ENOSYS); SysV shared memory can, and the next sandbox, in an IPC
    namespace of its own, sees none of it nor any other SysV object."""
    left, _ = _probe_run(LEAVE_IPC, warm)
    assert left.pop("posix_shm") in ("OK", "EACCES"), left
    assert left == {"msg": "ENOSYS", "shm": "OK", "sem": "ENOSYS", "mq": "ENOSYS",
                    "sysvipc": {"msg": 0, "shm": 1, "sem": 0}}, left
    found, _ = _probe_run(FIND_IPC, warm)
    assert found == {"msg": "ENOSYS", "shm": "ENOENT", "sem": "ENOSYS", "mq": "ENOSYS", "posix_shm": "ENOENT",
                     "sysvipc": {"msg": 0, "shm": 0, "sem": 0}}, found


def test_the_filter_is_built_for_x86_64_and_aarch64_and_refuses_other_machines():
    from mlbook_kernel import seccomp

    for machine in ("x86_64", "aarch64"):
        program = seccomp.program(machine)
        assert program and len(program) % 8 == 0
    with pytest.raises(seccomp.Unsupported, match="x86_64 and aarch64"):
        seccomp.program("riscv64")
