"""Check of apply_mask: masked scores become their dtype's most negative finite value, in every dtype."""

from __future__ import annotations

from typing import Callable

import torch

from ...kit import call_seeing_args, call_student, describe, dtype_name, fail, fresh_rng, torch_generator
from ._common import DTYPES, POLARITY, float16_overflow, randn, shape_str

__all__ = ["check_apply_mask"]


def check_apply_mask(apply_mask: Callable) -> None:
    """Masked scores become exactly the dtype's most negative finite value (replaced, not added to: a fully
    masked row is then uniform whatever its scores); nothing becomes inf or NaN."""
    rng = fresh_rng()
    gen = torch_generator(rng)
    for dtype in DTYPES:
        B, H, T_q = int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 7))
        T_k = T_q + int(rng.integers(1, 4))
        scores = randn(gen, B, H, T_q, T_k, dtype=dtype, scale=3.0)  # (B, H, T_q, T_k)
        kind = int(rng.integers(3))
        if kind == 0:
            mask = torch.rand(B, 1, 1, T_k, generator=gen) < 0.6  # (B, 1, 1, T_k) key padding
            mask[-1] = False  # a sequence that is all padding: every row fully masked
        elif kind == 1:
            mask = torch.rand(1, 1, T_q, T_k, generator=gen) < 0.6  # (1, 1, T_q, T_k)
            mask[..., 0, :] = False  # a fully masked query row
        else:
            mask = torch.rand(B, H, T_q, T_k, generator=gen) < 0.6  # (B, H, T_q, T_k)
            mask[0, 0, -1, :] = False
        full = mask.expand(B, H, T_q, T_k)  # (B, H, T_q, T_k)
        dead = ~full.any(dim=-1)  # (B, H, T_q)
        # Dead rows carry very negative scores: adding finfo.min to them overflows in float16.
        scores = torch.where(dead[..., None], scores.double().abs().neg().sub(40.0).to(dtype), scores)
        # ... and one large positive score each (key 0): finfo.min + 40 is -65472 in float16, not finfo.min, so an
        # additive mask, even clamped, leaves that row non-uniform. In every run, in every dtype.
        scores[..., 0] = torch.where(dead, scores[..., 0].double().abs().add(40.0).to(dtype), scores[..., 0])
        before = scores.clone()
        what = (f"apply_mask on {dtype_name(dtype)} scores of shape {shape_str(scores.shape)} with a mask of shape "
                f"{shape_str(mask.shape)}")
        out, (scores_after, _) = call_seeing_args(apply_mask, scores, mask, what=what, named=float16_overflow(
            dtype, "raised RuntimeError: the fill value cannot be converted to float16 without overflow",
            "A fixed constant such as -1e9 is not representable in float16 (its largest magnitude is 65504). "
            "Fill with torch.finfo(scores.dtype).min, which is finite in every dtype."))
        if not isinstance(out, torch.Tensor):
            fail(what, f"returned {describe(out)}", "Return the filled scores as a tensor.")
        if not torch.equal(scores_after, before):
            fail(what, "changed the caller's scores in place (masked_fill_ with an underscore?)",
                 "Return a new tensor: scores.masked_fill(...) without the underscore.")
        if out.dtype != dtype:
            fail(what, f"returned dtype {out.dtype}", "Keep the scores' dtype: take the fill value from torch.finfo(scores.dtype).")
        if tuple(out.shape) != (B, H, T_q, T_k):
            fail(what, f"shape is {shape_str(out.shape)}, expected {shape_str((B, H, T_q, T_k))}",
                 "The mask broadcasts against the scores; the result has the scores' shape.")
        o, s = out.double(), scores.double()
        if not torch.equal(o[full], s[full]):
            msg = "allowed (True) scores must stay unchanged. "
            if torch.equal(o[~full], s[~full]):
                msg = "the polarity is inverted: you filled the allowed positions and kept the forbidden ones. "
            fail(what, "scores where the mask is True were changed", msg + POLARITY)
        filled = o[~full]
        finfo_min = torch.finfo(dtype).min
        if torch.isnan(filled).any():
            fail(what, "masked scores are NaN", "Fill with torch.finfo(scores.dtype).min.")
        if torch.isinf(filled).any():
            n_inf, n = int(torch.isinf(filled).sum()), filled.numel()
            if dtype == torch.float16 and n_inf < n:
                fail(what, f"{n_inf} of {n} masked scores are -inf, where the scores were most negative",
                     "Adding finfo.min to a negative score overflows float16 to -inf, and a fully masked row of -inf "
                     "becomes NaN after the softmax. Fill the scores (masked_fill / torch.where) instead of adding, "
                     "or clamp the sum at finfo.min.")
            if dtype == torch.float16 and n_inf == n:
                fail(what, "masked scores are -inf in float16",
                     "Either the fill is -inf, or a constant such as -1e9 overflowed float16 (largest magnitude 65504) "
                     "to -inf. A fully masked row then becomes NaN after the softmax. Use torch.finfo(scores.dtype).min.")
            fail(what, f"masked scores are -inf in {dtype}",
                 "A fully masked row of -inf becomes NaN after the softmax (-inf - (-inf)). "
                 "Fill with torch.finfo(scores.dtype).min, the most negative FINITE value.")
        if not (filled <= finfo_min / 2).all():
            worst = float(filled.max())
            fail(what, f"masked scores are {worst:.4g}, far above the most negative finite value of {dtype} ({finfo_min:.4g})",
                 "A hand-picked constant (-1e9, -1e4, 0) depends on the dtype and on the scale of the scores; "
                 "use torch.finfo(scores.dtype).min.")
        if not (filled == finfo_min).all():
            off = filled[filled != finfo_min]
            fail(what, f"{off.numel()} of {filled.numel()} masked scores are not finfo.min ({finfo_min:.6g}) but "
                       f"{float(off.max()):.6g} .. {float(off.min()):.6g}",
                 "An ADDITIVE finfo.min mask keeps each masked score's difference (finfo.min + score; -65504 + 40 is "
                 "-65472 in float16), so a fully masked row is not uniform. REPLACE the masked scores with "
                 "torch.finfo(scores.dtype).min (masked_fill / torch.where).")
        same = call_student(apply_mask, scores, None, what="apply_mask(scores, None)")
        if not (isinstance(same, torch.Tensor) and same.dtype == dtype and torch.equal(same, before)):
            fail("apply_mask(scores, None)", "did not return the scores unchanged", "mask=None means nothing is masked.")
