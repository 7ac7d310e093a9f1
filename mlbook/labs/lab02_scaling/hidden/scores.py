"""Scores: ``attention_scores`` (scaled and raw) and ``qk_norm_scores`` (cosines times a gain)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ...kit import array, ask_array, call_student, compare, dtype_name, first_bad, fresh_rng, quiet


def _scores_shape_hint(want: tuple[int, ...]) -> Callable[[tuple[int, ...]], str]:
    """The advice for scores of another shape than ``want``, (..., T_q, T_k): transposed, or the batch axes moved."""
    def hint(got: tuple[int, ...]) -> str:
        if got == want[:-2] + want[-2:][::-1]:
            return "Queries are the rows: compute Q K^T (shape (..., T_q, T_k)), not K Q^T."
        return ("Swap only the last two axes of K (K.swapaxes(-2, -1) or K.transpose(-2, -1) in torch); K.T also "
                "reverses the batch axes.")

    return hint


_LAST_TWO = ("swap only the last two axes of K (K.swapaxes(-2, -1), or K.transpose(-2, -1) in torch), which works "
             "for one sequence and for a batch: K.T reverses every axis, the batch axis included, and "
             "transpose(0, 2, 1) needs exactly three")


def _layout_error(Q: np.ndarray) -> Callable[[str, str], tuple[str, str] | None]:
    """A ``named=`` hook: a shape error, which a transpose written for one layout gives on the other
    (K.T on a batch, transpose(0, 2, 1) on one sequence)."""
    layout = "batched (B, T, d_k)" if Q.ndim > 2 else "single-sequence (T, d_k)"

    def named(kind: str, text: str) -> tuple[str, str] | None:
        shape_words = ("axes", "shape", "size", "dimension", "broadcast", "mismatch")
        if kind in ("ValueError", "RuntimeError", "IndexError") and any(w in text.lower() for w in shape_words):
            return f"raised {kind} on {layout} inputs: {text[:160]}", f"Scores must work for both layouts: {_LAST_TWO}."
        return None

    return named


def _answer_tolerance(got: Any, inputs_dtype: np.dtype, float64_tol: float, float32_tol: float) -> float:
    """The tolerance for a result, from the precision it was computed in: float32 inputs, or a float32 answer
    to float64 inputs (torch's default dtype, a correct choice too), get ``float32_tol``."""
    low = inputs_dtype != np.float64 or dtype_name(getattr(got, "dtype", "float64")) != "float64"
    return float32_tol if low else float64_tol


def check_attention_scores(attention_scores: Callable) -> None:
    """Batched, rectangular scores on a fresh d_k, scaled and unscaled, float64 and float32."""
    rng = fresh_rng()
    d_k = int(rng.choice([11, 13, 17, 24, 48]))  # never the lesson's 2, never equal to T_q or T_k
    t_q, t_k = int(rng.integers(3, 6)), int(rng.integers(6, 10))
    cases = [
        (rng.standard_normal((2, t_q, d_k)), rng.standard_normal((2, t_k, d_k))),  # batched
        (rng.standard_normal((t_q, d_k)).astype(np.float32),
         rng.standard_normal((t_k, d_k)).astype(np.float32)),  # one sequence, float32
    ]
    for Q, K in cases:
        raw = np.einsum("...qd,...kd->...qk", Q.astype(np.float64), K.astype(np.float64))  # (..., T_q, T_k)
        for scaled in (True, False):
            what = f"attention_scores(Q of shape {Q.shape} {Q.dtype}, K of shape {K.shape}, scaled={scaled})"
            with quiet():
                result = call_student(attention_scores, Q.copy(), K.copy(), scaled=scaled, what=what,
                                      named=_layout_error(Q))
            tol = _answer_tolerance(result, Q.dtype, 1e-6, 1e-4)
            got = array(result, what)
            want = raw / math.sqrt(d_k) if scaled else raw
            compare(got, want, what, "Each entry is q_i . k_j over the d_k components, divided by sqrt(d_k) when "
                    "scaled=True.", atol=tol, rtol=tol, shape_hint=_scores_shape_hint(want.shape), mistakes={
                "scores were divided by d_k instead of sqrt(d_k)": raw / d_k,
                "scaled=True returned the raw dot products: divide by sqrt(d_k)": raw,
                "scaled=False must return the raw dot products q . k, without dividing": raw / math.sqrt(d_k),
                "divided by the square root of the number of keys: d_k is the last axis of Q and K": raw / math.sqrt(t_k),
                "divided by the square root of the number of queries: d_k is the last axis of Q and K": raw / math.sqrt(t_q),
                "multiplied by sqrt(d_k) instead of dividing": raw * math.sqrt(d_k),
            } if scaled else {
                "scaled=False must return the raw dot products q . k, without dividing": raw / math.sqrt(d_k),
                "scaled=False divided the scores by d_k; it must return the raw dot products": raw / d_k,
            })


def check_qk_norm_scores(qk_norm_scores: Callable) -> None:
    """Cosine scores times a gain, batched and single, rows of very different lengths, float32 too."""
    rng = fresh_rng()
    d_k = int(rng.choice([5, 7, 10, 24]))
    t_q, t_k = int(rng.integers(3, 6)), int(rng.integers(6, 10))
    lengths_q = np.exp(rng.uniform(-3, 3, size=(2, t_q, 1)))  # (2, T_q, 1): lengths from 0.05 to 20
    lengths_k = np.exp(rng.uniform(-3, 3, size=(2, t_k, 1)))  # (2, T_k, 1)
    cases = [
        (rng.standard_normal((2, t_q, d_k)) * lengths_q, rng.standard_normal((2, t_k, d_k)) * lengths_k,
         float(rng.uniform(1.5, 12.0))),
        (rng.standard_normal((t_q, d_k)).astype(np.float32), rng.standard_normal((t_k, d_k)).astype(np.float32),
         float(rng.uniform(1.5, 12.0))),
    ]
    for Q, K, gain in cases:
        q, k = Q.astype(np.float64), K.astype(np.float64)
        unit_q = q / np.linalg.norm(q, axis=-1, keepdims=True)  # (..., T_q, d_k)
        unit_k = k / np.linalg.norm(k, axis=-1, keepdims=True)  # (..., T_k, d_k)
        want = gain * unit_q @ np.swapaxes(unit_k, -1, -2)  # (..., T_q, T_k)
        what = f"qk_norm_scores(Q of shape {Q.shape} {Q.dtype}, K of shape {K.shape}, gain={gain:.3f})"
        got = ask_array(qk_norm_scores, Q.copy(), K.copy(), gain, what=what, named=_layout_error(Q))
        # Relative to the gain, whatever the dtype: x / (|x| + eps) with the usual eps <= 1e-6 is correct too
        # (rows here are at least about 0.05 long), and every known mistake is off by far more.
        tol = 1e-4
        across = lambda x: x / np.linalg.norm(x, axis=-2, keepdims=True)  # noqa: E731 - the wrong axis
        compare(got, want, what, "Each score is gain * cos(q_i, k_j): every |score| is at most the gain.",
                atol=tol * gain, rtol=tol,
                shape_hint="Queries are the rows: (..., T_q, d_k) against (..., T_k, d_k) gives (..., T_q, T_k); "
                           "swap only the last two axes of the keys.",
                observed=lambda got: first_bad(got, want, atol=tol * gain, rtol=tol)
                + f" (largest |score| {float(np.abs(got).max()):.4g})", mistakes={
            "each component was normalised across the tokens (axis -2): normalise each vector over its d_k "
            "components (axis=-1)": gain * across(q) @ np.swapaxes(across(k), -1, -2),
            "the cosines were also divided by sqrt(d_k): with QK-norm the gain replaces the scale":
                want / math.sqrt(d_k),
            "only the queries were normalised: normalise the keys too, or the scores still grow with |k|":
                gain * unit_q @ np.swapaxes(k, -1, -2),
            "only the keys were normalised: normalise the queries too, or the scores still grow with |q|":
                gain * q @ np.swapaxes(unit_k, -1, -2),
            "the gain was left out": want / gain,
            "divided by the squared length: a unit vector is x / |x|, not x / |x|^2":
                gain * (q / (q**2).sum(-1, keepdims=True)) @ np.swapaxes(k / (k**2).sum(-1, keepdims=True), -1, -2),
        })
