"""train_copy_task's updates, replayed: a few updates of the specified loop run by the grader itself
(``replay_updates``) must leave the student's weights exactly where the student's loop left them.

Three replays: plain updates at a learning rate and batch size other than the defaults (so that
a loop ignoring its arguments shows), warm-up, and qk_decay. On a mismatch the replays of the
known mistakes of a loop name the one the weights match.
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np
import torch

from mlbook_helpers.copy_task import TinyDecoder, copy_loss

from ...kit import close, diagnose, fail
from ._loop import run_loop, tiny_copy, tiny_model
from ._models import state

__all__ = ["check_updates", "check_warmup", "check_decay"]

# Where and how a loop may apply qk_decay: "after" each optimiser step by (1 - lr * qk_decay), as specified,
# or one of the known mistakes.
_DECAYS = ("after", "before_step", "warmed_rate", "without_lr", "with_v", "weight_decay")


def _decay(model: TinyDecoder, factor: float, with_v: bool = False) -> None:
    """Multiply every block's W_q and W_k (and W_v, ``with_v``) by ``factor``, in place."""
    with torch.no_grad():
        for block in model.blocks:
            for W in (block.W_q, block.W_k, block.W_v) if with_v else (block.W_q, block.W_k):
                W.mul_(factor)  # (d_model, d_model), a view into in_proj_weight


def replay_updates(reference: TinyDecoder, steps: int, lr: float, batch_size: int, seed: int,
                   rate: Callable[[int], float], *, eval_first: bool = True, momentum: float = 0.9,
                   zero_grad: bool = True, train_batch: int | None = None, qk_decay: float = 0.0,
                   decay: str = "after", losses: list[float] | None = None) -> dict[str, torch.Tensor]:
    """The grader's own run of the specified loop on a copy of ``reference``: the weights after
    ``steps`` updates, update s (from 1) at learning rate ``rate(s)``, with ``qk_decay`` applied as
    ``decay`` says (``_DECAYS``). The options (``rate``, ``eval_first``, ``momentum``, ``zero_grad``,
    ``train_batch``: the training batches' size when it is not ``batch_size``; ``decay``) are the
    known mistakes of a loop. ``losses``, when given, receives the loss on the evaluation batch
    after every update s = 0, 1, ..., steps (s = 0: the untrained model), as the loop must log it."""
    assert decay in _DECAYS, decay
    model = copy.deepcopy(reference)
    task = model.task
    gen = torch.Generator().manual_seed(seed)
    if eval_first:
        eval_x, eval_y = task.batch(batch_size, gen)  # (B, T), (B, T): the evaluation batch comes first

    def log() -> None:
        if losses is not None:
            with torch.no_grad():
                losses.append(copy_loss(model(eval_x)[0], eval_y).item())

    log()
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
        log()
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _moved(after: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> np.ndarray:
    """Every weight's change, flattened: (n_weights,)."""
    return torch.cat([(after[name] - before[name]).flatten() for name in before]).double().numpy()


def check_updates(train_copy_task, rng: np.random.Generator, seed: int) -> None:
    """Without warm-up or decay, the weights after a few updates are the grader's own replay of the specified
    loop, at a learning rate and batch size other than the defaults (so that an argument ignored shows)."""
    steps = 3
    lr = float(rng.choice([0.04, 0.06, 0.15, 0.2]))  # never 0.1, the default
    batch_size = int(rng.integers(6, 13))  # never 16 or 32
    base = tiny_model(seed + 31)
    model = tiny_copy(base)
    what = f"train_copy_task(tiny model, steps={steps}, lr={lr:g}, batch_size={batch_size})"
    logged, _ = run_loop(train_copy_task, model, steps, what, seed=seed + 9, log_every=1, lr=lr,
                         batch_size=batch_size)  # (steps + 1,)
    before = base.state_dict()
    got = _moved(state(model, base, what), before)  # (n_weights,)

    def replay(lr=lr, batch_size=batch_size, **options):
        return lambda: _moved(replay_updates(base, steps, lr, batch_size, seed + 9, lambda s: lr, **options), before)

    want = replay()()
    scale = np.abs(want).max()
    if close(got, want, atol=1e-4 * scale, rtol=0):  # the tolerance of check_warmup, measured there
        _check_logged_loss(logged, base, steps, lr, batch_size, seed + 9, what)
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


def _check_logged_loss(logged: np.ndarray, base: TinyDecoder, steps: int, lr: float, batch_size: int, seed: int,
                       what: str) -> None:
    """What the loop logs at step s is the loss on the evaluation batch (the first draw of the seeded
    generator) of the model after exactly s updates: the grader's replay logs it itself and the two must agree.

    Only the loss is compared: it does not depend on the student's attention_entropy, so a wrong entropy
    function costs its own cells and not this one. The training batches differ from the evaluation batch
    (other sequences of the same generator), and every update moves the loss (the replay's losses at
    consecutive steps differ by far more than the tolerance), so a loop that logs the training batch, or
    the model one update early or late, is seen on every draw.
    """
    want: list[float] = []
    replay_updates(base, steps, lr, batch_size, seed, lambda s: lr, losses=want)
    want_arr = np.array(want)  # (steps + 1,)
    # float32 forward passes of the same weights agree to about 1e-6 of the loss; consecutive steps of the
    # replay differ by 1e-3 of it or more, a training batch's loss from the evaluation batch's by more still.
    tol = 1e-4 * np.abs(want_arr).max()
    if close(logged, want_arr, atol=tol, rtol=0):
        return
    shown = ", ".join(f"{v:.4f}" for v in logged)
    if close(logged[1:], want_arr[:-1], atol=tol, rtol=0):
        hint = ("At step s you logged the model after s - 1 updates: log after optimiser.step() (and after qk_decay), "
                "not before the update.")
    elif close(logged[:-1], want_arr[1:], atol=tol, rtol=0):
        hint = "At step s you logged the model after s + 1 updates: log step s right after update s."
    elif close(logged[0], want_arr[0], atol=tol, rtol=0):
        hint = ("The step-0 loss is right but the later ones are not the evaluation batch's: log every step on the one "
                "evaluation batch drawn first, never on the training batch of the update.")
    else:
        hint = ("Log the loss on the evaluation batch (the first task.batch(batch_size, gen) draw, drawn once before "
                "training), of the model after s updates, under torch.no_grad().")
    fail(what, f"history['loss'] is [{shown}], but the evaluation batch's loss after 0, 1, ..., {steps} updates is "
               f"[{', '.join(f'{v:.4f}' for v in want_arr)}]", hint)


def check_warmup(train_copy_task, rng: np.random.Generator, seed: int, common: dict) -> None:
    """Warm-up: after a few updates the weights are the grader's own replay of the specified schedule."""
    warmup = int(rng.integers(3, 6))
    steps = warmup + 2
    lr = common["lr"]
    base = tiny_model(seed + 23)
    model = tiny_copy(base)
    what = f"train_copy_task(tiny model, steps={steps}, warmup={warmup})"
    run_loop(train_copy_task, model, steps, what, seed=seed + 5, log_every=1, warmup=warmup, **common)
    before = base.state_dict()
    got = _moved(state(model, base, what), before)  # (n_weights,)

    def replay(rate):
        return lambda: _moved(replay_updates(base, steps, lr, common["batch_size"], seed + 5, rate), before)

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


def check_decay(train_copy_task, rng: np.random.Generator, seed: int, common: dict) -> None:
    """qk_decay: after a few warmed-up updates the weights are the grader's own replay of the specified
    decay, (1 - lr * qk_decay) after every step, with lr the argument (the warm-up, judged before, is on,
    so that a decay at the warmed-up rate shows)."""
    steps, warmup = 3, 2
    lr = common["lr"]
    qk_decay = float(rng.choice([0.5, 1.0, 1.5]))
    base = tiny_model(seed + 41)
    model = tiny_copy(base)
    what = f"train_copy_task(tiny model, steps={steps}, warmup={warmup}, qk_decay={qk_decay:g})"
    run_loop(train_copy_task, model, steps, what, seed=seed + 13, log_every=1, warmup=warmup, qk_decay=qk_decay,
             **common)
    before = base.state_dict()
    got = _moved(state(model, base, what), before)  # (n_weights,)

    def replay(decay: str):
        return lambda: _moved(replay_updates(base, steps, lr, common["batch_size"], seed + 13,
                                      lambda s: lr * min(1.0, s / warmup), qk_decay=qk_decay, decay=decay), before)

    want = replay("after")()
    scale = np.abs(want).max()
    if close(got, want, atol=1e-4 * scale, rtol=0):  # the tolerance of check_warmup
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
            lambda: _moved(replay_updates(base, steps, lr, common["batch_size"], seed + 13,
                                   lambda s: lr * min(1.0, s / warmup)), before),
    }, atol=1e-4 * scale, rtol=0)
    fail(what, "the weights after training are not those of the specified decay",
         hint or "After each optimiser.step(), multiply every block's W_q and W_k by (1 - lr * qk_decay), in place "
                 "under torch.no_grad(), with lr the argument.")
