"""Hidden checks of lab 1, section 7: token importance by masking, gradient x input, Spearman's rank correlation."""

from __future__ import annotations

import numpy as np

from ...kit import (ask_array, ask_number, call_student, compare, data_array, describe, diagnose, fail, fresh_rng,
                   helper, quiet, seed)

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
            "The absolute value loses the sign: a word that lowers the probability has a negative importance, "
            "p_full - p_without_word.": np.abs(ref),
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
            "that is a mean over the d components: sum x_i * grad_i over them": ref / x.shape[-1],
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
    lowest = lambda x: 1.0 + (x[None, :] < x[:, None]).sum(axis=1)  # noqa: E731 - ties share their lowest rank
    dense = lambda x: np.unique(x, return_inverse=True)[1].astype(float)  # noqa: E731 - ties share one rank, no gaps
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
        "tied values got the lowest of their ranks (1, 2, 2, 4): they share the AVERAGE of the ranks they occupy "
        "(1, 2.5, 2.5, 4)": lambda: _pearson(lowest(a), lowest(b)),
        "those are dense ranks (np.unique's inverse: 1, 2, 2, 3), which close the gap after a tie: tied values share "
        "the AVERAGE of the ranks they occupy (1, 2.5, 2.5, 4)": lambda: _pearson(dense(a), dense(b)),
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
    # A constant array has no ranking, so rho is undefined: the lab asks for nan (asked in every run).
    n4 = int(rng.integers(4, 10))
    level = float(rng.integers(-3, 4))
    for label, a, b in ((f"{n4} numbers against a constant array", rng.normal(size=n4), np.full(n4, level)),
                        (f"a constant array against {n4} numbers", np.full(n4, level), rng.normal(size=n4))):
        what = f"spearman on {label}"
        with quiet():
            got = call_student(spearman, a.copy(), b.copy(), what=what)
        arr = data_array(got) if not isinstance(got, bool) else None
        if arr is None or arr.ndim != 0 or arr.dtype.kind != "f" or not np.isnan(arr):
            fail(what, f"returned {describe(got)}", "A constant array has no ranking to compare, so rho is undefined: "
                 "return nan (float('nan')), not 0 or +-1; its centred ranks are all 0, so guard the division.")
