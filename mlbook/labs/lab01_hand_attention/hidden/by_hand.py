"""Hidden checks of lab 1, sections 1a-3: token 0 worked by hand, softmax_rows, project_qkv."""

from __future__ import annotations

import numpy as np

from mlbook_helpers.examples import ticket_example

from ...kit import (array, ask_items, call_student, close, compare, fail, float_tolerance, fresh_rng, softmax,
                   weight_tolerance)

# --- 1a: hand-worked token 0 ----------------------------------------------------------------


def check_hand_token0(raw, scaled, weights, output) -> None:
    ex = ticket_example()
    q0 = ex.W_q[0]  # (d_k,)
    raw_ref = ex.W_k @ q0  # (3,)
    scaled_ref = raw_ref / np.sqrt(2)  # (3,)
    weights_ref = softmax(scaled_ref)  # (3,)
    out_ref = weights_ref @ ex.W_v  # (2,)
    swapped = ex.W_q @ ex.W_k[0]  # (3,): q0 taken from W_k, the keys from W_q
    # Each answer with the known mistakes of that step (message -> what the mistake types in).
    answers = {
        "raw_scores_0": (raw, raw_ref, {
            "These are already divided by sqrt(d_k): the raw scores are the plain dot products q0 . k_j.": scaled_ref,
            "Queries and keys swapped: q0 is row 0 of W_q, the keys are the rows of W_k.": swapped,
        }),
        "scaled_scores_0": (scaled, scaled_ref, {
            "These are the raw scores: divide them by sqrt(d_k) = sqrt(2).": raw_ref,
            "Looks like the scores were divided by d_k = 2 instead of sqrt(d_k).": raw_ref / 2,
        }),
        "weights_0": (weights, weights_ref, {
            "These are the softmax of the unscaled scores: scale before the softmax.": softmax(raw_ref),
            "Looks like the softmax of scores divided by d_k = 2 instead of sqrt(d_k).": softmax(raw_ref / 2),
            "The scores were divided by their sum: the weights are a softmax, exp of each score divided by the "
            "sum of the exps.": scaled_ref / scaled_ref.sum(),
            "These are exponentials that were not normalised: divide each by their sum.": np.exp(scaled_ref),
        }),
        "output_0": (output, out_ref, {
            "That mixes the rows of W_k: the output mixes the value rows (W_v).": weights_ref @ ex.W_k,
            "That mixes the values with the scaled scores: mix them with the softmax weights.": scaled_ref @ ex.W_v,
        }),
    }
    for name, (got, ref, mistakes) in answers.items():
        got = array(got, name, shape=ref.shape, kind="iuf",
                    hint=f"{name} is {len(ref)} numbers: the step of the hand calculation for token 0.")
        compare(got, ref, name, "Redo that step by hand: q0 = (1, 0), keys are the rows of W_k, values the rows of W_v.",
                atol=1e-3, rtol=0, mistake_tol=(2e-3, 0),
                observed=lambda got: f"{np.round(got, 4).tolist()} is not within 1e-3 of the example", mistakes=mistakes)


# --- 2: softmax_rows ------------------------------------------------------------------------


def _row_sums_not_kept(kind: str, text: str) -> tuple[str, str] | None:
    """A ``named=`` hook: (T_q, T_k) divided by (T_q,) row sums raises NumPy's (or torch's) broadcast error."""
    if kind in ("ValueError", "RuntimeError") and ("broadcast" in text or "must match the size" in text):
        return (f"raised {kind}: {text[:160]}",
                "A (T_q, T_k) matrix divided by its (T_q,) row sums does not broadcast: keep the summed axis "
                "(keepdims=True, or [:, None]) so each row is divided by its own sum.")
    return None


def check_softmax_rows(softmax_rows) -> None:
    rng = fresh_rng()
    for T_q, T_k, spread in ((4, 7, 1.0), (6, 3, 5.0), (1, 9, 2.0), (5, 5, 3000.0)):
        S = rng.normal(size=(T_q, T_k)) * spread  # (T_q, T_k); spread 3000: exp overflows unless shifted
        what = f"softmax_rows on a ({T_q}, {T_k}) matrix"
        got = call_student(softmax_rows, S.copy(), what=what, named=_row_sums_not_kept)
        tol = weight_tolerance(got, spread)  # from the dtype the student computed in
        w = array(got, what, finite=False)
        if w.shape == S.shape and T_q > 1 and np.isfinite(w).all() and close(w.sum(axis=0), np.ones(T_k), atol=tol) \
                and not close(w.sum(axis=-1), np.ones(T_q), atol=tol):
            fail(what, f"columns sum to 1 and rows to {np.round(w.sum(axis=-1), 3).tolist()[:5]}",
                 "The exponentials were normalised over axis 0 (queries): divide each row by its own sum, over the "
                 "last axis (keys), with keepdims=True.")
        compare(w, softmax(S), what, "Each row of the result must be the softmax of that "
                "row of S.", atol=tol, rtol=1e-5,
                nonfinite=(f"returned nan or inf on scores up to {np.abs(S).max():.0f}",
                           "exp overflows for large scores: subtract each row's max before exponentiating."),
                observed=lambda got: f"rows sum to {np.round(got.sum(axis=-1), 3).tolist()[:5]}", mistakes={
            "Columns sum to 1 instead of rows: the softmax ran over axis 0 (queries), not the last axis (keys).":
                lambda: softmax(S, axis=0),
            "The whole matrix sums to 1: normalise each row separately (axis=-1, keepdims=True).":
                lambda: np.exp(S - S.max()) / np.exp(S - S.max()).sum(),
            "These are exponentials without normalising: divide by each row's sum.":
                lambda: np.exp(S - S.max(axis=-1, keepdims=True)),
            "Each entry was shifted by its column's max: subtract each ROW's max (axis=-1, keepdims=True), one "
            "number per row, which leaves the row's softmax unchanged.":
                lambda: softmax(S - S.max(axis=0, keepdims=True)),
        })


# --- 3: project_qkv -------------------------------------------------------------------------


def check_project_qkv(project_qkv) -> None:
    rng = fresh_rng()
    T, d_model, d_k, d_v = 5, 6, 3, 4
    X = rng.normal(size=(T, d_model))
    W_q, W_k, W_v = rng.normal(size=(d_model, d_k)), rng.normal(size=(d_model, d_k)), rng.normal(size=(d_model, d_v))
    got = ask_items(project_qkv, X, W_q, W_k, W_v, n=3, what="project_qkv with d_k = 3, d_v = 4",
                    names="the three matrices (Q, K, V)")
    weights = {"W_q": W_q, "W_k": W_k, "W_v": W_v}
    for name, g, w in zip("QKV", got, weights):
        what = f"{name} from project_qkv"
        tol = float_tolerance(getattr(g, "dtype", "float64"))  # a float32 answer is correct too
        compare(array(g, what), X @ weights[w], what, f"{name} = X @ {w}; keys use W_k and values W_v.", **tol,
                shape_hint=_projection_shape_hint(name, w, X, weights),
                observed=lambda g: f"values differ from X @ {w}",
                mistakes={f"{name} was computed with {other} instead of {w}.": X @ weights[other]
                          for other in weights if other != w and weights[other].shape == weights[w].shape})


def _projection_shape_hint(name: str, w: str, X: np.ndarray, weights: dict[str, np.ndarray]):
    """The advice for a projection of the wrong shape: the matrix whose shape it has (d_k != d_v), or a transpose."""
    def hint(shape: tuple[int, ...]) -> str:
        for other, W in weights.items():
            if other != w and (X @ W).shape == shape and W.shape != weights[w].shape:
                return (f"{name} has the shape of X @ {other}: {name} = X @ {w} (keys use W_k, values W_v; "
                        f"d_v = {weights['W_v'].shape[1]} differs from d_k = {weights['W_k'].shape[1]}).")
        return "X @ W: one token per row, one column per output dimension."

    return hint
