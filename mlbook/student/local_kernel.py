"""Execute a notebook top to bottom in a real Jupyter kernel and report what failed.

Used by ``mlbook validate`` (a student's check before handing in: the visible tests, in the
student's own kernel, no sandbox). ``mlbook run`` grades the reference through the sandbox and
the judge instead (``mlbook.sandbox.notebook``). Errors do not stop execution, like nbgrader's
autograder.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from mlbook.authoring.notebooks import grade_id
from mlbook.outputs.preprocessors import cell_failure


@dataclass
class Execution:
    notebook: NotebookNode
    seconds: float
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # (cell index, grade_id, message)


def execute(nb: NotebookNode, workdir: Path | None = None, timeout: int = 300, env: dict | None = None) -> Execution:
    """Run every cell of ``nb`` (a copy is executed) in ``workdir`` (a temporary folder by default)."""
    import copy

    from mlbook_kernel.polling import KERNEL_ARGS, SlicedPollClient

    nb = copy.deepcopy(nb)
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="mlbook-run-")) if own_dir else workdir
    try:
        client = SlicedPollClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                  shutdown_kernel="immediate", extra_arguments=KERNEL_ARGS,
                                  resources={"metadata": {"path": str(workdir)}})
        start = time.perf_counter()
        client.execute(**({"env": env} if env else {}))  # env reaches the kernel process
        seconds = time.perf_counter() - start
    finally:
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    errors = [(index, grade_id(cell) or "", message) for index, cell in enumerate(nb.cells)
              if (message := cell_failure(cell)) is not None]
    return Execution(nb, seconds, errors)
