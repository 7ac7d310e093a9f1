"""Check of train_copy_task: its history's form and step-0 log, the seed, learning, the updates, warm-up
and qk_decay.

The check uses a smaller model than the notebook (T = 8, d_model = 16) so it stays cheap, and
grades trends with thresholds measured over many seeds, never exact curves. Nothing the kernel
computes decides a verdict: the trained weights are loaded into the grader's own TinyDecoder and
its loss measured on copy-task data the grader draws (``mlbook_helpers.copy_task`` as imported
here, the grader's copy), against the untrained reference on the same data; the history the
student's loop reports is checked for its form and its step-0 log only. A few updates, with and
without warm-up, and with qk_decay, are replayed by the grader (``_replay``) and must leave the same
weights: at a learning rate and batch size other than the defaults, so that a loop ignoring its
arguments shows.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import numpy as np
import torch

from mlbook_helpers.copy_task import CopyTask, TinyDecoder, copy_loss

from ...kit import array, call_student, close, describe, diagnose, fail, fresh_rng
from ._models import state, students_copy
from .entropy import entropy_per_head

__all__ = ["check_train_copy_task"]

_TINY = dict(d_model=16, n_heads=2, n_layers=2)
_TINY_TASK = dict(n_data=8, length=4)
_EVAL_SEQUENCES = 256  # the grader's evaluation batch
# The model learns when 60 updates take its loss on the grader's evaluation batch below this
# fraction of the untrained model's, as the median of three seeds. Measured with the reference
# loop over 420 runs (40 seeds x 3, and 300 more): 0.005 to 0.64 of the untrained loss (median
# 0.04), one run in 100 above 0.6, no median of three above 0.31. A loop that never updates
# leaves the weights as they were: exactly 1.
_LEARNED_BELOW = 0.75


def _tiny_model(seed: int) -> TinyDecoder:
    """The grader's tiny model, initialised from ``seed``."""
    torch.manual_seed(seed)
    return TinyDecoder(CopyTask(**_TINY_TASK), **_TINY)


def _tiny_copy(reference: TinyDecoder) -> Any:
    """The student's copy of a tiny model, in the kernel."""
    return students_copy(reference, **_TINY)


def _evaluation_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(256, T) inputs and targets the grader draws with its own CopyTask; the kernel never sees them."""
    return CopyTask(**_TINY_TASK).batch(_EVAL_SEQUENCES, torch.Generator().manual_seed(seed))


def _loss(model: TinyDecoder, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The copy loss of a grader-side model on a grader-drawn batch."""
    x, y = batch  # (256, T), (256, T)
    with torch.no_grad():
        return copy_loss(model(x)[0], y).item()


def _measure(model: TinyDecoder, seed: int) -> tuple[float, np.ndarray]:
    """The grader's loss and per-layer mean-over-heads entropy on 256 fresh sequences."""
    x, y = _evaluation_batch(seed)  # (256, T), (256, T)
    with torch.no_grad():
        logits, attns = model(x)  # (256, T, vocab), per layer (256, H, T, T)
    entropies = [entropy_per_head(a.double().numpy()).mean() for a in attns]
    return copy_loss(logits, y).item(), np.array(entropies)  # (), (n_layers,)


def _trained(model: Any, reference: TinyDecoder, what: str) -> TinyDecoder:
    """The grader's own TinyDecoder holding the weights the student's loop left in ``model``
    (the kernel's copy of ``reference``)."""
    trained = TinyDecoder(CopyTask(**_TINY_TASK), **_TINY)
    trained.load_state_dict(state(model, reference, what))
    return trained.eval()


def _history(train_copy_task, model, steps: int, what: str, log_every: int, **kwargs) -> tuple[np.ndarray, np.ndarray]:
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
    n_logs, n_layers = len(logged), _TINY["n_layers"]
    if loss.shape != (n_logs,) or entropy.shape != (n_logs, n_layers):
        fail(what, f"loss has shape {loss.shape} and entropy {entropy.shape}, expected ({n_logs},) and "
                   f"({n_logs}, {n_layers})", shape_hint)
    if not np.isfinite(loss).all():
        fail(what, "the logged loss reaches nan or inf: the training diverged",
             "Call optimiser.zero_grad() before every backward() (otherwise the gradients add up from update to "
             "update), and build the optimiser with the lr you are given.")
    if not np.isfinite(entropy).all():
        fail(what, "the logged entropy contains nan or inf", "Is 0 * log 0 counted as 0 in attention_entropy?")
    return loss, entropy


def _norms(weights: dict[str, torch.Tensor]) -> dict[str, float]:
    """Norms of a tiny model's token embedding and of each block's W_q, W_k, W_v (from ``state``)."""
    d = _TINY["d_model"]
    out = {"tok": weights["tok.weight"].norm().item()}
    for i in range(_TINY["n_layers"]):
        packed = weights[f"blocks.{i}.attn.in_proj_weight"]  # (3 d, d): W_q, W_k, W_v rows
        for j, part in enumerate(("W_q", "W_k", "W_v")):
            out[f"block {i} {part}"] = packed[j * d:(j + 1) * d].norm().item()
    return out


# Where and how a loop may apply qk_decay: "after" each optimiser step by (1 - lr * qk_decay), as specified,
# or one of the known mistakes.
_DECAYS = ("after", "before_step", "warmed_rate", "without_lr", "with_v", "weight_decay")


def _decay(model: TinyDecoder, factor: float, with_v: bool = False) -> None:
    """Multiply every block's W_q and W_k (and W_v, ``with_v``) by ``factor``, in place."""
    with torch.no_grad():
        for block in model.blocks:
            for W in (block.W_q, block.W_k, block.W_v) if with_v else (block.W_q, block.W_k):
                W.mul_(factor)  # (d_model, d_model), a view into in_proj_weight


def _replay(reference: TinyDecoder, steps: int, lr: float, batch_size: int, seed: int,
            rate: Callable[[int], float], *, eval_first: bool = True, momentum: float = 0.9,
            zero_grad: bool = True, train_batch: int | None = None, qk_decay: float = 0.0,
            decay: str = "after") -> dict[str, torch.Tensor]:
    """The grader's own run of the specified loop on a copy of ``reference``: the weights after
    ``steps`` updates, update s (from 1) at learning rate ``rate(s)``, with ``qk_decay`` applied as
    ``decay`` says (``_DECAYS``). The options (``rate``, ``eval_first``, ``momentum``, ``zero_grad``,
    ``train_batch``: the training batches' size when it is not ``batch_size``; ``decay``) are the
    known mistakes of a loop."""
    assert decay in _DECAYS, decay
    model = copy.deepcopy(reference)
    task = model.task
    gen = torch.Generator().manual_seed(seed)
    if eval_first:
        task.batch(batch_size, gen)  # the evaluation batch comes first
    optimiser = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                                weight_decay=qk_decay if decay == "weight_decay" else 0.0)
    for s in range(1, steps + 1):
        x, y = task.batch(train_batch or batch_size, gen)  # (B, T), (B, T)
        loss = copy_loss(model(x)[0], y)
        if zero_grad:
            optimiser.zero_grad()
        loss.backward()
        for group in optimiser.param_groups:
            group["lr"] = rate(s)
        if qk_decay and decay == "before_step":
            _decay(model, 1 - lr * qk_decay)
        optimiser.step()
        if qk_decay and decay in ("after", "warmed_rate", "without_lr", "with_v"):
            factor = {"warmed_rate": 1 - rate(s) * qk_decay, "without_lr": 1 - qk_decay}.get(decay, 1 - lr * qk_decay)
            _decay(model, factor, with_v=decay == "with_v")
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _moved(after: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> np.ndarray:
    """Every weight's change, flattened: (n_weights,)."""
    return torch.cat([(after[name] - before[name]).flatten() for name in before]).double().numpy()


def _check_updates(train_copy_task, rng: np.random.Generator, seed: int) -> None:
    """Without warm-up or decay, the weights after a few updates are the grader's own replay of the specified
    loop, at a learning rate and batch size other than the defaults (so that an argument ignored shows)."""
    steps = 3
    lr = float(rng.choice([0.04, 0.06, 0.15, 0.2]))  # never 0.1, the default
    batch_size = int(rng.integers(6, 13))  # never 16 or 32
    base = _tiny_model(seed + 31)
    model = _tiny_copy(base)
    what = f"train_copy_task(tiny model, steps={steps}, lr={lr:g}, batch_size={batch_size})"
    _history(train_copy_task, model, steps, what, seed=seed + 9, log_every=1, lr=lr, batch_size=batch_size)
    before = base.state_dict()
    got = _moved(state(model, base, what), before)  # (n_weights,)

    def replay(lr=lr, batch_size=batch_size, **options):
        return lambda: _moved(_replay(base, steps, lr, batch_size, seed + 9, lambda s: lr, **options), before)

    want = replay()()
    scale = np.abs(want).max()
    if close(got, want, atol=1e-4 * scale, rtol=0):  # the tolerance of _check_warmup, measured there
        return
    hint = diagnose(got, {
        "the weights did not change: call optimiser.step() after every backward()": np.zeros_like(want),
        "the lr argument was ignored (0.1 used): build the optimiser with lr=lr": replay(lr=0.1),
        "the batch_size argument was ignored (32 used): draw every batch with task.batch(batch_size, gen)":
            replay(batch_size=32),
        "the training batches ignore the batch_size argument (32 used): draw every batch with "
        "task.batch(batch_size, gen)": replay(train_batch=32),
        "the optimiser has no momentum: use torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)":
            replay(momentum=0.0),
        "the training batches are not the draws that follow the evaluation batch: draw the evaluation batch first, "
        "then every training batch, all from one torch.Generator seeded with seed": replay(eval_first=False),
        "the gradients add up across updates: call optimiser.zero_grad() before every backward()":
            replay(zero_grad=False),
    }, atol=1e-4 * scale, rtol=0)
    fail(what, f"the weights after {steps} updates are not those of the specified loop",
         hint or "Build torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9); draw the evaluation batch, then one "
                 "training batch per update, all of batch_size sequences from one torch.Generator seeded with seed; "
                 "per update: zero_grad(), the copy loss's backward(), step().")


def _check_warmup(train_copy_task, rng: np.random.Generator, seed: int, common: dict) -> None:
    """Warm-up: after a few updates the weights are the grader's own replay of the specified schedule."""
    warmup = int(rng.integers(3, 6))
    steps = warmup + 2
    lr = common["lr"]
    base = _tiny_model(seed + 23)
    model = _tiny_copy(base)
    what = f"train_copy_task(tiny model, steps={steps}, warmup={warmup})"
    _history(train_copy_task, model, steps, what, seed=seed + 5, log_every=1, warmup=warmup, **common)
    before = base.state_dict()
    got = _moved(state(model, base, what), before)  # (n_weights,)

    def replay(rate):
        return lambda: _moved(_replay(base, steps, lr, common["batch_size"], seed + 5, rate), before)

    want = replay(lambda s: lr * min(1.0, s / warmup))()
    # Over 30 seeds a correct loop (param_group or LambdaLR) matched the replay to 1e-7 of the
    # largest change; another schedule differs by 10 % of it or more.
    scale = np.abs(want).max()
    if close(got, want, atol=1e-4 * scale, rtol=0):
        return
    hint = diagnose(got, {
        "the first update had learning rate 0: update s (from 1) uses lr * min(1, s / warmup); counting from 0 "
        "(LambdaLR's first factor is that of 0) wastes the first update": replay(lambda s: lr * min(1.0, (s - 1) / warmup)),
        "the warm-up never ends: the learning rate keeps growing past lr after `warmup` updates; cap it with "
        "min(1, s / warmup)": replay(lambda s: lr * s / warmup),
        "there is no warm-up: every update used lr": replay(lambda s: lr),
        "the warm-up reaches lr one update late: update s uses lr * min(1, s / (warmup + 1))":
            replay(lambda s: lr * min(1.0, s / (warmup + 1))),
    }, atol=1e-4 * scale, rtol=0)
    fail(what, "the weights after training are not those of the specified warm-up schedule",
         hint or "Update s (s = 1, 2, ...) must use the learning rate lr * min(1, s / warmup), set before its step.")


def _check_decay(train_copy_task, rng: np.random.Generator, seed: int, common: dict) -> None:
    """qk_decay: after a few warmed-up updates the weights are the grader's own replay of the specified
    decay, (1 - lr * qk_decay) after every step, with lr the argument (the warm-up, judged before, is on,
    so that a decay at the warmed-up rate shows)."""
    steps, warmup = 3, 2
    lr = common["lr"]
    qk_decay = float(rng.choice([0.5, 1.0, 1.5]))
    base = _tiny_model(seed + 41)
    model = _tiny_copy(base)
    what = f"train_copy_task(tiny model, steps={steps}, warmup={warmup}, qk_decay={qk_decay:g})"
    _history(train_copy_task, model, steps, what, seed=seed + 13, log_every=1, warmup=warmup, qk_decay=qk_decay,
             **common)
    before = base.state_dict()
    got = _moved(state(model, base, what), before)  # (n_weights,)

    def replay(decay: str):
        return lambda: _moved(_replay(base, steps, lr, common["batch_size"], seed + 13,
                                      lambda s: lr * min(1.0, s / warmup), qk_decay=qk_decay, decay=decay), before)

    want = replay("after")()
    scale = np.abs(want).max()
    if close(got, want, atol=1e-4 * scale, rtol=0):  # the tolerance of _check_warmup
        return
    hint = diagnose(got, {
        "the decay was applied before optimiser.step(): multiply W_q and W_k by (1 - lr * qk_decay) after each step":
            replay("before_step"),
        "the decay used the warmed-up learning rate: the factor is (1 - lr * qk_decay) with lr the argument, "
        "whatever rate the update used": replay("warmed_rate"),
        "the decay factor left out lr: multiply by (1 - lr * qk_decay), not (1 - qk_decay)": replay("without_lr"),
        "the decay reached W_v as well: it shrinks W_q and W_k only, which set the scores' size":
            replay("with_v"),
        "the decay reached every weight: apply it to W_q and W_k only (not through the optimiser's weight_decay, "
        "which decays every parameter)": replay("weight_decay"),
        "qk_decay had no effect: after every step multiply W_q and W_k of every block by (1 - lr * qk_decay)":
            lambda: _moved(_replay(base, steps, lr, common["batch_size"], seed + 13,
                                   lambda s: lr * min(1.0, s / warmup)), before),
    }, atol=1e-4 * scale, rtol=0)
    fail(what, "the weights after training are not those of the specified decay",
         hint or "After each optimiser.step(), multiply every block's W_q and W_k by (1 - lr * qk_decay), in place "
                 "under torch.no_grad(), with lr the argument.")


def check_train_copy_task(train_copy_task) -> None:
    rng = fresh_rng()
    seed = int(rng.integers(10_000))
    common = dict(lr=0.1, batch_size=16)

    # (a) the history's form: logging cadence and shapes, on another interval than the notebook's
    untrained = _tiny_model(seed)  # the grader's reference, never trained
    what = "train_copy_task(tiny model, steps=9, log_every=3)"
    _, entropy = _history(train_copy_task, _tiny_copy(untrained), 9, what, seed=seed, log_every=3, **common)

    # (b) step 0 is the untrained model, in nats, averaged over heads.
    # Over 30 seeds the 16-sequence evaluation batch's entropy differed from the grader's
    # 256-sequence measurement by at most 0.011 nats per layer: tolerance 0.06.
    _, ref_entropy = _measure(untrained, seed + 1)  # (2,)
    if not close(entropy[0], ref_entropy, atol=0.06, rtol=0):
        hint = diagnose(entropy[0], {
            "That is the entropy in bits: log base 2 instead of the natural log.": ref_entropy / math.log(2),
            "That is the sum over the heads: log the mean over a layer's heads.": ref_entropy * _TINY["n_heads"],
        }, atol=0.09, rtol=0)
        fail(what, f"the entropies logged at step 0 are {np.round(entropy[0], 3).tolist()}, "
                   "which is not the untrained model's mean entropy per layer",
             hint or "Log before the first update, on the evaluation batch, each layer's mean over heads.")

    # (c) the seed chooses the data: two seeds, no update, different evaluation batches
    what_seed = "train_copy_task(the same untrained model, steps=0) with two different seeds"
    loss1, _ = _history(train_copy_task, _tiny_copy(untrained), 0, what_seed, seed=seed + 11, log_every=3, **common)
    loss2, _ = _history(train_copy_task, _tiny_copy(untrained), 0, what_seed, seed=seed + 12, log_every=3, **common)
    if close(loss1, loss2, atol=0, rtol=0):  # both finite (_history): equal means one batch for both seeds
        fail(what_seed, "logged exactly the same loss",
             "The seed is ignored: seed a torch.Generator with it and draw every batch from that generator.")

    # (d) the model learns, judged on the model, not on the loss it reports: the trained weights
    # are loaded into the grader's TinyDecoder and scored on sequences the grader draws, against
    # the untrained reference on the same sequences. A loop that never updates gives exactly 1.
    what_learn = "train_copy_task(tiny model, steps=60) on three seeds"
    batch = _evaluation_batch(int(rng.integers(2**31 - 1)))
    ratios = []
    for k in range(3):
        reference = _tiny_model(seed + 100 + k)
        model = _tiny_copy(reference)
        _history(train_copy_task, model, 60, what_learn, seed=seed + 100 + k, log_every=30, **common)
        ratios.append(_loss(_trained(model, reference, what_learn), batch) / _loss(reference, batch))
    if not np.median(ratios) < _LEARNED_BELOW:
        fail(what_learn, f"on fresh copy sequences, the trained model's loss is {np.round(ratios, 2).tolist()} times "
                         f"the untrained model's (the median must be below {_LEARNED_BELOW})",
             "The model does not learn, whatever loss the history reports: SGD with momentum 0.9 at lr, and "
             "zero_grad(), backward() and optimiser.step() at every update?")

    # (e) the updates themselves, at another lr and batch size: the weights after a few updates against the
    # grader's replay of the specified loop (before the warm-up is judged, which assumes them)
    _check_updates(train_copy_task, rng, seed)

    # (f) warm-up: the weights after a few updates, against the grader's replay of the schedule
    _check_warmup(train_copy_task, rng, seed, common)

    # (g) qk_decay, against the grader's replay of a few decayed updates (placement, factor, which weights)
    _check_decay(train_copy_task, rng, seed, common)

    # (h) over a longer run, qk_decay shrinks W_q and W_k only. lr 0.1 and qk_decay 2.0 multiply them by 0.8 per
    # step, 0.11 after 10 steps; over 10 seeds the ratio to an undecayed run was at most 0.11,
    # and W_v and the embeddings stayed within 0.3 % of it.
    base = _tiny_model(seed + 7)
    decayed, plain = _tiny_copy(base), _tiny_copy(base)
    what_decay = "train_copy_task(tiny model, steps=10, qk_decay=2.0) against the same run with qk_decay=0"
    _history(train_copy_task, decayed, 10, what_decay, seed=seed, log_every=5, qk_decay=2.0, **common)
    _history(train_copy_task, plain, 10, what_decay, seed=seed, log_every=5, qk_decay=0.0, **common)
    n_dec, n_plain = _norms(state(decayed, base, what_decay)), _norms(state(plain, base, what_decay))
    ratio = {name: n_dec[name] / n_plain[name] if n_plain[name] > 0 else math.inf for name in n_dec}
    for name in ("block 0 W_q", "block 0 W_k", "block 1 W_q", "block 1 W_k"):
        if not ratio[name] < 0.4:
            fail(what_decay, f"{name} ends at {ratio[name]:.2f} times its norm without decay",
                 "qk_decay had no effect: after every step multiply W_q and W_k of every block by "
                 "(1 - lr * qk_decay).")
    for name in ("block 0 W_v", "block 1 W_v", "tok"):
        if not 0.8 < ratio[name] < 1.25:
            fail(what_decay, f"{name} ends at {ratio[name]:.2f} times its norm without decay",
                 "The decay reached every weight: apply it to W_q and W_k only (not through the optimiser's "
                 "weight_decay, which decays every parameter).")
