"""How every notebook execution here talks to its kernel: its arguments, and waits on its
channels in short polls (the fix for a lost ZeroMQ wake-up).

Measured by ``benchmarks/reply_stall.py``: about one cell in 120 of a widget-heavy
notebook (lab 1's explorer) waited the whole cell timeout for an ``execute_reply`` its kernel had
already sent (the kernel's ``status: idle`` had arrived on iopub; the kernel sat idle in
``select``). The wake-up for the reply is lost inside the client's asyncio poll of the ZeroMQ
socket; a new poll finds the message at once. So a wait here is a series of polls of at most
``POLL_SLICE`` seconds that together keep the timeout the caller asked for.

Every notebook this project executes waits this way: the sandbox's runner and ``mlbook
run``/``validate`` through ``SlicedPollClient`` (and the fork server's manager, a subclass of
``SlicedKernelManager``); nbgrader's own ``Execute`` (the Validate button, plain ``nbgrader
autograde``) through ``nbgrader_config.py``, which names ``SlicedKernelClient`` as the client
class of nbgrader's kernel manager.
"""

from __future__ import annotations

import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import DottedObjectName, Type, default

# The kernel's command-line arguments: no history database, and a quiet log (no transport
# warnings on stderr, which nbgrader would count against a test cell).
KERNEL_ARGS = ["--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=ERROR"]
# A grading kernel's (mlbook_kernel.runner): also the admission extension, the operating system's
# buffers closed before the first cell (mlbook_kernel.admission; Linux only, so not in KERNEL_ARGS,
# which a student's own `mlbook validate` uses too).
SANDBOX_KERNEL_ARGS = [*KERNEL_ARGS, "--IPKernelApp.extensions=mlbook_kernel.admission"]

# How long one wait on a kernel channel may last before it is started afresh (seconds).
POLL_SLICE = 0.25


class SlicedChannel(AsyncZMQSocketChannel):
    """A kernel channel whose ``get_msg(timeout)`` polls in slices of ``POLL_SLICE``."""

    async def get_msg(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await super().get_msg(timeout=min(POLL_SLICE, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise


class SlicedKernelClient(AsyncKernelClient):
    """The async kernel client, with sliced waits on the two channels nbclient waits on."""

    shell_channel_class = Type(SlicedChannel)
    iopub_channel_class = Type(SlicedChannel)


class SlicedKernelManager(AsyncKernelManager):
    """The async kernel manager, handing out ``SlicedKernelClient``s."""

    client_class = DottedObjectName("mlbook_kernel.polling.SlicedKernelClient")
    client_factory = Type(SlicedKernelClient, klass=AsyncKernelClient)


class SlicedPollClient(NotebookClient):
    """nbclient's NotebookClient on a ``SlicedKernelManager`` unless told another."""

    @default("kernel_manager_class")
    def _sliced_manager(self) -> type[AsyncKernelManager]:
        return SlicedKernelManager
