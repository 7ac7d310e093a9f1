"""The tiny model the training check trains, and the call of the student's loop on it.

The check uses a smaller model than the notebook (T = 8, d_model = 16) so it stays cheap. The
student's loop trains the kernel's copy of a model the grader keeps (``tiny_copy``); what it
reports is checked for its form only (``run_loop``), never for what it claims about learning.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mlbook_helpers.copy_task import CopyTask, TinyDecoder

from ...kit import array, call_student, describe, fail
from ._models import students_copy

__all__ = ["TINY", "TINY_TASK", "tiny_model", "tiny_copy", "run_loop"]

TINY = dict(d_model=16, n_heads=2, n_layers=2)
TINY_TASK = dict(n_data=8, length=4)


def tiny_model(seed: int) -> TinyDecoder:
    """The grader's tiny model, initialised from ``seed``."""
    torch.manual_seed(seed)
    return TinyDecoder(CopyTask(**TINY_TASK), **TINY)


def tiny_copy(reference: TinyDecoder) -> Any:
    """The student's copy of a tiny model, in the kernel."""
    return students_copy(reference, **TINY)


def run_loop(train_copy_task, model, steps: int, what: str, log_every: int, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Run the student's loop and check the form of the history it reports (never what it claims
    about learning: that is measured on the model).

    Returns:
        loss (n_logs,) and entropy (n_logs, n_layers), finite.
    """
    history = call_student(train_copy_task, model, steps, what=what, log_every=log_every, **kwargs)
    if not isinstance(history, dict) or not {"step", "loss", "entropy"} <= set(history):
        fail(what, f"returned {describe(history)}", 'Return a dict with "step", "loss" and "entropy".')
    logged = list(range(0, steps + 1, log_every))
    step_hint = "Log the untrained model as step 0, then after every log_every updates, up to steps."
    got_steps = array(history["step"], f"{what}: history['step']", kind="iuf", hint=step_hint)
    if got_steps.tolist() != logged:
        fail(what, f"history['step'] is [{', '.join(f'{s:g}' for s in got_steps.ravel())}]", step_hint)
    shape_hint = "One loss per logged step, and per logged step one entropy per layer (mean over its heads)."
    loss = array(history["loss"], f"{what}: history['loss']", finite=False, hint=shape_hint)
    entropy = array(history["entropy"], f"{what}: history['entropy']", finite=False, hint=shape_hint)
    n_logs, n_layers = len(logged), TINY["n_layers"]
    if loss.shape != (n_logs,) or entropy.shape != (n_logs, n_layers):
        fail(what, f"loss has shape {loss.shape} and entropy {entropy.shape}, expected ({n_logs},) and "
                   f"({n_logs}, {n_layers})", shape_hint)
    if not np.isfinite(loss).all():
        fail(what, "the logged loss reaches nan or inf: the training diverged",
             "Call optimiser.zero_grad() before every backward() (otherwise the gradients add up from update to "
             "update), and build the optimiser with the lr you are given.")
    if not np.isfinite(entropy).all():
        fail(what, "the logged entropy contains nan or inf, although the check runs your loop with a correct "
                   "attention_entropy", "Log each layer's attention_entropy, averaged over its heads, under torch.no_grad().")
    return loss, entropy
