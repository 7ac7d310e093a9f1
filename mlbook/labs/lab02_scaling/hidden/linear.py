"""Linear attention as a recurrence: ``linear_attention_step``.

The state is (S, z): S (d_k, d_v) = sum over the tokens so far of outer(phi(k_j), v_j) and
z (d_k,) = sum of phi(k_j), with phi(x) = elu(x) + 1. Every step is asked from the grader's own
state, so one wrong step is reported as itself and never as the consequence of an earlier one.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...kit import array, call_student, compare, dtype_name, float_tolerance, fresh_rng, items, quiet


def _phi(x: np.ndarray) -> np.ndarray:
    """elu(x) + 1, elementwise."""
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


_ACCUMULATE = "S is the running sum of outer(phi(k_j), v_j) over the tokens so far, this one included: add to it."
_READ_EARLY = ("Was the output read before the state was updated with this token? The new token attends to itself "
               "(j <= i); on the first token the state is still zero and 0 / 0 is nan.")
_EARLY = "the output was read before the state was updated with this token: the new token attends to itself (j <= i)"


def _tolerance(*results: Any) -> float:
    """1e-9 for float64 results; a float32 one (torch's default dtype) is correct too, to float32's precision."""
    low = any(dtype_name(getattr(r, "dtype", "float64")) != "float64" for r in results)
    return float_tolerance("float32")["atol"] if low else 1e-9


def _hint_for_S(S_got: np.ndarray, S: np.ndarray, k: np.ndarray, v: np.ndarray, tol: float) -> str:
    """The advice for a wrong new S. When this step added an outer product f v^T to the earlier state (the
    accumulation is right) with features f other than elu_feature(k), the feature map is what is wrong."""
    if S_got.shape == S.shape and np.dot(v, v) > 0:
        added = S_got - S  # (d_k, d_v): what this step added
        f = added @ v / np.dot(v, v)  # (d_k,): the features that outer product would have
        if np.allclose(added, np.outer(f, v), atol=10 * tol) and not np.allclose(f, _phi(k), atol=10 * tol):
            return ("This step added outer(f, v) with features f other than elu_feature(k): phi(x) = elu(x) + 1, "
                    "that is x + 1 for x > 0 and exp(x) otherwise; use the given elu_feature.")
    return _ACCUMULATE


def check_linear_attention_step(linear_attention_step: Callable) -> None:
    """Steps through a fresh causal sequence (d_k != d_v), checking the new state and the output of each."""
    rng = fresh_rng()
    t_len, d_k = int(rng.integers(6, 14)), int(rng.integers(2, 6))
    d_v = d_k + int(rng.integers(1, 4))
    Q = rng.standard_normal((t_len, d_k)) * rng.uniform(0.5, 2.0)  # (T, d_k)
    K = rng.standard_normal((t_len, d_k)) * rng.uniform(0.5, 2.0)  # (T, d_k)
    V = rng.standard_normal((t_len, d_v))  # (T, d_v)
    S, z = np.zeros((d_k, d_v)), np.zeros(d_k)  # the grader's state before token t
    for t in range(t_len):
        q, k, v = Q[t], K[t], V[t]
        what = f"linear_attention_step(state after {t} tokens, q, k, v) with d_k = {d_k}, d_v = {d_v}"
        with quiet():
            got = call_student(linear_attention_step, (S.copy(), z.copy()), q.copy(), k.copy(), v.copy(), what=what)
        out, state = items(got, 2, what, "(out, (S, z))")
        S_got, z_got = items(state, 2, what, "the new state as a pair (S, z)")
        S_new, z_new = S + np.outer(_phi(k), v), z + _phi(k)  # (d_k, d_v), (d_k,)
        tol = _tolerance(out, S_got, z_got)
        S_arr = array(S_got, f"{what}: new S")
        compare(S_arr, S_new, f"{what}: new S", _hint_for_S(S_arr, S, k, v, tol), atol=tol, rtol=tol,
                shape_hint=f"S is (d_k, d_v) = ({d_k}, {d_v}) whatever the number of tokens: outer(phi(k), v).",
                mistakes={
                    "the state was replaced by this token's outer(phi(k), v): add to it, do not replace it":
                        np.outer(_phi(k), v),
                    "the key went in without the feature map: S adds outer(phi(k), v) with phi = elu_feature":
                        S + np.outer(k, v),
                    "the state was not updated with this token: S must include outer(phi(k), v)": S,
                })
        compare(array(z_got, f"{what}: new z"), z_new, f"{what}: new z",
                "z is the running sum of phi(k_j), this token included, with phi = elu_feature.", atol=tol, rtol=tol,
                shape_hint=f"z is (d_k,) = ({d_k},): the sum of the keys' features.",
                mistakes={"z was replaced by this token's phi(k): add to it, do not replace it": _phi(k),
                          "the key went in without the feature map: z adds phi(k)": z + k})
        fq = _phi(q)  # (d_k,)
        want = fq @ S_new / (fq @ z_new)  # (d_v,)
        early = fq @ S / (fq @ z) if t > 0 else np.full(d_v, np.nan)  # the output without this token
        # The normaliser is often written phi(q) . z + 1e-6 (as in Katharopoulos et al.'s code): a relative change
        # of at most 1e-6 / (phi(q) . z), under 5e-5 here, where every known mistake is off by far more.
        out_tol = max(tol, 1e-4)
        compare(array(out, f"{what}: out", finite=False), want, f"{what}: out",
                "out = phi(q) . S / phi(q) . z with the state that includes this token.", atol=out_tol, rtol=out_tol,
                shape_hint=f"out is one value vector, (d_v,) = ({d_v},).",
                nonfinite=("returned nan or inf", _READ_EARLY),
                mistakes={
                    "the output was not divided by phi(q) . z: without it the weights do not sum to 1":
                        fq @ S_new,
                    "the feature map was not applied to the query: out = phi(q) . S / phi(q) . z":
                        q @ S_new / (q @ z_new),
                    _EARLY: early,
                })
        S, z = S_new, z_new
