"""The fork server: one warm process whose forks run submissions inside fresh sandboxes.

    python -m mlbook_kernel.forkserver --fd 3      (started by the grader, as root, outside any sandbox)

A fresh kernel spends most of its start on imports (torch, matplotlib, ipykernel, nbclient:
about 4 s of a 12 s notebook on this laptop; seaborn, with pandas, adds about 2 s on a cold
interpreter). This process pays them once; for each submission the grader starts an empty
bubblewrap sandbox (``bwrap.placeholder_command``: namespaces, mounts, nothing running but
``cat``) and asks for a fork that moves into it:

    fork server --fork--> entrant (joins the sandbox's namespaces and root, then forks and exits)
                       --fork--> runner, inside the sandbox's process namespace: drops to the
                                 sandbox user, then runs ``mlbook_kernel.runner`` whose kernel is
                                 a fork of itself (``mlbook_kernel.forked_kernel``)

Isolation is the sandbox's, not weaker: the runner and the kernel live in that submission's own
mount, process, network, IPC and UTS namespaces, under its uid, rlimits, no capabilities, no
new privileges and its syscall filter (``mlbook_kernel.seccomp``); when the grader closes the
placeholder, every process in it dies. Nothing one submission does reaches this process or
another submission: the fork server is in a process namespace the sandbox cannot see, and each
submission starts from this process's memory, which holds imported libraries only (never the
grader's package, references or another student's data).

Protocol, on a unix socket pair: the fork server sends ``ready`` once warm; then per request the
grader sends one JSON line with three file descriptors (the notebook pipe, the log file and the
runner's private channel to the judge) and
the fork server answers one JSON line, ``{"pid": entrant_pid}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import gc
import json
import os
import socket
import sys
import traceback

from mlbook_kernel import seccomp

# As in the runner: nbformat imports jsonschema, which builds an IRI grammar (2.7 s) for format
# checks no notebook schema uses. Forks inherit the module marked absent.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]

PRELOAD = ("numpy", "scipy.special", "scipy.stats", "torch", "torch.nn.functional", "matplotlib",
           "matplotlib.pyplot", "pandas", "seaborn", "ipywidgets", "ipykernel.kernelapp",
           "ipykernel.ipkernel", "nbformat", "nbclient", "jupyter_client", "mlbook_helpers", "mlbook_kernel.runner",
           "mlbook_kernel.forked_kernel")
NAMESPACES = ("ipc", "uts", "net", "cgroup", "pid", "mnt")  # mnt last: it changes what /proc shows
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_DUMPABLE, PR_CAP_AMBIENT = 38, 24, 4, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
OUT_FD = 3  # where the runner writes the executed notebook, inside the sandbox
CONTROL_FD = 4  # the runner's private channel to the judge, inside the sandbox


def preload() -> None:
    """Import what every graded notebook imports, so each fork starts warm."""
    import importlib
    import pkgutil

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional library missing costs only its warm start
            pass
    import mlbook_helpers

    for info in pkgutil.iter_modules(mlbook_helpers.__path__, "mlbook_helpers."):
        importlib.import_module(info.name)


def serve(conn: socket.socket) -> None:
    """Answer fork requests until the grader closes its end."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:  # a fork keeps only the thread that forked: locks held by others never open
        conn.sendall(json.dumps({"error": f"{threads} threads after preloading; forks could deadlock"}).encode() + b"\n")
        return
    gc.freeze()  # the warm heap stays shared between forks instead of being copied by the collector
    conn.sendall(b'{"ready": true}\n')
    while True:
        fds: list[int] = []
        try:
            line, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        except OSError:
            return
        if not line:
            return
        _reap()
        try:
            request = json.loads(line)
            pid = os.fork()
        except Exception as exc:  # a malformed request or no memory to fork: say so, go on
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            continue
        if pid == 0:
            code = 1
            try:
                conn.close()
                code = _enter_and_run(request, fds)
            except BaseException:  # noqa: BLE001 - a forked child must never return into the loop
                try:
                    os.write(fds[1], traceback.format_exc().encode(errors="replace"))
                except (OSError, IndexError):
                    pass
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _enter_and_run(request: dict, fds: list[int]) -> int:
    """In the entrant: join the placeholder's sandbox, fork the runner into it, exit."""
    out_fd, log_fd, control_fd = fds
    libc = ctypes.CDLL(None, use_errno=True)
    target = int(request["placeholder_pid"])
    ns_fds = [(ns, os.open(f"/proc/{target}/ns/{ns}", os.O_RDONLY)) for ns in NAMESPACES]
    root_fd = os.open(f"/proc/{target}/root", os.O_RDONLY | os.O_DIRECTORY)
    for ns, fd in ns_fds:
        if libc.setns(fd, 0) != 0:
            raise OSError(ctypes.get_errno(), f"cannot join the sandbox's {ns} namespace")
        os.close(fd)
    os.fchdir(root_fd)
    os.chroot(".")
    os.close(root_fd)
    os.chdir(request["cwd"])
    if os.fork() != 0:
        return 0  # the runner lives in the sandbox's pid namespace (it dies with the placeholder)
    os.setsid()
    _settle_fds(out_fd, log_fd, control_fd)
    _drop_privileges(libc, request)
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["PWD"] = request["cwd"]  # as bubblewrap's --chdir sets it
    _fresh_process_state()
    from mlbook_kernel import runner

    return runner.main(request["runner_args"] + ["--out-fd", str(OUT_FD)], fork_kernel=True)


def _settle_fds(out_fd: int, log_fd: int, control_fd: int) -> None:
    """stdin from /dev/null, stdout and stderr to the log, the notebook pipe on OUT_FD, the
    judge's channel on CONTROL_FD, nothing else."""
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    control = fcntl.fcntl(control_fd, fcntl.F_DUPFD, 16)  # off OUT_FD's number before that is set
    os.dup2(out_fd, OUT_FD)
    os.dup2(control, CONTROL_FD)
    os.closerange(CONTROL_FD + 1, 1 << 16)


def _drop_privileges(libc, request: dict) -> None:
    """rlimits, then the sandbox user with no capabilities and no way to gain any."""
    import resource

    for which, value in request["rlimits"]:
        resource.setrlimit(which, (value, value))
    uid = request["uid"]
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
    seccomp.install()  # the sandbox's syscall filter, as bubblewrap loads it on a cold start
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as any process the user starts (setuid cleared it)
    status = open("/proc/self/status").read()
    if os.getuid() != uid or os.geteuid() != uid or "CapEff:\t0000000000000000" not in status:
        raise PermissionError("the runner kept privileges it must not have")


def _fresh_process_state() -> None:
    """What a fresh interpreter would have had that the fork shares with its siblings."""
    import random
    import signal

    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as CPython sets it at start: EPIPE, not death
    signal.signal(signal.SIGINT, signal.default_int_handler)
    random.seed()
    try:
        import numpy as np

        np.random.seed()  # numpy's global generator was seeded once, in the fork server
    except ImportError:
        pass
    try:
        import matplotlib

        for cached in (matplotlib.get_configdir, matplotlib.get_cachedir):
            getattr(cached, "cache_clear", lambda: None)()
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    conn = socket.socket(fileno=args.fd)
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # as ipykernel_launcher does: a kernel does not import from its start folder
    preload()
    serve(conn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
