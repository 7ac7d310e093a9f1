"""Hidden checks of lab 1, sections 1a-3: token 0 worked by hand, softmax_rows, project_qkv."""

from __future__ import annotations

import numpy as np

from mlbook_helpers.examples import ticket_example

from ...kit import array, ask_items, call_student, compare, fresh_rng, softmax, weight_tolerance

# --- 1a: hand-worked token 0 ----------------------------------------------------------------


def check_hand_token0(raw, scaled, weights, output) -> None:
    ex = ticket_example()
    q0 = ex.W_q[0]  # (d_k,)
    raw_ref = ex.W_k @ q0  # (3,)
    scaled_ref = raw_ref / np.sqrt(2)
    weights_ref = softmax(scaled_ref)
    out_ref = weights_ref @ ex.W_v  # (2,)
    answers = {"raw_scores_0": (raw, raw_ref), "scaled_scores_0": (scaled, scaled_ref),
               "weights_0": (weights, weights_ref), "output_0": (output, out_ref)}
    for name, (got, ref) in answers.items():
        got = array(got, name, shape=ref.shape, kind="iuf",
                    hint=f"{name} is {len(ref)} numbers: the step of the hand calculation for token 0.")
        compare(got, ref, name, "Redo that step by hand: q0 = (1, 0), keys are the rows of W_k, values the rows of W_v.",
                atol=1e-3, rtol=0, mistake_tol=(2e-3, 0),
                observed=lambda got: f"{np.round(got, 4).tolist()} is not within 1e-3 of the example", mistakes={
            "These are the raw scores: divide them by sqrt(d_k) = sqrt(2).": raw_ref,
            "Looks like the scores were divided by d_k = 2 instead of sqrt(d_k).": raw_ref / 2,
            "These are the softmax of the unscaled scores: scale before the softmax.": softmax(raw_ref),
            "Queries and keys swapped: q0 is row 0 of W_q, the keys are the rows of W_k.": ex.W_q @ ex.W_k[0],
            "That mixes the rows of W_k: the output mixes the value rows (W_v).": weights_ref @ ex.W_k,
        })


# --- 2: softmax_rows ------------------------------------------------------------------------


def check_softmax_rows(softmax_rows) -> None:
    rng = fresh_rng()
    for T_q, T_k, spread in ((4, 7, 1.0), (6, 3, 5.0), (1, 9, 2.0), (5, 5, 3000.0)):
        S = rng.normal(size=(T_q, T_k)) * spread  # (T_q, T_k); spread 3000: exp overflows unless shifted
        what = f"softmax_rows on a ({T_q}, {T_k}) matrix"
        got = call_student(softmax_rows, S.copy(), what=what)
        tol = weight_tolerance(got, spread)  # from the dtype the student computed in
        compare(array(got, what, finite=False), softmax(S), what, "Each row of the result must be the softmax of that "
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
        compare(array(g, what), X @ weights[w], what, f"{name} = X @ {w}; keys use W_k and values W_v.", atol=1e-9,
                shape_hint="X @ W: one token per row, one column per output dimension.",
                observed=lambda g: f"values differ from X @ {w}",
                mistakes={f"{name} was computed with {other} instead of {w}.": X @ weights[other]
                          for other in weights if other != w and weights[other].shape == weights[w].shape})
