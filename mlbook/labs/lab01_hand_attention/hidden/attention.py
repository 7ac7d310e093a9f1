"""Hidden checks of lab 1, sections 4-5: attention (and its shapes), row_attention on the worked examples."""

from __future__ import annotations

import numpy as np

from ...kit import (array, ask_items, call_student, close, compare, data_array, describe, diagnose, fail,
                   fresh_rng, given, random_mask, softmax, weight_tolerance)
from ...kit import attention as reference_attention  # the student's function is called `attention`
from .graders import graders_attention, graders_softmax_rows

# --- 4: attention ---------------------------------------------------------------------------


def _attention_variants(Q, K, V, mask):
    """Message -> the (T_q, T_k) weights that known mistake produces, computed only when needed.

    Where a mistake normalises over entries that are all blocked (a row, under an inverted mask;
    a column, for the softmax over queries), its weights are NaN, as the mistake's own are.
    """
    d_k, T_k, d_v = Q.shape[-1], K.shape[0], V.shape[-1]
    variants = {
        "Scores were divided by d_k instead of sqrt(d_k).": lambda: reference_attention(Q, K, V, mask, scale=d_k)[1],
        "Scores were not scaled: divide Q K^T by sqrt(d_k).": lambda: reference_attention(Q, K, V, mask, scale=1.0)[1],
        "The scale was taken from the number of keys T_k: it is sqrt(d_k), the width of Q and K (Q.shape[-1]).":
            lambda: reference_attention(Q, K, V, mask, scale=np.sqrt(T_k))[1],
        "The scale was taken from the width of the values d_v: it is sqrt(d_k), the width of Q and K (Q.shape[-1]).":
            lambda: reference_attention(Q, K, V, mask, scale=np.sqrt(d_v))[1],
        "The softmax ran over the query axis: normalise over keys (the last axis).":
            lambda: reference_attention(Q, K, V, mask, axis=0)[1],
    }
    if mask is not None:
        variants.update({
            "Rows do not sum to 1: the mask was applied after the softmax instead of to the scores.":
                lambda: reference_attention(Q, K, V)[1] * mask,  # (T_q, T_k): blocked weights zeroed afterwards
            "Inverted polarity: the mask is True where attention is ALLOWED.":
                lambda: reference_attention(Q, K, V, ~mask)[1],
        })
    return variants


def _expect_out_first(out, weights, out_shape: tuple[int, ...], weights_shape: tuple[int, ...], what: str) -> None:
    """Fail when the pair came back as (weights, out): each has the other's shape (T_k != d_v)."""
    got_out, got_w = data_array(out), data_array(weights)
    if (out_shape != weights_shape and got_out is not None and got_w is not None
            and got_out.shape == weights_shape and got_w.shape == out_shape):
        fail(what, f"the first result has shape {got_out.shape} and the second {got_w.shape}",
             "They are swapped: return the pair in the order (out, weights), out first.")


def check_attention(attention) -> None:
    # attention alone: the softmax_rows it calls is the grader's (a wrong softmax_rows costs its own cells)
    attention = given(attention, softmax_rows=graders_softmax_rows)
    rng = fresh_rng()
    cases = [(4, 6, 3, 5, 1.0, False), (7, 2, 5, 2, 1.0, True), (3, 8, 16, 4, 60.0, False), (5, 5, 4, 3, 1.0, True)]
    for T_q, T_k, d_k, d_v, spread, masked in cases:
        Q = rng.normal(size=(T_q, d_k)) * spread  # (T_q, d_k); spread 60: scores in the thousands
        K = rng.normal(size=(T_k, d_k)) * spread  # (T_k, d_k)
        V = rng.normal(size=(T_k, d_v))  # (T_k, d_v)
        mask = random_mask(rng, T_q, T_k) if masked else None  # (T_q, T_k)
        what = f"attention with T_q={T_q}, T_k={T_k}, d_k={d_k}, d_v={d_v}" + (", a random mask" if masked else "")
        kwargs = {"mask": mask.copy()} if masked else {}
        out, weights = ask_items(attention, Q.copy(), K.copy(), V.copy(), n=2, what=what, names="the pair (out, weights)",
                                 **kwargs)
        ref_out, ref_w = reference_attention(Q, K, V, mask)  # (T_q, d_v), (T_q, T_k)
        _expect_out_first(out, weights, ref_out.shape, ref_w.shape, what)
        w = array(weights, f"{what}: weights", finite=False)  # nan and inf are diagnosed below
        if w.shape != ref_w.shape:
            fail(what, f"weights have shape {w.shape}, expected (T_q, T_k) = {ref_w.shape}",
                 "Scores are Q @ K.T: one row per query, one column per key.")
        tol = weight_tolerance(weights, spread)
        if not close(w, ref_w, atol=tol, rtol=1e-5):
            hint = diagnose(w, _attention_variants(Q, K, V, mask), atol=tol, rtol=1e-5)
            if hint is None and mask is not None and (np.abs(np.nan_to_num(w[~mask])) > 1e-9).any():  # a diagnosis only
                hint = "Masked keys got weight: masked scores must be set to -inf before the softmax."
            if hint is None and not np.all(np.isfinite(w)):
                fail(what, "weights contain nan or inf",
                     "Large scores overflow exp unless each row's max is subtracted first.")
            fail(what, f"weights differ from softmax(Q K^T / sqrt(d_k)) (rows sum to {np.round(w.sum(-1), 3).tolist()[:4]})",
                 hint or "Check the scale, the softmax axis and where the mask is applied.")
        compare(array(out, f"{what}: out", finite=False), ref_out, what,
                "The output of each query is the weighted average of the value rows: weights @ V, shape (T_q, d_v).",
                atol=tol * max(1.0, float(np.abs(V).max())), rtol=1e-5, observed=lambda o: "outputs are not weights @ V",
                shape_hint=_out_shape_hint(T_q, T_k, d_k, d_v))


def _out_shape_hint(T_q: int, T_k: int, d_k: int, d_v: int):
    """The advice for outputs of another shape than (T_q, d_v): the one a known mistake gives, named."""
    def hint(shape: tuple[int, ...]) -> str:
        if shape == (T_q, d_k):
            return "The outputs have the width of the keys: the output mixes the VALUE rows, weights @ V."
        if shape in ((T_k, d_v), (d_v, T_q)):
            return "One row per query: out = weights @ V, (T_q, T_k) @ (T_k, d_v); no transpose of the weights."
        return "out = weights @ V: one row per query, the width of the values, (T_q, d_v)."

    return hint


def check_attention_shapes(attention_shapes) -> None:
    rng = fresh_rng()
    T_q, T_k, d_model, d_k, d_v = (int(x) for x in rng.choice(np.arange(2, 40), size=5, replace=False))
    got = call_student(attention_shapes, T_q, T_k, d_model, d_k, d_v, what="attention_shapes")
    ref = {"X_q": (T_q, d_model), "X_kv": (T_k, d_model), "Q": (T_q, d_k), "K": (T_k, d_k), "V": (T_k, d_v),
           "scores": (T_q, T_k), "weights": (T_q, T_k), "out": (T_q, d_v)}
    call = f"attention_shapes(T_q={T_q}, T_k={T_k}, d_model={d_model}, d_k={d_k}, d_v={d_v})"
    if not isinstance(got, dict):
        fail(call, f"returned {describe(got)}", "Return a dict: name -> shape tuple.")
    for name, shape in ref.items():
        value = got.get(name)
        arr = data_array(value) if isinstance(value, (tuple, list)) else None
        if arr is None or arr.shape != (len(shape),) or arr.dtype.kind not in "iu" or tuple(arr.tolist()) != shape:
            observed = tuple(arr.tolist()) if arr is not None and arr.ndim == 1 and arr.dtype.kind in "iu" else describe(value)
            fail(f"{call}['{name}']", f"is {observed}", "Keys and values come from the T_k sequence, queries from "
                 "T_q; the output has one row per query and the width of the values.")


# --- 5: row_attention (the worked examples) -------------------------------------------------


def check_row_attention(row_attention) -> None:
    # row_attention alone: the softmax_rows (or attention) it calls is the grader's
    row_attention = given(row_attention, softmax_rows=graders_softmax_rows, attention=graders_attention)
    rng = fresh_rng()
    for T_k, d_k, d_v in ((5, 3, 4), (2, 9, 3), (7, 16, 2)):  # d_k != T_k, so the two scales differ
        q = rng.normal(size=d_k) * 2.0  # (d_k,)
        K = rng.normal(size=(T_k, d_k))  # (T_k, d_k)
        V = rng.normal(size=(T_k, d_v))  # (T_k, d_v)
        raw = K @ q  # (T_k,)
        for scaled in (True, False):
            what = f"row_attention with T_k={T_k}, d_k={d_k}, d_v={d_v}, scaled={scaled}"
            out, weights = ask_items(row_attention, q.copy(), K.copy(), V.copy(), scaled=scaled, n=2, what=what,
                                     names="the pair (out, weights)")
            scores = raw / np.sqrt(d_k) if scaled else raw  # (T_k,)
            ref_w = softmax(scores)  # (T_k,)
            _expect_out_first(out, weights, (d_v,), (T_k,), what)
            tol = weight_tolerance(weights, spread=2.0)  # from the dtype the student computed in
            flag = (("With scaled=True divide by sqrt(d_k): the scores were left raw.", raw) if scaled else
                    ("With scaled=False the scores must stay raw: the scale was applied anyway.", raw / np.sqrt(d_k)))
            compare(array(weights, f"{what}: weights", finite=False), ref_w, what,
                    "Scores are K @ q, one per key; the weights are their softmax, which sums to 1.",
                    atol=tol, rtol=1e-5,
                    observed=lambda w: f"weights differ from softmax of the {'scaled' if scaled else 'raw'} scores "
                                       f"(they sum to {float(np.sum(w)):.4g})",
                    mistakes={
                "Scores were divided by d_k instead of sqrt(d_k).": lambda: softmax(raw / d_k),
                flag[0]: lambda: softmax(flag[1]),
                "The scale uses the number of keys T_k: it is sqrt(d_k), the width of q.": lambda: softmax(raw / np.sqrt(T_k)),
                "These are exponentials of the scores, not normalised: divide them by their sum (a softmax).":
                    lambda: np.exp(scores),
                **({"The scale uses the width of the values d_v: it is sqrt(d_k), the width of q.":
                    lambda: softmax(raw / np.sqrt(d_v))} if scaled else {}),
            })
            compare(array(out, f"{what}: out", finite=False), ref_w @ V, what, "The output is weights @ V, shape (d_v,).",
                    atol=tol * max(1.0, float(np.abs(V).max())), rtol=1e-5, mistake_tol=(tol, 1e-5),
                    observed=lambda o: "out is not weights @ V", mistakes={
                "The output mixes the value rows with the raw scores: use the softmax weights.": lambda: scores @ V,
                "That mixes the key rows: the output mixes the value rows, weights @ V.": lambda: ref_w @ K,
            })
