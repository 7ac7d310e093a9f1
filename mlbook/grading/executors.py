"""Step 2 of grading: run prepared notebooks in sandboxes, here or on a cluster.

An executor takes ``Task``s (plain data: the notebook, the lab's source notebook text, the
limits) and yields ``(task, SandboxResult)`` as each finishes, in completion order. Executors
never touch the course folder or the gradebook; recording stays with the caller (one writer).
- ``LocalExecutor(workers)``: threads in this process, each driving one sandbox at a time (the
  notebooks run in their own processes, so threads are enough); every sandbox has a user of its own.
  ``workers`` fixes how many run at once; without it ``admission`` decides (one per core, and
  more while cores sit idle).
- ``DaskExecutor(address)``: an existing Dask distributed cluster; each worker needs only this
  project installed (and bubblewrap). The judge runs on the worker, beside its sandbox.
Both are ``Executor``s; ``executor_for`` picks one from the grading options.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Protocol

import nbformat

from mlbook.sandbox.limits import Limits
from mlbook.judge.plan import LabPlan, plan_from_text
from mlbook.sandbox.notebook import SandboxResult, execute_sandboxed
from mlbook.grading.admission import Admission


@dataclass
class Task:
    lab: str
    student: str
    key: str
    notebook_json: str
    source_json: str  # the lab's source notebook: the judge's trusted cell plans come from it
    limits: Limits
    sandboxed: bool = True


ATTEMPTS = 2  # runs of a submission whose check failed for the grader's own reason


def grade_task(task: Task) -> SandboxResult:
    """Execute one task (the unit of work on any executor).

    A verdict the judge marks ``internal`` (the grader's own failure) is never the student's:
    the submission runs again in a fresh sandbox, and if the grader fails again the result is
    an error with that reason, which a TA sees, instead of a lower score."""
    plan: LabPlan = plan_from_text(task.lab, task.source_json)
    for _ in range(ATTEMPTS):
        result = execute_sandboxed(nbformat.reads(task.notebook_json, as_version=4), plan, task.limits,
                                   sandboxed=task.sandboxed)
        internal = [v.message for v in result.verdicts.values() if v.internal]
        if not internal or result.error:
            return result
    result.error = (f"the grader failed to check this notebook, {ATTEMPTS} times (not the student's fault; "
                    f"grade again, or report it): {internal[0]}")[:500]
    return result


class Executor(Protocol):
    """Runs tasks in sandboxes; what the batch needs of any executor."""

    peak: int  # the most sandboxes that ran at once on this machine (0 where it cannot tell)

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, SandboxResult]]:
        """``(task, result)`` as each finishes, drawing ``tasks`` as workers free up."""
        ...

    def close(self) -> None:
        """Let go of what the executor holds (a cluster's connection)."""
        ...


def executor_for(workers: int | None, scheduler: str | None) -> Executor:
    """A Dask cluster's executor when a scheduler address is given, else sandboxes here."""
    return DaskExecutor(scheduler) if scheduler else LocalExecutor(workers)


class LocalExecutor:
    """Sandboxes on this machine, as many at once as ``admission`` allows.

    Args:
        workers: run exactly this many at once; None: one per core, plus more while cores are idle.
        run: the unit of work (``grade_task``).
    """

    def __init__(self, workers: int | None = None, run: Callable[[Task], SandboxResult] = grade_task):
        self.admission = Admission.fixed(workers) if workers else Admission.adaptive()
        self.run_one = run
        self.peak = 0  # the most sandboxes that ran at once

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, SandboxResult]]:
        """Results as they finish. ``tasks`` is drawn lazily (preparing a task is work too), and a
        freed worker gets its next task before the finished one is handed back to be recorded."""
        tasks = iter(tasks)
        admission = self.admission
        if admission.cap == 1:
            for task in tasks:
                self.peak = 1
                yield task, self.run_one(task)
            return
        with ThreadPoolExecutor(admission.cap, thread_name_prefix="sandbox") as pool:
            pending: dict = {}
            drawn_all = False

            def top_up() -> None:
                nonlocal drawn_all
                while not drawn_all and admission.may_start(len(pending)):
                    if (task := next(tasks, None)) is None:
                        drawn_all = True
                    else:
                        pending[pool.submit(self.run_one, task)] = task
                        self.peak = max(self.peak, len(pending))

            top_up()
            while pending:
                # while the batch may still grow, wake up every window to look at the cores
                done, _ = wait(pending, timeout=admission.window if admission.grows and not drawn_all else None,
                               return_when=FIRST_COMPLETED)
                finished = [(pending.pop(future), future) for future in done]
                top_up()
                for task, future in finished:
                    yield task, future.result()

    def close(self) -> None:
        """Nothing outlives ``run`` here (its pool closes with it)."""


class DaskExecutor:
    """Sandboxes on the workers of a running Dask cluster at ``address``."""

    def __init__(self, address: str):
        from distributed import Client

        self.client = Client(address, timeout="30s")
        self.peak = 0  # the cluster's workers are other machines': not counted here

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, SandboxResult]]:
        from distributed import as_completed

        tasks = list(tasks)
        futures = {self.client.submit(grade_task, t, pure=False, key=f"mlbook-{t.lab}-{t.student}-{t.key[:12]}"): t
                   for t in tasks}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        self.client.close()
