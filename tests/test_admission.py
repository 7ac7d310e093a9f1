"""How many sandboxes run at once: one per core always, more only while cores are measured idle.

The policy is driven by a scripted meter and clock (our own component, not nbgrader's or
Jupyter's); the executor runs real threads; the meter reads the real /proc/stat.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from mlbook.grading.admission import IDLE_CORES, MIN_FREE_BYTES, Admission, CpuMeter, available_memory
from mlbook.grading.executors import LocalExecutor


class ScriptedMeter:
    """Reports ``idle`` cores for every interval."""

    def __init__(self, idle: float | None):
        self.idle = idle

    def reset(self) -> None:
        pass

    def idle_cores(self) -> float | None:
        return self.idle


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def policy(idle, floor=2, cap=8, memory=lambda: 8 * MIN_FREE_BYTES):
    clock = Clock()
    return Admission(floor, cap, ScriptedMeter(idle), window=0.5, memory=memory, clock=clock), clock


def admitted_over(admission: Admission, clock: Clock, seconds: float) -> int:
    """Sandboxes running after asking every 0.1 s for ``seconds`` (none finishes)."""
    running, start = 0, clock.now
    for tick in range(round(seconds / 0.1)):
        clock.now = start + tick / 10
        while admission.may_start(running):
            running += 1
    return running


def test_the_floor_starts_at_once_whatever_the_cores_say():
    admission, clock = policy(idle=0.0, floor=3)
    assert [admission.may_start(n) for n in range(4)] == [True, True, True, False]


def test_busy_cores_never_admit_more_than_one_sandbox_per_core():
    admission, clock = policy(idle=IDLE_CORES / 2)
    assert admitted_over(admission, clock, 10) == 2


def test_idle_cores_admit_one_sandbox_per_window_up_to_the_cap():
    admission, clock = policy(idle=1.5)
    assert admitted_over(admission, clock, 1.0) == 2 + 1  # the floor at 0 s, one more at 0.5 s
    assert admitted_over(admission, clock, 10) == 8


def test_no_extra_sandbox_without_memory_to_spare_or_a_reading():
    low, clock = policy(idle=2.0, memory=lambda: MIN_FREE_BYTES // 2)
    assert admitted_over(low, clock, 5) == 2
    unknown, clock = policy(idle=None)
    assert admitted_over(unknown, clock, 5) == 2


def test_fixed_workers_ignore_idle_cores():
    admission = Admission.fixed(3)
    assert not admission.grows
    assert [admission.may_start(n) for n in range(5)] == [True, True, True, False, False]


def spin(seconds: float) -> None:
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        pass


def test_the_meter_reads_between_zero_and_all_cores_and_sees_a_busy_core():
    core = min(os.sched_getaffinity(0))
    meter = CpuMeter(cpus={core})
    time.sleep(0.2)
    quiet = meter.idle_cores()
    assert quiet is not None and 0.0 <= quiet <= 1.0

    spinner = threading.Thread(target=spin, args=(0.4,))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})  # the spinning thread inherits this one core
    try:
        meter.reset()
        spinner.start()
        spinner.join()
    finally:
        os.sched_setaffinity(0, before)
    busy = meter.idle_cores()
    assert busy is not None and busy < 0.5, f"core {core} was spun for 0.4 s but read {busy:.2f} idle"
    assert (available_memory() or 0) > 0


def test_the_executor_runs_beyond_the_floor_only_while_cores_are_idle():
    running, peak, lock = [0], [0], threading.Lock()

    def task(n):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)  # a notebook that waits
        with lock:
            running[0] -= 1
        return n

    def executed(idle):
        executor = LocalExecutor(run=task)
        executor.admission = Admission(2, 8, ScriptedMeter(idle), window=0.05, memory=lambda: 8 * MIN_FREE_BYTES)
        peak[0] = 0
        results = sorted(result for _, result in executor.run(range(24)))
        assert results == list(range(24)), "every task ran once and was handed back"
        return peak[0], executor.peak

    assert executed(idle=0.0) == (2, 2)
    waited, reported = executed(idle=2.0)
    assert waited == reported and 4 <= waited <= 8


@pytest.mark.parametrize("workers", [1, 3])
def test_fixed_workers_run_exactly_that_many(workers):
    executor = LocalExecutor(workers, run=lambda n: time.sleep(0.05) or n)
    assert sorted(r for _, r in executor.run(range(7))) == list(range(7))
    assert executor.peak == workers
