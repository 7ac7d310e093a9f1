"""Hidden checks for lab 3, causal and padding masks (grader only).

Convention, as in the lab: a boolean mask is True where attention is allowed; it broadcasts
against scores of shape (B, H, T_q, T_k).

Every check draws fresh inputs (``fresh_rng``) of other shapes and dtypes than the notebook,
computes the grader's own reference here (NumPy in float64, independent of the notebook's
solution) and, on a mismatch, names the known mistake the student's output matches.
Messages quote the student's values and public constants (finfo limits) only.

Checks run in the grader; the student's functions are called in their kernel, so every argument
is data. The layers and the attention a student's property test or ``permutation_gap`` calls are
built here from the grader's own ``mlbook_helpers.masking`` and lent to the kernel (``lend``):
the student's code can call them, never look inside (a layer's leak is the answer).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from mlbook.labs._support import RemoteError, boolean, call_student, describe, diagnose, fresh_rng, number
from mlbook_helpers.checks import Misconception
from mlbook_kernel.wire import WireError
from mlbook.labs._support import fail as _fail
from mlbook_helpers.masking import CAUSAL_LEAKS as _CAUSAL_LEAK_NAMES
from mlbook_helpers.masking import D_MODEL, causal_layer_with_leak, library_attention, padding_layer_with_leak
from mlbook.judge.remote import lend
from mlbook_helpers.masking import PADDING_LEAKS as _PADDING_LEAK_NAMES

__all__ = [
    "check_causal_mask",
    "check_causal_mask_with_cache",
    "check_padding_mask",
    "check_combine_masks",
    "check_apply_mask",
    "check_scaled_dot_product_attention",
    "check_mask_after_softmax",
    "check_outputs_ignore_future",
    "check_padding_invariant",
    "check_mask_conversions",
    "check_permutation_gap",
]

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Absolute tolerance on outputs and weights of O(1), per input dtype.
TOL = {torch.float16: 2e-2, torch.bfloat16: 8e-2, torch.float32: 1e-5, torch.float64: 1e-10}
POLARITY = "The course's convention: a mask is True where attention is ALLOWED."


def fail(what: str, observed: str, hint: str | None = None) -> None:
    """_support.fail, with the hint starting as a sentence (diagnoses are written lower-case)."""
    _fail(what, observed, hint[:1].upper() + hint[1:] if hint else hint)


# --------------------------------------------------------------------------- inputs


def _gen(rng: np.random.Generator) -> torch.Generator:
    """A torch generator seeded from the fresh NumPy generator."""
    return torch.Generator().manual_seed(int(rng.integers(2**31 - 1)))


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64, scale: float = 1.0) -> torch.Tensor:
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def _shape_str(shape: Any) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ")"


def _expect_bool_tensor(m: Any, shape: tuple[int, ...], what: str) -> None:
    """Fail unless ``m`` is a torch bool tensor of exactly ``shape``."""
    if not isinstance(m, torch.Tensor):
        fail(what, f"returned {describe(m)}, not a torch tensor", "Build the mask with torch.")
    if m.dtype != torch.bool:
        fail(what, f"dtype is {m.dtype}, not torch.bool",
             "Return a boolean mask (True where attention is allowed): a 0/1 float mask would be "
             "added to or multiplied with the scores instead of selecting them.")
    if tuple(m.shape) != shape:
        fail(what, f"shape is {_shape_str(m.shape)}, expected {_shape_str(shape)}",
             "Keep the broadcast axes of size 1 so the mask lines up with (B, H, T_q, T_k) scores.")


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(torch.float64).cpu().numpy()


# --------------------------------------------------------------------------- the grader's reference


def _ref_weights(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Reference weights in float64 and the (broadcast) boolean mask of fully masked rows.

    Args:
        q: (B, H, T_q, d), k: (B, H, T_k, d); mask: bool broadcastable to (B, H, T_q, T_k) or None.
    Returns:
        weights: (B, H, T_q, T_k) (uniform on fully masked rows); dead: (B, H, T_q) bool.
    """
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    if mask is None:
        allowed = np.ones(s.shape, dtype=bool)
    else:
        allowed = np.broadcast_to(mask, s.shape)  # (B, H, T_q, T_k)
    dead = ~allowed.any(axis=-1)  # (B, H, T_q)
    s = np.where(allowed | dead[..., None], s, -np.inf)  # a dead row: every key counts again
    s = np.where(dead[..., None], 0.0, s)  # ... with equal weight
    e = np.exp(s - s.max(axis=-1, keepdims=True))  # (B, H, T_q, T_k)
    return e / e.sum(axis=-1, keepdims=True), dead


def _softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _wrong_weights(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None) -> dict[str, Callable[[], np.ndarray]]:
    """Message -> the weights a known mistake would produce (float64)."""
    d = q.shape[-1]
    raw = np.einsum("bhqd,bhkd->bhqk", q, k)  # (B, H, T_q, T_k)
    allowed = np.ones(raw.shape, dtype=bool) if mask is None else np.broadcast_to(mask, raw.shape)
    big = -1e300

    def masked(s, keep):
        return _softmax(np.where(keep, s, big))

    return {
        "the mask was applied after the softmax: masked weights were zeroed but the rows were not renormalised, "
        "so they no longer sum to 1. Fill the SCORES before the softmax.": lambda: _softmax(raw / math.sqrt(d)) * allowed,
        "the mask polarity is inverted: allowed keys got zero weight and forbidden keys the rest. " + POLARITY:
            lambda: masked(raw / math.sqrt(d), ~allowed),
        "the mask was ignored: forbidden keys still get weight": lambda: _softmax(raw / math.sqrt(d)),
        "the scores were divided by d_k instead of sqrt(d_k)": lambda: masked(raw / d, allowed),
        "the scores were not scaled by 1/sqrt(d_k)": lambda: masked(raw, allowed),
        "the softmax was taken over the query axis (dim=-2) instead of the keys (dim=-1)":
            lambda: _softmax(np.where(allowed, raw / math.sqrt(d), big), axis=-2),
    }


# --------------------------------------------------------------------------- mask builders


def check_causal_mask(causal_mask: Callable) -> None:
    """causal_mask(T) -> (1, 1, T, T) bool, True where key j <= query i."""
    rng = fresh_rng()
    for T in (int(rng.integers(7, 14)), int(rng.integers(2, 6)), 1):
        what = f"causal_mask({T})"
        m = call_student(causal_mask, T, what=what)
        _expect_bool_tensor(m, (1, 1, T, T), what)
        got = m[0, 0].cpu().numpy()  # (T, T)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        if np.array_equal(got, j <= i):
            continue
        msg = diagnose(got, {
            "the diagonal is excluded, so a token cannot read itself and the first row is fully masked "
            "(off by one: use j <= i, torch.tril with diagonal=0)": j < i,
            "each query also sees the next (future) key (off by one: the diagonal offset should be 0, not 1)": j <= i + 1,
            "the polarity is inverted: True marks the future, which is the positions to BLOCK. " + POLARITY: j > i,
            "the mask is upper-triangular: each query sees the future and not the past": j >= i,
        })
        fail(what, f"row 0 is {got[0].astype(int).tolist()[:8]} and row {T - 1} is {got[-1].astype(int).tolist()[:8]}",
             msg or "Query i may read key j exactly when j <= i (the past and itself).")


def check_causal_mask_with_cache(causal_mask_with_cache: Callable) -> None:
    """The T_new newest queries against T_total keys: query i is absolute position T_total - T_new + i."""
    rng = fresh_rng()
    t_total = int(rng.integers(6, 12))
    cases = [(int(rng.integers(2, t_total)), t_total), (1, int(rng.integers(3, 9))), (t_total, t_total)]
    for t_new, t_all in cases:
        what = f"causal_mask_with_cache({t_new}, {t_all})"
        m = call_student(causal_mask_with_cache, t_new, t_all, what=what)
        _expect_bool_tensor(m, (1, 1, t_new, t_all), what)
        got = m[0, 0].cpu().numpy()  # (T_new, T_total)
        i = np.arange(t_new)[:, None] + (t_all - t_new)  # (T_new, 1) absolute query positions
        j = np.arange(t_all)[None, :]  # (1, T_total)
        if np.array_equal(got, j <= i):
            continue
        i0 = np.arange(t_new)[:, None]
        msg = diagnose(got, {
            "the queries were aligned with the START of the keys (top-left): they are the newest tokens, so "
            "query i sits at absolute position T_total - T_new + i (bottom-right alignment)": j <= i0,
            "the diagonal is excluded: a new token must see its own key (off by one)": j < i,
            "each query also sees one future key (off by one)": j <= i + 1,
            "the polarity is inverted. " + POLARITY: j > i,
        })
        fail(what, f"the last query's row is {got[-1].astype(int).tolist()[:12]}",
             msg or "Query i (absolute position T_total - T_new + i) may read key j exactly when j <= that position.")


def check_padding_mask(padding_mask: Callable) -> None:
    """padding_mask(is_pad (B, T_k), True at PAD) -> (B, 1, 1, T_k), True at real keys."""
    rng = fresh_rng()
    B, T_k = int(rng.integers(2, 5)), int(rng.integers(4, 10))
    lengths = rng.integers(1, T_k + 1, size=B)
    lengths[0] = T_k  # one sequence without padding
    is_pad = torch.from_numpy(np.arange(T_k)[None, :] >= lengths[:, None])  # (B, T_k) right padding
    is_pad[-1] = torch.from_numpy(rng.random(T_k) < 0.5)  # and one irregular pattern
    before = is_pad.clone()
    what = f"padding_mask of a ({B}, {T_k}) is_pad"
    m = call_student(padding_mask, is_pad, what=what)
    if isinstance(m, torch.Tensor) and tuple(m.shape) == (B, 1, T_k, 1):
        fail(what, f"shape is {_shape_str(m.shape)}",
             "The mask was put on the query axis: padding removes KEYS (columns of the scores), so it "
             "must broadcast as (B, 1, 1, T_k), not (B, 1, T_q, 1).")
    if isinstance(m, torch.Tensor) and tuple(m.shape) == (B, T_k):
        fail(what, f"shape is {_shape_str(m.shape)}", "Add the head and query axes: (B, 1, 1, T_k).")
    _expect_bool_tensor(m, (B, 1, 1, T_k), what)
    if not torch.equal(is_pad, before):
        fail(what, "changed the caller's is_pad in place", "Return a new tensor; do not modify the input.")
    got = m[:, 0, 0, :].cpu().numpy()  # (B, T_k)
    ref = ~is_pad.numpy()
    if not np.array_equal(got, ref):
        msg = diagnose(got, {
            "the polarity is inverted: your mask is True at the PAD tokens, so attention would land only on "
            "padding. is_pad marks what to ignore; invert it (~is_pad). " + POLARITY: is_pad.numpy(),
        })
        fail(what, f"row 0 of your mask is {got[0].astype(int).tolist()}", msg or "True where the key is a real token.")


def check_combine_masks(combine_masks: Callable) -> None:
    """combine_masks(*masks): AND of broadcastable bool masks, None entries skipped."""
    rng = fresh_rng()
    gen = _gen(rng)
    B, H, T = int(rng.integers(2, 4)), int(rng.integers(2, 4)), int(rng.integers(4, 8))
    causal = torch.from_numpy(np.tril(np.ones((T, T), dtype=bool)))[None, None]  # (1, 1, T, T)
    pad = torch.rand(B, 1, 1, T, generator=gen) < 0.7  # (B, 1, 1, T)
    extra = torch.rand(1, H, T, T, generator=gen) < 0.8  # (1, H, T, T)
    what = "combine_masks(causal (1,1,T,T), None, padding (B,1,1,T))"
    got = call_student(combine_masks, causal, None, pad, what=what)
    ref = causal & pad  # (B, 1, T, T)
    if isinstance(got, torch.Tensor) and got.shape == ref.shape and torch.equal(got, causal | pad):
        fail(what, "a position allowed by only one of the masks is allowed in yours",
             "The masks were combined with OR: a key is allowed only if EVERY mask allows it (AND, &).")
    _expect_bool_tensor(got, tuple(ref.shape), what)
    if not torch.equal(got, ref):
        fail(what, f"{int((got != ref).sum())} of {ref.numel()} entries differ from the AND of the masks",
             "Combine with & and let broadcasting produce (B, 1, T, T).")
    three = call_student(combine_masks, pad, extra, causal, what="combine_masks of three masks")
    ref3 = pad & extra & causal  # (B, H, T, T)
    _expect_bool_tensor(three, tuple(ref3.shape), "combine_masks of three masks")  # torch.equal ignores dtypes
    if not torch.equal(three, ref3):
        fail("combine_masks of three masks", "the result is not the AND of all three",
             "Loop over every argument, not just the first two.")
    one = call_student(combine_masks, None, pad, what="combine_masks(None, padding)")
    if not (isinstance(one, torch.Tensor) and one.dtype == torch.bool and torch.equal(one, pad)):
        fail("combine_masks(None, padding)", "did not return the padding mask unchanged", "None means 'no mask': skip it.")
    none = call_student(combine_masks, None, None, what="combine_masks(None, None)")
    if none is not None:
        fail("combine_masks(None, None)", f"returned a {type(none).__name__}",
             "With no mask at all return None (attention everywhere), not a tensor.")


# --------------------------------------------------------------------------- apply_mask


def _overflowed(exc: Exception, dtype: torch.dtype) -> bool:
    """Whether a student's exception (raised here, or in the kernel as a RemoteError) is torch's
    float16 overflow on converting a fill value."""
    kind, text = (exc.type_name, exc.message) if isinstance(exc, RemoteError) else (type(exc).__name__, str(exc))
    return kind == "RuntimeError" and "overflow" in text and dtype == torch.float16


def _reraise(exc: Exception) -> Callable:
    def raiser(*_args: Any) -> Any:
        raise exc

    return raiser


def _call_fp16(fn: Callable, *args: Any, what: str, dtype: torch.dtype, observed: str, hint: str) -> Any:
    """call_student, naming torch's float16 overflow of a fill value (``observed``, ``hint``)
    whether it was raised here or, as a RemoteError, in the kernel."""
    try:
        return fn(*args)
    except (Misconception, WireError, EOFError, OSError, TimeoutError):
        raise  # a verdict, or the kernel went away
    except Exception as exc:  # noqa: BLE001 - the student's error: a float16 overflow is named, the rest reported
        if _overflowed(exc, dtype):
            fail(what, observed, hint)
        return call_student(_reraise(exc), *args, what=what)


def _call_apply_mask(apply_mask: Callable, scores: torch.Tensor, mask: torch.Tensor, what: str) -> Any:
    return _call_fp16(apply_mask, scores, mask, what=what, dtype=scores.dtype,
                      observed="raised RuntimeError: the fill value cannot be converted to float16 without overflow",
                      hint="A fixed constant such as -1e9 is not representable in float16 (its largest magnitude is "
                           "65504). Fill with torch.finfo(scores.dtype).min, which is finite in every dtype.")


def check_apply_mask(apply_mask: Callable) -> None:
    """Masked scores become the dtype's most negative finite value; nothing becomes inf or NaN."""
    rng = fresh_rng()
    gen = _gen(rng)
    for dtype in DTYPES:
        B, H, T_q = int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 7))
        T_k = T_q + int(rng.integers(1, 4))
        scores = _randn(gen, B, H, T_q, T_k, dtype=dtype, scale=3.0)  # (B, H, T_q, T_k)
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
        before = scores.clone()
        what = f"apply_mask on {str(dtype).replace('torch.', '')} scores of shape {_shape_str(scores.shape)} with a mask of shape {_shape_str(mask.shape)}"
        out = _call_apply_mask(apply_mask, scores, mask, what)
        if not isinstance(out, torch.Tensor):
            fail(what, f"returned {describe(out)}", "Return the filled scores as a tensor.")
        if not torch.equal(scores, before):
            fail(what, "changed the caller's scores in place (masked_fill_ with an underscore?)",
                 "Return a new tensor: scores.masked_fill(...) without the underscore.")
        if out.dtype != dtype:
            fail(what, f"returned dtype {out.dtype}", "Keep the scores' dtype: take the fill value from torch.finfo(scores.dtype).")
        if tuple(out.shape) != (B, H, T_q, T_k):
            fail(what, f"shape is {_shape_str(out.shape)}, expected {_shape_str((B, H, T_q, T_k))}",
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
        same = call_student(apply_mask, scores, None, what="apply_mask(scores, None)")
        if not (isinstance(same, torch.Tensor) and same.dtype == dtype and torch.equal(same, before)):
            fail("apply_mask(scores, None)", "did not return the scores unchanged", "mask=None means nothing is masked.")


# --------------------------------------------------------------------------- attention


def _check_attention_case(fn: Callable, q, k, v, mask, what: str, compare_sdpa: dict | None) -> None:
    dtype = q.dtype
    tol = TOL[dtype]
    B, H, T_q, _ = q.shape
    T_k, d_v = k.shape[-2], v.shape[-1]
    res = _call_fp16(fn, q, k, v, mask, what=what, dtype=dtype,
                     observed="raised RuntimeError: the mask's fill value cannot be converted to float16 without overflow",
                     hint="A fixed constant such as -1e9 is not representable in float16 (largest magnitude 65504): "
                          "fill with torch.finfo(scores.dtype).min.")
    if not (isinstance(res, tuple) and len(res) == 2):
        fail(what, f"returned {describe(res)}", "Return the pair (out, attn).")
    out, attn = res
    for name, t, shape in (("out", out, (B, H, T_q, d_v)), ("attn", attn, (B, H, T_q, T_k))):
        if not isinstance(t, torch.Tensor):
            fail(what, f"{name} is {describe(t)}", "Return torch tensors.")
        if tuple(t.shape) != shape:
            fail(what, f"{name} has shape {_shape_str(t.shape)}, expected {_shape_str(shape)}",
                 "attn is (B, H, T_q, T_k) and out is (B, H, T_q, d_v): one row per query, d_v from the values.")
        if t.dtype != dtype:
            fail(what, f"{name} has dtype {t.dtype}", "Keep the input dtype (torch's SDPA does).")
    if not (torch.isfinite(out).all() and torch.isfinite(attn).all()):
        fail(what, f"{int((~torch.isfinite(attn)).sum())} weights and {int((~torch.isfinite(out)).sum())} outputs are NaN or inf",
             "A fully masked row must not produce NaN: fill masked scores with torch.finfo(dtype).min, not -inf "
             "(and not -1e9, which is -inf in float16).")
    qn, kn, vn = _np(q), _np(k), _np(v)
    mn = None if mask is None else mask.cpu().numpy()
    ref_w, dead = _ref_weights(qn, kn, mn)  # (B, H, T_q, T_k), (B, H, T_q)
    live = ~dead  # rows with at least one allowed key
    a = _np(attn)
    if not np.allclose(a[live], ref_w[live], atol=tol, rtol=0):
        sums = a.sum(-1)[live]
        msg = diagnose(a[live], {m: (lambda f=f: f()[live]) for m, f in _wrong_weights(qn, kn, mn).items()}, atol=tol, rtol=0)
        off = np.abs(sums - 1) > 10 * tol
        observed = (f"rows of attn sum to {np.round(sums[off][:4], 3).tolist()}" if off.any()
                    else f"weights differ (largest gap {np.abs(a[live] - ref_w[live]).max():.3g})")
        fail(what, observed, msg or "Scores q @ k^T / sqrt(d_k), masked BEFORE a softmax over the keys (dim=-1).")
    ref_out = np.einsum("bhqk,bhkd->bhqd", ref_w, vn)  # (B, H, T_q, d_v)
    o = _np(out)
    if not np.allclose(o[live], ref_out[live], atol=tol * max(1.0, float(np.abs(vn).max())), rtol=0):
        fail(what, f"weights are right but outputs differ (largest gap {np.abs(o[live] - ref_out[live]).max():.3g})",
             "The output mixes the VALUE rows with the weights: attn @ v.")
    if compare_sdpa is not None:
        ref_t = torch.nn.functional.scaled_dot_product_attention(q, k, v, **compare_sdpa)  # (B, H, T_q, d_v)
        gap = (out.double() - ref_t.double()).abs()[torch.from_numpy(live)]
        if not bool((gap <= 2 * tol * max(1.0, float(np.abs(vn).max()))).all()):
            fail(what, f"differs from torch.nn.functional.scaled_dot_product_attention by {float(gap.max()):.3g}",
                 "Use the default scale 1/sqrt(d_k) and the boolean mask as 'True = may attend'.")


def check_scaled_dot_product_attention(fn: Callable) -> None:
    """Against the grader's NumPy reference and torch's SDPA, in four dtypes, with T_q != T_k."""
    rng = fresh_rng()
    gen = _gen(rng)
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        B, H = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        d, d_v = int(rng.choice([3, 5, 8, 16])), int(rng.choice([2, 4, 6]))
        T = int(rng.integers(3, 9))
        q, k, v = (_randn(gen, B, H, T, n, dtype=dtype) for n in (d, d, d_v))
        causal = torch.from_numpy(np.tril(np.ones((T, T), dtype=bool)))[None, None]  # (1, 1, T, T)
        _check_attention_case(fn, q, k, v, causal, f"{name}, causal mask (1, 1, {T}, {T}), q {_shape_str(q.shape)}",
                              {"is_causal": True})
        T_q, T_k = int(rng.integers(2, 7)), 0
        T_k = T_q + int(rng.integers(1, 5))
        q = _randn(gen, B, H, T_q, d, dtype=dtype)
        k, v = _randn(gen, B, H, T_k, d, dtype=dtype), _randn(gen, B, H, T_k, d_v, dtype=dtype)
        _check_attention_case(fn, q, k, v, None, f"{name}, no mask, T_q={T_q}, T_k={T_k}", {})
        shapes = [(B, 1, 1, T_k), (1, H, T_q, T_k), (B, 1, T_q, T_k), (T_q, T_k)]
        shape = shapes[int(rng.integers(len(shapes)))]
        mask = torch.rand(*shape, generator=gen) < 0.6
        mask[..., 0] = True  # every row keeps a key: comparable with torch's SDPA
        _check_attention_case(fn, q, k, v, mask,
                              f"{name}, boolean mask of shape {_shape_str(shape)}, q {_shape_str(q.shape)}, k {_shape_str(k.shape)}",
                              {"attn_mask": mask})
        dead_mask = torch.rand(B, 1, T_q, T_k, generator=gen) < 0.6  # (B, 1, T_q, T_k)
        dead_mask[..., 0] = True
        dead_mask[0, 0, int(rng.integers(T_q)), :] = False  # a fully masked query row
        _check_attention_case(fn, q, k, v, dead_mask, f"{name}, a fully masked row, q {_shape_str(q.shape)}", None)


def check_mask_after_softmax(fn: Callable) -> None:
    """The deliberately wrong variant: softmax over all keys, then zero the masked weights."""
    rng = fresh_rng()
    gen = _gen(rng)
    for dtype in (torch.float64, torch.float32):
        B, H, T_q = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(3, 7))
        T_k = T_q + int(rng.integers(0, 4))
        d, d_v = int(rng.integers(2, 9)), int(rng.integers(2, 5))
        q, k, v = _randn(gen, B, H, T_q, d, dtype=dtype), _randn(gen, B, H, T_k, d, dtype=dtype), _randn(gen, B, H, T_k, d_v, dtype=dtype)
        mask = torch.rand(B, 1, T_q, T_k, generator=gen) < 0.6
        mask[..., 0] = True
        what = f"mask_after_softmax on {str(dtype).replace('torch.', '')} q {_shape_str(q.shape)}, k {_shape_str(k.shape)}"
        res = call_student(fn, q, k, v, mask, what=what)
        if not (isinstance(res, tuple) and len(res) == 2 and all(isinstance(t, torch.Tensor) for t in res)):
            fail(what, f"returned {describe(res)}", "Return the pair (out, attn) of tensors.")
        out, attn = res
        for name, t, shape in (("out", out, (B, H, T_q, d_v)), ("attn", attn, (B, H, T_q, T_k))):
            if tuple(t.shape) != shape or t.dtype != dtype:
                fail(what, f"{name} has shape {_shape_str(t.shape)} and dtype {t.dtype}",
                     f"Keep the input dtype; attn is (B, H, T_q, T_k) and out (B, H, T_q, d_v), here {_shape_str(shape)}.")
        if not (torch.isfinite(out).all() and torch.isfinite(attn).all()):
            fail(what, "attn or out contains NaN or inf",
                 "Take the softmax over all keys of q @ k^T / sqrt(d_k), then zero the masked weights (nothing is -inf).")
        qn, kn, vn, mn = _np(q), _np(k), _np(v), mask.numpy()
        full = _softmax(np.einsum("bhqd,bhkd->bhqk", qn, kn) / math.sqrt(d))  # (B, H, T_q, T_k)
        ref_w = full * np.broadcast_to(mn, full.shape)  # (B, H, T_q, T_k) rows sum to < 1
        a = _np(attn)
        if a.shape != ref_w.shape or not np.allclose(a, ref_w, atol=TOL[dtype]):
            right, _ = _ref_weights(qn, kn, mn)
            msg = diagnose(a, {
                "your weights are renormalised (rows sum to 1): that is the correct masked attention. This function "
                "must show the BUG: softmax over all keys first, then zero the masked weights, without renormalising": right,
                "masked weights are not zeroed: multiply (or fill) the softmax weights with the mask afterwards": full,
            }, atol=TOL[dtype])
            fail(what, f"weights of shape {_shape_str(a.shape)} differ from softmax-then-zero", msg)
        ref_out = np.einsum("bhqk,bhkd->bhqd", ref_w, vn)
        if not np.allclose(_np(out), ref_out, atol=10 * TOL[dtype]):
            fail(what, "weights are right but outputs differ", "out = attn @ v with the zeroed weights.")


# --------------------------------------------------------------------------- property tests


def _layer_weights(rng: np.random.Generator) -> torch.Tensor:
    """Fresh (3, D_MODEL, D_MODEL) float32 query, key and value projections for a test layer."""
    return torch.from_numpy(rng.standard_normal((3, D_MODEL, D_MODEL)) / math.sqrt(D_MODEL)).float()


def _causal_layer(weights: torch.Tensor, leak: str | None) -> Any:
    """A causal layer built here and lent to the student's property test: the kernel can call
    it, never see which leak it has."""
    return lend(causal_layer_with_leak(weights, leak))


def _padding_layer(weights: torch.Tensor, leak: str | None) -> Any:
    """A key-padding layer built here and lent to the student's property test."""
    return lend(padding_layer_with_leak(weights, leak))


CAUSAL_LEAKS = {
    "no mask": "has no causal mask at all",
    "one future key": "lets every query see one future key (a causal mask off by one)",
    "after softmax": "applies the causal mask after the softmax, so the future leaks in through the normaliser",
    "first query sees all": "lets only the FIRST position read the whole sequence",
}


if set(CAUSAL_LEAKS) != set(_CAUSAL_LEAK_NAMES):
    raise ImportError(f"lab 3 describes the causal leaks {sorted(CAUSAL_LEAKS)} but mlbook_helpers.masking "
                      f"builds {sorted(_CAUSAL_LEAK_NAMES)}: keep the two lists the same")


def _as_bool(res: Any, what: str) -> bool:
    """A property test's verdict: a truth value (a one-entry boolean tensor counts), never a number."""
    if isinstance(res, torch.Tensor) and res.dtype == torch.bool and res.numel() == 1:
        res = res.reshape(())
    return boolean(res, what, "A property test returns True (property holds) or False (it is violated).")


def check_outputs_ignore_future(outputs_ignore_future: Callable) -> None:
    """The student's property test must pass a correct causal layer and catch every leak."""
    weights = _layer_weights(fresh_rng())
    what = "outputs_ignore_future(a correctly masked causal layer)"
    ok = _as_bool(call_student(outputs_ignore_future, _causal_layer(weights, None), what=what), what)
    if not ok:
        fail(what, "returned False",
             "A correct layer must pass: change only LATER tokens, compare only the EARLIER outputs, and compare "
             "with a tolerance (torch.allclose), not ==.")
    for kind, description in CAUSAL_LEAKS.items():
        what = f"outputs_ignore_future(a layer that {description})"
        if _as_bool(call_student(outputs_ignore_future, _causal_layer(weights, kind), what=what), what):
            hint = "Change a later token and check that EVERY earlier output is unchanged (all positions before it)."
            if kind == "one future key":
                hint = ("This leak reads only the next token: change the token right after each position you check "
                        "(e.g. every position t, or the last token while checking ALL earlier outputs).")
            fail(what, "returned True, so the leak went unnoticed", hint)


PADDING_LEAKS = {
    "no mask": ("ignores the padding mask", "Append padding tokens (random vectors, is_pad True) and compare the real outputs."),
    "queries": ("masks padded QUERIES instead of padded keys",
                "Appended padding must not change the real tokens' outputs; padded keys are the ones to remove."),
    "first sequence": ("uses the first sequence's padding for the whole batch",
                       "Also compare a padded BATCH of sequences of different lengths with each sequence run alone."),
}


if set(PADDING_LEAKS) != set(_PADDING_LEAK_NAMES):
    raise ImportError(f"lab 3 describes the padding leaks {sorted(PADDING_LEAKS)} but mlbook_helpers.masking "
                      f"builds {sorted(_PADDING_LEAK_NAMES)}: keep the two lists the same")


def check_padding_invariant(padding_invariant: Callable) -> None:
    """The student's property test must pass a correct key-padding layer and catch every leak."""
    weights = _layer_weights(fresh_rng())
    what = "padding_invariant(a correctly masked layer)"
    if not _as_bool(call_student(padding_invariant, _padding_layer(weights, None), what=what), what):
        fail(what, "returned False",
             "A correct layer must pass: compare only the REAL positions (padded outputs are discarded), "
             "with a tolerance (torch.allclose).")
    for kind, (description, hint) in PADDING_LEAKS.items():
        what = f"padding_invariant(a layer that {description})"
        if _as_bool(call_student(padding_invariant, _padding_layer(weights, kind), what=what), what):
            fail(what, "returned True, so the leak went unnoticed", hint)


# --------------------------------------------------------------------------- conventions, permutation


def check_mask_conversions(to_key_padding_mask: Callable, to_sdpa_mask: Callable) -> None:
    """SDPA (B, 1, 1, T_k) True = attend  <->  MultiheadAttention (B, T_k) True = ignore."""
    rng = fresh_rng()
    B, T_k = int(rng.integers(2, 5)), int(rng.integers(3, 9))
    sdpa = torch.from_numpy(rng.random((B, 1, 1, T_k)) < 0.6)  # (B, 1, 1, T_k)
    what = f"to_key_padding_mask of a {_shape_str(sdpa.shape)} SDPA mask"
    kpm = call_student(to_key_padding_mask, sdpa, what=what)
    _expect_bool_tensor(kpm, (B, T_k), what)
    if torch.equal(kpm, sdpa[:, 0, 0, :]):
        fail(what, "True where the SDPA mask is True",
             "MultiheadAttention's key_padding_mask is True where a key is IGNORED: invert with ~.")
    if not torch.equal(kpm, ~sdpa[:, 0, 0, :]):
        fail(what, "entries do not match the inverted SDPA mask", "Drop the two axes of size 1 and invert.")
    kpm2 = torch.from_numpy(rng.random((B, T_k)) < 0.4)  # (B, T_k)
    what = f"to_sdpa_mask of a {_shape_str(kpm2.shape)} key_padding_mask"
    back = call_student(to_sdpa_mask, kpm2, what=what)
    _expect_bool_tensor(back, (B, 1, 1, T_k), what)
    if torch.equal(back[:, 0, 0, :], kpm2):
        fail(what, "True where key_padding_mask is True (the padding)",
             "SDPA's boolean attn_mask is True where attention is ALLOWED: invert with ~.")
    if not torch.equal(back[:, 0, 0, :], ~kpm2):
        fail(what, "entries do not match the inverted key_padding_mask", "Invert, then add the head and query axes.")


def _grader_attention(q, k, v, mask=None):
    """The grader's reference attention for the permutation check (torch, float64-safe).

    The student's ``permutation_gap`` gets torch's SDPA instead (``library_attention``, built in
    their kernel); without a fully masked row the two agree to rounding.
    """
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, dim=-1)  # (B, H, T_q, T_k)
    return w @ v, w


def check_permutation_gap(permutation_gap: Callable) -> None:
    """gap = max |Attn(Pq, Pk, Pv) - P Attn(q, k, v)|: 0 without a mask, > 0 with the causal mask."""
    rng = fresh_rng()
    gen = _gen(rng)
    B, H, T, d = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(5, 9)), int(rng.integers(2, 7))
    q, k, v = (_randn(gen, B, H, T, d) for _ in range(3))
    perm = torch.from_numpy(rng.permutation(T))
    while torch.equal(perm, torch.arange(T)):
        perm = torch.from_numpy(rng.permutation(T))
    causal = torch.from_numpy(np.tril(np.ones((T, T), dtype=bool)))[None, None]

    def ref_gap(mask):
        return float((_grader_attention(q[..., perm, :], k[..., perm, :], v[..., perm, :], mask)[0]
                      - _grader_attention(q, k, v, mask)[0][..., perm, :]).abs().max())

    def inv_gap(mask):
        inv = torch.argsort(perm)
        return float((_grader_attention(q[..., perm, :], k[..., perm, :], v[..., perm, :], mask)[0]
                      - _grader_attention(q, k, v, mask)[0][..., inv, :]).abs().max())

    def q_only_gap(mask):
        return float((_grader_attention(q[..., perm, :], k, v, mask)[0]
                      - _grader_attention(q, k, v, mask)[0][..., perm, :]).abs().max())

    for mask, label in ((None, "without a mask"), (causal, "with the causal mask")):
        what = f"permutation_gap {label}, T = {T}"
        got = call_student(permutation_gap, lend(library_attention), q, k, v, perm, mask,
                           what=what)
        got = number(got, what, "Return one number: the largest absolute difference (float(...) or .item()).")
        ref = ref_gap(mask)
        if abs(got - ref) <= 1e-8 + 1e-6 * abs(ref):
            continue
        msg = diagnose(got, {
            "the outputs were re-ordered with the inverse permutation: Attn(q[perm], ...) should equal out[perm]": lambda: inv_gap(mask),
            "only the queries were permuted: permute q, k and v together (the same token order for all three)": lambda: q_only_gap(mask),
            "the gap is not the largest absolute difference: use (a - b).abs().max()": lambda: float(
                (_grader_attention(q[..., perm, :], k[..., perm, :], v[..., perm, :], mask)[0]
                 - _grader_attention(q, k, v, mask)[0][..., perm, :]).max()),
        }, atol=1e-8, rtol=1e-6)
        fail(what, f"your gap is {got:.3g}",
             msg or "Permute the token axis (dim -2) of q, k and v with perm, run attn_fn, and compare with the "
                    "unpermuted outputs re-ordered by the same perm.")
