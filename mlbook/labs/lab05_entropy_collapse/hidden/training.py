"""Check of train_copy_task: its history's form and step-0 log, the seed, learning, the updates, warm-up
and qk_decay.

The check uses a smaller model than the notebook (T = 8, d_model = 16) so it stays cheap, and
grades trends with thresholds measured over many seeds, never exact curves. Nothing the kernel
computes decides a verdict: the trained weights are loaded into the grader's own TinyDecoder and
its loss measured on copy-task data the grader draws (``mlbook_helpers.copy_task`` as imported
here, the grader's copy), against the untrained reference on the same data; the history the
student's loop reports is checked for its form and its step-0 log only. A few updates, with and
without warm-up, and with qk_decay, are replayed by the grader (``updates``) and must leave the same
weights.

The loop is judged on its own: every call runs it with the grader's ``attention_entropy``
(``kit.given``) in place of the student's, so a wrong entropy costs the attention_entropy cells
only, never this one a second time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mlbook_helpers.copy_task import CopyTask, TinyDecoder, copy_loss

from ...kit import close, diagnose, fail, fresh_rng, given
from ._loop import TINY, TINY_TASK, run_loop, tiny_copy, tiny_model
from ._models import state
from .entropy import entropy_per_head, graders_attention_entropy
from .updates import check_decay, check_updates, check_warmup

__all__ = ["check_train_copy_task"]

_EVAL_SEQUENCES = 256  # the grader's evaluation batch
# The model learns when 60 updates take its loss on the grader's evaluation batch below this
# fraction of the untrained model's, as the median of three seeds. Measured with the reference
# loop over 420 runs (40 seeds x 3, and 300 more): 0.005 to 0.64 of the untrained loss (median
# 0.04), one run in 100 above 0.6, no median of three above 0.31. A loop that never updates
# leaves the weights as they were: exactly 1.
_LEARNED_BELOW = 0.75



def _evaluation_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(256, T) inputs and targets the grader draws with its own CopyTask; the kernel never sees them."""
    return CopyTask(**TINY_TASK).batch(_EVAL_SEQUENCES, torch.Generator().manual_seed(seed))


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
    trained = TinyDecoder(CopyTask(**TINY_TASK), **TINY)
    trained.load_state_dict(state(model, reference, what))
    return trained.eval()


def _norms(weights: dict[str, torch.Tensor]) -> dict[str, float]:
    """Norms of a tiny model's token embedding and of each block's W_q, W_k, W_v (from ``state``)."""
    d = TINY["d_model"]
    out = {"tok": weights["tok.weight"].norm().item()}
    for i in range(TINY["n_layers"]):
        packed = weights[f"blocks.{i}.attn.in_proj_weight"]  # (3 d, d): W_q, W_k, W_v rows
        for j, part in enumerate(("W_q", "W_k", "W_v")):
            out[f"block {i} {part}"] = packed[j * d:(j + 1) * d].norm().item()
    return out


def check_train_copy_task(train_copy_task) -> None:
    # the loop alone: the entropies it logs are the grader's attention_entropy of the model it logs
    train_copy_task = given(train_copy_task, attention_entropy=graders_attention_entropy)
    rng = fresh_rng()
    seed = int(rng.integers(10_000))
    common = dict(lr=0.1, batch_size=16)

    # (a) the history's form: logging cadence and shapes, on another interval than the notebook's
    untrained = tiny_model(seed)  # the grader's reference, never trained
    what = "train_copy_task(tiny model, steps=9, log_every=3)"
    _, entropy = run_loop(train_copy_task, tiny_copy(untrained), 9, what, seed=seed, log_every=3, **common)

    # (b) step 0 is the untrained model, in nats, averaged over heads.
    # Over 30 seeds the 16-sequence evaluation batch's entropy differed from the grader's
    # 256-sequence measurement by at most 0.011 nats per layer: tolerance 0.06.
    _, ref_entropy = _measure(untrained, seed + 1)  # (2,)
    if not close(entropy[0], ref_entropy, atol=0.06, rtol=0):
        hint = diagnose(entropy[0], {
            "That is the entropy in bits: log base 2 instead of the natural log.": ref_entropy / math.log(2),
            "That is the sum over the heads: log the mean over a layer's heads.": ref_entropy * TINY["n_heads"],
        }, atol=0.09, rtol=0)
        fail(what, f"the entropies logged at step 0 are {np.round(entropy[0], 3).tolist()}, "
                   "which is not the untrained model's mean entropy per layer",
             hint or "Log before the first update, on the evaluation batch, each layer's mean over heads.")

    # (c) the seed chooses the data: two seeds, no update, different evaluation batches
    what_seed = "train_copy_task(the same untrained model, steps=0) with two different seeds"
    loss1, _ = run_loop(train_copy_task, tiny_copy(untrained), 0, what_seed, seed=seed + 11, log_every=3, **common)
    loss2, _ = run_loop(train_copy_task, tiny_copy(untrained), 0, what_seed, seed=seed + 12, log_every=3, **common)
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
        reference = tiny_model(seed + 100 + k)
        model = tiny_copy(reference)
        run_loop(train_copy_task, model, 60, what_learn, seed=seed + 100 + k, log_every=30, **common)
        ratios.append(_loss(_trained(model, reference, what_learn), batch) / _loss(reference, batch))
    if not np.median(ratios) < _LEARNED_BELOW:
        fail(what_learn, f"on fresh copy sequences, the trained model's loss is {np.round(ratios, 2).tolist()} times "
                         f"the untrained model's (the median must be below {_LEARNED_BELOW})",
             "The model does not learn, whatever loss the history reports: SGD with momentum 0.9 at lr, and "
             "zero_grad(), backward() and optimiser.step() at every update?")

    # (e) the updates themselves, at another lr and batch size: the weights after a few updates against the
    # grader's replay of the specified loop (before the warm-up is judged, which assumes them)
    check_updates(train_copy_task, rng, seed)

    # (f) warm-up: the weights after a few updates, against the grader's replay of the schedule
    check_warmup(train_copy_task, rng, seed, common)

    # (g) qk_decay, against the grader's replay of a few decayed updates (placement, factor, which weights)
    check_decay(train_copy_task, rng, seed, common)

    # (h) over a longer run, qk_decay shrinks W_q and W_k only. lr 0.1 and qk_decay 2.0 multiply them by 0.8 per
    # step, 0.11 after 10 steps; over 10 seeds the ratio to an undecayed run was at most 0.11,
    # and W_v and the embeddings stayed within 0.3 % of it.
    base = tiny_model(seed + 7)
    decayed, plain = tiny_copy(base), tiny_copy(base)
    what_decay = "train_copy_task(tiny model, steps=10, qk_decay=2.0) against the same run with qk_decay=0"
    run_loop(train_copy_task, decayed, 10, what_decay, seed=seed, log_every=5, qk_decay=2.0, **common)
    run_loop(train_copy_task, plain, 10, what_decay, seed=seed, log_every=5, qk_decay=0.0, **common)
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
