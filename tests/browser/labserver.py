"""A throw-away JupyterLab server for the browser tests.

Conventions:
- The server listens on 127.0.0.1 only, on a free port, and asks for a random token.
- Everything Jupyter writes (config, data, runtime, IPython and matplotlib caches) lives under
  one scratch folder; the user's own ~/.jupyter is never read or written.
- The server's working directory and ``root_dir`` are the scratch course: nbgrader's server
  extensions read ``nbgrader_config.py`` from the working directory.
- Kernels inherit one BLAS thread each (OMP_NUM_THREADS=1): the test machine has two cores.
- JupyterLab exposes its application object as ``window.jupyterapp``
  (``LabApp.expose_app_in_browser``), so tests can read notebook models instead of guessing
  from pixels; every action a student takes still goes through the page.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 90

# JupyterLab user settings for the test profile: no network calls from the page (news, update
# checks, the extension manager's registry), nothing else changed from what students get.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension/plugin.jupyterlab-settings": {"enabled": False},
}


@dataclass
class LabServer:
    """A running ``jupyter lab``.

    Attributes:
        root: the folder it serves (the scratch course).
        url: base URL, ``http://127.0.0.1:<port>/``.
        token: the token a browser must present.
        log: the server's combined stdout and stderr.
        process: the server process (leader of its own process group, kernels included).
    """

    root: Path
    url: str
    token: str
    log: Path
    process: subprocess.Popen
    shutdowns: list[threading.Thread] = field(default_factory=list)

    def lab_url(self, workspace: str) -> str:
        """URL of JupyterLab in its own workspace (nothing restored from elsewhere), token included."""
        return f"{self.url}lab/workspaces/{workspace}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        """Call ``<url><path>`` with the token; returns the decoded JSON (None when empty)."""
        request = urllib.request.Request(self.url + path, method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Shut down every kernel running now, through the REST API, in the background (a
        graceful shutdown takes seconds; the next test need not wait for it)."""
        ids = [kernel["id"] for kernel in self.api("api/kernels")]

        def shut_down() -> None:
            for kernel_id in ids:
                try:
                    self.api(f"api/kernels/{kernel_id}", method="DELETE")
                except urllib.error.HTTPError as exc:
                    if exc.code != 404:  # gone already: fine
                        raise

        worker = threading.Thread(target=shut_down, name="kernel-shutdown", daemon=True)
        worker.start()
        self.shutdowns.append(worker)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server and its kernels (its process group), gracefully first."""
        for worker in self.shutdowns:
            worker.join(timeout=30)
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)  # jupyter_server stops and shuts its kernels down
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # stragglers: kernels left behind
        except ProcessLookupError:
            pass
        self.process.wait(timeout=5)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scratch_environment(home: Path) -> dict[str, str]:
    """The server's environment: Jupyter's folders under ``home``, one BLAS thread per kernel.

    Args:
        home: a scratch folder owned by the test run.

    Returns:
        A copy of ``os.environ`` with the Jupyter, IPython and matplotlib folders redirected.
    """
    env = dict(os.environ)
    folders = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
               "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "matplotlib"}
    for var, name in folders.items():
        (home / name).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / name)
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_PREFER_ENV_PATH", None)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def write_profile(config_dir: Path, home: Path) -> None:
    """Write the test profile into ``config_dir``: JupyterLab settings (``LAB_SETTINGS``) and
    an nbgrader exchange folder under ``home`` (the default, /usr/local/share, is not writable
    and the formgrader would show a warning about it)."""
    for relative, values in LAB_SETTINGS.items():
        path = config_dir / "lab" / "user-settings" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))
    (home / "exchange").mkdir(exist_ok=True)
    (config_dir / "nbgrader_config.py").write_text(f"c.Exchange.root = {str(home / 'exchange')!r}\n")


def start_lab(root: Path, home: Path) -> LabServer:
    """Start ``jupyter lab`` serving ``root`` and wait until it answers.

    Args:
        root: the course folder to serve (also the server's working directory).
        home: scratch folder for Jupyter's own files and the server log.

    Returns:
        The running server. Raises RuntimeError, with the end of the server log, when it
        does not come up within ``START_TIMEOUT_S``.
    """
    env = scratch_environment(home)
    write_profile(Path(env["JUPYTER_CONFIG_DIR"]), home)
    token, port = secrets.token_hex(24), free_port()
    log = home / "jupyter-lab.log"
    command = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.extension_manager=readonly",  # never asks PyPI for extensions
        "--ServerApp.allow_root=True",  # CI containers run as root; harmless otherwise
        "--ServerApp.log_level=INFO",
    ]
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = LabServer(root, f"http://127.0.0.1:{port}/", token, log, process)
    atexit.register(server.stop)  # even if the test session ends without its teardown
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {process.returncode} before answering; "
                               f"its log ({log}) ends:\n{server.log_tail()}")
        try:
            server.api("api/status")
            return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"jupyter lab did not answer on {server.url} within {START_TIMEOUT_S} s; "
                       f"its log ({log}) ends:\n{server.log_tail()}")
