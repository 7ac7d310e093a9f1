"""The bubblewrap command line that isolates one submission's kernel.

Why bubblewrap: it is a maintained, small, setuid-free tool (Debian package ``bubblewrap``,
used by Flatpak) that builds the sandbox from Linux namespaces without a daemon or root, so a
TA can run it on a laptop or a cluster node alike. Docker needs a daemon that is often absent;
nsjail and firejail are bigger and less common in distributions.

What the sandbox sees (everything else does not exist inside it):
- read-only: /usr, /etc, the Python installation and the virtual environment, and the two
  packages a graded notebook imports: ``mlbook_helpers`` (what students have) and
  ``mlbook_kernel`` (the kernel side of hidden checks, no reference solutions). The grader's
  own package ``mlbook`` is hidden even when it lives inside the environment;
- the submission, read-only, and the judge's unix socket;
- writable: a size-capped tmpfs for the home/working folder and one for /tmp.
It has its own network namespace with only loopback (no network), its own process and IPC
namespaces, no capabilities, and runs as an unprivileged user.

Nothing of one submission may reach the next, so nothing a sandbox can leave behind may
outlive it: its namespaces, scratch space and processes end with it, and two more rules cover
what the kernel keeps outside them:
- a fresh identity per submission. When the grader runs as root, each sandbox runs as a user
  and group id (``fresh_uid``) drawn at random from ``UID_RANGE``, never drawn before by this
  process and under which no process on this machine runs: state the kernel keys by user id
  (keyrings, the process count behind RLIMIT_NPROC) starts empty and is nobody else's. (A
  grader without root runs bubblewrap in a new user namespace, as its own user.)
- a syscall filter (``mlbook_kernel.seccomp``, whose docstring lists what it denies and why) on
  every process in the sandbox: bubblewrap loads it from ``seccomp_fd()`` before it executes the
  sandbox's first command; a warm runner installs it itself after ``no_new_privs``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from mlbook_kernel import seccomp

from mlbook.errors import MlbookError
from mlbook.sandbox.profiles import STANDARD, SandboxProfile

UID_RANGE = (2**20, 2**31 - 2**16)  # sandbox user ids when the grader is root: far above any real user
SOCKET = "/run/mlbook/judge.sock"
SUBMISSION = "/run/mlbook/submission.ipynb"
HOME = "/home/student"
INSTALL_HINT = ("install Debian's bubblewrap (`sudo apt-get install bubblewrap`, or `make system`), "
                "or grade unsandboxed with --unsandboxed if you trust every submission")


def package_dir(name: str) -> Path:
    """The folder this process imports the package ``name`` from."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise MlbookError(f"package {name} is not installed")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def read_only_paths() -> list[Path]:
    """Host paths bound read-only at the same place inside the sandbox."""
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
             package_dir("mlbook_helpers"), package_dir("mlbook_kernel")]
    unique: list[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(p.is_relative_to(q) for q in unique):
            unique.append(p)
    return unique


def command(inner: list[str], submission: Path, socket_path: Path, uid: int, scratch_bytes: int,
            env: dict[str, str], filter_fd: int) -> list[str]:
    """The full argv: bwrap, its mounts, then ``inner`` run as the unprivileged sandbox user
    ``uid`` (``fresh_uid()``; used when the grader is root) under the syscall filter bwrap reads
    from ``filter_fd`` (``seccomp_fd()``: pass it to bwrap, then close it)."""
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox", "--clearenv",
            "--seccomp", str(filter_fd)]
    as_root = os.geteuid() == 0
    if not as_root:
        argv += ["--unshare-user", "--cap-drop", "ALL"]
    for top in ("usr", "etc"):
        argv += ["--ro-bind", f"/{top}", f"/{top}"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    # /proc read-only: no process of the submission can write its clear_refs (clear the referenced
    # bits or the peak that lab 6's measurement reads from the host's /proc) or any other /proc file
    argv += ["--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc"]
    # Writable scratch first: a read-only path below /tmp (a venv in a temporary clone) must be
    # mounted on top of the /tmp tmpfs, not hidden by it.
    argv += ["--perms", "0755", "--dir", str(Path(HOME).parent)]
    for writable in (HOME, "/tmp"):
        argv += ["--perms", "01777", "--size", str(scratch_bytes), "--tmpfs", writable]
    made: set[str] = {"/", "/usr", "/etc", "/tmp", str(Path(HOME).parent), HOME}
    for path in read_only_paths():
        argv += _parents(path, made) + ["--ro-bind", str(path), str(path)]
    mlbook_dir = package_dir("mlbook")
    if any(mlbook_dir.is_relative_to(p) for p in read_only_paths()):
        argv += ["--tmpfs", str(mlbook_dir)]  # the grader's package (reference checks) stays out of sight
    argv += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/run/mlbook",
             "--ro-bind", str(submission), SUBMISSION, "--bind", str(socket_path), SOCKET]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", HOME]
    if as_root:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs"]
    return argv + inner


PLACEHOLDER = ["/bin/sh", "-c", "echo ready; exec cat >/dev/null"]  # lives until its stdin closes


def placeholder_command(submission: Path, socket_path: Path, uid: int, scratch_bytes: int, env: dict[str, str],
                        info_fd: int, filter_fd: int) -> list[str]:
    """An empty sandbox for the fork server to enter (``forkserver``): the same namespaces and
    mounts as ``command``, running only ``cat``; it prints ``ready`` once built and writes its
    init's pid to ``info_fd``. Closing its stdin ends it and everything that entered it."""
    argv = command(PLACEHOLDER, submission, socket_path, uid, scratch_bytes, env, filter_fd)
    return [argv[0], "--info-fd", str(info_fd), *argv[1:]]


_drawn: set[int] = set()
_drawn_lock = threading.Lock()


def fresh_uid() -> int:
    """A user (and group) id for one sandbox: random in ``UID_RANGE``, never drawn before by this
    process, and no process on this machine runs under it (another grading process's or Dask
    worker's sandbox, say). Each submission gets its own, so what the kernel keeps per user
    starts empty, and per-user limits (RLIMIT_NPROC) count this sandbox's processes only."""
    low, high = UID_RANGE
    with _drawn_lock:
        busy = _ids_in_use() | _drawn
        for _ in range(1000):
            uid = low + secrets.randbelow(high - low)
            if uid not in busy:
                _drawn.add(uid)
                return uid
    raise MlbookError("no unused sandbox user id found")  # not reached: the range has two billion


def _ids_in_use() -> set[int]:
    """Every user and group id (real, effective, saved, filesystem) of a running process."""
    ids: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                for line in status:
                    if line.startswith(("Uid:", "Gid:")):
                        ids.update(int(v) for v in line.split()[1:])
        except (OSError, ValueError):
            continue  # the process ended meanwhile
    return ids


def seccomp_fd() -> int:
    """A new descriptor holding the sandbox's syscall filter, for one bwrap to read
    (``--seccomp``); the caller passes it to that bwrap and closes its own copy after starting
    it. Raises MlbookError on an architecture the filter does not know."""
    try:
        data = seccomp.program()
    except seccomp.Unsupported as exc:
        raise MlbookError(str(exc)) from None
    fd = os.memfd_create("mlbook-seccomp", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _parents(path: Path, made: set[str]) -> list[str]:
    args = []
    for parent in reversed(path.parents):
        if str(parent) not in made:
            made.add(str(parent))
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def environment(threads: int = 1, profile: SandboxProfile = STANDARD) -> dict[str, str]:
    """The sandbox's whole environment (bwrap starts from an empty one), with ``profile``'s
    allocator settings (``mlbook.sandbox.profiles``; none in the standard profile). A fork server's
    environment is this one too, so warm kernels inherit the settings: one server per profile.
    """
    venv_bin = str(Path(sys.prefix) / "bin")
    threads_s = str(threads)
    return {"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "MPLCONFIGDIR": "/tmp/matplotlib", "IPYTHONDIR": f"{HOME}/.ipython", "PYTHONDONTWRITEBYTECODE": "1",
            "JUPYTER_RUNTIME_DIR": "/tmp/jupyter-runtime", "MLBOOK_PROBE_SOCKET": SOCKET,
            "OMP_NUM_THREADS": threads_s, "MKL_NUM_THREADS": threads_s, "OPENBLAS_NUM_THREADS": threads_s,
            **profile.allocator}


def problem() -> str | None:
    """Why the sandbox cannot start on this machine, or None when it can."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc"] + ([] if os.geteuid() == 0 else ["--unshare-user"]) + ["true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap does not start: {exc}; {INSTALL_HINT}"
    if done.returncode != 0:
        return (f"bubblewrap cannot create namespaces here ({done.stderr.strip() or done.returncode}); "
                f"user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1); {INSTALL_HINT}")
    try:
        filter_fd = seccomp_fd()
    except MlbookError as exc:
        return str(exc)
    try:
        done = subprocess.run([*argv[:-1], "--seccomp", str(filter_fd), "true"], capture_output=True, text=True,
                              timeout=30, pass_fds=(filter_fd,))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap does not start: {exc}; {INSTALL_HINT}"
    finally:
        os.close(filter_fd)
    if done.returncode != 0:
        return (f"bubblewrap cannot install the sandbox's syscall filter ({done.stderr.strip() or done.returncode}); "
                "the kernel needs seccomp filters (CONFIG_SECCOMP_FILTER)")
    return None
