"""Execute one notebook inside the grading sandbox and hand the result back on a file descriptor.

    python -m mlbook_kernel.runner IN.ipynb --out-fd 3 --control-fd 4 --cell-timeout 120 ...

Runs every cell in a fresh kernel (errors do not stop the run, as in nbgrader), caps what each
cell may print (by bytes and by lines, error messages and tracebacks included), and writes the
executed notebook as JSON to ``--out-fd``. Before and after each cell it reports
``{"start": i}`` / ``{"end": i}`` on ``--control-fd``, the judge's private channel: the judge
admits a test cell's session only while the runner reports that cell running. The kernel never
holds that channel (a forked kernel closes it, a launched one does not inherit it), and the
runner makes itself undumpable, so the kernel, though it runs as the same user, can neither
read the runner's memory nor take its descriptors.
A cell past ``--cell-timeout`` is interrupted and the notebook goes on; a kernel still busy as long
again after the interrupt ignored it, and the run stops there (nbclient alone would interrupt it
again and again until the grader's whole-notebook budget ran out).
Nothing here is trusted by the grader: the outputs it returns only ever lower a score.
If the kernel dies, the cells run so far are returned and ``metadata.mlbook_sandbox.error`` says
where it died.
"""

from __future__ import annotations

import time

_STARTED = time.time()  # before the heavy imports: the benchmark's "start-up" ends at kernel start

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402

# jsonschema (imported by nbformat) builds an IRI grammar with lark when rfc3987_syntax is
# installed: 2.7 s per process start, for "iri" format checks no notebook schema uses.
# Marking the module absent skips those two checks and nothing else.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]

import nbformat  # noqa: E402
from nbclient.exceptions import CellTimeoutError, DeadKernelError  # noqa: E402

from mlbook_kernel.polling import SANDBOX_KERNEL_ARGS, SlicedPollClient  # noqa: E402


class CappedClient(SlicedPollClient):
    """A NotebookClient that stops recording a cell's output past a byte or line budget, gives an
    interrupted cell one more timeout before it gives up on the kernel (and, like every client here,
    waits on its kernel's channels in short polls)."""

    max_cell_bytes = 2_000_000
    max_cell_lines = 5_000

    async def _async_handle_timeout(self, timeout, cell=None):
        """The first timeout of a cell interrupts the kernel (nbclient's own handling); the next one,
        with no reply a further ``timeout`` seconds on, raises ``CellTimeoutError``: the kernel ignored
        the interrupt. (An earlier call, when a stray shell message shortened nbclient's wait, only
        waits a little.)"""
        interrupted = self.__dict__.setdefault("_interrupted", {})
        now = time.monotonic()
        if id(cell) not in interrupted:
            interrupted[id(cell)] = now
            return await super()._async_handle_timeout(timeout, cell)
        if now - interrupted[id(cell)] >= timeout / 2:
            raise CellTimeoutError.error_from_timeout_and_cell("Cell ignored the interrupt", timeout, cell)
        await asyncio.sleep(min(1.0, timeout / 2))
        return None

    def output(self, outs, msg, display_id, cell_index):
        used = self._used.setdefault(cell_index, [0, 0])
        content = msg.get("content", {})
        if used[0] > self.max_cell_bytes or used[1] > self.max_cell_lines:
            if msg.get("msg_type") == "error":
                outs.append(_cut_error(content))
            return None
        text = content.get("text") or ""
        data = content.get("data") or {}
        traceback = content.get("traceback") or []
        size = (len(text) + sum(len(v) if isinstance(v, str) else len(str(v)) for v in data.values())
                + len(str(content.get("evalue") or "")) + sum(len(str(line)) for line in traceback))
        used[0] += size
        used[1] += text.count("\n") + len(traceback)
        if used[0] > self.max_cell_bytes or used[1] > self.max_cell_lines:
            if msg.get("msg_type") == "error":
                outs.append(_cut_error(content))
            note = nbformat.v4.new_output("stream", name="stdout", text=(  # stdout: a note never costs points
                f"[output truncated by the grader: more than {self.max_cell_bytes:,} characters or "
                f"{self.max_cell_lines:,} lines]\n"))
            outs.append(note)
            return None
        return super().output(outs, msg, display_id, cell_index)


def _cut_error(content: dict):
    """An error output past the cap: kept (it fails the cell), cut to a few kilobytes."""
    traceback = [str(line)[:2000] for line in list(content.get("traceback") or [])[-5:]]
    return nbformat.v4.new_output("error", ename=str(content.get("ename", "Error"))[:200],
                                  evalue=str(content.get("evalue", ""))[:2000], traceback=traceback)


class _Reports:
    """The runner's end of the judge's channel; a judge that has gone is not an error here."""

    def __init__(self, fd: int):
        os.set_inheritable(fd, False)  # a launched kernel must not get it
        self.sock = socket.socket(fileno=fd)

    def say(self, report: dict) -> None:
        try:
            self.sock.sendall(json.dumps(report).encode() + b"\n")
        except OSError:
            pass


def _undumpable() -> None:
    """Keep processes of the same user (the kernel) out of this one's memory and descriptors."""
    import ctypes

    PR_SET_DUMPABLE = 4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot make the runner undumpable")


def main(argv: list[str] | None = None, fork_kernel: bool = False) -> int:
    """Run the notebook; with ``fork_kernel`` (a warm fork from ``mlbook_kernel.forkserver``) the
    kernel is a fork of this process (``mlbook_kernel.forked_kernel``) instead of a new one."""
    manager_class = None
    if fork_kernel:
        from mlbook_kernel.forked_kernel import ForkedKernelManager, KernelSeed

        ForkedKernelManager.seed = KernelSeed()  # first, while this process has one thread
        manager_class = ForkedKernelManager
    _undumpable()  # after the seed forked: the kernel is dumpable like any process of the user
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook")
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--cell-timeout", type=int, default=120)
    parser.add_argument("--max-cell-bytes", type=int, default=2_000_000)
    parser.add_argument("--max-cell-lines", type=int, default=5_000)
    parser.add_argument("--control-fd", type=int, required=True)
    args = parser.parse_args(argv)
    out = os.fdopen(args.out_fd, "w")
    control = _Reports(args.control_fd)

    nb = nbformat.read(args.notebook, as_version=4)
    client = CappedClient(nb, timeout=args.cell_timeout, interrupt_on_timeout=True, allow_errors=True,
                          kernel_name="python3", shutdown_kernel="immediate", extra_arguments=SANDBOX_KERNEL_ARGS,
                          resources={"metadata": {"path": os.getcwd()}},
                          **({"kernel_manager_class": manager_class} if manager_class else {}))
    client.max_cell_bytes, client.max_cell_lines, client._used = args.max_cell_bytes, args.max_cell_lines, {}
    error = None
    timings = {"process_start": time.time() if fork_kernel else _STARTED, "cells": []}
    try:
        timings["kernel_start"] = time.time()
        with client.setup_kernel():
            timings["kernel_ready"] = time.time()
            for index, cell in enumerate(nb.cells):
                began = time.time()
                control.say({"start": index})
                try:
                    client.execute_cell(cell, index)
                    control.say({"end": index})
                    timings["cells"].append(round(time.time() - began, 4))
                except CellTimeoutError:
                    error = f"cell {index} ran past {args.cell_timeout} s and ignored the interrupt"
                    break
                except DeadKernelError:
                    error = f"the kernel died while running cell {index}"
                    break
    except DeadKernelError:
        error = "the kernel died before the first cell ran"
    except RuntimeError as exc:  # the kernel failed to start or answer
        error = f"the kernel did not start: {exc}"
    timings["finished"] = time.time()
    nb.metadata["mlbook_sandbox"] = {"error": error, "timings": timings}
    out.write(nbformat.writes(nb))
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
