"""The grader's side of the fork server (``mlbook_kernel.forkserver``): start it once, ask it for forks.

One fork server per grading process and sandbox profile (a ``LocalExecutor``'s threads share
it; each Dask worker process starts its own; warm kernels inherit their server's environment,
and a profile's allocator settings are part of it: ``mlbook.sandbox.profiles``), started on first
use and stopped at exit. It needs root, because its
forks join a sandbox's namespaces and then become the sandbox user; without root (bubblewrap in
a user namespace) or when it cannot start, ``shared()`` returns None and each submission starts
its own interpreter in the sandbox. ``MLBOOK_FORKSERVER=0`` turns it off.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

from mlbook_kernel.forkserver import CONTROL_FD

from mlbook.sandbox import bwrap
from mlbook.sandbox.profiles import STANDARD, SandboxProfile

__all__ = ["ForkServer", "shared", "warm_up", "CONTROL_FD"]

READY_SECONDS = 180  # preloading torch and friends on a loaded laptop
_lock = threading.Lock()
_servers: "dict[str, ForkServer]" = {}  # profile name -> its server
_failed: dict[str, str] = {}  # profile name -> why its server could not start


class ForkServer:
    """A running ``mlbook_kernel.forkserver`` and the socket to it (requests are serialized)."""

    def __init__(self, profile: SandboxProfile = STANDARD) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._home = tempfile.mkdtemp(prefix="mlbook-forkserver-")
        env = {**bwrap.environment(profile=profile), "MPLCONFIGDIR": os.path.join(self._home, "matplotlib"),
               "HOME": self._home, "TMPDIR": self._home, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        env.pop("MLBOOK_PROBE_SOCKET", None)
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "mlbook_kernel.forkserver", "--fd", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), env=env, cwd=self._home, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log, start_new_session=True)
        theirs.close()
        self._sock = mine
        self._lock = threading.Lock()
        self._sock.settimeout(READY_SECONDS)
        try:
            ready = self._readline()
        except (OSError, ValueError) as exc:
            ready = {"error": f"{exc}; {self.log()}"}
        if not ready.get("ready"):
            reason = ready.get("error") or self.log()
            self.close()
            raise RuntimeError(f"the fork server did not start: {reason}")
        self._sock.settimeout(60)

    def _readline(self) -> dict:
        data = b""
        while not data.endswith(b"\n"):
            chunk = self._sock.recv(4096)
            if not chunk:
                raise ConnectionError("the fork server closed its socket")
            data += chunk
        return json.loads(data)

    def spawn(self, request: dict, out_fd: int, log_fd: int, control_fd: int) -> int:
        """Fork a runner into the sandbox ``request`` names; returns the entrant's pid.

        Args:
            request: placeholder_pid, uid, cwd, env, rlimits, runner_args (see the fork server).
            out_fd: the write end of the pipe the executed notebook comes back on.
            log_fd: where the runner's and the kernel's stderr go.
            control_fd: the runner's end of its private channel to the judge (``CONTROL_FD`` there).
        """
        with self._lock:
            try:
                socket.send_fds(self._sock, [json.dumps(request).encode() + b"\n"], [out_fd, log_fd, control_fd])
                answer = self._readline()
            except (OSError, ValueError):
                self.proc.kill()  # out of step with us: the next caller starts a new one
                raise
        if "error" in answer:
            raise RuntimeError(f"the fork server could not fork: {answer['error']}")
        return int(answer["pid"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read()[-2000:].decode(errors="replace")

    def close(self) -> None:
        self._sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        shutil.rmtree(self._home, ignore_errors=True)


def shared(profile: SandboxProfile = STANDARD) -> ForkServer | None:
    """This process's fork server for ``profile``, started on first use; None where it cannot be used."""
    if not _wanted():
        return None
    with _lock:
        server = _servers.get(profile.name)
        if server is not None and not server.alive():
            server = None  # it died (killed by the OOM killer, say): start a new one
        if server is None and profile.name not in _failed:
            try:
                server = ForkServer(profile)
                atexit.register(server.close)
            except (OSError, RuntimeError) as exc:
                _failed[profile.name] = str(exc)
                print(f"mlbook: warm kernels unavailable ({exc}); each notebook starts its own interpreter",
                      file=sys.stderr)
        if server is None:
            _servers.pop(profile.name, None)
        else:
            _servers[profile.name] = server
        return server


def warm_up(profile: SandboxProfile = STANDARD) -> None:
    """Start this process's fork server for ``profile`` in the background (``shared()`` waits for it)."""
    if _wanted() and profile.name not in _servers:
        threading.Thread(target=shared, args=(profile,), name="forkserver-warm-up", daemon=True).start()


def _wanted() -> bool:
    return os.environ.get("MLBOOK_FORKSERVER", "1") != "0" and os.geteuid() == 0
