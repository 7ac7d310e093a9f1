"""The runner's kernel client: its sliced waits keep the caller's timeout and deliver replies."""

from __future__ import annotations

import time
from queue import Empty

import nbformat
import pytest

from mlbook_probe.runner import KERNEL_ARGS, POLL_SLICE, CappedClient


@pytest.fixture(scope="module")
def client():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 41 + 1")])
    runner = CappedClient(nb, timeout=30, kernel_name="python3", extra_arguments=KERNEL_ARGS)
    runner._used = {}
    with runner.setup_kernel():
        yield runner


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
