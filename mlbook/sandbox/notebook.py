"""One submission end to end: judge up, notebook run in the sandbox, results collected.

``execute_sandboxed`` is a pure function of (notebook, lab, limits): it touches no course
folder and no gradebook, so it runs the same in the grader's process, in a local worker pool
or on a Dask worker. What it returns is split by trust:
- ``notebook``: the executed notebook as the sandbox returned it (untrusted: its outputs are
  shown to the student and can only lower a score);
- ``verdicts``: decided by the judge in this process (trusted);
- ``error``: why the submission failed as a whole, if it did (time budget, dead kernel,
  unreadable result), in words a TA and the student can act on.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from mlbook.sandbox import bwrap, forkserver, profiles
from mlbook.judge.server import Judge, Verdict
from mlbook.sandbox.limits import Limits
from mlbook.sandbox.profiles import SandboxProfile
from mlbook.judge.plan import LabPlan


@dataclass
class SandboxResult:
    notebook: NotebookNode | None
    verdicts: dict[str, Verdict]
    error: str | None = None
    seconds: float = 0.0
    log: str = ""  # the sandbox's own stderr, for a TA (capped)
    timings: dict[str, float] = field(default_factory=dict)


def execute_sandboxed(nb: NotebookNode, plan: LabPlan, limits: Limits = Limits(),
                      sandboxed: bool = True, warm: bool = True) -> SandboxResult:
    """Run ``nb`` top to bottom in a fresh sandboxed kernel; judge its test cells here.

    Args:
        nb: the notebook to run (nbgrader's sanitized submission).
        plan: the lab's trusted test-cell plans (``plan.lab_plan``).
        limits: the caps (``Limits``).
        sandboxed: False runs the kernel without bubblewrap (a TA's explicit opt-out); the
            verdicts are still decided here.
        warm: fork the runner and kernel from the fork server when it is available (worth it
            from the second notebook on); False starts them cold, as a student's laptop would.
    """
    start, spawned = time.perf_counter(), time.time()
    scratch = Path(tempfile.mkdtemp(prefix="mlbook-sandbox-"))
    try:
        submission = scratch / "submission.ipynb"
        sock = scratch / "judge.sock"
        instrumented = instrument(nb, plan)
        submission.write_text(nbformat.writes(instrumented))
        submission.chmod(0o644)  # whatever the grader's umask: the sandbox user reads it
        # The runner's private channel to the judge: one end stays here, the other is inherited
        # by the runner alone (never by its kernel); the judge admits sessions by its reports.
        control, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sandbox = _Sandbox()
        profile = profiles.profile(plan.sandbox_profile)
        with Judge(plan, sock, call_timeout=limits.cell_seconds + 30, control=control,
                   test_cells=test_cell_indices(instrumented, plan),
                   memory_root=(lambda: sandbox.pid) if profile.measures_memory else (lambda: None)) as judge:
            try:
                raw, error, log = _run_runner(submission, sock, limits, sandboxed, warm, runner_end, sandbox,
                                              profile)
            finally:
                runner_end.close()
            judge.close(wait=5.0)
            verdicts = dict(judge.verdicts)
            judged = judge.seconds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    executed, read_error = _read_result(raw, nb, limits)
    error = error or read_error
    if executed is not None and not error:
        error = (executed.metadata.get("mlbook_sandbox") or {}).get("error") or None
        error = str(error)[:500] if error else None
    timings = _timings(executed, spawned, time.time(), judged)
    return SandboxResult(executed, verdicts, error, time.perf_counter() - start, log, timings)


def _timings(executed: NotebookNode | None, spawned: float, done: float, judged: float) -> dict[str, float]:
    """Where one notebook's time went (seconds), from the runner's clock marks (same machine)."""
    marks = ((executed.metadata.get("mlbook_sandbox") or {}).get("timings") if executed is not None else None) or {}
    try:
        cells = [float(c) for c in marks.get("cells", [])]
        code = [t for t, c in zip(cells, [c for c in executed.cells]) if c.cell_type == "code"] if cells else []
        return {"start-up": round(float(marks["kernel_start"]) - spawned, 3),
                "kernel start": round(float(marks["kernel_ready"]) - float(marks["kernel_start"]), 3),
                "imports": round(code[0] if code else 0.0, 3),
                "execution": round(sum(cells) - (code[0] if code else 0.0), 3),
                "of which judging": round(judged, 3),
                "shutdown": round(done - float(marks["finished"]), 3)}
    except (KeyError, TypeError, ValueError):
        return {"total": round(done - spawned, 3)}


class _Sandbox:
    """What the judge learns of the running sandbox, for measurements from outside
    (``procmem``): the host pid of its init (warm start: every process of its pid namespace is
    measured) or of bubblewrap (cold start: its descendants are)."""

    pid: int | None = None


def test_cell_indices(nb: NotebookNode, plan: LabPlan) -> dict[int, str]:
    """Cell index -> grade id of the test cells the judge decides, in the notebook as run."""
    from mlbook.authoring.notebooks import grade_id, is_test

    return {i: grade_id(c) for i, c in enumerate(nb.cells) if is_test(c) and grade_id(c) in plan.cells}


def instrument(nb: NotebookNode, plan: LabPlan) -> NotebookNode:
    """The copy the kernel runs: each test cell keeps its visible tests (for the student's
    output), loses its hidden block (it runs in the grader) and ends by handing the cell over."""
    import copy

    from mlbook.authoring.notebooks import grade_id, is_test

    out = copy.deepcopy(nb)
    for cell in out.cells:
        gid = grade_id(cell) if is_test(cell) else None
        if gid in plan.cells:
            cell.source = (f"{plan.cells[gid].visible.rstrip()}\n"
                           f"__import__('mlbook_kernel').probe_cell({plan.lab!r}, {gid!r})\n")
    return out


def _runner_args(notebook: str, limits: Limits, control_fd: int) -> list[str]:
    return [notebook, "--cell-timeout", str(limits.cell_seconds), "--max-cell-bytes", str(limits.cell_output_bytes),
            "--max-cell-lines", str(limits.cell_output_lines), "--control-fd", str(control_fd)]


def _run_runner(submission: Path, sock: Path, limits: Limits, sandboxed: bool, warm: bool, control: socket.socket,
                sandbox: _Sandbox, profile: SandboxProfile) -> tuple[bytes, str | None, str]:
    """Run the runner (in bubblewrap unless opted out); return (stdout of --out-fd, error, stderr).

    In a sandbox, the runner is a warm fork from the fork server when one is available, and a
    fresh interpreter otherwise; both see the same sandbox, set up as the lab's ``profile`` says."""
    server = forkserver.shared(profile) if sandboxed and warm else None
    if server is not None:
        try:
            return _run_warm(server, submission, sock, limits, control, sandbox, profile)
        except _NotStarted as exc:  # nothing of the submission ran yet: start it cold instead
            print(f"mlbook: a warm kernel did not start ({exc}); starting this notebook cold", file=sys.stderr)
    read_fd, write_fd = os.pipe()
    inner = [sys.executable, "-m", "mlbook_kernel.runner",
             *_runner_args(bwrap.SUBMISSION if sandboxed else str(submission), limits, control.fileno()),
             "--out-fd", str(write_fd)]
    env, filter_fds = bwrap.environment(profile=profile), ()
    if sandboxed:
        filter_fds = (bwrap.seccomp_fd(),)
        argv, run_env = bwrap.command(inner, submission, sock, bwrap.fresh_uid(), limits.scratch_bytes, env,
                                      *filter_fds), None
    else:
        home = Path(tempfile.mkdtemp(prefix="mlbook-unsandboxed-"))
        argv = inner
        run_env = {**os.environ, **env, "HOME": str(home), "IPYTHONDIR": str(home / ".ipython"),
                   "TMPDIR": str(home), "MLBOOK_PROBE_SOCKET": str(sock), "MPLCONFIGDIR": str(home / "mpl"),
                   "JUPYTER_RUNTIME_DIR": str(home / "rt")}
        run_env.pop("PYTHONPATH", None)
    stderr_file = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr_file, stderr=stderr_file,
                                pass_fds=(write_fd, control.fileno(), *filter_fds), env=run_env, start_new_session=True,
                                cwd=None if sandboxed else str(home),
                                preexec_fn=limits.apply_rlimits if sandboxed else None)
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        return b"", f"the sandbox did not start: {exc}", ""
    finally:
        for fd in filter_fds:
            os.close(fd)
    os.close(write_fd)
    sandbox.pid = proc.pid
    reader = _Drain(read_fd, limits.notebook_bytes)
    error = None
    try:
        proc.wait(timeout=limits.notebook_seconds)
    except subprocess.TimeoutExpired:
        error = f"the notebook ran past its time budget of {limits.notebook_seconds} s and was stopped"
    _kill_group(proc)
    if not sandboxed:
        shutil.rmtree(home, ignore_errors=True)
    return reader.result(error, stderr_file)


def _run_warm(server: forkserver.ForkServer, submission: Path, sock: Path, limits: Limits,
              control: socket.socket, sandbox: _Sandbox, profile: SandboxProfile) -> tuple[bytes, str | None, str]:
    """The runner as a warm fork: build the empty sandbox, have the fork server enter it."""
    info_r, info_w = os.pipe()
    stderr_file = tempfile.TemporaryFile()
    uid, filter_fd = bwrap.fresh_uid(), bwrap.seccomp_fd()
    env = bwrap.environment(profile=profile)
    argv = bwrap.placeholder_command(submission, sock, uid, limits.scratch_bytes, env, info_w,
                                     filter_fd)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file,
                                pass_fds=(info_w, filter_fd), start_new_session=True, preexec_fn=limits.apply_rlimits)
    except OSError as exc:
        os.close(info_r)
        os.close(info_w)
        raise _NotStarted(f"bubblewrap: {exc}") from None
    finally:
        os.close(filter_fd)
    os.close(info_w)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else b""
        if line != b"ready\n":
            _kill_group(proc)
            stderr_file.seek(0)
            raise _NotStarted(f"the empty sandbox: {stderr_file.read(2000).decode(errors='replace').strip()}")
        init_pid = json.loads(os.read(info_r, 1 << 16))["child-pid"]
    finally:
        os.close(info_r)
    read_fd, write_fd = os.pipe()
    request = {"placeholder_pid": init_pid, "uid": uid, "cwd": bwrap.HOME,
               "env": env, "rlimits": limits.rlimits(),
               "runner_args": _runner_args(bwrap.SUBMISSION, limits, forkserver.CONTROL_FD)}
    sandbox.pid = init_pid  # the sandbox's init: measurements cover its whole pid namespace
    try:
        server.spawn(request, write_fd, stderr_file.fileno(), control.fileno())
    except (OSError, RuntimeError, ValueError) as exc:
        os.close(read_fd)
        _kill_group(proc)
        raise _NotStarted(f"the fork server: {exc}") from None
    finally:
        os.close(write_fd)
    reader = _Drain(read_fd, limits.notebook_bytes)
    reader.join(limits.notebook_seconds)  # the runner and its kernel are done when the pipe closes
    error = None
    if reader.is_alive():
        error = f"the notebook ran past its time budget of {limits.notebook_seconds} s and was stopped"
    proc.stdin.close()  # the placeholder ends, and with it every process that entered the sandbox
    _kill_group(proc)
    proc.stdout.close()
    return reader.result(error, stderr_file)


class _NotStarted(Exception):
    """The warm start failed before any of the submission ran."""


class _Drain(threading.Thread):
    """Reads the executed notebook off the runner's pipe, keeping at most ``cap`` bytes."""

    def __init__(self, read_fd: int, cap: int):
        super().__init__(daemon=True)
        self.read_fd, self.cap, self.size, self.chunks = read_fd, cap, 0, []
        self.start()

    def run(self) -> None:
        with os.fdopen(self.read_fd, "rb") as pipe:
            while chunk := pipe.read(1 << 20):
                self.size += len(chunk)
                if self.size <= self.cap:
                    self.chunks.append(chunk)

    def result(self, error: str | None, stderr_file) -> tuple[bytes, str | None, str]:
        """(notebook bytes, error, the sandbox's stderr) once the runner is gone."""
        self.join(10)
        stderr_file.seek(0)
        log = stderr_file.read(20_000).decode(errors="replace")
        stderr_file.close()
        if self.size > self.cap and not error:
            error = f"the executed notebook is larger than {self.cap // 2**20} MiB"
        return b"".join(self.chunks), error, log


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def _read_result(raw: bytes, submitted: NotebookNode, limits: Limits) -> tuple[NotebookNode | None, str | None]:
    """Parse the sandbox's notebook; it must have the cells that went in, in order."""
    if not raw:
        return None, "the sandbox returned no notebook (the run was killed or crashed)"
    try:
        executed = nbformat.reads(raw.decode("utf-8", errors="replace"), as_version=4)
    except Exception as exc:  # any parse failure is the sandbox's, reported the same way
        return None, f"the sandbox returned an unreadable notebook ({type(exc).__name__})"
    ids = [c.get("id") for c in submitted.cells]
    if [c.get("id") for c in executed.cells] != ids:
        return None, "the notebook's cells changed while it ran"
    return executed, None
