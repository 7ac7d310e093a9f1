"""Hidden checks for lab 1 (attention by hand).

Each check draws fresh inputs (other shapes than the notebook's: T_q != T_k, d_k != d_v),
computes the grader's own reference here, and on a mismatch names the known mistake the
student's result matches. Convention: a mask is True where attention is allowed.
"""

from __future__ import annotations

import numpy as np

from mlbook_helpers.examples import ticket_example

from ..kit import (array, ask_array, ask_boolean, ask_items, ask_number, call_student, close, compare, data_array,
                   describe, diagnose, fail, fresh_rng, helper, random_mask, seed, softmax, weight_tolerance)
from ..kit import attention as reference_attention  # the student's function is called `attention`

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


# --- 4: attention ---------------------------------------------------------------------------


def _attention_variants(Q, K, V, mask):
    """Message -> the (T_q, T_k) weights that known mistake produces, computed only when needed.

    Where a mistake normalises over entries that are all blocked (a row, under an inverted mask;
    a column, for the softmax over queries), its weights are NaN, as the mistake's own are.
    """
    d_k = Q.shape[-1]
    variants = {
        "Scores were divided by d_k instead of sqrt(d_k).": lambda: reference_attention(Q, K, V, mask, scale=d_k)[1],
        "Scores were not scaled: divide Q K^T by sqrt(d_k).": lambda: reference_attention(Q, K, V, mask, scale=1.0)[1],
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


def check_attention(attention) -> None:
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
                atol=tol * max(1.0, float(np.abs(V).max())), rtol=1e-5, observed=lambda o: "outputs are not weights @ V")


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
            tol = weight_tolerance(weights, spread=2.0)  # from the dtype the student computed in
            flag = (("With scaled=True divide by sqrt(d_k): the scores were left raw.", raw) if scaled else
                    ("With scaled=False the scores must stay raw: the scale was applied anyway.", raw / np.sqrt(d_k)))
            compare(array(weights, f"{what}: weights", finite=False), ref_w, what, "Scores are K @ q, one per key.",
                    atol=tol, rtol=1e-5,
                    observed=lambda w: f"weights differ from softmax of the {'scaled' if scaled else 'raw'} scores",
                    mistakes={
                "Scores were divided by d_k instead of sqrt(d_k).": lambda: softmax(raw / d_k),
                flag[0]: lambda: softmax(flag[1]),
                "The scale uses the number of keys T_k: it is sqrt(d_k), the width of q.": lambda: softmax(raw / np.sqrt(T_k)),
            })
            compare(array(out, f"{what}: out", finite=False), ref_w @ V, what, "The output is weights @ V, shape (d_v,).",
                    atol=tol * max(1.0, float(np.abs(V).max())), rtol=1e-5, mistake_tol=(tol, 1e-5),
                    observed=lambda o: "out is not weights @ V", mistakes={
                "The output mixes the value rows with the raw scores: use the softmax weights.": lambda: scores @ V,
                "That mixes the key rows: the output mixes the value rows, weights @ V.": lambda: ref_w @ K,
            })


# --- 6: property checks ---------------------------------------------------------------------


def check_property_checks(rows_are_distributions, outputs_in_value_range) -> None:
    rng = fresh_rng()
    T_q, T_k, d_v = 5, 7, 3
    good = softmax(rng.normal(size=(T_q, T_k)) * 2)  # (T_q, T_k)
    negative = good.copy()
    negative[0] = 0.0
    negative[0, :2] = (1.2, -0.2)  # row 0 sums to 1 but has a negative weight
    _expect_verdicts(rows_are_distributions, "rows_are_distributions", {
        "valid random weights": ((good,), True),
        "one row summing to 1.01": ((good + np.eye(T_q, T_k) * 0.01,), False),
        "a negative weight with rows still summing to 1": ((negative,), False),
        "columns (not rows) summing to 1": ((softmax(rng.normal(size=(T_q, T_k)), axis=0),), False),
    }, "Check non-negativity and that each row (last axis) sums to 1 within atol.")
    V = rng.normal(size=(T_k, d_v))  # (T_k, d_v)
    inside = good @ V  # (T_q, d_v)
    just_above = inside.copy()
    just_above[2, 1] = V[:, 1].max() + 1e-3  # one coordinate slightly outside
    _expect_verdicts(outputs_in_value_range, "outputs_in_value_range", {
        "real attention outputs": ((inside, V), True),
        "one coordinate 1e-3 above every value": ((just_above, V), False),
        "outputs below every value": ((inside - 10.0, V), False),
    }, "Compare each output column with the min and max of the same column of V (over the keys axis).")


def _expect_verdicts(check, name: str, cases: dict[str, tuple[tuple, bool]], hint: str) -> None:
    """Call the student's property check ``name`` on each case: label -> (its array arguments, the verdict due)."""
    for label, (args, expected) in cases.items():
        what = f"{name} on {label}"
        got = ask_boolean(check, *(a.copy() for a in args), what=what)
        if got != expected:
            fail(what, f"returned {got}", hint)


# --- 7: token importance --------------------------------------------------------------------


def _classifiers_and_tickets(max_words: int, n: int = 3):
    """``n`` fresh (grader's classifier, the student's identical copy in the kernel, ticket words).

    The two classifiers are built alike from one seed; the ticket has 3 to ``max_words`` words.
    """
    from mlbook_helpers.ticket_classifier import VOCAB, TicketClassifier  # torch: imported only here

    rng = fresh_rng()
    build_in_kernel = helper("mlbook_helpers.ticket_classifier:TicketClassifier.random")
    for _ in range(n):
        built_from = seed(rng)
        words = [str(w) for w in rng.choice(VOCAB, size=int(rng.integers(3, max_words + 1)))]
        yield (TicketClassifier.random(np.random.default_rng(built_from)),
               build_in_kernel(np.random.default_rng(built_from)), words)


def check_token_importance(token_importance_by_masking) -> None:
    for classifier, students_copy, words in _classifiers_and_tickets(max_words=6):
        p_full, weights = classifier.predict(words)
        ref = np.array([p_full - classifier.predict(words, keep=[j != i for j in range(len(words))])[0]
                        for i in range(len(words))])  # (T,)
        what = f"token_importance_by_masking on a {len(words)}-word ticket"
        got = ask_array(token_importance_by_masking, students_copy, list(words), what=what, shape=ref.shape,
                        hint="Return one importance per word: p_full - p_without_word.")
        keep_only = lambda: np.array([p_full - classifier.predict(words, keep=[j == i for j in range(len(words))])[0]  # noqa: E731
                                      for i in range(len(words))])
        compare(got, ref, what, "For each i: p_full - predict(words, keep=all but i).", observed=_returned, mistakes={
            "Those are the attention weights: importance must be measured by masking each word and re-predicting.": weights,
            "The sign is reversed: importance is p_full - p_without_word.": -ref,
            "Every word but one was masked: mask only word i and keep the others.": keep_only,
        })


def _returned(got: np.ndarray) -> str:
    return f"returned {np.round(got, 3).tolist()}"


# --- 7b: gradient x input -------------------------------------------------------------------


def _logit_and_gradient(classifier, words):
    """The grader's own forward pass of the pooling classifier, written from its definition:
    scores q . x_j / sqrt(d), softmax over the words, pooled = sum_j a_j x_j, logit = r . pooled + b.

    Returns:
        p (the probability), x (T, d), d logit / d x (T, d), the attention weights (T,), all float64.
    """
    import torch

    from mlbook_helpers.ticket_classifier import VOCAB

    emb = classifier.embeddings.detach().numpy()[[VOCAB.index(w) for w in words]]  # (T, d)
    x = torch.tensor(emb, dtype=torch.float64, requires_grad=True)  # (T, d)
    q = classifier.query.detach().reshape(-1).to(torch.float64)  # (d,)
    r = classifier.readout.detach().to(torch.float64)  # (d,)
    a = torch.softmax(x @ q / np.sqrt(x.shape[1]), dim=0)  # (T,)
    logit = (a @ x) @ r + classifier.bias  # ()
    (grad,) = torch.autograd.grad(logit, x)  # (T, d)
    p = float(torch.sigmoid(logit.detach()))
    return p, emb, grad.numpy(), a.detach().numpy()


def check_gradient_x_input(gradient_x_input) -> None:
    for classifier, students_copy, words in _classifiers_and_tickets(max_words=7):
        p, x, grad, weights = _logit_and_gradient(classifier, words)
        ref = (grad * x).sum(axis=-1)  # (T,)
        what = f"gradient_x_input on a {len(words)}-word ticket"
        got = ask_array(gradient_x_input, students_copy, list(words), what=what, shape=ref.shape,
                        hint="Return one attribution per word: sum over d of x_i * d logit / d x_i.")
        compare(got, ref, what, "Mark the word vectors requires_grad, take the gradient of refund_logit with respect to "
                "them, multiply by the vectors and sum over the last axis.", atol=1e-7, rtol=1e-6,
                mistake_tol=(1e-6, 1e-5), observed=_returned, mistakes={
            "that is the gradient alone, summed over the components: multiply it by the input x_i first": grad.sum(axis=-1),
            "that is the gradient of the probability: take the gradient of the logit (refund_logit), "
            "before the sigmoid": ref * p * (1 - p),
            "a norm loses the sign: sum x_i * grad_i over the components, keeping its sign":
                np.linalg.norm(grad * x, axis=-1),
            "absolute values lose the sign: sum x_i * grad_i over the components, keeping its sign": np.abs(ref),
            "the sign is reversed: the attribution is +x_i . d logit / d x_i": -ref,
            "those are the attention weights, not an attribution by the gradient": weights,
        })


# --- 7c: Spearman's rank correlation --------------------------------------------------------


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank: 1 + (values below) + (other equal values) / 2."""
    below = (x[None, :] < x[:, None]).sum(axis=1)  # (n,)
    equal = (x[None, :] == x[:, None]).sum(axis=1)  # (n,), itself included
    return 1.0 + below + (equal - 1) / 2.0


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def _spearman_variants(a: np.ndarray, b: np.ndarray) -> dict:
    """Message -> what a known mistake returns on (a, b)."""
    n = len(a)
    ordinal_a, ordinal_b = np.argsort(np.argsort(a, kind="stable")), np.argsort(np.argsort(b, kind="stable"))
    ra, rb = _average_ranks(a), _average_ranks(b)
    return {
        "that is the Pearson correlation of the values: correlate their ranks instead": lambda: _pearson(a, b),
        "tied values got different ranks: tied values share the average of the ranks they occupy":
            lambda: _pearson(ordinal_a.astype(float), ordinal_b.astype(float)),
        "np.argsort returns the order (which index is smallest), not the ranks: rank i is where element i "
        "lands once sorted": lambda: _pearson(np.argsort(a, kind="stable").astype(float), np.argsort(b, kind="stable").astype(float)),
        "the shortcut 1 - 6 sum d^2 / (n (n^2 - 1)) holds only without ties: correlate the average ranks":
            lambda: 1 - 6 * ((ra - rb) ** 2).sum() / (n * (n * n - 1)),
        "the ranks were not centred before they were multiplied (a cosine, not a correlation)":
            lambda: float((ra * rb).sum() / np.sqrt((ra * ra).sum() * (rb * rb).sum())),
    }


def check_spearman(spearman) -> None:
    rng = fresh_rng()
    n1, n2, n3 = int(rng.integers(6, 12)), int(rng.integers(12, 20)), int(rng.integers(5, 9))
    a1 = rng.normal(size=n1)  # no ties
    a2 = rng.integers(0, 4, size=n2).astype(float)  # many ties
    a3 = rng.normal(size=n3)
    cases = [
        (f"two unrelated arrays of {n1} numbers", a1, rng.normal(size=n1)),
        (f"{n1} numbers against a steep increasing function of them", a1, np.exp(3 * a1) + a1),
        (f"{n2} small integers with ties against noisy copies", a2, a2 + rng.normal(size=n2) * 1.5),
        (f"{n2} small integers with ties against other tied integers", a2, rng.integers(0, 3, size=n2).astype(float)),
        (f"{n3} numbers against their reversal by a decreasing function", a3, -(a3**3)),
    ]
    for label, a, b in cases:
        if np.ptp(b) == 0:  # a constant draw has no ranking: not asked
            continue
        want = _pearson(_average_ranks(a), _average_ranks(b))
        what = f"spearman on {label}"
        got = ask_number(spearman, a.copy(), b.copy(), what=what, hint="Return one float, the correlation of the two "
                         "rank vectors.")
        if abs(got - want) <= 1e-6:
            continue
        hint = diagnose(got, _spearman_variants(a, b), atol=1e-6, rtol=0)
        fail(what, f"returned {got:.4f}", hint or "Rank each array (ties: average rank), centre the ranks and take "
                                                   "their Pearson correlation.")
