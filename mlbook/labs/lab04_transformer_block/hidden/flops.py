"""The cost question: FLOPs of one attention layer (the matrix's bytes are lab 6's; the n x n share of a
full layer is an ungraded extension of the notebook)."""

from __future__ import annotations

import math
from typing import Callable

from ...kit import call_student, describe, fail, fresh_rng, number
from ._common import view_error

__all__ = ["check_attention_flops"]

_NUMBER = "Return a number (an int or a float)."


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
