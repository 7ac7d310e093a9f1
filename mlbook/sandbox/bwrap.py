"""The bubblewrap command line that isolates one submission's kernel.

Why bubblewrap: it is a maintained, small, setuid-free tool (Debian package ``bubblewrap``,
used by Flatpak) that builds the sandbox from Linux namespaces without a daemon or root, so a
TA can run it on a laptop or a cluster node alike. Docker needs a daemon that is often absent;
nsjail and firejail are bigger and less common in distributions.

What the sandbox sees (everything else does not exist inside it):
- read-only: /usr, /etc, the Python installation and the virtual environment, and the two
  packages a graded notebook imports: ``mlbook_helpers`` (what students have) and
  ``mlbook_probe`` (the kernel side of hidden checks, no reference solutions). The grader's
  own package ``mlbook`` is hidden even when it lives inside the environment;
- the submission, read-only, and the judge's unix socket;
- writable: a size-capped tmpfs for the home/working folder and one for /tmp.
It has its own network namespace with only loopback (no network), its own process and IPC
namespaces, no capabilities, and runs as an unprivileged user: when the grader runs as root,
uid ``SANDBOX_UID_BASE + slot`` (one per parallel slot, so process limits do not add up).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import MlbookError

SANDBOX_UID_BASE = 61000
SOCKET = "/run/mlbook/judge.sock"
SUBMISSION = "/run/mlbook/submission.ipynb"
HOME = "/home/student"
INSTALL_HINT = ("install Debian's bubblewrap (`sudo apt-get install bubblewrap`, or `make system`), "
                "or grade unsandboxed with --unsandboxed if you trust every submission")


def _package_dir(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise MlbookError(f"package {name} is not installed")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def read_only_paths() -> list[Path]:
    """Host paths bound read-only at the same place inside the sandbox."""
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
             _package_dir("mlbook_helpers"), _package_dir("mlbook_probe")]
    unique: list[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(p.is_relative_to(q) for q in unique):
            unique.append(p)
    return unique


def command(inner: list[str], submission: Path, socket_path: Path, slot: int, scratch_bytes: int,
            env: dict[str, str]) -> list[str]:
    """The full argv: bwrap, its mounts, then ``inner`` run as the unprivileged sandbox user."""
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox", "--clearenv"]
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
    argv += ["--dev", "/dev", "--proc", "/proc"]
    # Writable scratch first: a read-only path below /tmp (a venv in a temporary clone) must be
    # mounted on top of the /tmp tmpfs, not hidden by it.
    argv += ["--perms", "0755", "--dir", str(Path(HOME).parent)]
    for writable in (HOME, "/tmp"):
        argv += ["--perms", "01777", "--size", str(scratch_bytes), "--tmpfs", writable]
    made: set[str] = {"/", "/usr", "/etc", "/tmp", str(Path(HOME).parent), HOME}
    for path in read_only_paths():
        argv += _parents(path, made) + ["--ro-bind", str(path), str(path)]
    mlbook_dir = _package_dir("mlbook")
    if any(mlbook_dir.is_relative_to(p) for p in read_only_paths()):
        argv += ["--tmpfs", str(mlbook_dir)]  # the grader's package (reference checks) stays out of sight
    argv += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/run/mlbook",
             "--ro-bind", str(submission), SUBMISSION, "--bind", str(socket_path), SOCKET]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", HOME]
    if as_root:
        uid = str(sandbox_uid(slot))
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs"]
    return argv + inner


PLACEHOLDER = ["/bin/sh", "-c", "echo ready; exec cat >/dev/null"]  # lives until its stdin closes


def placeholder_command(submission: Path, socket_path: Path, slot: int, scratch_bytes: int, env: dict[str, str],
                        info_fd: int) -> list[str]:
    """An empty sandbox for the fork server to enter (``forkserver``): the same namespaces and
    mounts as ``command``, running only ``cat``; it prints ``ready`` once built and writes its
    init's pid to ``info_fd``. Closing its stdin ends it and everything that entered it."""
    argv = command(PLACEHOLDER, submission, socket_path, slot, scratch_bytes, env)
    return [argv[0], "--info-fd", str(info_fd), *argv[1:]]


def sandbox_uid(slot: int) -> int:
    """The sandbox user of a parallel slot when the grader runs as root."""
    return SANDBOX_UID_BASE + slot


def _parents(path: Path, made: set[str]) -> list[str]:
    args = []
    for parent in reversed(path.parents):
        if str(parent) not in made:
            made.add(str(parent))
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def environment(threads: int = 1) -> dict[str, str]:
    """The sandbox's whole environment (bwrap starts from an empty one)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    threads_s = str(threads)
    return {"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "MPLCONFIGDIR": "/tmp/matplotlib", "IPYTHONDIR": f"{HOME}/.ipython", "PYTHONDONTWRITEBYTECODE": "1",
            "JUPYTER_RUNTIME_DIR": "/tmp/jupyter-runtime", "MLBOOK_PROBE_SOCKET": SOCKET,
            "OMP_NUM_THREADS": threads_s, "MKL_NUM_THREADS": threads_s, "OPENBLAS_NUM_THREADS": threads_s}


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
    return None
