"""The kernel clients' sliced waits: they keep the caller's timeout, deliver replies, and are
the only way this project runs a notebook."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from queue import Empty

import nbformat
import pytest

from mlbook_kernel.polling import KERNEL_ARGS, POLL_SLICE
from mlbook_kernel.runner import CappedClient


@pytest.fixture(scope="module")
def client():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 41 + 1")])
    runner = CappedClient(nb, timeout=30, kernel_name="python3", extra_arguments=KERNEL_ARGS)
    runner._used = {}
    with runner.setup_kernel():
        _settle(runner)
        yield runner


def _settle(client) -> None:
    """Wait until the shell channel holds nothing from the kernel's start: on a loaded machine
    the start sends kernel_info requests again while the first goes unanswered, and their
    late replies would reach a test that expects silence. Replies come in order, so once a
    last request is answered every earlier one has been."""
    msg_id = client.kc.kernel_info()
    while _wait(client, 60)["parent_header"].get("msg_id") != msg_id:
        pass


def test_a_sliced_wait_lasts_the_whole_timeout_when_nothing_comes(client):
    began = time.monotonic()
    with pytest.raises(Empty):
        _wait(client, 4 * POLL_SLICE + 0.1)
    waited = time.monotonic() - began
    assert 4 * POLL_SLICE + 0.1 <= waited < 4 * POLL_SLICE + 0.1 + 2 * POLL_SLICE, waited


def test_a_reply_that_comes_after_several_slices_is_delivered(client):
    began = time.monotonic()
    msg_id = client.kc.execute("import time; time.sleep(1.2)")
    reply = _wait(client, 30)
    assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"
    assert time.monotonic() - began < 1.2 + 2, "the reply waited for the 30-s timeout"


def test_cells_run_through_the_client_as_usual(client):
    cell = client.nb.cells[0]
    client.execute_cell(cell, 0)
    assert cell.execution_count >= 1 and cell.outputs == []


def _wait(client, timeout):
    from jupyter_core.utils import run_sync

    return run_sync(client.kc.shell_channel.get_msg)(timeout=timeout)


def test_no_module_runs_a_notebook_with_a_plain_nbclient():
    """A plain nbclient client can wait out a whole cell timeout for a reply already sent (the
    stall the sliced polls fix): every client the project builds must be a sliced one."""
    root = Path(__file__).resolve().parent.parent
    plain = []
    for path in [*root.glob("mlbook/**/*.py"), *root.glob("mlbook_kernel/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "NotebookClient":
                plain.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not plain, f"a plain NotebookClient (use mlbook_kernel.polling.SlicedPollClient): {plain}"


@pytest.mark.parametrize("source", ["the sandbox's fork server", "mlbook run and validate", "nbgrader's Execute"])
def test_every_kernel_manager_hands_out_clients_that_wait_in_slices(source):
    from mlbook_kernel.polling import SlicedChannel, SlicedKernelClient, SlicedPollClient

    if source == "the sandbox's fork server":
        from mlbook_kernel.forked_kernel import ForkedKernelManager

        manager = ForkedKernelManager()
    elif source == "mlbook run and validate":
        client = SlicedPollClient(nbformat.v4.new_notebook())
        manager = client.kernel_manager_class(config=client.config)
    else:  # the course's own nbgrader_config.py, as nbgrader and its Validate button load it
        from nbgrader.preprocessors import Execute
        from traitlets.config.loader import PyFileConfigLoader

        root = Path(__file__).resolve().parent.parent
        execute = Execute(config=PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config())
        manager = execute.kernel_manager_class(config=execute.config)
    kc = manager.client()
    assert isinstance(kc, SlicedKernelClient), f"{source}: {type(kc).__name__}"
    assert kc.shell_channel_class is SlicedChannel and kc.iopub_channel_class is SlicedChannel


def test_mlbook_run_executes_every_cell_and_names_the_one_that_raised():
    from mlbook.student.local_kernel import execute

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 6 * 7\nprint(x)"),
                                         nbformat.v4.new_code_cell("raise ValueError('wrong')")])
    run = execute(nb, timeout=30)
    assert run.notebook.cells[0].outputs[0]["text"] == "42\n"
    assert [(index, "wrong" in message) for index, _, message in run.errors] == [(1, True)], run.errors


def _run_in_runner(tmp_path, sources: list[str], cell_timeout: int) -> tuple[nbformat.NotebookNode, float]:
    """The sandbox's runner (``python -m mlbook_kernel.runner``, unsandboxed) on a notebook of
    ``sources``: (the executed notebook, seconds). A runner still going after 60 s fails the test."""
    import os
    import socket
    import subprocess
    import sys

    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    out = tmp_path / "out.ipynb"
    control, runner_end = socket.socketpair()
    began = time.monotonic()
    with control, runner_end, out.open("w") as sink:
        subprocess.run([sys.executable, "-m", "mlbook_kernel.runner", str(path), "--out-fd", str(sink.fileno()),
                        "--control-fd", str(runner_end.fileno()), "--cell-timeout", str(cell_timeout)],
                       pass_fds=(sink.fileno(), runner_end.fileno()), timeout=60, check=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return nbformat.read(out, as_version=4), time.monotonic() - began

def test_an_interrupted_cell_fails_and_the_notebook_goes_on(tmp_path):
    nb, _ = _run_in_runner(tmp_path, ["while True:\n    pass", "print('after')"], cell_timeout=3)
    assert nb.metadata.mlbook_sandbox["error"] is None
    assert nb.cells[0].outputs[-1]["ename"] == "KeyboardInterrupt"
    assert "after" in nb.cells[1].outputs[0]["text"]


def test_a_kernel_that_ignores_the_interrupt_stops_the_run_one_timeout_later(tmp_path):
    """Not at the grader's whole-notebook budget: the run names the cell and stops."""
    ignoring = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    nb, seconds = _run_in_runner(tmp_path, ["x = 1", ignoring, "print('after')"], cell_timeout=3)
    assert nb.metadata.mlbook_sandbox["error"] == "cell 1 ran past 3 s and ignored the interrupt"
    assert not nb.cells[2].outputs
    assert 2 * 3 <= seconds < 2 * 3 + 20, seconds
