"""The cost questions: FLOPs, the n x n share, the crossover lengths (the matrix's bytes are lab 6's)."""

from __future__ import annotations

import math
from typing import Callable

from ...kit import call_student, describe, diagnose, fail, fresh_rng, number
from ._common import view_error

__all__ = ["check_attention_flops", "check_attention_share", "check_crossover_length"]

_NUMBER = "Return a number (an int or a float)."


def _expect(got: float, ref: float, what: str, mistakes: dict[str, float], hint: str) -> None:
    """Pass when ``got`` is ``ref`` to a relative 1e-9; else fail, naming the mistake (message -> its value)
    that ``got`` matches, or with ``hint``."""
    if math.isclose(got, ref, rel_tol=1e-9):
        return
    found = diagnose(got, mistakes, atol=0, rtol=1e-9)
    fail(what, f"returned {got:.6g}" + (f": {found}" if found else ""), None if found else hint)


def check_attention_flops(attention_flops: Callable) -> None:
    """attention_flops(B, T, d_model) on fresh sizes: exact integers, 2 m k n per matmul."""
    rng = fresh_rng()
    for _ in range(3):
        B, T, d = int(rng.integers(2, 17)), int(rng.integers(100, 5000)), int(rng.integers(64, 2048))
        what = f"attention_flops(B={B}, T={T}, d_model={d})"
        got = call_student(attention_flops, B, T, d, what=what, named=view_error)
        if not isinstance(got, dict):
            fail(what, f"returned {describe(got)}", "Return a dict with keys projections, qk_t, av, total.")
        missing = {"projections", "qk_t", "av", "total"} - set(got)
        if missing:
            fail(what, f"the dict lacks {sorted(missing)}", "Keys: projections, qk_t, av, total.")
        ref = {"projections": 8 * B * T * d * d, "qk_t": 2 * B * T * T * d, "av": 2 * B * T * T * d}
        ref["total"] = sum(ref.values())
        variants = {
            "projections": {
                4 * B * T * d * d: "counted multiply-adds, not FLOPs: a (m, k) @ (k, n) matmul costs 2 m k n",
                6 * B * T * d * d: "only three projections: the output projection W_O is a fourth (d, d) matmul",
                2 * B * T * d * d: "one projection counted: Q, K, V and O each cost 2 B T d^2",
                8 * B * T * d: "a projection is (B T, d) @ (d, d): 2 B T d^2, d squared",
            },
            "qk_t": {
                B * T * T * d: "counted multiply-adds, not FLOPs: a (m, k) @ (k, n) matmul costs 2 m k n",
                2 * B * T * d * d: "QK^T is (T, d_head) @ (d_head, T) per head: 2 B T^2 d over all heads, T squared",
            },
            "av": {
                B * T * T * d: "counted multiply-adds, not FLOPs: a (m, k) @ (k, n) matmul costs 2 m k n",
                2 * B * T * d * d: "AV is (T, T) @ (T, d_head) per head: 2 B T^2 d over all heads, T squared",
            },
        }
        for key in ("projections", "qk_t", "av", "total"):
            value = number(got[key], what, _NUMBER)
            if math.isclose(value, ref[key], rel_tol=1e-9):
                continue
            if key == "total":
                parts = sum(number(got[k], what, _NUMBER) for k in ("projections", "qk_t", "av"))
                hint = None if math.isclose(value, parts, rel_tol=1e-9) else "total must be projections + qk_t + av"
                fail(what, f"total is {value:.6g}", hint)
            found = next((m for v, m in variants[key].items() if math.isclose(value, v, rel_tol=1e-9)), None)
            fail(what, f"{key} is {value:.6g}" + (f": {found}" if found else ""),
                 None if found else "Count each matmul (m, k) @ (k, n) as 2 m k n FLOPs.")


def check_attention_share(attention_share: Callable) -> None:
    """attention_share(T, d_model): the n x n share of one layer with a 4x FFN, a fraction in [0, 1]."""
    rng = fresh_rng()
    for _ in range(3):
        T, d = int(rng.integers(64, 40000)), int(rng.integers(64, 8192))
        what = f"attention_share(T={T}, d_model={d})"
        got = number(call_student(attention_share, T, d, what=what, named=view_error), what, _NUMBER)
        ref = 4 * T * T * d / (24 * T * d * d + 4 * T * T * d)
        _expect(got, ref, what, {
            "this is the share for the attention sublayer alone; the layer also has a 4x FFN, "
            "2 matmuls of (T, d) @ (d, 4d) = 16 B T d^2 FLOPs": T / (T + 2 * d),
            "the FFN was counted as 8 B T d^2; with d_ff = 4 d its two matmuls cost 16 B T d^2": T / (T + 4 * d),
            "this is the ratio of the n x n part to the rest, not its share of the whole layer": T / (6 * d),
            "a percentage was returned; return a fraction between 0 and 1": 100 * ref,
        }, "share = (qk_t + av) / (attention projections + FFN + qk_t + av).")


def check_crossover_length(crossover_length: Callable) -> None:
    """crossover_length(d_model, full_layer) on fresh widths: 2 d alone, 6 d with the 4x FFN."""
    rng = fresh_rng()
    for _ in range(2):
        d = int(rng.integers(65, 5000))
        for full in (False, True):
            what = f"crossover_length({d}, full_layer={full})"
            got = number(call_student(crossover_length, d, full_layer=full, what=what, named=view_error), what,
                         _NUMBER)
            _expect(got, (6 if full else 2) * d, what, {
                "the two cases are swapped: attention alone crosses at 2 d_model, a full layer with its FFN at 6 d_model":
                    (2 if full else 6) * d,
                "the FFN was counted as 8 B T d^2 instead of 16 B T d^2": 4 * d,
                "the crossover is where 4 B T^2 d (n x n part) equals the per-token part; solve for T": d / 2,
            }, "Solve 4 B T^2 d = (per-token FLOPs) for T.")
