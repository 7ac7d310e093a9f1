"""Real servers the scale tests need, started on loopback and stopped after: a PostgreSQL
server (Debian's package, `make system`) and a Dask scheduler with two workers."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} before it listened on port {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    pytest.fail(f"{what} did not listen on port {port} within {timeout} s")


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL is not installed: run `make system` (Debian package postgresql)")
    return found[-1].parent


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throw-away PostgreSQL server; yields the URL of an empty database ``gradebook``."""
    pg = _postgres_bin()
    # The server's own folder: PostgreSQL refuses to run as root, and its user must reach the
    # folder, which pytest's private temporary folders do not allow.
    base = Path(tempfile.mkdtemp(prefix="mlbook-postgres-"))
    data, log = base / "data", base / "server.log"
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        base.chmod(0o755)
        shutil.chown(base, "postgres", "postgres")
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
    port = free_port()
    made = subprocess.run([*as_postgres, pg / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"initdb failed: {made.stderr.strip()}")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    started = subprocess.run([*as_postgres, pg / "pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "start"],
                             capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"PostgreSQL did not start: {started.stderr or log.read_text()}")
    try:
        subprocess.run([*as_postgres, pg / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "gradebook"],
                       check=True, capture_output=True)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/gradebook"
    finally:
        subprocess.run([*as_postgres, pg / "pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def dask_cluster(base: Path, workers: int = 2) -> Iterator[str]:
    """A Dask scheduler and ``workers`` single-threaded workers; yields the scheduler address."""
    base.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    logs = [open(base / f"{name}.log", "w") for name in ["scheduler"] + [f"worker{i}" for i in range(workers)]]
    procs = [subprocess.Popen([BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=logs[0], stderr=subprocess.STDOUT, env=env, cwd=base)]
    try:
        _wait_for_port(port, procs[0], "dask scheduler")
        address = f"tcp://127.0.0.1:{port}"
        for i in range(workers):
            procs.append(subprocess.Popen(
                [BIN / "dask", "worker", address, "--nthreads", "1", "--no-dashboard", "--name", f"w{i}",
                 "--local-directory", str(base / f"w{i}")], stdout=logs[i + 1], stderr=subprocess.STDOUT, env=env,
                cwd=base))
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            if proc.poll() is None:
                proc.kill()
        for log in logs:
            log.close()
