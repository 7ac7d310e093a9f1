"""The trusted side of every graded test: verdicts decided where student code never runs.

For one submission the judge listens on a unix socket bound into the sandbox, and holds the
other end of a private channel to the runner (the process that drives the kernel; the kernel
cannot reach that channel or inspect the runner). The runner reports each cell as it starts
and ends. While a test cell runs, the judge admits exactly one connection from the sandbox,
and runs that cell's trusted source (``plan``: visible tests and hidden block, taken from the
lab's source notebook, never from the submission) here, in the grader's process. Every other
connection (while an answer cell runs, a second one for the same cell, one naming another
cell) is closed unread. Hidden checks draw fresh inputs, call the student's functions through
the socket (``remote``), compare the plain-data results with the grader's own reference and
diagnose the misconception. The verdict stays here; the kernel is told only pass/fail and the
student-facing message.

Whatever answers on the admitted connection answers for the student's kernel: the checks ask
questions only a correct implementation answers (fresh inputs, test objects lent from the
grader, never built in the kernel), so it does not matter which code in the kernel answers.

Bounds, per submission: one session at a time (all of them in one thread), a hello of at most
``HELLO_BYTES`` read within ``HELLO_SECONDS``, answers of at most ``remote.MAX_REPLY_BYTES``,
at most 100 refused connections a second (``REFUSAL_PAUSE``).

A cell that never connected, ended early (kernel interrupted or dead) or got malformed answers
has no passing verdict, so it scores 0. A check that fails for the grader's own reason (a bug
in a check, an internal error of the interpreter) gives an ``internal`` verdict: the
submission is graded again, and recorded as an error with that reason if it happens again,
never as the student's lost points.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mlbook_kernel import wire

from mlbook.judge.plan import LabPlan
from mlbook.judge.remote import RemoteError, RemoteSession

HELLO_BYTES = 64 * 1024
HELLO_SECONDS = 10.0
CONTROL_LINE_BYTES = 256
REFUSAL_PAUSE = 0.01  # seconds after each refused connection: at most 100 a second per submission
GRADER_ERROR = "[grader error]"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str = ""
    internal: bool = False  # the grader's own failure, not the student's


class Judge:
    """Serve test-cell sessions for one submission on ``socket_path``.

    Args:
        plan: the lab's trusted cell plans.
        socket_path: where to listen (bound into the sandbox).
        call_timeout: seconds the judge waits for any one answer from the kernel.
        control: the grader's end of the runner's private channel (lines of JSON:
            ``{"start": i}`` and ``{"end": i}`` for the notebook's cell ``i``).
        test_cells: cell index in the notebook the runner runs -> test cell grade id.
        memory_root: called once per session, the host pid of the sandbox (measurements).
    """

    def __init__(self, plan: LabPlan, socket_path: Path, call_timeout: float, control: socket.socket,
                 test_cells: dict[int, str], memory_root=lambda: None):
        self.plan, self.path, self.call_timeout = plan, Path(socket_path), call_timeout
        self.control, self.test_cells, self.memory_root = control, dict(test_cells), memory_root
        self.verdicts: dict[str, Verdict] = {}
        self.seconds = 0.0  # time spent judging, all cells
        self.refused = 0  # connections closed unread
        self._running: int | None = None  # the cell the runner reports running
        self._claimed: set[str] = set()
        self._control_buffer = b""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None

    def __enter__(self) -> "Judge":
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self.path.chmod(0o666)  # the sandbox user must be able to connect
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._serve, name="judge", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, wait: float = 5.0) -> None:
        """Stop serving; give a running session ``wait`` seconds to see its kernel gone."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.control.close()

    # --- one loop: the runner's reports first, then connections -------------------------------

    def _serve(self) -> None:
        control_open = True
        while not self._stop.is_set():
            watched = [self._listener] + ([self.control] if control_open else [])
            try:
                ready, _, _ = select.select(watched, [], [], 0.2)
            except (OSError, ValueError):
                return
            if control_open and self.control in ready:
                control_open = self._read_control()
            elif self._listener in ready:
                if control_open and select.select([self.control], [], [], 0)[0]:
                    continue  # a report sent before this connection is read first
                try:
                    conn, _ = self._listener.accept()
                except OSError:
                    return
                self._admit(conn)

    def _read_control(self) -> bool:
        """Apply the runner's reports; False once the runner has gone."""
        try:
            data = self.control.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._running = None
            return False
        self._control_buffer += data
        *lines, self._control_buffer = self._control_buffer.split(b"\n")
        if len(self._control_buffer) > CONTROL_LINE_BYTES:
            self._running = None
            return False
        for line in lines:
            try:
                report = json.loads(line)
                if "start" in report:
                    self._running = int(report["start"])
                elif "end" in report and self._running == int(report["end"]):
                    self._running = None
            except (ValueError, TypeError, AttributeError):
                self._running = None
        return True

    def _admit(self, conn: socket.socket) -> None:
        gid = self.test_cells.get(self._running) if self._running is not None else None
        if gid is None or gid in self._claimed or gid not in self.plan.cells:
            self.refused += 1
            conn.close()  # not while a test cell runs, or its one session was already admitted
            time.sleep(REFUSAL_PAUSE)  # a flood of connections costs the grader no more than this
            return
        self._claimed.add(gid)
        self.verdicts[gid] = Verdict(False, "the grader's check of this cell did not finish")
        try:
            self._session(conn, gid)
        finally:
            conn.close()

    def _session(self, conn: socket.socket, gid: str) -> None:
        try:
            conn.settimeout(HELLO_SECONDS)
            header, _ = wire.recv(conn, HELLO_BYTES)
            if header.get("op") != "hello" or header.get("lab") != self.plan.lab or header.get("cell") != gid:
                _send_quietly(conn, {"op": "done", "passed": False, "message": f"this connection is for {gid}"})
                return
            conn.settimeout(self.call_timeout)
            began = time.perf_counter()
            verdict = judge_cell(self.plan, gid, RemoteSession(conn, self.memory_root()))
            self.verdicts[gid] = verdict
            self.seconds += time.perf_counter() - began
            wire.send(conn, {"op": "done", "passed": verdict.passed, "message": verdict.message})
        except (EOFError, OSError, wire.WireError, ValueError):
            pass  # the kernel went away or spoke nonsense: the cell keeps its failing verdict


def judge_cell(plan: LabPlan, gid: str, remote: RemoteSession) -> Verdict:
    """The verdict on test cell ``gid``: its trusted source run here, the kernel reached through ``remote``.

    Raises:
        EOFError, OSError, WireError, socket.timeout: the kernel went away or spoke nonsense (no verdict).
    """
    cell = plan.cells[gid]
    if not cell.replayed:
        return Verdict(True)  # decided by its covering cells (plan.NOT_REPLAYED)
    with remote:
        try:
            exec(cell.code, plan.fresh_namespace(remote.lookup))
        except AssertionError as exc:  # Misconception: the student-facing message
            return Verdict(False, str(exc) or f"{gid} failed")
        except wire.UnsendableError as exc:
            return Verdict(False, f"{GRADER_ERROR} {gid}: {exc}", internal=True)
        except (EOFError, OSError, wire.WireError, socket.timeout):
            raise
        except NameError as exc:
            return Verdict(False, f"{exc}: did an earlier cell fail or get skipped?")
        except RemoteError as exc:
            return Verdict(False, f"your code raised {exc.type_name}: {exc.message}")
        except Exception as exc:  # the check itself failed: the grader's error, never the student's
            return Verdict(False, f"{GRADER_ERROR} {gid}: {type(exc).__name__}: {exc}"[:500], internal=True)
    return Verdict(True)


def _send_quietly(conn: socket.socket, header: dict) -> None:
    try:
        wire.send(conn, header)
    except OSError:
        pass
