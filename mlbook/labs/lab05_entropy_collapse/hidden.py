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
back as data (``state_dict``, checked tensor by tensor against the reference's layout) and
judged here. Nothing the kernel computes decides a verdict: a training check loads the trained
weights into the grader's own TinyDecoder and measures its loss on copy-task data the grader
draws (``mlbook_helpers.copy_task`` as imported here, the grader's copy), against the untrained
reference on the same data; the history the student's loop reports is checked for its form
and its step-0 log only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mlbook_helpers.checks import Misconception, describe
from mlbook_helpers.copy_task import CopyTask, TinyDecoder, copy_loss
from mlbook_kernel.wire import WireError

from .._support import RemoteError, array, boolean, call_student, close, diagnose, fail, fresh_rng, helper

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
        The kernel's copy (a remote object in a sandboxed check, a local model otherwise), whose
        weights were read back and found equal to the reference's: what the kernel built is not
        trusted to hold them.
    """
    task = helper("mlbook_helpers.copy_task:CopyTask")(n_data=reference.task.n_data, length=reference.task.length)
    model = helper("mlbook_helpers.copy_task:TinyDecoder")(task, **sizes)
    model.load_state_dict(reference.state_dict())
    what = "the model the check built for your function"
    held = _state(model, reference, what)
    if not all(torch.equal(held[name], weights) for name, weights in reference.state_dict().items()):
        fail(what, "does not hold the weights it was given",
             "Leave torch and mlbook_helpers as they are: the check builds its models with them.")
    return model


def _state(model: Any, reference: TinyDecoder, what: str) -> dict[str, torch.Tensor]:
    """The weights of the kernel's ``model``, read back as data and checked against the layout of
    the grader's ``reference``: every tensor of its state dict present, real, finite, of its shape.

    Returns:
        name -> float32 tensor, in the reference's order (``load_state_dict`` takes it as it is).
    """
    try:
        state = model.state_dict()  # a dict of tensors: data, whatever the kernel made of the model
    except (Misconception, WireError, EOFError, OSError, TimeoutError):
        raise  # a verdict, or the kernel went away
    except Exception as exc:  # noqa: BLE001 - the student's code broke the model
        kind = exc.type_name if isinstance(exc, RemoteError) else type(exc).__name__
        fail(what, f"the model's weights cannot be read back (state_dict() raised {kind})",
             "Change the model you are given in place; keep its modules and parameters.")
    if not isinstance(state, dict):
        fail(what, f"the model's state_dict() returned {describe(state)}",
             "Change the model you are given in place; keep its modules and parameters.")
    out = {}
    for name, ref in reference.state_dict().items():
        if name not in state:
            fail(what, f"{name} is no longer a parameter of the model",
                 "Change the weights in place (`.mul_(...)` under torch.no_grad()) instead of replacing them.")
        values = array(state[name], f"{what}: {name}", shape=tuple(ref.shape),
                       hint="The weights must stay finite real numbers of their original shape.")
        out[name] = torch.from_numpy(values).to(ref.dtype)
    return out


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
        got = array(got, what, finite=False, hint="Return a tensor with one entropy per head.")  # nan: below
        if not np.isfinite(got).all():
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

    # The one property data cannot carry: whether each parameter still requires grad, reported by
    # the kernel. Only a flag the student's code set could be misreported; the verdict on the
    # scaling itself comes from the weights read back as data (_state) and compared here.
    trainable = helper("mlbook_helpers.copy_task:requires_grad")(model)  # parameter name -> requires_grad
    if not isinstance(trainable, dict):
        fail(what, f"the model's parameters cannot be listed (got {describe(trainable)})",
             "Change the model you are given in place; keep its modules and parameters.")
    missing = sorted(set(before) - set(trainable))
    if missing:
        fail(what, f"{missing[0]} is no longer a parameter of the model",
             "Scale in place (`.mul_(factor)` under torch.no_grad()) instead of assigning a plain tensor.")
    for name in before:
        if not boolean(trainable[name], f"{what}: requires_grad of {name}"):
            fail(what, f"{name} no longer requires grad", "Scale in place under torch.no_grad(); do not detach.")
    after = _state(model, reference, what)  # name -> tensor, read back as data and checked

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
    return _students_copy(reference, **_TINY)


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
    entropies = [_entropy_per_head(a.double().numpy()).mean() for a in attns]
    return copy_loss(logits, y).item(), np.array(entropies)  # (), (n_layers,)


def _trained(model: Any, reference: TinyDecoder, what: str) -> TinyDecoder:
    """The grader's own TinyDecoder holding the weights the student's loop left in ``model``
    (the kernel's copy of ``reference``)."""
    trained = TinyDecoder(CopyTask(**_TINY_TASK), **_TINY)
    trained.load_state_dict(_state(model, reference, what))
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
    if not (np.isfinite(loss).all() and np.isfinite(entropy).all()):
        fail(what, "the history contains nan or inf", "Is 0 * log 0 counted as 0 in attention_entropy?")
    return loss, entropy


def _norms(state: dict[str, torch.Tensor]) -> dict[str, float]:
    """Norms of a tiny model's token embedding and of each block's W_q, W_k, W_v (from ``_state``)."""
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

    # (a) the history's form: logging cadence and shapes, on another interval than the notebook's
    untrained = _tiny_model(seed)  # the grader's reference, never trained
    what = "train_copy_task(tiny model, steps=9, log_every=3)"
    _, entropy = _history(train_copy_task, _tiny_copy(untrained), 9, what, seed=seed, log_every=3, **common)

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

    # (e) qk_decay shrinks W_q and W_k only. lr 0.1 and qk_decay 2.0 multiply them by 0.8 per
    # step, 0.11 after 10 steps; over 10 seeds the ratio to an undecayed run was at most 0.11,
    # and W_v and the embeddings stayed within 0.3 % of it.
    base = _tiny_model(seed + 7)
    decayed, plain = _tiny_copy(base), _tiny_copy(base)
    what_decay = "train_copy_task(tiny model, steps=10, qk_decay=2.0) against the same run with qk_decay=0"
    _history(train_copy_task, decayed, 10, what_decay, seed=seed, log_every=5, qk_decay=2.0, **common)
    _history(train_copy_task, plain, 10, what_decay, seed=seed, log_every=5, qk_decay=0.0, **common)
    n_dec, n_plain = _norms(_state(decayed, base, what_decay)), _norms(_state(plain, base, what_decay))
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
