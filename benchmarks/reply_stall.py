"""Benchmark: how often a widget cell waits for a reply its kernel already sent.

    .venv/bin/python benchmarks/reply_stall.py [--runs 30] [--cells 20] [--timeout 30]

Runs a notebook of one set-up cell and ``--cells`` copies of lab 1's attention explorer (an
ipywidgets cell that redraws a heat map in an Output widget) ``--runs`` times, each time in a
fresh kernel, alternating two kernel clients: plain nbclient, whose wait for a cell's
``execute_reply`` is one long poll, and the project's client (``mlbook_kernel.polling``, used by
the grading runner, ``mlbook run``/``validate`` and, through ``nbgrader_config.py``, nbgrader),
which polls in short slices. A cell that took longer than ``--slow`` seconds is a stall; plain
nbclient's stalls last the whole cell timeout. Prints, for each client, the cells run,
the stalls and the slowest cell. Not a test: the stall is rare and timing-dependent; run two of
these at once to load both cores the way grading does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]  # see mlbook_kernel.runner

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from mlbook_kernel.polling import KERNEL_ARGS, SlicedPollClient  # noqa: E402

SETUP = """\
import numpy as np
from mlbook_helpers.examples import ticket_example
from mlbook_helpers.explorer import attention_explorer

ticket = ticket_example()

def attention(Q, K, V, mask=None):
    scores = Q @ K.T / np.sqrt(Q.shape[1])  # (T, T)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))  # (T, T)
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ V, weights  # (T, d_v), (T, T)
"""
EXPLORER = "attention_explorer(attention, ticket.tokens, ticket.W_q, ticket.W_k, ticket.W_v)"


def run_once(client_class: type[NotebookClient], cells: int, timeout: int) -> list[float]:
    """Seconds each explorer cell took in one fresh kernel."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SETUP)]
                                  + [nbformat.v4.new_code_cell(EXPLORER) for _ in range(cells)])
    client = client_class(nb, timeout=timeout, interrupt_on_timeout=True, allow_errors=True, kernel_name="python3",
                          shutdown_kernel="immediate", extra_arguments=KERNEL_ARGS,
                          resources={"metadata": {"path": str(REPO)}})
    seconds = []
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            began = time.monotonic()
            client.execute_cell(cell, index)
            if index > 1:  # cell 1 imports matplotlib and ipywidgets
                seconds.append(time.monotonic() - began)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="fresh kernels per client")
    parser.add_argument("--cells", type=int, default=20, help="explorer cells per notebook")
    parser.add_argument("--timeout", type=int, default=30, help="cell timeout (s)")
    parser.add_argument("--slow", type=float, default=5.0, help="a cell slower than this is a stall (s)")
    args = parser.parse_args()
    clients = {"plain nbclient": NotebookClient, "sliced polls": SlicedPollClient}
    seconds: dict[str, list[float]] = {name: [] for name in clients}
    for run in range(args.runs):
        for name, client_class in clients.items():
            seconds[name] += run_once(client_class, args.cells, args.timeout)
        print(f"run {run + 1}/{args.runs}: " + "; ".join(
            f"{name} {sum(s > args.slow for s in times)} stalls" for name, times in seconds.items()), flush=True)
    print(f"\n{'client':16s} {'cells':>6s} {'stalls':>7s} {'slowest cell':>13s}")
    for name, times in seconds.items():
        print(f"{name:16s} {len(times):6d} {sum(s > args.slow for s in times):7d} {max(times):12.2f}s")


if __name__ == "__main__":
    main()
