"""Hidden checks for lab 5 (entropy collapse).

Each check builds fresh inputs (other shapes, other models, other seeds than the notebook),
computes the grader's own reference here, and on a mismatch names the known mistake the
student's result matches. Training checks use a smaller model than the notebook (T = 8,
d_model = 16) so they stay cheap, and they grade trends with thresholds measured over many
seeds, never exact curves.

Conventions: attention weights are (B, H, T_q, T_k), rows over the last axis; entropy is in
nats; a TinyDecoder block's ``W_q``/``W_k``/``W_v`` are views of ``attn.in_proj_weight``.

Models: the checks run in the grader, the student's functions in the student's kernel. Every
model a student's function receives is built there (``_students_copy``) with the weights of a
model the grader draws and keeps as its reference; what the function did to the copy is read
back as data (``state_dict``) and compared here with the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mlbook_helpers.checks import as_array
from mlbook_helpers.copy_task import CopyTask, TinyDecoder, copy_loss

from .._support import call_student, close, diagnose, fail, fresh_rng, helper

# --- the grader's reference ----------------------------------------------------------------


def _entropy_rows(w: np.ndarray, axis: int = -1) -> np.ndarray:
    """-sum p log p along ``axis`` with 0 log 0 = 0, in nats."""
    safe = np.where(w > 0, w, 1.0)
    return -(w * np.log(safe)).sum(axis=axis)


def _entropy_per_head(w: np.ndarray) -> np.ndarray:
    """(B, H, T_q, T_k) -> (H,): row entropies averaged over batch and queries."""
    return _entropy_rows(w).mean(axis=(0, 2))


def _random_weights(rng: np.random.Generator, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Random attention rows with exact zeros, one one-hot row and one uniform row."""
    B, H, T_q, T_k = shape
    logits = rng.normal(size=shape) * rng.uniform(0.5, 3.0)  # (B, H, T_q, T_k)
    keep = rng.random(shape) > 0.35  # (B, H, T_q, T_k): about a third of the keys masked
    keep[..., 0] |= ~keep.any(axis=-1)  # every row keeps at least one key
    e = np.exp(logits - logits.max(axis=-1, keepdims=True)) * keep
    w = e / e.sum(axis=-1, keepdims=True)
    w[0, 0, 0] = np.eye(T_k)[rng.integers(T_k)]  # a one-hot row
    w[-1, -1, -1] = 1.0 / T_k  # a uniform row
    return w


def _students_copy(reference: TinyDecoder, **sizes: Any) -> Any:
    """A TinyDecoder built in the student's kernel with the weights of the grader's ``reference``.

    Args:
        reference: the grader's model; it stays here, untouched by the student's code.
        sizes: the keyword arguments ``reference`` was built with (d_model, n_heads, n_layers).
    Returns:
        The kernel's copy (a remote object in a sandboxed check, a local model otherwise).
    """
    task = helper("mlbook_helpers.copy_task:CopyTask")(n_data=reference.task.n_data, length=reference.task.length)
    model = helper("mlbook_helpers.copy_task:TinyDecoder")(task, **sizes)
    model.load_state_dict(reference.state_dict())
    return model


# --- 1: attention_entropy -------------------------------------------------------------------


def check_attention_entropy(attention_entropy) -> None:
    rng = fresh_rng()
    shapes = [(3, 4, 5, 7), (2, 3, 9, 6), (4, 2, 1, 11)]  # B, H, T_q, T_k all distinct within each
    for shape, dtype, atol in zip(shapes, (torch.float64, torch.float32, torch.float64), (1e-7, 2e-5, 1e-7)):
        B, H, T_q, T_k = shape
        w = _random_weights(rng, shape)
        attn = torch.tensor(w, dtype=dtype)
        w = attn.double().numpy()  # the reference sees exactly the values the student sees
        pristine = attn.clone()
        what = f"attention_entropy on {dtype} weights of shape (B, H, T_q, T_k) = {shape}"
        got = call_student(attention_entropy, attn, what=what)
        # Seen only when the check runs in the student's process: a sandboxed call receives a
        # copy of `attn`, and a change to it stays in the kernel.
        if not torch.equal(attn, pristine):
            fail(what, "the input weights were changed in place",
                 "Compute on a copy (torch.where, clamp without the underscore), never modify attn.")
        try:
            got = as_array(got)
        except (TypeError, ValueError):
            fail(what, f"returned a {type(got).__name__}", "Return a tensor with one entropy per head.")
        if np.isnan(got).any() or np.isinf(got).any():
            fail(what, "the result contains nan or inf",
                 "Some weights are exactly 0, and 0 * log 0 is nan in floating point (log of zero is -inf): "
                 "count those terms as 0, their limit.")
        if got.shape != (H,):
            axes = {(T_q,): "the batch and the heads", (B,): "the heads and the queries",
                    (B, H): "the queries only", (H, T_q): "the batch only", (): "everything"}
            averaged = axes.get(got.shape)
            fail(what, f"shape is {got.shape}, expected one value per head, ({H},)",
                 (f"It looks averaged over {averaged}: wrong axis. " if averaged else "Wrong axes. ")
                 + "Sum over the keys (axis -1), then average over the batch (axis 0) and the queries (axis 2).")
        ref = _entropy_per_head(w)  # (H,)
        if close(got, ref, atol=atol, rtol=0):
            continue
        hint = diagnose(got, {
            "The values are in bits (log base 2): the lab asks for nats, the natural log.": ref / math.log(2),
            "The row entropies are summed over the queries instead of averaged.": ref * T_q,
            "Each row's terms are averaged over the keys instead of summed.": ref / T_k,
            "The sign is wrong: entropy is MINUS the sum of p log p.": -ref,
            "Entropy taken down the columns (over the queries, axis -2) instead of along each row "
            "(over the keys, axis -1): wrong axis.": _entropy_rows(w, axis=-2).mean(axis=(0, 2)),
        }, atol=max(atol, 1e-6), rtol=1e-5)
        fail(what, f"got {np.round(got, 4).tolist()}, which is not the mean row entropy per head",
             hint or "Uniform rows must give log T_k and one-hot rows 0; average over batch and queries only.")


# --- 3: scale_qk_init -----------------------------------------------------------------------


def _kind(after: torch.Tensor, before: torch.Tensor, factor: float) -> str:
    """How `after` relates to `before`: unchanged, factor, factor2, sqrt or other."""
    for name, k in (("unchanged", 1.0), ("factor", factor), ("factor2", factor**2), ("sqrt", math.sqrt(factor))):
        if torch.allclose(after, k * before, rtol=1e-5, atol=1e-6):
            return name
    return "other"


def check_scale_qk_init(scale_qk_init) -> None:
    rng = fresh_rng()
    task = CopyTask(n_data=int(rng.integers(5, 12)), length=int(rng.integers(3, 7)))
    d_model, n_heads = [(24, 3), (48, 4), (20, 5)][int(rng.integers(3))]
    n_layers = 3
    sizes = dict(d_model=d_model, n_heads=n_heads, n_layers=n_layers)
    torch.manual_seed(int(rng.integers(2**31)))
    reference = TinyDecoder(task, **sizes)
    model = _students_copy(reference, **sizes)
    factor = float(rng.uniform(2.5, 7.5))
    before = {name: p.detach().clone() for name, p in reference.named_parameters()}
    what = f"scale_qk_init(model with {n_layers} blocks, d_model = {d_model}, {n_heads} heads, factor {factor:.2f})"
    call_student(scale_qk_init, model, factor, what=what)

    trainable = helper("mlbook_helpers.copy_task:requires_grad")(model)  # parameter name -> requires_grad
    missing = sorted(set(before) - set(trainable))
    if missing:
        fail(what, f"{missing[0]} is no longer a parameter of the model",
             "Scale in place (`.mul_(factor)` under torch.no_grad()) instead of assigning a plain tensor.")
    for name, flag in trainable.items():
        if not flag:
            fail(what, f"{name} no longer requires grad", "Scale in place under torch.no_grad(); do not detach.")
    after = {name: t for name, t in model.state_dict().items() if name in before}  # name -> tensor, as data

    d = d_model
    parts = {}  # (block, "W_q"/"W_k"/"W_v") -> kind
    for i in range(n_layers):
        packed_before = before[f"blocks.{i}.attn.in_proj_weight"]  # (3 d, d)
        packed_after = after[f"blocks.{i}.attn.in_proj_weight"]  # (3 d, d)
        for j, part in enumerate(("W_q", "W_k", "W_v")):
            parts[i, part] = _kind(packed_after[j * d:(j + 1) * d], packed_before[j * d:(j + 1) * d], factor)
    others = {name: _kind(after[name], before[name], factor)
              for name in before if not name.endswith("in_proj_weight")}

    if all(k == "unchanged" for k in list(parts.values()) + list(others.values())):
        fail(what, "the model is unchanged",
             "Change the model in place: `W_q * factor` builds a new tensor; use `block.W_q.mul_(factor)` "
             "under torch.no_grad().")
    changed_others = [name for name, k in others.items() if k != "unchanged"]
    if changed_others:
        fail(what, f"{len(changed_others)} other parameters changed too (e.g. {changed_others[0]})",
             "Every weight was scaled: only W_Q and W_K set the size of the scores, so scale only those.")
    if any(parts[i, "W_v"] != "unchanged" for i in range(n_layers)):
        fail(what, "W_V changed",
             "W_V was scaled too: it sets what is mixed, not how peaked the mixing is. Scale only W_Q and W_K.")
    for i in range(n_layers):
        for part in ("W_q", "W_k"):
            kind = parts[i, part]
            if kind == "factor":
                continue
            hints = {
                "unchanged": (f"block {i}'s {part} is unchanged",
                              "Scale W_Q and W_K of every block (loop over model.blocks)."),
                "factor2": (f"block {i}'s {part} was multiplied by factor**2",
                            "Multiply each of W_Q and W_K by the factor once; the scores then grow by factor**2."),
                "sqrt": (f"block {i}'s {part} was multiplied by sqrt(factor)",
                         "Multiply each of W_Q and W_K by the factor itself."),
                "other": (f"block {i}'s {part} is not a multiple of the original",
                          "Multiply the whole matrix by the factor, in place."),
            }
            fail(what, *hints[kind])


# --- 4: train_copy_task ---------------------------------------------------------------------

_TINY = dict(d_model=16, n_heads=2, n_layers=2)


def _tiny_model(seed: int) -> TinyDecoder:
    """The grader's tiny model, initialised from ``seed``."""
    torch.manual_seed(seed)
    return TinyDecoder(CopyTask(n_data=8, length=4), **_TINY)


def _tiny_copy(reference: TinyDecoder) -> Any:
    """The student's copy of a tiny model, in the kernel."""
    return _students_copy(reference, **_TINY)


def _measure(model: TinyDecoder, seed: int) -> tuple[float, np.ndarray]:
    """The grader's loss and per-layer mean-over-heads entropy on 256 fresh sequences."""
    x, y = model.task.batch(256, torch.Generator().manual_seed(seed))  # (256, T), (256, T)
    with torch.no_grad():
        logits, attns = model(x)  # (256, T, vocab), per layer (256, H, T, T)
    entropies = [_entropy_per_head(a.double().numpy()).mean() for a in attns]
    return copy_loss(logits, y).item(), np.array(entropies)  # (), (n_layers,)


def _history(train_copy_task, model, steps, what, **kwargs) -> dict:
    history = call_student(train_copy_task, model, steps, what=what, **kwargs)
    if not isinstance(history, dict) or not {"step", "loss", "entropy"} <= set(history):
        fail(what, f"returned {type(history).__name__}"
             + (f" with keys {sorted(history)}" if isinstance(history, dict) else ""),
             'Return a dict with "step", "loss" and "entropy".')
    return history


def _norms(model: Any) -> dict[str, float]:
    """Norms of a tiny model's token embedding and of each block's W_q, W_k, W_v, read as data."""
    state = model.state_dict()  # name -> tensor
    d = _TINY["d_model"]
    out = {"tok": state["tok.weight"].norm().item()}
    for i in range(_TINY["n_layers"]):
        packed = state[f"blocks.{i}.attn.in_proj_weight"]  # (3 d, d): W_q, W_k, W_v rows
        for j, part in enumerate(("W_q", "W_k", "W_v")):
            out[f"block {i} {part}"] = packed[j * d:(j + 1) * d].norm().item()
    return out


def check_train_copy_task(train_copy_task) -> None:
    rng = fresh_rng()
    seed = int(rng.integers(10_000))
    common = dict(lr=0.1, batch_size=16)

    # (a) logging cadence and shapes, on another interval than the notebook's
    untrained = _tiny_model(seed)  # the grader's reference, never trained
    model = _tiny_copy(untrained)
    what = "train_copy_task(tiny model, steps=9, log_every=3)"
    history = _history(train_copy_task, model, 9, what, seed=seed, log_every=3, **common)
    if list(history["step"]) != [0, 3, 6, 9]:
        fail(what, f"history['step'] is {list(history['step'])}",
             "Log the untrained model as step 0, then after every log_every updates, up to steps.")
    loss, entropy = as_array(history["loss"]), as_array(history["entropy"])
    if loss.shape != (4,) or entropy.shape != (4, 2):
        fail(what, f"loss has shape {loss.shape} and entropy {entropy.shape}, expected (4,) and (4, 2)",
             "One loss per logged step, and per logged step one entropy per layer (mean over its heads).")
    if not (np.isfinite(loss).all() and np.isfinite(entropy).all()):
        fail(what, "the history contains nan or inf", "Is 0 * log 0 counted as 0 in attention_entropy?")

    # (b) step 0 is the untrained model, in nats, averaged over heads.
    # Over 30 seeds the 16-sequence evaluation batch's entropy differed from the grader's
    # 256-sequence measurement by at most 0.011 nats per layer: tolerance 0.06.
    ref_loss, ref_entropy = _measure(untrained, seed + 1)  # (), (2,)
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
    h1 = _history(train_copy_task, _tiny_copy(untrained), 0, what_seed, seed=seed + 11, log_every=3, **common)
    h2 = _history(train_copy_task, _tiny_copy(untrained), 0, what_seed, seed=seed + 12, log_every=3, **common)
    if close(h1["loss"], h2["loss"], atol=0, rtol=0):
        fail(what_seed, "logged exactly the same loss",
             "The seed is ignored: seed a torch.Generator with it and draw every batch from that generator.")

    # (d) the model learns. Over 40 seeds, 60 updates took the tiny model's loss to 0.00 to 0.61
    # of its initial value (median 0.04), and no median of three seeds exceeded 0.21: the
    # median of three must be below 0.6. A loop that never updates gives exactly 1.
    ratios = []
    for k in range(3):
        what_learn = "train_copy_task(tiny model, steps=60) on three seeds"
        h = _history(train_copy_task, _tiny_copy(_tiny_model(seed + 100 + k)), 60, what_learn,
                     seed=seed + 100 + k, log_every=30, **common)
        ratios.append(float(h["loss"][-1]) / float(h["loss"][0]))
    if not np.median(ratios) < 0.6:
        fail(what_learn, f"the final loss is {np.round(ratios, 2).tolist()} times the initial loss "
                         "(median must be below 0.6)",
             "The model does not learn: SGD with momentum 0.9 at lr, and zero_grad, backward and step every update?")

    # (e) qk_decay shrinks W_q and W_k only. lr 0.1 and qk_decay 2.0 multiply them by 0.8 per
    # step, 0.11 after 10 steps; over 10 seeds the ratio to an undecayed run was at most 0.11,
    # and W_v and the embeddings stayed within 0.3 % of it.
    base = _tiny_model(seed + 7)
    decayed, plain = _tiny_copy(base), _tiny_copy(base)
    what_decay = "train_copy_task(tiny model, steps=10, qk_decay=2.0) against the same run with qk_decay=0"
    _history(train_copy_task, decayed, 10, what_decay, seed=seed, log_every=5, qk_decay=2.0, **common)
    _history(train_copy_task, plain, 10, what_decay, seed=seed, log_every=5, qk_decay=0.0, **common)
    n_dec, n_plain = _norms(decayed), _norms(plain)
    ratio = {name: n_dec[name] / n_plain[name] for name in n_dec}
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
