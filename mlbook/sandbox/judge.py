"""The trusted side of every graded test: verdicts decided where student code never runs.

For one submission the judge listens on a unix socket bound into the sandbox. When a test cell
finishes in the kernel, ``mlbook_probe.probe_cell`` connects and names the cell; the judge then
runs that cell's trusted source (``plan``: visible tests and hidden block, taken from the lab's
source notebook, never from the submission) here, in the grader's process. Hidden checks draw
fresh inputs, call the student's functions through the socket (``remote``), compare the
plain-data results with the grader's own reference and diagnose the misconception. The verdict
stays here; the kernel is told only pass/fail and the student-facing message.

A cell that never connected, ended early (kernel interrupted or dead) or got malformed answers
has no passing verdict, so it scores 0.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mlbook_probe import wire

from .plan import LabPlan
from .remote import RemoteError, RemoteSession

MAX_SESSIONS = 256
GRADER_ERROR = "[grader error]"  # a check that cannot run outside the kernel: the lab's bug, not the student's


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str = ""


class Judge:
    """Serve test-cell sessions for one submission on ``socket_path``.

    Args:
        plan: the lab's trusted cell plans.
        socket_path: where to listen (bound into the sandbox).
        call_timeout: seconds the judge waits for any one answer from the kernel.
    """

    def __init__(self, plan: LabPlan, socket_path: Path, call_timeout: float):
        self.plan, self.path, self.call_timeout = plan, Path(socket_path), call_timeout
        self.verdicts: dict[str, Verdict] = {}
        self.seconds = 0.0  # time spent judging, all cells
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None

    def __enter__(self) -> "Judge":
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self.path.chmod(0o666)  # the sandbox user must be able to connect
        self._listener.listen(8)
        threading.Thread(target=self._accept, name="judge-accept", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, wait: float = 5.0) -> None:
        """Stop accepting; give running sessions ``wait`` seconds to see their kernel gone."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for thread in list(self._threads):
            thread.join(wait)

    def _accept(self) -> None:
        while self._listener is not None:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if len(self._threads) >= MAX_SESSIONS:
                conn.close()
                continue
            thread = threading.Thread(target=self._session, args=(conn,), name="judge-session", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _session(self, conn: socket.socket) -> None:
        conn.settimeout(self.call_timeout)
        try:
            header, _ = wire.recv(conn)
            gid = self._cell_name(header)
            with self._lock:
                if gid in self.verdicts:
                    raise _Refused(f"{gid} was already judged in this notebook")
                self.verdicts[gid] = Verdict(False, "the grader's check of this cell did not finish")
            began = time.perf_counter()
            verdict = self._judge_cell(gid, RemoteSession(conn))
            self.verdicts[gid] = verdict
            self.seconds += time.perf_counter() - began
            wire.send(conn, {"op": "done", "passed": verdict.passed, "message": verdict.message})
        except _Refused as exc:
            _send_quietly(conn, {"op": "done", "passed": False, "message": str(exc)})
        except (EOFError, OSError, wire.WireError, ValueError):
            pass  # the kernel went away or spoke nonsense: the cell keeps its failing verdict
        finally:
            conn.close()

    def _cell_name(self, header: dict) -> str:
        gid = header.get("cell") if header.get("op") == "hello" else None
        if header.get("lab") != self.plan.lab or gid not in self.plan.cells:
            raise _Refused(f"unknown test cell {gid!r} for {self.plan.lab}")
        return gid

    def _judge_cell(self, gid: str, remote: RemoteSession) -> Verdict:
        cell = self.plan.cells[gid]
        if not cell.replayed:
            return Verdict(True)  # decided by its covering cells (plan.NOT_REPLAYED)
        with remote:
            try:
                namespace = self.plan.fresh_namespace(remote.lookup)
                exec(compile(cell.source, f"<{gid}>", "exec"), namespace)
            except AssertionError as exc:  # Misconception: the student-facing message
                return Verdict(False, str(exc) or f"{gid} failed")
            except wire.UnsendableError as exc:
                return Verdict(False, f"{GRADER_ERROR} {gid}: {exc}")
            except (EOFError, OSError, wire.WireError, socket.timeout):
                raise
            except NameError as exc:
                return Verdict(False, f"{exc}: did an earlier cell fail or get skipped?")
            except RemoteError as exc:
                return Verdict(False, f"your code raised {exc.type_name}: {exc.message}")
            except Exception as exc:  # the student's results could not even be examined
                return Verdict(False, f"{gid}: your results could not be checked ({type(exc).__name__}: {exc})")
        return Verdict(True)


class _Refused(Exception):
    pass


def _send_quietly(conn: socket.socket, header: dict) -> None:
    try:
        wire.send(conn, header)
    except OSError:
        pass
