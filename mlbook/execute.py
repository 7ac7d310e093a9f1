"""Execute a notebook top to bottom in a real Jupyter kernel and report what failed.

Used by ``mlbook run`` (an instructor's "does my reference solution run, and how fast") and
by ``mlbook validate``. Errors do not stop execution, like nbgrader's autograder.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from .notebooks import grade_id
from .preprocessors import strip_ansi


@dataclass
class Execution:
    notebook: NotebookNode
    seconds: float
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # (cell index, grade_id, message)


def execute(nb: NotebookNode, workdir: Path | None = None, timeout: int = 300, env: dict | None = None) -> Execution:
    """Run every cell of ``nb`` (a copy is executed) in ``workdir`` (a temporary folder by default)."""
    import copy

    from nbclient import NotebookClient

    nb = copy.deepcopy(nb)
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="mlbook-run-")) if own_dir else workdir
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, shutdown_kernel="immediate",
                                extra_arguments=["--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=ERROR"],
                                resources={"metadata": {"path": str(workdir)}})
        start = time.perf_counter()
        client.execute(**({"env": env} if env else {}))  # env reaches the kernel process
        seconds = time.perf_counter() - start
    finally:
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    errors = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append((index, grade_id(cell) or "", strip_ansi(f"{output['ename']}: {output['evalue']}")))
            elif output.get("output_type") == "stream" and output.get("name") == "stderr":
                errors.append((index, grade_id(cell) or "", "stderr: " + strip_ansi(output["text"]).strip()[:200]))
    return Execution(nb, seconds, errors)
