# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 1 — Attention by hand
#
# A support team's triage model reads the ticket **"bag delayed refund"**, and someone shows
# you a heat map in which *refund* takes 40 % of a token's attention "because it is the
# reason". In this lab you compute those weights yourself, three tokens and two dimensions
# at a time, and then you test whether a heat map deserves to be called a reason.
#
# You will:
# 1. work one query through scores, scale, softmax and mixing **by hand**;
# 2. write `softmax_rows`, `project_qkv` and `attention` in NumPy, and state the shape of every step;
# 3. reproduce the lesson's tables, the causal mask and two more worked examples;
# 4. check two properties that every attention output must have;
# 5. measure which words a small classifier *relies on*, and compare that with where it *looks*.
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, on fresh random inputs of other shapes. A failing test
# tells you the likely misconception. The written answer at the end is graded by a TA.

# %% [markdown]
# ## Setup
# Run this cell first. It loads NumPy, the lesson's examples and the plotting helpers.

# %% nbgrader={"grade_id": "setup", "locked": true}
import numpy as np

from mlbook_helpers.checks import (
    expect,
    expect_close,
    expect_in_convex_hull,
    expect_rows_sum_to_one,
    expect_shape,
    expect_zero_where_masked,
)
from mlbook_helpers.examples import bank_session, chapter_qkv, ticket_example
from mlbook_helpers.plotting import attention_heatmap, heatmap_grid

np.set_printoptions(precision=3, suppress=True)
ticket = ticket_example()
print("tokens:", ticket.tokens)
print("W_q =\n", ticket.W_q, "\nW_k =\n", ticket.W_k, "\nW_v =\n", ticket.W_v)

# %% [markdown]
# ## 1. The three-token ticket
#
# Each token is a one-hot row of `X` (3 × 3), so the projection `X @ W_q` simply picks rows:
# token *i*'s query is row *i* of `W_q`, its key row *i* of `W_k`, its value row *i* of
# `W_v`. The projections are set by hand for this lab (nothing was learned), with
# `d_k = 2`.
#
# Before any code, here is the one picture that needs no computation: which keys each query
# may read once a **causal mask** is on (a decoder may not read the future). Allowed pairs
# are 1, forbidden pairs 0.

# %% nbgrader={"grade_id": "causal_picture", "locked": true}
allowed = np.tril(np.ones((3, 3), dtype=bool))  # (T, T): True where query i may read key j (j <= i)
attention_heatmap(allowed.astype(float), ticket.tokens, title="causal mask: allowed (1) / forbidden (0)");

# %% [markdown]
# ### 1a. Token 0 ("bag") by hand
#
# Work with pen and paper (a calculator for the exponentials is fine), then type your numbers.
#
# * `raw_scores_0`: the dot products q₀ · kⱼ for j = 0, 1, 2, where q₀ = (1, 0).
# * `scaled_scores_0`: the same divided by √d_k.
# * `weights_0`: the softmax of the scaled scores.
# * `output_0`: Σⱼ weights_0[j] · vⱼ, a 2-vector.
#
# Type plain numbers (at least three decimals), not code that computes them: the point is to
# have done it once by hand.

# %% nbgrader={"grade_id": "hand_token0", "solution": true}
### BEGIN SOLUTION
raw_scores_0 = [1.0, 1.0, 0.0]
scaled_scores_0 = [0.7071, 0.7071, 0.0]
weights_0 = [0.4011, 0.4011, 0.1978]
output_0 = [1.0, 1.0]
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_hand_token0", "points": 1}
expect_shape(np.asarray(raw_scores_0), (3,), "raw_scores_0", "One score per key: three numbers.")
expect_shape(np.asarray(scaled_scores_0), (3,), "scaled_scores_0", "One scaled score per key: three numbers.")
expect_rows_sum_to_one(np.asarray(weights_0), "weights_0", "Softmax weights are positive and sum to 1 (to 3 decimals).", atol=2e-3)
expect_shape(np.asarray(output_0), (2,), "output_0", "The output is a mix of 2-dimensional value vectors.")

# %% nbgrader={"grade": true, "grade_id": "test_hand_token0_hidden", "points": 2}
# Hidden tests check your four answers against the example (tolerance 1e-3).
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_hand_token0(raw_scores_0, scaled_scores_0, weights_0, output_0)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. A softmax that does not overflow
#
# `softmax_rows` turns each row of a score matrix into weights: exponentiate, then divide by
# the row's sum. Each **row** is one query, each column one key, so the sum runs over the
# last axis.
#
# `exp(1000)` overflows to `inf` in float64, and `inf / inf` is `nan`. Subtracting the row's
# maximum first changes nothing mathematically (the factor cancels) and keeps every exponent
# at most 0.

# %% nbgrader={"grade_id": "softmax_rows", "solution": true}
def softmax_rows(S):
    """Softmax over the last axis (over keys), stable for large scores.

    Args:
        S: (T_q, T_k) scores.

    Returns:
        (T_q, T_k) weights: non-negative, every row sums to 1.
    """
    ### BEGIN SOLUTION
    S = np.asarray(S, dtype=float)
    shifted = S - S.max(axis=-1, keepdims=True)  # (T_q, T_k): every row's max is now 0
    e = np.exp(shifted)  # (T_q, T_k), entries in (0, 1]
    return e / e.sum(axis=-1, keepdims=True)  # (T_q, T_k) / (T_q, 1)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_softmax_rows", "points": 1}
w = softmax_rows(np.array([[0.7071, 0.7071, 0.0], [1.0, 2.0, 3.0]]))
expect_rows_sum_to_one(w, "softmax_rows of a 2 x 3 matrix",
                       "Each row is one query: normalise over the last axis (keys), not over axis 0 (queries).")
expect_close(w[0], [0.401, 0.401, 0.198], "softmax of token 0's scaled scores",
             hint="Those are the lesson's weights for 'bag'.")
big = softmax_rows(np.array([[1000.0, 1000.0, 0.0]]))
expect_close(big, [[0.5, 0.5, 0.0]], "softmax_rows of scores near 1000",
             hint="exp(1000) overflows to inf: subtract each row's max before exponentiating.")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_rows_hidden", "points": 2}
# Hidden tests: random shapes with T_q != T_k, and scores in the thousands.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_softmax_rows(softmax_rows)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Queries, keys and values
#
# All three are linear views of the same token rows: `Q = X W_q`, `K = X W_k`, `V = X W_v`.
# `X` is (T, d_model); `W_q` and `W_k` are (d_model, d_k) because queries and keys meet in a
# dot product; `W_v` is (d_model, d_v), and d_v need not equal d_k.

# %% nbgrader={"grade_id": "project_qkv", "solution": true}
def project_qkv(X, W_q, W_k, W_v):
    """Project token rows into queries, keys and values.

    Args:
        X: (T, d_model) one token per row.
        W_q: (d_model, d_k), W_k: (d_model, d_k), W_v: (d_model, d_v).

    Returns:
        Q: (T, d_k), K: (T, d_k), V: (T, d_v).
    """
    ### BEGIN SOLUTION
    Q = X @ W_q  # (T, d_model) @ (d_model, d_k) -> (T, d_k)
    K = X @ W_k  # (T, d_k)
    V = X @ W_v  # (T, d_v)
    return Q, K, V
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_project_qkv", "points": 1}
Q, K, V = project_qkv(ticket.X, ticket.W_q, ticket.W_k, ticket.W_v)
expect_shape(Q, (3, 2), "Q for the ticket", "Q = X @ W_q is (T, d_k).")
expect_close(Q, ticket.W_q, "Q for one-hot tokens", hint="With one-hot rows, X @ W_q returns W_q's rows.")
expect_close(V, ticket.W_v, "V for one-hot tokens", hint="Values come from W_v, not W_k.")

# %% nbgrader={"grade": true, "grade_id": "test_project_qkv_hidden", "points": 1}
# Hidden tests: random X with d_k != d_v.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_project_qkv(project_qkv)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. One attention head
#
# $$\text{Attention}(Q, K, V) = \text{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# Shapes: `Q` (T_q, d_k) and `K` (T_k, d_k) give scores (T_q, T_k); the weights have the same
# shape; the output is (T_q, d_v), one row per **query**. T_q and T_k are equal here but need
# not be (a decoder reading an encoder has T_q ≠ T_k), so keep them apart in your head.
#
# **The mask convention of this course: a mask is True where attention is allowed.** A
# disallowed score must get zero weight *and* the remaining weights must still sum to 1, so the
# mask acts on the scores, before the softmax (set forbidden scores to -inf).

# %% nbgrader={"grade_id": "attention", "solution": true}
def attention(Q, K, V, mask=None):
    """Single-head scaled dot-product attention.

    Args:
        Q: (T_q, d_k) queries, K: (T_k, d_k) keys, V: (T_k, d_v) values.
        mask: optional (T_q, T_k) bool, True where query i may attend to key j. Every row
            has at least one True.

    Returns:
        out: (T_q, d_v) outputs, weights: (T_q, T_k) attention weights (rows sum to 1).
    """
    ### BEGIN SOLUTION
    d_k = Q.shape[-1]
    scores = Q @ K.T / np.sqrt(d_k)  # (T_q, d_k) @ (d_k, T_k) -> (T_q, T_k)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # (T_q, T_k): forbidden keys drop out of the softmax
    weights = softmax_rows(scores)  # (T_q, T_k), rows sum to 1
    out = weights @ V  # (T_q, T_k) @ (T_k, d_v) -> (T_q, d_v)
    return out, weights
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_attention", "points": 2}
out, weights = attention(Q, K, V)
expect_rows_sum_to_one(weights, "weights of the ticket", "Normalise each query's row over the keys.")
expect_close(weights, [[0.401, 0.401, 0.198], [0.198, 0.401, 0.401], [0.248, 0.503, 0.248]],
             "weights of the ticket", hint="Scores are divided by sqrt(d_k) = 1.414, not by d_k = 2.")
expect_close(out, [[1.0, 1.0], [0.797, 1.203], [0.745, 1.255]], "outputs of the ticket",
             hint="The output mixes the value rows: weights @ V.")
out_c, weights_c = attention(Q, K, V, mask=allowed)
expect_zero_where_masked(weights_c, allowed, "causal weights",
                         "Future keys got weight: the mask is True where attention is ALLOWED (is the polarity inverted?).")
expect_rows_sum_to_one(weights_c, "causal weights",
                       "Rows must still sum to 1: was the mask applied after the softmax instead of to the scores?")
expect_close(weights_c, [[1.0, 0.0, 0.0], [0.330, 0.670, 0.0], [0.248, 0.503, 0.248]], "causal weights",
             hint="The mask is True where attention is ALLOWED; masked keys get weight exactly 0.")

# %% nbgrader={"grade": true, "grade_id": "test_attention_hidden", "points": 3}
# Hidden tests: random T_q != T_k, d_k != d_v, scores in the thousands, random boolean masks.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_attention(attention)
### END HIDDEN TESTS

# %% [markdown]
# Row by row, the lesson's table: *refund* reads most from *delayed*, not from itself, and
# with the causal mask the first token can only read itself.

# %% nbgrader={"grade_id": "ticket_heatmaps", "locked": true}
heatmap_grid({"no mask": weights, "causal mask": weights_c}, ticket.tokens);

# %% [markdown]
# ### 4b. Shapes at every step
#
# Write `attention_shapes`, which returns the shape of every intermediate of one head as a
# dict of tuples, for queries from a sequence of length `T_q`, keys and values from a
# sequence of length `T_k`, width `d_model`, and head sizes `d_k`, `d_v`. Keys:
# `"X_q"`, `"X_kv"`, `"Q"`, `"K"`, `"V"`, `"scores"`, `"weights"`, `"out"`.

# %% nbgrader={"grade_id": "attention_shapes", "solution": true}
def attention_shapes(T_q, T_k, d_model, d_k, d_v):
    """Shapes through one attention head.

    Returns:
        dict: name -> shape tuple, for X_q, X_kv, Q, K, V, scores, weights, out.
    """
    ### BEGIN SOLUTION
    return {
        "X_q": (T_q, d_model),
        "X_kv": (T_k, d_model),
        "Q": (T_q, d_k),
        "K": (T_k, d_k),
        "V": (T_k, d_v),
        "scores": (T_q, T_k),
        "weights": (T_q, T_k),
        "out": (T_q, d_v),
    }
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_attention_shapes", "points": 1}
shapes = attention_shapes(3, 3, 3, 2, 2)
for name, arr in {"Q": Q, "K": K, "V": V, "weights": weights, "out": out}.items():
    expect(tuple(shapes.get(name, ())) == arr.shape, f"attention_shapes(...)['{name}']",
           f"says {shapes.get(name)}, but the ticket's {name} is {arr.shape}")

# %% nbgrader={"grade": true, "grade_id": "test_attention_shapes_hidden", "points": 1}
# Hidden tests: other sizes, T_q != T_k and d_k != d_v.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_attention_shapes(attention_shapes)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Two more worked examples
#
# **A bank session** (d_k = 4). Three events, *login*, *new-device*, *transfer*, already
# projected: the keys, values and the query of *transfer* are in `bank_session()`. Compute,
# with your `attention`, the weights and the output of the *transfer* row, and the weights the
# same row would get **without** the scale (hint: multiplying the query by √d_k cancels your
# function's division).
#
# **The chapter's example**: `Q = K = [[1, 0], [0, 1], [1, 1]]`, `V = [[10, 0], [0, 10], [5, 5]]`
# from `chapter_qkv()`. Give the first query's weights and output. The chapter prints them as
# (0.422, 0.208, 0.370) and (6.07, 3.93). Before you trust the book, look at the first row of
# the scores, (0.707, 0, 0.707): what must be true of the weights of keys 0 and 2?

# %% nbgrader={"grade_id": "worked_examples", "solution": true}
bank = bank_session()
chapter_Q, chapter_K, chapter_V = chapter_qkv()
### BEGIN SOLUTION
q_transfer = bank.queries[2][None, :]  # (1, 4)
bank_output, bank_weights = attention(q_transfer, bank.K, bank.V)  # (1, 2), (1, 3)
_, bank_weights_unscaled = attention(q_transfer * np.sqrt(4), bank.K, bank.V)  # (1, 3)
chapter_out, chapter_weights = attention(chapter_Q, chapter_K, chapter_V)  # (3, 2), (3, 3)
chapter_weights_row0, chapter_output_row0 = chapter_weights[0], chapter_out[0]  # (3,), (2,)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_worked_examples", "points": 2}
expect_close(np.ravel(bank_weights), [0.212, 0.576, 0.212], "transfer's weights",
             hint="Raw scores are (1, 3, 1); scaled by 1/sqrt(4) they are (0.5, 1.5, 0.5).")
expect_close(np.ravel(bank_output), [0.424, 0.788], "transfer's output", hint="Mix the value rows with those weights.")
expect_close(np.ravel(bank_weights_unscaled), [0.107, 0.787, 0.107], "transfer's unscaled weights",
             hint="Without the scale the row is softmax(1, 3, 1): sharper from the same vectors.")
expect_close(np.ravel(chapter_weights_row0), [0.401, 0.198, 0.401], "the chapter's first row of weights",
             hint="Keys 0 and 2 both score 0.707, so they get equal weight; the book's 0.422 / 0.370 is a misprint.")
expect_close(np.ravel(chapter_output_row0), [6.017, 3.983], "the chapter's first output",
             hint="0.401 (10, 0) + 0.198 (0, 10) + 0.401 (5, 5); the book's (6.07, 3.93) mixes its misprinted weights.")

# %% [markdown]
# ## 6. Two properties every attention output has
#
# Run these checks before you believe any heat map:
# * every row of the weights is a probability distribution (non-negative, sums to 1);
# * every output row lies in the **convex hull** of the value rows: it is a weighted average,
#   so in each coordinate it lies between the smallest and the largest value.
#
# Write both as functions that return `True` or `False` (not raise), with a tolerance.

# %% nbgrader={"grade_id": "property_checks", "solution": true}
def rows_are_distributions(weights, atol=1e-6):
    """True when every row of (T_q, T_k) `weights` is non-negative and sums to 1 within atol."""
    ### BEGIN SOLUTION
    weights = np.asarray(weights, dtype=float)
    return bool(np.all(weights >= -atol) and np.allclose(weights.sum(axis=-1), 1.0, atol=atol))
    ### END SOLUTION


def outputs_in_value_range(out, V, atol=1e-6):
    """True when each (T_q, d_v) output coordinate lies between the min and max of V's column (T_k, d_v)."""
    ### BEGIN SOLUTION
    out, V = np.asarray(out, dtype=float), np.asarray(V, dtype=float)
    lo, hi = V.min(axis=0), V.max(axis=0)  # (d_v,), (d_v,)
    return bool(np.all(out >= lo - atol) and np.all(out <= hi + atol))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_property_checks", "points": 1}
expect(rows_are_distributions(weights) is True, "rows_are_distributions(ticket weights)", "returned False on valid weights")
expect(rows_are_distributions(weights * 0.9) is False, "rows_are_distributions(weights * 0.9)",
       "returned True although rows sum to 0.9")
expect(outputs_in_value_range(out, V) is True, "outputs_in_value_range(ticket)", "returned False on real outputs")
expect(outputs_in_value_range(out + 5.0, V) is False, "outputs_in_value_range(out + 5)",
       "returned True for outputs above every value")
expect_in_convex_hull(out, V, "your ticket outputs")

# %% nbgrader={"grade": true, "grade_id": "test_property_checks_hidden", "points": 2}
# Hidden tests: fresh valid and invalid weights and outputs, including subtle violations.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_property_checks(rows_are_distributions, outputs_in_value_range)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Test the heat map instead of believing it
#
# `TicketClassifier` is a small, fixed model: one attention-pooling head reads the words of a
# ticket and a logistic read-out gives the probability that the ticket asks for a refund. Its
# `predict(words, keep=None)` returns that probability and the attention weight on each word;
# `keep[i] = False` masks word *i* out, as if it were padding.

# %% nbgrader={"grade_id": "classifier_intro", "locked": true}
from mlbook_helpers.ticket_classifier import TicketClassifier

classifier = TicketClassifier.default()
words = ["please", "refund", "my", "bag"]
p_full, looked_at = classifier.predict(words)
print(f"P(refund request) = {p_full:.3f}")
attention_heatmap(looked_at[None, :], ["pooling query"], words, title="where the classifier looks");

# %% [markdown]
# A heat map says where the model *looks*. To learn what it *relies on*, remove one word at a
# time and watch the prediction. Write `token_importance_by_masking(classifier, words)`, which
# returns, for each word *i*, `p_full - p_without_i`: the probability with every word, minus
# the probability when only word *i* is masked. Positive means the word pushed the
# prediction up.

# %% nbgrader={"grade_id": "token_importance", "solution": true}
def token_importance_by_masking(classifier, words):
    """Change in the predicted probability when each word alone is masked.

    Args:
        classifier: has ``predict(words, keep) -> (probability, weights)``.
        words: T words.

    Returns:
        (T,) array: p_full - p_without_word_i for each i.
    """
    ### BEGIN SOLUTION
    p_full, _ = classifier.predict(words)
    changes = []
    for i in range(len(words)):
        keep = [j != i for j in range(len(words))]  # (T,): every word but i
        p_without, _ = classifier.predict(words, keep=keep)
        changes.append(p_full - p_without)
    return np.array(changes)  # (T,)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_token_importance", "points": 1}
importance = token_importance_by_masking(classifier, words)
expect_shape(np.asarray(importance), (4,), "token_importance_by_masking(...)", "One number per word.")
expect(int(np.argmax(np.abs(importance))) == 1, "the word the prediction relies on most",
       f"is {words[int(np.argmax(np.abs(importance)))]!r} by your importances {np.round(importance, 3)}; "
       "mask one word at a time and compare with the full prediction (not the attention weights)")

# %% nbgrader={"grade": true, "grade_id": "test_token_importance_hidden", "points": 2}
# Hidden tests: other classifiers and other tickets.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_token_importance(token_importance_by_masking)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "looks_vs_relies", "locked": true}
heatmap_grid(
    {"attention weight (looks at)": looked_at[None, :], "|importance| (relies on)": np.abs(importance)[None, :]},
    ["ticket"], words, vmin=None, vmax=None,
);

# %% [markdown]
# ## 8. Written answer (graded by a TA)
#
# The classifier puts most of its attention on *please*, yet masking *refund* moves the
# prediction most. In four to six sentences: why are attention weights not an explanation of a
# prediction? Use what you measured above, and say what Jain & Wallace (2019) and Wiegreffe &
# Pinter (2019) add. Say what you would do before showing a heat map to a user as "the reason".

# %% [markdown] nbgrader={"grade": true, "grade_id": "written_explanation", "points": 3, "solution": true}
# ### BEGIN SOLUTION
# A weight says how much a word's *value vector* was mixed into the output, not how much the
# prediction depends on that word. Here *please* gets about 0.71 of the weight but carries a
# value with no refund evidence, while *refund* gets 0.10 of the weight and a value that the
# read-out amplifies, so masking *refund* drops the probability by about 0.45. Masking a word also
# redistributes its weight to the others, so the effect of a word is not its weight. Jain & Wallace
# showed that attention often disagrees with gradient or perturbation importance and that
# different weights can give the same prediction; Wiegreffe & Pinter answer that whether weights
# explain depends on the definition of explanation and must be tested (e.g. against a uniform
# baseline). Before calling a heat map a reason: run a perturbation test like the one above over
# many tickets and compare with a second attribution method; present the map as a diagnostic.
#
# **Rubric (TA only):** 1 point: weights mix values, they do not measure reliance, with the
# lab's numbers (please vs refund). 1 point: names a finding of each paper correctly.
# 1 point: a concrete test before presenting a map (masking/perturbation over many examples, a
# second attribution method).
# ### END SOLUTION

# %% [markdown]
# ## 9. Explore (not graded)
#
# The explorer below calls **your** `attention`. Move the sliders to edit any query, key or
# value entry; toggle the scale and the causal mask; try the presets "large scores" (rows
# saturate towards one-hot) and "identical keys" (every row becomes uniform, whatever the
# queries).

# %% nbgrader={"grade_id": "explorer", "locked": true}
from mlbook_helpers.explorer import attention_explorer

attention_explorer(attention, ticket.tokens, ticket.W_q, ticket.W_k, ticket.W_v)
