"""TransformerBlock: the wiring of its sublayers, tested with the grader's own sublayers swapped in."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from mlbook_helpers.transformer_block import TorchAttention

from ...kit import (Handle, RemoteError, array, ask_items, call_student, close, compare, fail, first_bad, fresh_rng,
                    helper)
from ._common import GRAD_TOL, view_error

__all__ = ["check_block"]

SUBLAYERS = ("attn", "ln1", "ln2", "ff")  # the block's attributes the check replaces


def _grader_sublayers(d: int, H: int, d_ff: int, rng: np.random.Generator) -> nn.ModuleDict:
    """The grader's sublayers for a block, float64, every weight drawn from ``rng``.

    Returns:
        ModuleDict with attn (torch.nn.MultiheadAttention behind the lab's call, TorchAttention),
        ln1 and ln2 (LayerNorm(d)), ff (Linear(d, d_ff), GELU, Linear(d_ff, d)).
    """
    subs = nn.ModuleDict({
        "attn": TorchAttention(d, H),
        "ln1": nn.LayerNorm(d),
        "ln2": nn.LayerNorm(d),
        "ff": nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)),
    }).double()
    with torch.no_grad():
        for name, p in subs.named_parameters():
            if name.startswith("attn."):
                mean, std = 0.0, (1 / math.sqrt(d) if p.dim() == 2 else 0.3)
            else:
                mean, std = (0.3 if p.dim() == 1 else 0.0), 0.6
            p.copy_(torch.from_numpy(rng.normal(mean, std, tuple(p.shape))))
    return subs.eval()


def _kernel_sublayers(subs: nn.ModuleDict, d: int, H: int, d_ff: int) -> Any:
    """The same sublayers built where the student's block lives (the kernel), weights included."""
    torch_nn = lambda name: helper(f"torch.nn:{name}")  # noqa: E731
    copy = torch_nn("ModuleDict")({
        "attn": helper("mlbook_helpers.transformer_block:TorchAttention")(d, H),
        "ln1": torch_nn("LayerNorm")(d),
        "ln2": torch_nn("LayerNorm")(d),
        "ff": torch_nn("Sequential")(torch_nn("Linear")(d, d_ff), torch_nn("GELU")(), torch_nn("Linear")(d_ff, d)),
    })
    copy.double()
    copy.load_state_dict(subs.state_dict())  # a state dict is data: it crosses to the kernel
    copy.eval()
    return copy


def _has(obj: Any, name: str) -> bool:
    """hasattr that also works on a kernel object (whose AttributeError arrives as RemoteError)."""
    try:
        getattr(obj, name)
    except (AttributeError, RemoteError):
        return False
    return True


def _ref_block(subs: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, pre_ln: bool, residual: bool,
               variant: str | None = None) -> torch.Tensor:
    """The grader's block from the grader's sublayers (float64), one mistake optionally injected."""
    ln1, ln2 = (subs.ln2, subs.ln1) if variant == "ln_swapped" else (subs.ln1, subs.ln2)
    ff, attn = subs.ff, subs.attn
    if variant == "mask_dropped":
        mask = None
    if variant == "swap_pre_post":
        pre_ln = not pre_ln
    if variant == "residual_flip":
        residual = not residual
    r = 1.0 if residual else 0.0
    if variant == "ln_inside":  # post-LN asked, sublayer output normalised before the add
        h = r * x + ln1(attn(x, x, mask)[0])
        return r * h + ln2(ff(h))
    if variant == "second_residual_from_x":
        h = ln1(r * x + attn(x, x, mask)[0]) if not pre_ln else r * x + attn(ln1(x), ln1(x), mask)[0]
        return ln2(r * x + ff(h)) if not pre_ln else r * x + ff(ln2(h))
    if pre_ln:
        z = ln1(x)
        h = r * x + attn(z, z, mask)[0]  # (B, T, d)
        return r * h + ff(ln2(h))  # (B, T, d)
    h = ln1(r * x + attn(x, x, mask)[0])  # (B, T, d)
    return ln2(r * h + ff(h))  # (B, T, d)


BLOCK_VARIANTS = {
    "ln_inside": "LayerNorm was applied to the sublayer output before the residual add; post-LN (the "
                 "paper's block) normalises the sum: h = LN1(x + attn(x)), y = LN2(h + ff(h))",
    "swap_pre_post": "the block computes the other LayerNorm placement: post-LN is LN(x + sublayer(x)), "
                     "pre-LN is x + sublayer(LN(x)); check which one the pre_ln flag selects",
    "ln_swapped": "ln1 and ln2 are used in each other's place: ln1 belongs to the attention sublayer, ln2 to the feed-forward",
    "residual_flip": "the residual flag is not honoured: residual=True adds the sublayer input back, residual=False must not",
    "second_residual_from_x": "the feed-forward residual adds the block input x; it must add h, the attention sublayer's output",
    "mask_dropped": "the mask was not passed on to the attention sublayer",
}


def check_block(TransformerBlock: type) -> None:
    """TransformerBlock wiring (post-LN, pre-LN, with and without residual, with a causal mask), float64.

    The block's attention, LayerNorms and feed-forward network are replaced by the grader's
    (torch.nn.MultiheadAttention and torch layers with fresh random weights), so only the wiring
    written in forward is under test; the reference is computed from the grader's own copies.
    """
    rng = fresh_rng()
    H, dh = int(rng.integers(2, 4)), int(rng.integers(2, 5))
    d, B, T = H * dh, int(rng.integers(1, 3)), int(rng.integers(4, 8))
    d_ff = 4 * d
    cases = [
        dict(pre_ln=False, residual=True, causal=False),
        dict(pre_ln=False, residual=True, causal=True),
        dict(pre_ln=True, residual=True, causal=False),
        dict(pre_ln=True, residual=True, causal=True),
        dict(pre_ln=False, residual=False, causal=False),
        dict(pre_ln=True, residual=False, causal=False),
    ]
    with torch.no_grad():  # the grader's reference; every weight is drawn from rng
        for case in cases:
            _check_block_case(TransformerBlock, d, H, d_ff, B, T, case, rng)


def _check_block_case(TB: type, d: int, H: int, d_ff: int, B: int, T: int, case: dict, rng: np.random.Generator) -> None:
    pre_ln, residual, causal = case["pre_ln"], case["residual"], case["causal"]
    label = f"TransformerBlock({d}, {H}, {d_ff}, pre_ln={pre_ln}, residual={residual})"
    what = label + (" with a causal mask" if causal else "")
    block = call_student(TB, d, H, d_ff, pre_ln=pre_ln, residual=residual, what=label, named=view_error)
    for name in SUBLAYERS:
        if not _has(block, name):
            fail(label, f"has no attribute {name!r}", "Keep the sublayers the skeleton's __init__ creates.")
    subs = _grader_sublayers(d, H, d_ff, rng)
    kernel_subs = _kernel_sublayers(subs, d, H, d_ff)
    keep_settings = helper("mlbook_helpers.transformer_block:keep_settings")
    for name in SUBLAYERS:  # the grader's sublayer, with the settings (n_heads, ...) the student's one had
        setattr(block, name, keep_settings(kernel_subs[name], getattr(block, name)))
    block.double()
    block.eval()
    x = torch.from_numpy(rng.normal(size=(B, T, d)))  # (B, T, d)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None] if causal else None  # (1, 1, T, T)
    y, attn = ask_items(block, x, mask, n=2, what=what, names="the pair (y, attn)", named=view_error)
    ref = _ref_block(subs, x, mask, pre_ln, residual).numpy()  # (B, T, d)
    compare(array(y, f"{what}: y"), ref, f"{what}: y",
            "post-LN: h = LN1(x + attn(x)), y = LN2(h + FFN(h)); pre-LN: h = x + attn(LN1(x)), y = h + FFN(LN2(h)); "
            "residual=False drops the '+ x' and '+ h' terms.", atol=GRAD_TOL, rtol=1e-8, mistake_tol=(1e-9, 1e-8),
            mistakes={msg: (lambda v=v: _ref_block(subs, x, mask, pre_ln, residual, v).numpy())
                      for v, msg in BLOCK_VARIANTS.items()},
            shape_hint="The block's output has its input's shape (B, T, d_model).",
            observed=lambda got: f"output differs from the block's definition ({first_bad(got, ref, GRAD_TOL, 1e-8)})")
    z = subs.ln1(x) if pre_ln else x  # what the attention sublayer reads
    ref_attn = subs.attn(z, z, mask)[1].numpy()  # (B, H, T, T)
    if isinstance(attn, Handle) or not close(attn, ref_attn, atol=1e-10, rtol=0):
        fail(what, "y is right but the returned attn is not the attention sublayer's weights",
             "Return the (B, H, T, T) weights that self.attn returned.")
