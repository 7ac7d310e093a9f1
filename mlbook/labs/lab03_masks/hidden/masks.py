"""Checks of the mask builders: causal_mask, causal_mask_with_cache, padding_mask, combine_masks."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...kit import call_seeing_args, call_student, causal_allowed, compare, fail, fresh_rng, torch_generator
from ._common import POLARITY, expect_bool_tensor, shape_str

__all__ = ["check_causal_mask", "check_causal_mask_with_cache", "check_padding_mask", "check_combine_masks"]


def check_causal_mask(causal_mask: Callable) -> None:
    """causal_mask(T) -> (1, 1, T, T) bool, True where key j <= query i."""
    rng = fresh_rng()
    for T in (int(rng.integers(7, 14)), int(rng.integers(2, 6)), 1):
        what = f"causal_mask({T})"
        m = call_student(causal_mask, T, what=what)
        expect_bool_tensor(m, (1, 1, T, T), what)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]  # query and key positions
        # Booleans, so a tolerance of 0 asks for the same mask entry by entry.
        compare(m[0, 0].cpu().numpy(), causal_allowed(T), what,  # (T, T)
                "Query i may read key j exactly when j <= i (the past and itself).", atol=0, rtol=0, mistakes={
            "the diagonal is excluded, so a token cannot read itself and the first row is fully masked "
            "(off by one: use j <= i, torch.tril with diagonal=0)": j < i,
            "each query also sees the next (future) key (off by one: the diagonal offset should be 0, not 1)": j <= i + 1,
            "the polarity is inverted: True marks the future, which is the positions to BLOCK. " + POLARITY: j > i,
            "the mask is upper-triangular: each query sees the future and not the past": j >= i,
        }, observed=lambda got: f"row 0 is {got[0].astype(int).tolist()[:8]} and row {T - 1} is "
                                f"{got[-1].astype(int).tolist()[:8]}")


def check_causal_mask_with_cache(causal_mask_with_cache: Callable) -> None:
    """The T_new newest queries against T_total keys: query i is absolute position T_total - T_new + i."""
    rng = fresh_rng()
    t_total = int(rng.integers(6, 12))
    cases = [(int(rng.integers(2, t_total)), t_total), (1, int(rng.integers(3, 9))), (t_total, t_total)]
    for t_new, t_all in cases:
        what = f"causal_mask_with_cache({t_new}, {t_all})"
        m = call_student(causal_mask_with_cache, t_new, t_all, what=what)
        expect_bool_tensor(m, (1, 1, t_new, t_all), what, shape_hint="One row per new query and one column per key, "
                           "the cached keys included: (1, 1, T_new, T_total).")
        i = np.arange(t_new)[:, None] + (t_all - t_new)  # (T_new, 1) absolute query positions
        i0 = np.arange(t_new)[:, None]  # (T_new, 1) the queries counted from the first key
        j = np.arange(t_all)[None, :]  # (1, T_total)
        compare(m[0, 0].cpu().numpy(), causal_allowed(t_new, t_all), what,  # (T_new, T_total)
                "Query i (absolute position T_total - T_new + i) may read key j exactly when j <= that position.",
                atol=0, rtol=0, mistakes={
            "the queries were aligned with the START of the keys (top-left): they are the newest tokens, so "
            "query i sits at absolute position T_total - T_new + i (bottom-right alignment)": j <= i0,
            "the diagonal is excluded: a new token must see its own key (off by one)": j < i,
            "each query also sees one future key (off by one)": j <= i + 1,
            "the polarity is inverted. " + POLARITY: j > i,
        }, observed=lambda got: f"the last query's row is {got[-1].astype(int).tolist()[:12]}")


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
    m, (is_pad_after,) = call_seeing_args(padding_mask, is_pad, what=what)
    if isinstance(m, torch.Tensor) and tuple(m.shape) == (B, 1, T_k, 1):
        fail(what, f"shape is {shape_str(m.shape)}",
             "The mask was put on the query axis: padding removes KEYS (columns of the scores), so it "
             "must broadcast as (B, 1, 1, T_k), not (B, 1, T_q, 1).")
    if isinstance(m, torch.Tensor) and tuple(m.shape) == (B, T_k):
        fail(what, f"shape is {shape_str(m.shape)}", "Add the head and query axes: (B, 1, 1, T_k).")
    expect_bool_tensor(m, (B, 1, 1, T_k), what)
    if not torch.equal(is_pad_after, before):
        fail(what, "changed the caller's is_pad in place", "Return a new tensor; do not modify the input.")
    compare(m[:, 0, 0, :].cpu().numpy(), ~is_pad.numpy(), what, "True where the key is a real token.",  # (B, T_k)
            atol=0, rtol=0, mistakes={
        "the polarity is inverted: your mask is True at the PAD tokens, so attention would land only on "
        "padding. is_pad marks what to ignore; invert it (~is_pad). " + POLARITY: is_pad.numpy(),
    }, observed=lambda got: f"row 0 of your mask is {got[0].astype(int).tolist()}")


def check_combine_masks(combine_masks: Callable) -> None:
    """combine_masks(*masks): AND of broadcastable bool masks, None entries skipped."""
    rng = fresh_rng()
    gen = torch_generator(rng)
    B, H, T = int(rng.integers(2, 4)), int(rng.integers(2, 4)), int(rng.integers(4, 8))
    causal = torch.from_numpy(causal_allowed(T))[None, None]  # (1, 1, T, T)
    pad = torch.rand(B, 1, 1, T, generator=gen) < 0.7  # (B, 1, 1, T)
    extra = torch.rand(1, H, T, T, generator=gen) < 0.8  # (1, H, T, T)
    what = "combine_masks(causal (1,1,T,T), None, padding (B,1,1,T))"
    got = call_student(combine_masks, causal, None, pad, what=what)
    ref = causal & pad  # (B, 1, T, T)
    if isinstance(got, torch.Tensor) and got.shape == ref.shape and torch.equal(got, causal | pad):
        fail(what, "a position allowed by only one of the masks is allowed in yours",
             "The masks were combined with OR: a key is allowed only if EVERY mask allows it (AND, &).")
    expect_bool_tensor(got, tuple(ref.shape), what)
    if not torch.equal(got, ref):
        fail(what, f"{int((got != ref).sum())} of {ref.numel()} entries differ from the AND of the masks",
             "Combine with & and let broadcasting produce (B, 1, T, T).")
    three = call_student(combine_masks, pad, extra, causal, what="combine_masks of three masks")
    ref3 = pad & extra & causal  # (B, H, T, T)
    expect_bool_tensor(three, tuple(ref3.shape), "combine_masks of three masks")  # torch.equal ignores dtypes
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
