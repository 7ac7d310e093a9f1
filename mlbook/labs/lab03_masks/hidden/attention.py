"""Checks of scaled_dot_product_attention and of mask_after_softmax (the deliberately wrong order).

The reference is kit.attention in float64 on the same inputs; torch's own SDPA is a second
opinion where it is defined (every row keeps a key).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from ...kit import (TORCH_ATOL, ask_items, attention, call_student, causal_allowed, compare, describe, dtype_name, fail,
                    fresh_rng, given, torch_generator)
from ._common import DTYPES, POLARITY, as_numpy, float16_overflow, randn, shape_str
from .graders import graders_apply_mask

__all__ = ["check_scaled_dot_product_attention", "check_mask_after_softmax"]

# A finite fill, as a student's finfo.min is: a row (or column) a wrong mask blocks entirely comes
# out uniform, where -inf would give NaN. Added to the scaled scores as kit.attention's bias.
_FILL = -1e300


def _wrong_weights(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   allowed: np.ndarray) -> dict[str, Callable[[], np.ndarray]]:
    """Message -> the weights a known mistake would produce (float64).

    Args:
        q: (B, H, T_q, d_k), k: (B, H, T_k, d_k), v: (B, H, T_k, d_v); allowed: (B, H, T_q, T_k) bool.
    """
    d = q.shape[-1]
    blocked = np.where(allowed, 0.0, _FILL)  # (B, H, T_q, T_k): the mask as a finite fill
    inverted = np.where(allowed, _FILL, 0.0)  # (B, H, T_q, T_k)

    def weights(**options) -> np.ndarray:
        return attention(q, k, v, **options)[1]  # (B, H, T_q, T_k)

    return {
        "the mask was applied after the softmax: masked weights were zeroed but the rows were not renormalised, "
        "so they no longer sum to 1. Fill the SCORES before the softmax.": lambda: weights() * allowed,
        "the mask polarity is inverted: allowed keys got zero weight and forbidden keys the rest. " + POLARITY:
            lambda: weights(bias=inverted),
        "the mask was ignored: forbidden keys still get weight": lambda: weights(),
        "the scores were divided by d_k instead of sqrt(d_k)": lambda: weights(bias=blocked, scale=d),
        "the scores were not scaled by 1/sqrt(d_k)": lambda: weights(bias=blocked, scale=1.0),
        "the scale was taken from the values' width d_v: it is 1/sqrt(d_k), d_k = q.shape[-1]":
            lambda: weights(bias=blocked, scale=np.sqrt(v.shape[-1])),
        "the scale was taken from the number of keys T_k: it is 1/sqrt(d_k), d_k = q.shape[-1]":
            lambda: weights(bias=blocked, scale=np.sqrt(k.shape[-2])),
        "the softmax was taken over the query axis (dim=-2) instead of the keys (dim=-1)":
            lambda: weights(bias=blocked, axis=-2),
    }


def _check_attention_case(fn: Callable, q, k, v, mask, what: str, compare_sdpa: dict | None) -> None:
    """One call of the student's attention on q (B, H, T_q, d_k), k (B, H, T_k, d_k), v (B, H, T_k, d_v)
    and ``mask`` (bool broadcastable to (B, H, T_q, T_k), or None); ``compare_sdpa``: the arguments
    that make torch's SDPA compute the same, or None where it differs (a fully masked row)."""
    dtype = q.dtype
    tol = TORCH_ATOL[dtype_name(dtype)]
    B, H, T_q, _ = q.shape
    T_k, d_v = k.shape[-2], v.shape[-1]
    out, attn = ask_items(fn, q, k, v, mask, n=2, what=what, names="the pair (out, attn)", named=float16_overflow(
        dtype, "raised RuntimeError: the mask's fill value cannot be converted to float16 without overflow",
        "A fixed constant such as -1e9 is not representable in float16 (largest magnitude 65504): "
        "fill with torch.finfo(scores.dtype).min."))
    for name, t, shape in (("out", out, (B, H, T_q, d_v)), ("attn", attn, (B, H, T_q, T_k))):
        if not isinstance(t, torch.Tensor):
            fail(what, f"{name} is {describe(t)}", "Return torch tensors.")
        if tuple(t.shape) != shape:
            fail(what, f"{name} has shape {shape_str(t.shape)}, expected {shape_str(shape)}",
                 "attn is (B, H, T_q, T_k) and out is (B, H, T_q, d_v): one row per query, d_v from the values.")
        if t.dtype != dtype:
            fail(what, f"{name} has dtype {t.dtype}", "Keep the input dtype (torch's SDPA does).")
    if not (torch.isfinite(out).all() and torch.isfinite(attn).all()):
        fail(what, f"{int((~torch.isfinite(attn)).sum())} weights and {int((~torch.isfinite(out)).sum())} outputs are NaN or inf",
             "A fully masked row must not produce NaN: fill masked scores with torch.finfo(dtype).min, not -inf "
             "(and not -1e9, which is -inf in float16).")
    qn, kn, vn = as_numpy(q), as_numpy(k), as_numpy(v)
    shape = (B, H, T_q, T_k)
    allowed = np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(mask.cpu().numpy(), shape)
    ref_out, ref_w = attention(qn, kn, vn, allowed)  # (B, H, T_q, d_v), (B, H, T_q, T_k): NaN on a fully masked row
    live = allowed.any(axis=-1)  # (B, H, T_q): rows with at least one allowed key
    if not live.all():
        # The lab's convention: a fully masked row fills every score with finfo.min, so its softmax is
        # uniform over all T_k keys and its output is the mean of the value rows (never zeros, never NaN).
        dead = ~live  # (B, H, T_q)
        w_dead = as_numpy(attn)[dead]  # (n_dead, T_k)
        if not np.allclose(w_dead, 1.0 / T_k, atol=10 * tol, rtol=0):
            zeros = np.allclose(w_dead, 0.0, atol=10 * tol)
            fail(what, "a fully masked row's weights are " + ("all zero" if zeros else
                 f"not uniform (range {w_dead.min():.3g} .. {w_dead.max():.3g})"),
                 ("Zeroing a NaN row (nan_to_num after a -inf softmax) is not the lab's convention. " if zeros else
                  "An ADDITIVE finfo.min mask keeps the masked scores' differences (finfo.min + score), so a fully "
                  "masked row is not uniform. ") +
                 "A fully masked row must give uniform weights 1/T_k: REPLACE masked scores with "
                 "torch.finfo(dtype).min (masked_fill / torch.where), do not add it.")
        mean_v = np.broadcast_to(vn.mean(axis=-2, keepdims=True), (B, H, T_q, d_v))[dead]  # (n_dead, d_v)
        if not np.allclose(as_numpy(out)[dead], mean_v, atol=10 * tol * max(1.0, float(np.abs(vn).max())), rtol=0):
            fail(what, "a fully masked row's output is not the mean of the value rows",
                 "Uniform weights 1/T_k give out = v.mean(dim=-2) on a fully masked row.")
    def weights_off(a: np.ndarray) -> str:  # a: (n_live, T_k), the live rows' weights
        sums = a.sum(-1)  # (n_live,)
        off = np.abs(sums - 1) > 10 * tol
        return (f"rows of attn sum to {np.round(sums[off][:4], 3).tolist()}" if off.any()
                else f"weights differ (largest gap {np.abs(a - ref_w[live]).max():.3g})")

    compare(as_numpy(attn)[live], ref_w[live], what,
            "Scores q @ k^T / sqrt(d_k), masked BEFORE a softmax over the keys (dim=-1).", atol=tol, rtol=0,
            mistakes={m: (lambda f=f: f()[live]) for m, f in _wrong_weights(qn, kn, vn, allowed).items()},
            observed=weights_off)
    v_size = max(1.0, float(np.abs(vn).max()))
    compare(as_numpy(out)[live], ref_out[live], what, "The output mixes the VALUE rows with the weights: attn @ v.",
            atol=tol * v_size, rtol=0, observed=lambda o: "weights are right but outputs differ "
                                                          f"(largest gap {np.abs(o - ref_out[live]).max():.3g})")
    if compare_sdpa is not None:
        ref_t = torch.nn.functional.scaled_dot_product_attention(q, k, v, **compare_sdpa)  # (B, H, T_q, d_v)
        gap = (out.double() - ref_t.double()).abs()[torch.from_numpy(live)]
        if not bool((gap <= 2 * tol * v_size).all()):
            fail(what, f"differs from torch.nn.functional.scaled_dot_product_attention by {float(gap.max()):.3g}",
                 "Use the default scale 1/sqrt(d_k) and the boolean mask as 'True = may attend'.")


def check_scaled_dot_product_attention(fn: Callable) -> None:
    """Against the grader's NumPy reference and torch's SDPA, in four dtypes, with T_q != T_k."""
    fn = given(fn, apply_mask=graders_apply_mask)  # the attention alone: the apply_mask it calls is the grader's
    rng = fresh_rng()
    gen = torch_generator(rng)
    for dtype in DTYPES:
        name = dtype_name(dtype)
        B, H = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        d, d_v = int(rng.choice([3, 5, 8, 16])), int(rng.choice([2, 4, 6]))
        T = int(rng.integers(3, 9))
        q, k, v = (randn(gen, B, H, T, n, dtype=dtype) for n in (d, d, d_v))
        causal = torch.from_numpy(causal_allowed(T))[None, None]  # (1, 1, T, T)
        _check_attention_case(fn, q, k, v, causal, f"{name}, causal mask (1, 1, {T}, {T}), q {shape_str(q.shape)}",
                              {"is_causal": True})
        T_q = int(rng.integers(2, 7))
        T_k = T_q + int(rng.integers(1, 5))
        q = randn(gen, B, H, T_q, d, dtype=dtype)
        k, v = randn(gen, B, H, T_k, d, dtype=dtype), randn(gen, B, H, T_k, d_v, dtype=dtype)
        _check_attention_case(fn, q, k, v, None, f"{name}, no mask, T_q={T_q}, T_k={T_k}", {})
        shapes = [(B, 1, 1, T_k), (1, H, T_q, T_k), (B, 1, T_q, T_k), (T_q, T_k)]
        shape = shapes[int(rng.integers(len(shapes)))]
        mask = torch.rand(*shape, generator=gen) < 0.6
        mask[..., 0] = True  # every row keeps a key: comparable with torch's SDPA
        _check_attention_case(fn, q, k, v, mask,
                              f"{name}, boolean mask of shape {shape_str(shape)}, q {shape_str(q.shape)}, k {shape_str(k.shape)}",
                              {"attn_mask": mask})
        dead_mask = torch.rand(B, 1, T_q, T_k, generator=gen) < 0.6  # (B, 1, T_q, T_k)
        dead_mask[..., 0] = True
        row = int(rng.integers(T_q))
        dead_mask[0, 0, row, :] = False  # a fully masked query row, in every run
        # That row scores exactly 40 against key 0 in every head: finfo.min + 40 is not finfo.min in float16, so an
        # additive mask leaves the row non-uniform, in every run.
        k0 = k[0, :, 0].double()  # (H, d)
        q = q.clone()
        q[0, :, row] = (k0 * (40.0 * math.sqrt(d) / (k0 * k0).sum(-1, keepdim=True))).to(dtype)  # (H, d)
        _check_attention_case(fn, q, k, v, dead_mask, f"{name}, a fully masked row, q {shape_str(q.shape)}", None)


def check_mask_after_softmax(fn: Callable) -> None:
    """The deliberately wrong variant: softmax over all keys, then zero the masked weights."""
    rng = fresh_rng()
    gen = torch_generator(rng)
    for dtype in (torch.float64, torch.float32):
        tol = TORCH_ATOL[dtype_name(dtype)]
        B, H, T_q = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(3, 7))
        T_k = T_q + int(rng.integers(0, 4))
        d, d_v = int(rng.integers(2, 9)), int(rng.integers(2, 5))
        q, k, v = randn(gen, B, H, T_q, d, dtype=dtype), randn(gen, B, H, T_k, d, dtype=dtype), randn(gen, B, H, T_k, d_v, dtype=dtype)
        mask = torch.rand(B, 1, T_q, T_k, generator=gen) < 0.6
        mask[..., 0] = True
        what = f"mask_after_softmax on {dtype_name(dtype)} q {shape_str(q.shape)}, k {shape_str(k.shape)}"
        res = call_student(fn, q, k, v, mask, what=what)
        if not (isinstance(res, tuple) and len(res) == 2 and all(isinstance(t, torch.Tensor) for t in res)):
            fail(what, f"returned {describe(res)}", "Return the pair (out, attn) of tensors.")
        out, attn = res
        for name, t, shape in (("out", out, (B, H, T_q, d_v)), ("attn", attn, (B, H, T_q, T_k))):
            if tuple(t.shape) != shape or t.dtype != dtype:
                fail(what, f"{name} has shape {shape_str(t.shape)} and dtype {t.dtype}",
                     f"Keep the input dtype; attn is (B, H, T_q, T_k) and out (B, H, T_q, d_v), here {shape_str(shape)}.")
        if not (torch.isfinite(out).all() and torch.isfinite(attn).all()):
            fail(what, "attn or out contains NaN or inf",
                 "Take the softmax over all keys of q @ k^T / sqrt(d_k), then zero the masked weights (nothing is -inf).")
        qn, kn, vn, allowed = as_numpy(q), as_numpy(k), as_numpy(v), mask.numpy()
        full = attention(qn, kn, vn)[1]  # (B, H, T_q, T_k): the softmax over every key
        ref_w = full * allowed  # (B, H, T_q, T_k) rows sum to < 1
        compare(as_numpy(attn), ref_w, what, "Take the softmax of q @ k^T / sqrt(d_k) over all keys, then zero the "
                "weights where the mask is False (True = allowed), without renormalising.",
                atol=tol, rtol=1e-5, mistake_tol=(tol, 1e-6), mistakes={
            "your weights are renormalised (rows sum to 1): that is the correct masked attention. This function "
            "must show the BUG: softmax over all keys first, then zero the masked weights, without renormalising":
                lambda: attention(qn, kn, vn, allowed)[1],
            "masked weights are not zeroed: multiply (or fill) the softmax weights with the mask afterwards": full,
            "the allowed weights were zeroed and the masked ones kept: the polarity is inverted. " + POLARITY:
                full * ~allowed,
        }, observed=lambda a: f"weights of shape {shape_str(a.shape)} differ from softmax-then-zero")
        compare(as_numpy(out), ref_w @ vn, what, "out = attn @ v with the zeroed weights.", atol=10 * tol, rtol=1e-5,
                observed=lambda o: "weights are right but outputs differ")
