"""What one graded submission may use. Defaults fit a 2-core, 24 GiB laptop and the slowest lab.

Every limit is enforced by the kernel (rlimits, a size-capped tmpfs) or by the grader's own
clock, never by code running inside the sandbox.
"""

from __future__ import annotations

import resource
import signal
from dataclasses import dataclass, replace

GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class Limits:
    """Caps for one submission.

    Attributes:
        memory_bytes: address space of each process (RLIMIT_AS); torch alone maps ~1.5 GiB.
        cpu_seconds: CPU time of each process (RLIMIT_CPU).
        processes: processes and threads of the sandbox's user (RLIMIT_NPROC).
        open_files: file descriptors per process (RLIMIT_NOFILE).
        file_bytes: largest file a process may write (RLIMIT_FSIZE).
        scratch_bytes: size of the writable tmpfs (home, working folder and /tmp share it).
        cell_seconds: per-cell timeout; the cell is interrupted, the notebook goes on (a kernel
            still busy ``cell_seconds`` after the interrupt ignored it: the run stops there and
            the submission is an error).
        notebook_seconds: whole-notebook budget, on the grader's clock; past it everything in
            the sandbox is killed and the submission is an error.
        cell_output_bytes / cell_output_lines: what a cell may print before it is cut.
        notebook_bytes: largest executed notebook the grader accepts back.
        submission_bytes: largest submitted file, and largest submission folder in total, the
            grader reads (``mlbook.grading.intake``); a bigger one is refused.
    """

    memory_bytes: int = 6 * GiB
    cpu_seconds: int = 900
    processes: int = 512
    open_files: int = 1024
    file_bytes: int = 64 * MiB
    scratch_bytes: int = 256 * MiB
    cell_seconds: int = 120
    notebook_seconds: int = 600
    cell_output_bytes: int = 2_000_000
    cell_output_lines: int = 5_000
    notebook_bytes: int = 64 * MiB
    submission_bytes: int = 64 * MiB

    def with_(self, **changes) -> "Limits":
        return replace(self, **changes)

    def rlimits(self) -> list[tuple[int, int]]:
        """(resource, value) pairs, set as both soft and hard limit."""
        return [(resource.RLIMIT_AS, self.memory_bytes), (resource.RLIMIT_CPU, self.cpu_seconds),
                (resource.RLIMIT_NPROC, self.processes), (resource.RLIMIT_NOFILE, self.open_files),
                (resource.RLIMIT_FSIZE, self.file_bytes), (resource.RLIMIT_CORE, 0)]

    def apply_rlimits(self) -> None:
        """Set the rlimits on the calling process (a ``preexec_fn``): inherited by the sandbox.

        Also gives SIGHUP, SIGTERM and SIGCHLD their default action, as the fork server does for
        warm kernels: an ignored signal survives exec, so a grader started under ``nohup`` would
        otherwise hand its cold kernels a SIGHUP they ignore, and they would differ from warm ones.
        """
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        for which, value in self.rlimits():
            resource.setrlimit(which, (value, value))
