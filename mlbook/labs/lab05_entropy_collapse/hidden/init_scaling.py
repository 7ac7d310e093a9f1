"""Check of scale_qk_init: W_q and W_k of every block, and nothing else, multiplied by the factor in place."""

from __future__ import annotations

import math

import torch

from mlbook_helpers.copy_task import CopyTask, TinyDecoder

from ...kit import boolean, call_student, describe, fail, fresh_rng, helper
from ._models import KEEP_THE_MODEL, state, students_copy

__all__ = ["check_scale_qk_init"]


def _kind(after: torch.Tensor, before: torch.Tensor, factor: float) -> str:
    """How `after` relates to `before`: unchanged, factor, factor2, sqrt or other."""
    for name, k in (("unchanged", 1.0), ("factor", factor), ("factor2", factor**2), ("sqrt", math.sqrt(factor))):
        if torch.allclose(after, k * before, rtol=1e-5, atol=1e-6):
            return name
    return "other"


def _named_error(kind: str, text: str) -> tuple[str, str] | None:
    """``call_student``'s ``named`` hook: the two errors of scaling W_q and W_k the wrong way."""
    if kind == "RuntimeError" and "leaf Variable that requires grad" in text:
        return ("raised RuntimeError: an in-place change of a parameter that requires grad",
                "Change the weights under torch.no_grad() (with torch.no_grad(): block.W_q.mul_(factor)): "
                "autograd must not record the scaling.")
    if kind == "AttributeError" and ("setter" in text or "can't set attribute" in text):
        return (f"raised AttributeError: {text}",
                "block.W_q and block.W_k are views of attn.in_proj_weight that cannot be assigned to: change them "
                "in place (block.W_q.mul_(factor) under torch.no_grad()).")
    return None


def check_scale_qk_init(scale_qk_init) -> None:
    rng = fresh_rng()
    task = CopyTask(n_data=int(rng.integers(5, 12)), length=int(rng.integers(3, 7)))
    d_model, n_heads = [(24, 3), (48, 4), (20, 5)][int(rng.integers(3))]
    n_layers = 3
    sizes = dict(d_model=d_model, n_heads=n_heads, n_layers=n_layers)
    torch.manual_seed(int(rng.integers(2**31)))
    reference = TinyDecoder(task, **sizes)
    model = students_copy(reference, **sizes)
    factor = float(rng.uniform(2.5, 7.5))
    before = {name: p.detach().clone() for name, p in reference.named_parameters()}
    what = f"scale_qk_init(model with {n_layers} blocks, d_model = {d_model}, {n_heads} heads, factor {factor:.2f})"
    call_student(scale_qk_init, model, factor, what=what, named=_named_error)

    # The one property data cannot carry: whether each parameter still requires grad, reported by
    # the kernel. Only a flag the student's code set could be misreported; the verdict on the
    # scaling itself comes from the weights read back as data (state) and compared here.
    trainable = helper("mlbook_helpers.copy_task:requires_grad")(model)  # parameter name -> requires_grad
    if not isinstance(trainable, dict):
        fail(what, f"the model's parameters cannot be listed (got {describe(trainable)})", KEEP_THE_MODEL)
    missing = sorted(set(before) - set(trainable))
    if missing:
        fail(what, f"{missing[0]} is no longer a parameter of the model",
             "Scale in place (`.mul_(factor)` under torch.no_grad()) instead of assigning a plain tensor.")
    for name in before:
        if not boolean(trainable[name], f"{what}: requires_grad of {name}"):
            fail(what, f"{name} no longer requires grad", "Scale in place under torch.no_grad(); do not detach.")
    after = state(model, reference, what)  # name -> tensor, read back as data and checked

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
