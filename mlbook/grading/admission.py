"""When one more sandbox may start: keep every core busy without crowding one.

A notebook does not hold its core all the time: it waits for its kernel to start, for the
judge's round trips, for a ``time.sleep`` or I/O of its own. With one sandbox per core those
waits are idle cores. So by default the local executor starts one sandbox per core
unconditionally (the *floor*) and then one more whenever the cores it may use were idle for at
least half a core over the last ``WINDOW`` seconds, up to a *cap* of four per core, and only
while ``MIN_FREE_BYTES`` of memory are available. A CPU-bound class thus stays close to one
sandbox per core (extras start only in the short waits between its cells); a class that waits
fills its waits. Cores are shared only when waiting notebooks wake up together, and no sandbox
starts while they are busy.

``--workers N`` fixes the count (floor = cap = N) and never reads the meter.
The readings come from /proc/stat and /proc/meminfo; where they cannot be read (not Linux),
no extra sandbox starts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WINDOW = 0.5  # seconds of measured idleness behind each extra admission
IDLE_CORES = 0.5  # idle cores over a window that admit one more sandbox
PER_CORE_CAP = 4  # sandboxes per core at the most
MIN_FREE_BYTES = 2 << 30  # memory available (MemAvailable) that an extra sandbox needs


def usable_cpus() -> set[int]:
    """The cores this process may run on (all of them where the OS does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return os.sched_getaffinity(0)
    return set(range(os.cpu_count() or 1))


class CpuMeter:
    """Idle cores among those this process may run on, between two readings of /proc/stat."""

    def __init__(self, cpus: set[int] | None = None, stat: Path = Path("/proc/stat")):
        self.names = {f"cpu{c}" for c in (cpus if cpus is not None else usable_cpus())}
        self.stat = stat
        self._last = self._read()

    def _read(self) -> tuple[int, int] | None:
        """(idle jiffies, all jiffies) summed over our cores, or None where unreadable."""
        try:
            lines = self.stat.read_text().splitlines()
        except OSError:
            return None
        idle = total = 0
        for line in lines:
            fields = line.split()
            if fields and fields[0] in self.names:
                user, nice, system, idle_, iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
                idle += idle_ + iowait
                total += user + nice + system + idle_ + iowait + irq + softirq + steal
        return (idle, total) if total else None

    def reset(self) -> None:
        """Start a new measuring interval now."""
        self._last = self._read()

    def idle_cores(self) -> float | None:
        """Idle cores on average since the last reading (0 .. number of cores); starts a new interval."""
        before, self._last = self._last, self._read()
        if before is None or self._last is None or self._last[1] <= before[1]:
            return None
        return len(self.names) * (self._last[0] - before[0]) / (self._last[1] - before[1])


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable in bytes, or None where unreadable."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class Admission:
    """Decides, each time the executor asks, whether one more sandbox may start.

    Args:
        floor: sandboxes that may always run (one per core by default).
        cap: sandboxes at the most.
        meter: the idle-core reading (None: never more than ``floor``).
        window: seconds of idleness measured after the last start before another extra one.
        memory: bytes available now (None when unknown: no extra start).
    """

    def __init__(self, floor: int, cap: int, meter: CpuMeter | None = None, window: float = WINDOW,
                 memory=available_memory, clock=time.monotonic):
        self.floor, self.cap = max(1, floor), max(1, floor, cap)
        self.meter, self.window, self.memory, self.clock = meter, window, memory, clock
        self._since = clock()

    @classmethod
    def fixed(cls, workers: int) -> "Admission":
        return cls(workers, workers)

    @classmethod
    def adaptive(cls, cores: int | None = None) -> "Admission":
        cores = cores or len(usable_cpus())
        return cls(cores, PER_CORE_CAP * cores, CpuMeter())

    @property
    def grows(self) -> bool:
        """Whether an idle core can ever admit a sandbox beyond the floor."""
        return self.meter is not None and self.cap > self.floor

    def may_start(self, running: int) -> bool:
        """Whether a sandbox may start now, with ``running`` already running."""
        if running < self.floor:
            return self._started()
        if not self.grows or running >= self.cap or self.clock() - self._since < self.window:
            return False
        idle = self.meter.idle_cores()  # over the window since the last start or check
        self._since = self.clock()
        if idle is None or idle < IDLE_CORES:
            return False
        free = self.memory()
        if free is None or free < MIN_FREE_BYTES:
            return False
        return self._started()

    def _started(self) -> bool:
        self._since = self.clock()
        if self.meter is not None:
            self.meter.reset()  # the next window measures the machine with this sandbox in it
        return True
