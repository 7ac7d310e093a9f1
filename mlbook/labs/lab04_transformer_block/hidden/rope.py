"""Rotary positions: apply_rope (both layouts) and rope_step_scores (one cached decoding step).

The grader's rotation is written here in NumPy with complex numbers, independently of the
notebook's slicing: pair i of a row at position p is the complex number x1 + i x2 and is
multiplied by exp(i p theta_i), theta_i = base^(-2i/d). The layouts name the pairs:
"interleaved" pairs channels (2i, 2i + 1) (RoFormer, Meta's llama/model.py), "half" pairs
(i, i + d/2) (Hugging Face's rotate_half). tests/test_rope_convention.py ties this reference to
both published formulas.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from ...kit import (array, ask_items, call_student, close, compare, data_array, diagnose, dtype_name, fail, first_bad,
                    fresh_rng, given, like)
from ._common import view_error

__all__ = ["check_apply_rope", "check_rope_step", "rope_reference"]

LAYOUTS = ("interleaved", "half")
_OTHER = {"interleaved": "half", "half": "interleaved"}
_F64 = dict(atol=1e-9, rtol=1e-9)  # a correct float64 answer with its angles in float64
# A float32 input at positions of a few thousand, its angles in float64 and cos, sin and the products
# in float32: off by a few 1e-7. Angles computed in float32 there are off by ~1e-4 rad (theta_i and
# positions * theta_i rounded to 24 bits), far outside it: the lab asks for float64 angles.
_F32 = dict(atol=1e-5, rtol=1e-5)


def _pairs(x: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The two members of every channel pair, (..., T, d/2) each."""
    d = x.shape[-1]
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    return x[..., : d // 2], x[..., d // 2:]


def _unpairs(y1: np.ndarray, y2: np.ndarray, layout: str) -> np.ndarray:
    """Channel pairs put back in the layout's order: (..., T, d)."""
    if layout == "interleaved":
        return np.stack([y1, y2], axis=-1).reshape(*y1.shape[:-1], 2 * y1.shape[-1])
    return np.concatenate([y1, y2], axis=-1)


def rope_reference(x, positions, layout: str, base: float = 10000.0, variant: str | None = None) -> np.ndarray:
    """The grader's RoPE (float64), or what a known mistake computes (``variant``).

    Args:
        x: (..., T, d) array, d even.
        positions: (T,) integers.
    Returns:
        (..., T, d) float64.
    """
    x = np.asarray(x, dtype=np.float64)
    T, d = x.shape[-2], x.shape[-1]
    pos = np.asarray(positions, dtype=np.float64)  # (T,)
    i = np.arange(d // 2, dtype=np.float64)  # (d/2,)
    expo = i / d if variant == "no_two" else 2 * i / d  # (d/2,)
    if variant == "row_index":
        pos = np.arange(T, dtype=np.float64)
    elif variant == "one_based":
        pos = pos + 1
    theta = (10000.0 if variant == "base_ignored" else base) ** -expo  # (d/2,)
    angle = pos[:, None] * theta  # (T, d/2)
    if variant == "reversed":
        angle = -angle
    if variant == "float32_angles":
        angle = (pos.astype(np.float32)[:, None] * theta.astype(np.float32)).astype(np.float64)  # (T, d/2)
    pair_layout = _OTHER[layout] if variant == "other_layout" else layout
    x1, x2 = _pairs(x, pair_layout)  # (..., T, d/2) each
    if variant == "swapped":  # cos and sin exchanged in the rotation's formulas
        return _unpairs(x1 * np.sin(angle) - x2 * np.cos(angle), x1 * np.cos(angle) + x2 * np.sin(angle), pair_layout)
    z = (x1 + 1j * x2) * np.exp(1j * angle)  # (..., T, d/2) complex: each pair turned by its angle
    return _unpairs(z.real, z.imag, pair_layout)


ROPE_VARIANTS = {
    "other_layout": "the other layout was used: 'interleaved' pairs channels (2i, 2i + 1), 'half' pairs channels "
                    "(i, i + d/2); check which pairs your {layout!r} branch takes and how it puts them back",
    "no_two": "the frequencies are base^(-i/d); RoPE's are theta_i = base^(-2i/d) for pair i",
    "swapped": "sin and cos are swapped: pair (x1, x2) turns into (x1 cos - x2 sin, x1 sin + x2 cos)",
    "reversed": "the rotation goes the wrong way (angle -p theta_i): the first member gets x1 cos - x2 sin, "
                "the second x1 sin + x2 cos",
    "row_index": "the angles come from the row index (torch.arange(T)), not from the positions argument: a single "
                 "token at position p (cached decoding) would not be rotated by p",
    "one_based": "positions are off by one (p + 1): the first token, at position 0, is not rotated",
    "base_ignored": "the base argument was ignored (10000 used instead)",
    "float32_angles": "the frequencies theta_i or the angles were computed in float32 (as Hugging Face's inv_freq "
                      "is): at positions of a few thousand the angles are off by about 1e-4 radians; compute theta_i "
                      "and positions * theta_i in float64",
}


def _rope_cases(rng: np.random.Generator) -> list[dict]:
    """Fresh shapes: 4-D and 2-D inputs, both layouts, unsorted large positions, one row alone,
    another base, and float32 inputs at small and at large positions."""
    def even(lo, hi):
        return 2 * int(rng.integers(lo, hi))

    B, H, T = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 12))
    T2 = int(rng.integers(5, 20))
    first = rng.choice(["interleaved", "half"])
    second = _OTHER[str(first)]
    return [
        dict(shape=(B, H, T, even(2, 12)), layout=str(first), positions=rng.choice(6000, T, replace=False),
             base=10000.0, dtype=torch.float64),
        dict(shape=(T2, even(2, 12)), layout=second, positions=rng.choice(6000, T2, replace=False),
             base=10000.0, dtype=torch.float64),
        dict(shape=(B, 1, even(3, 10)), layout=str(first), positions=rng.integers(100, 4000, 1),
             base=10000.0, dtype=torch.float64),
        dict(shape=(B, T, even(2, 10)), layout=second, positions=rng.integers(0, 300, T),
             base=float(rng.choice([500.0, 1e6])), dtype=torch.float64),
        dict(shape=(B, H, T, even(2, 10)), layout=str(first), positions=rng.permutation(T), base=10000.0,
             dtype=torch.float32),
        # float32 input at large positions: float64 angles are required here too, and the result stays float32.
        dict(shape=(B, H, T2, even(4, 12)), layout=second, positions=rng.choice(np.arange(2000, 8000), T2,
             replace=False), base=10000.0, dtype=torch.float32),
    ]


def check_apply_rope(apply_rope: Callable) -> None:
    """apply_rope(x, positions, layout, base) on fresh shapes and positions, both layouts."""
    rng = fresh_rng()
    for case in _rope_cases(rng):
        x = torch.as_tensor(rng.normal(size=case["shape"]), dtype=case["dtype"])  # (..., T, d)
        positions = torch.as_tensor(np.asarray(case["positions"], dtype=np.int64))  # (T,)
        layout, base = case["layout"], case["base"]
        what = (f"apply_rope(x of shape {tuple(case['shape'])} {dtype_name(case['dtype'])}, "
                f"positions {positions[:4].tolist()}{' ...' if len(positions) > 4 else ''}, {layout!r}"
                + (f", base={base:g})" if base != 10000.0 else ")"))
        got = call_student(apply_rope, x, positions, layout, base, what=what, named=view_error)
        raw = data_array(got)
        y = array(got, what, shape=case["shape"],
                  hint="Return a tensor of x's shape (..., T, d): the rotated rows, in the same layout.")
        wanted = np.dtype(dtype_name(case["dtype"]))
        if raw is not None and raw.dtype != wanted:
            fail(what, f"returned {raw.dtype} for a {wanted} input",
                 "Keep x's dtype: compute the angles in float64, then cast cos and sin to x.dtype before they "
                 "multiply x (a float64 cos times a float32 x promotes the result to float64).")
        ref = rope_reference(x.numpy(), positions.numpy(), layout, base)
        tol = _F64 if case["dtype"] == torch.float64 else _F32
        if close(y, ref, **tol):
            continue
        variants = {msg.format(layout=layout): (lambda v=v: rope_reference(x.numpy(), positions.numpy(), layout,
                                                                           base, v))
                    for v, msg in ROPE_VARIANTS.items() if v != "float32_angles"}
        found = diagnose(y, variants, **tol)
        if found is None and close(y, ref, atol=5e-3, rtol=5e-3):
            found = ROPE_VARIANTS["float32_angles"]
        if found is None and close(y, x.numpy(), atol=1e-6, rtol=1e-6):
            found = "x came back unrotated"
        norms_kept = close(np.linalg.norm(y, axis=-1), np.linalg.norm(ref, axis=-1), atol=1e-4, rtol=1e-4)
        fail(what, found or (f"values differ from the rotation of pair i by positions[t] * base^(-2i/d) "
                             f"({first_bad(y, ref, tol['atol'], tol['rtol'])})"
                             + ("" if norms_kept else "; the rows' lengths changed, so this is not a rotation")))


# ---------------------------------------------------------------------------- cached decoding


def _step_reference(q, k, cache, layout: str, variant: str | None = None,
                    position: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Scores (B, H, 1, t + 1) and the grown cache (B, H, t + 1, d), or what a known mistake returns
    (``variant``; ``position``: the new token rotated by that position instead of t)."""
    t, d = cache.shape[-2], q.shape[-1]
    p = {"plus_one": t + 1, "minus_one": t - 1}.get(variant, t) if position is None else position
    lay = _OTHER[layout] if variant == "other_layout" else layout
    q_rot = q if variant == "query_unrotated" else rope_reference(q, [p], lay)  # (B, H, 1, d)
    k_rot = k if variant == "key_unrotated" else rope_reference(k, [p], lay)  # (B, H, 1, d)
    if variant == "cache_rotated_again":  # the cached keys, already rotated, rotated once more at their positions
        cache = rope_reference(cache, np.arange(t), lay)  # (B, H, t, d)
    keys = np.concatenate([cache, k_rot], axis=-2)  # (B, H, t + 1, d)
    scale = {"no_scale": 1.0, "scale_d": float(d)}.get(variant, math.sqrt(d))
    return q_rot @ np.swapaxes(keys, -1, -2) / scale, keys


STEP_VARIANTS = {
    "query_unrotated": "the keys were rotated but the query was not: rotate the new query by t too, or every score "
                       "mixes a rotated key with an unrotated query",
    "key_unrotated": "the new token's key was not rotated before it joined the cache: the cache must hold rotated keys",
    "plus_one": "the new token was rotated by t + 1, one position too far: with t cached keys (positions 0..t-1) "
                "the new token's 0-based position is t, off by one",
    "minus_one": "the new token was rotated by t - 1, one position short: with t cached keys (positions 0..t-1) "
                 "the new token's 0-based position is t, off by one",
    "other_layout": "the other RoPE layout was used: pass the layout argument on to apply_rope",
    "no_scale": "the scores were not divided by sqrt(d_head)",
    "scale_d": "the scores were divided by d_head instead of sqrt(d_head)",
    "cache_rotated_again": "the cached keys were rotated again: the cache holds keys already rotated at their own "
                           "positions, so rotate only the new query and the new key (by t) and append the key",
}
_SEARCHED = 64  # positions beyond t searched for the one a wrong step used


def _position_used(got: np.ndarray, q, k, cache, layout: str, which: int) -> int | None:
    """The position p != t by which the new token was rotated, if one reproduces ``got`` (the scores,
    ``which`` = 0, or the grown cache, 1): a position off by some amount or read from the wrong axis."""
    t = cache.shape[-2]
    for p in range(t + _SEARCHED):
        if p != t and close(got, _step_reference(q, k, cache, layout, position=p)[which], atol=1e-10, rtol=1e-10):
            return p
    return None


# The grader's apply_rope, lent by ``kit.given`` to ``rope_step_scores`` (one mistake, one loss): a
# mistake in apply_rope costs apply_rope's cells alone. It takes what a student's code may pass and
# answers in the kind and float precision it was given (``kit.like``).
def graders_apply_rope(x, positions, layout="interleaved", base=10000.0):
    """apply_rope: (..., T, d) x, (T,) integer positions -> (..., T, d) rotated, in x's dtype."""
    if layout not in ("interleaved", "half"):
        raise ValueError(f"layout must be 'interleaved' or 'half', not {layout!r}")
    values, pos = data_array(x), data_array(positions)
    if values is None or pos is None:
        raise TypeError("apply_rope expects a tensor x and a tensor of positions")
    return like(rope_reference(values.astype(np.float64), pos.reshape(-1), layout, float(base)), x)


def _position_message(p: int, t: int, what: str) -> str:
    return (f"the new {what} was rotated by position {p}, but with t = {t} cached keys (positions 0..t-1) the new "
            f"token's 0-based position is t = k_cache.shape[-2], the length of the cache's time axis")


def check_rope_step(rope_step_scores: Callable) -> None:
    """rope_step_scores(q_new, k_new, k_cache, layout) for caches of 0, a few and many keys."""
    # the step alone: the apply_rope it calls is the grader's (a wrong apply_rope costs its own cells)
    rope_step_scores = given(rope_step_scores, apply_rope=graders_apply_rope)
    rng = fresh_rng()
    B, H = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    d = 2 * int(rng.integers(2, 9))
    first = str(rng.choice(LAYOUTS))
    for t, layout in ((0, first), (int(rng.integers(1, 5)), _OTHER[first]), (int(rng.integers(5, 40)), first)):
        q = rng.normal(size=(B, H, 1, d))  # (B, H, 1, d) the new token's query
        k = rng.normal(size=(B, H, 1, d))  # (B, H, 1, d) its key
        cache = rope_reference(rng.normal(size=(B, H, t, d)), np.arange(t), layout)  # (B, H, t, d) rotated keys
        what = f"rope_step_scores with a cache of {t} keys (B = {B}, H = {H}, d_head = {d}, {layout!r})"
        res = ask_items(rope_step_scores, torch.as_tensor(q), torch.as_tensor(k), torch.as_tensor(cache), layout,
                        n=2, what=what, names="the pair (scores, k_cache)", named=view_error)
        scores = array(res[0], f"{what}: scores", shape=(B, H, 1, t + 1),
                       hint="One row of scores per head: the new query against keys 0..t (the cache and its own key).")
        grown = array(res[1], f"{what}: the returned cache", shape=(B, H, t + 1, d),
                      hint="Return the cache with the new rotated key appended along the time axis (dim=-2).")
        ref_scores, ref_cache = _step_reference(q, k, cache, layout)
        mistakes = {msg: (lambda v=v: _step_reference(q, k, cache, layout, v)[0]) for v, msg in STEP_VARIANTS.items()}
        if not close(scores, ref_scores, atol=1e-10, rtol=1e-10):  # rotated by a wrong position? name it
            p = _position_used(scores, q, k, cache, layout, 0)
            if p is not None:
                mistakes[_position_message(p, t, "query")] = _step_reference(q, k, cache, layout, position=p)[0]
        compare(scores, ref_scores, f"{what}: scores", "They differ from (R_t q) . [cache, R_t k] / sqrt(d_head); "
                "does apply_rope pass its own tests?", atol=1e-10, rtol=1e-10, mistakes=mistakes)
        cache_mistakes = {}
        if not close(grown, ref_cache, atol=1e-12, rtol=1e-12):
            p = _position_used(grown, q, k, cache, layout, 1)
            if p is not None:
                cache_mistakes[_position_message(p, t, "key") + " (the scores of a step cannot show it, RoPE being "
                               "relative, but the cache no longer matches keys rotated in one pass over the prompt)"] = \
                    _step_reference(q, k, cache, layout, position=p)[1]
        compare(grown, ref_cache, f"{what}: the returned cache", "It is not the old cache followed by the new rotated "
                "key; does apply_rope pass its own tests?", atol=1e-12, rtol=1e-12, mistakes={
            "the new key was appended unrotated: rotate it by t before it joins the cache":
                lambda: _step_reference(q, k, cache, layout, "key_unrotated")[1],
            "the new key was rotated by t + 1: with t cached keys (positions 0..t-1) the new token's 0-based "
            "position is t, off by one (the scores of a step cannot show it, RoPE being relative, but the cache "
            "no longer matches keys rotated in one pass over the prompt)":
                lambda: _step_reference(q, k, cache, layout, "plus_one")[1],
            "the new key was rotated by t - 1: with t cached keys (positions 0..t-1) the new token's 0-based "
            "position is t, off by one":
                lambda: _step_reference(q, k, cache, layout, "minus_one")[1],
            "the new key was rotated in the other layout: pass the layout argument on to apply_rope":
                lambda: _step_reference(q, k, cache, layout, "other_layout")[1],
            "the new key was put first: append it after the cached keys (positions stay in order)":
                lambda: np.concatenate([ref_cache[..., -1:, :], cache], axis=-2),
            STEP_VARIANTS["cache_rotated_again"]:
                lambda: _step_reference(q, k, cache, layout, "cache_rotated_again")[1],
            **cache_mistakes,
        })
