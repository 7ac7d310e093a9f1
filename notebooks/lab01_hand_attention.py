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
# 3. reproduce the lesson's tables, its six-token figure, the causal mask and two more worked examples,
#    and see that attention weights are computed afresh for every input (they are not parameters);
# 4. check two properties that every attention output must have;
# 5. measure which words a small classifier *relies on*, and compare that with where it *looks*:
#    masking one word at a time, a second method (gradient × input), and a rank correlation over
#    many tickets.
#
# **Time.** About 2 to 2.5 hours for a student who has done the lesson: 30 minutes for
# sections 1–3, 45 for section 4, 15 for sections 5–6, an hour for sections 7–8. Section 9 is
# optional.
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, on fresh random inputs of other shapes. A failing test
# tells you the likely misconception. The written answer in section 8 is graded by a TA.
#
# **Precision.** Your NumPy functions may compute in float64 or in float32: a float32 input may
# give a float32 result, and the tests compare each result with the accuracy of the precision it
# was computed in (float32 rounding is not a mistake).
#
# **Convention, for the whole lab: a mask is True where attention is allowed.**

# %% [markdown]
# ## Setup
# Run this cell first. It loads NumPy, the lesson's examples and the plotting helpers.

# %% nbgrader={"grade_id": "setup", "locked": true}
import numpy as np

from mlbook_helpers.checks import (
    expect,
    expect_close,
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
w = softmax_rows(np.array([[2.0, 0.0, 1.0], [1.0, 2.0, 3.0]]))
expect_rows_sum_to_one(w, "softmax_rows of a 2 x 3 matrix",
                       "Each row is one query: normalise over the last axis (keys), not over axis 0 (queries).")
expect_close(w[0], [0.665, 0.090, 0.245], "softmax of (2, 0, 1)",
             hint="exp(2), exp(0) and exp(1), each divided by their sum.")
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
# The mask (True where attention is allowed, as everywhere in this lab): a disallowed score
# must get zero weight *and* the remaining weights must still sum to 1, so the mask acts on the
# scores, before the softmax (set forbidden scores to -inf).

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
# The ticket's own numbers are yours to compare with 1a; this cell checks the numbers on
# another small example instead.
Q_ex = np.array([[1.0, 0.0], [0.0, 2.0], [2.0, 1.0]])  # (T, d_k)
K_ex = np.array([[1.0, 1.0], [0.0, 1.0], [2.0, 0.0]])  # (T, d_k)
V_ex = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # (T, d_v)
out, weights = attention(Q, K, V)  # the ticket, drawn below
expect_rows_sum_to_one(weights, "weights of the ticket", "Normalise each query's row over the keys (attention calls your "
                       "softmax_rows: if softmax_rows fails its own test, fix it first).")
out_ex, weights_ex = attention(Q_ex, K_ex, V_ex)
expect_close(weights_ex, [[0.284, 0.140, 0.576], [0.446, 0.446, 0.108], [0.306, 0.074, 0.620]],
             "weights of the example", hint="Scores are divided by sqrt(d_k) = 1.414, not by d_k = 2.")
expect_close(out_ex, [[0.860, 0.716], [0.554, 0.554], [0.926, 0.694]], "outputs of the example",
             hint="The output mixes the value rows: weights @ V.")
out_c, weights_c = attention(Q, K, V, mask=allowed)  # the ticket under the causal mask, drawn below
for name, w_masked in (("causal weights of the ticket", weights_c),
                       ("causal weights of the example", attention(Q_ex, K_ex, V_ex, mask=allowed)[1])):
    expect_zero_where_masked(w_masked, allowed, name,
                             "Future keys got weight: set their scores to -inf before the softmax (not 0, which "
                             "still gets weight), with the mask True where attention is ALLOWED (is the polarity "
                             "inverted?).")
    expect_rows_sum_to_one(w_masked, name,
                           "Rows must still sum to 1: was the mask applied after the softmax instead of to the scores?")
expect_close(attention(Q_ex, K_ex, V_ex, mask=allowed)[1], [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.306, 0.074, 0.620]],
             "causal weights of the example", hint="The mask is True where attention is ALLOWED; masked keys get weight exactly 0.")

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
Q, K, V = project_qkv(ticket.X, ticket.W_q, ticket.W_k, ticket.W_v)  # (T, d_k), (T, d_k), (T, d_v)
_, weights = attention(Q, K, V)  # (T, T): your weights for the ticket (drawn even when a test above failed)
_, weights_c = attention(Q, K, V, mask=allowed)  # (T, T): under the causal mask
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
# The ticket: T = 3 tokens, d_model = 3, d_k = d_v = 2 (the shapes printed in sections 1-4).
shapes = attention_shapes(3, 3, 3, 2, 2)
ticket_shapes = {"Q": (3, 2), "K": (3, 2), "V": (3, 2), "weights": (3, 3), "out": (3, 2)}
for name, shape in ticket_shapes.items():
    expect(tuple(shapes.get(name, ())) == shape, f"attention_shapes(...)['{name}']",
           f"says {shapes.get(name)}, but the ticket's {name} is {shape}")

# %% nbgrader={"grade": true, "grade_id": "test_attention_shapes_hidden", "points": 1}
# Hidden tests: other sizes, T_q != T_k and d_k != d_v.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_attention_shapes(attention_shapes)
### END HIDDEN TESTS

# %% [markdown]
# ### 4c. The lesson's six-token figure: no mask, causal mask, no scale
#
# The lesson draws one head on six tokens three times. The token vectors (d_model = 16) and the
# projections (d_k = 16) are seeded random numbers: nothing was trained, so *which* token reads
# which is arbitrary. What the figure shows is what the mask and the scale do to any head.
#
# To compare rows with one number, the lesson uses a row's **spread**, 2 to the power of its
# entropy in bits: 1 when a row reads one key, 6 when it reads all six equally (lab 2 measures it
# in depth). Three things to predict before you run the cell:
# * which entries of the causal map are exactly 0, and what the first row is;
# * whether the columns of the unmasked map sum to 1 (rows do);
# * whether dropping the scale (scores four times larger, since √16 = 4) raises or lowers the spread.
#
# The cell calls **your** `attention`; multiplying the queries by √d_k cancels its division, as
# in section 5.

# %% nbgrader={"grade_id": "six_token_figure", "locked": true}
from mlbook_helpers.attribution import six_tokens, spread

six = six_tokens()
Q6, K6, V6 = six.X @ six.W_q, six.X @ six.W_k, six.X @ six.W_v  # (6, 16) each
causal6 = np.tril(np.ones((6, 6), dtype=bool))  # (6, 6): True where query i may read key j <= i
_, w_encoder = attention(Q6, K6, V6)  # (6, 6)
_, w_decoder = attention(Q6, K6, V6, mask=causal6)  # (6, 6)
_, w_unscaled = attention(Q6 * np.sqrt(16), K6, V6)  # (6, 6): the division by sqrt(d_k) cancelled
print("rows sum to", np.round(w_encoder.sum(axis=1), 6), "| columns sum to", np.round(w_encoder.sum(axis=0), 2))
print(f"average spread: no mask {spread(w_encoder).mean():.1f} of 6 keys, causal {spread(w_decoder).mean():.1f}, "
      f"no scale {spread(w_unscaled).mean():.1f}")
heatmap_grid({"encoder: no mask": w_encoder, "decoder: causal mask": w_decoder, "no scale (scores x 4)": w_unscaled},
             six.tokens, fmt=".2f");

# %% [markdown]
# The lesson prints an average spread of **4.8** of 6 keys without a mask and **2.3** without
# the scale; the cell reproduces both. The lesson does not give its seed: `six_tokens()` uses
# seed 73, one that gives the lesson's numbers. How typical is that draw? The cell below repeats
# the figure for 200 seeds, with the same kind of draw each time.

# %% nbgrader={"grade_id": "six_token_seeds", "locked": true}
spreads = {"scaled": [], "unscaled": []}
for s in range(200):
    draw = six_tokens(seed=s)
    Q_s, K_s, V_s = draw.X @ draw.W_q, draw.X @ draw.W_k, draw.X @ draw.W_v  # (6, 16) each
    spreads["scaled"].append(spread(attention(Q_s, K_s, V_s)[1]).mean())
    spreads["unscaled"].append(spread(attention(Q_s * np.sqrt(16), K_s, V_s)[1]).mean())
for name, values in spreads.items():
    lo, hi = np.percentile(values, [10, 90])
    print(f"{name:8s}: mean spread {np.mean(values):.2f}, 80 % of seeds between {lo:.2f} and {hi:.2f}")
gap = np.array(spreads["scaled"]) - np.array(spreads["unscaled"])  # (200,): keys per row lost without the scale
print(f"keys lost without the scale: {gap.mean():.2f} on average, {gap.min():.2f} at the least")

# %% [markdown]
# Over 200 seeds the scaled head averages about 4.6 keys (most seeds between 4.0 and 5.2) and the
# unscaled one about 2.1 (1.5 to 2.7): the lesson's 4.8 and 2.3 are an ordinary draw. Dropping
# the scale costs about 2.5 keys per row on average and at least 1.4 on every one of the 200
# seeds: nothing was learned, only the spread of the scores changed.
#
# ### 4d. The weights are computed, not learned
#
# What a layer *learns* are its projections W_q, W_k and W_v. The attention weights are an
# output: they are recomputed from each input and stored nowhere. Two measurements make the
# point. The same head applied to two different six-token inputs gives two different maps; and
# a longer input gives a larger map from the **same** parameters.

# %% nbgrader={"grade_id": "weights_are_computed", "locked": true}
params = {name: w.size for name, w in (("W_q", six.W_q), ("W_k", six.W_k), ("W_v", six.W_v))}
other = six_tokens(seed=74).X  # (6, 16): another input, the same head
_, w_other = attention(other @ six.W_q, other @ six.W_k, other @ six.W_v)  # (6, 6)
print(f"parameters of the head: {sum(params.values())} ({params})")
print(f"same head, another input: the maps differ by up to {np.abs(w_other - w_encoder).max():.2f} per entry")
for T in (6, 60, 600):
    X_T = six_tokens(seed=75, T=T).X  # (T, 16): T random tokens
    _, w_T = attention(X_T @ six.W_q, X_T @ six.W_k, X_T @ six.W_v)  # (T, T)
    print(f"T = {T:3d}: weights {w_T.shape}, {w_T.size:7d} numbers computed from the same {sum(params.values())} parameters")
heatmap_grid({"input 1": w_encoder, "input 2, same head": w_other}, six.tokens, fmt=".2f");

# %% [markdown]
# The head has 768 parameters whatever the length; the map has T² entries and is different for
# every input. So a heat map describes one input passing through the layer, never the layer
# itself, and a longer context costs activations (T² weights per head) but not parameters.

# %% [markdown]
# ## 5. Two more worked examples
#
# Both examples ask for one query's row, so first write `row_attention(q, K, V, scaled=True)`:
# one query (d_k,) against all keys, returning that row's output (d_v,) and weights (T_k,),
# with the scores divided by √d_k when `scaled` is True and left raw when it is False. (Your
# `attention` can do the work: one query is a (1, d_k) matrix.)
#
# **A bank session** (d_k = 4). Three events, *login*, *new-device*, *transfer*, already
# projected: the keys, values and the query of *transfer* are in `bank_session()`. Set
# `bank_output` and `bank_weights` to the *transfer* row's output and weights, and
# `bank_weights_unscaled` to the weights the same row gets **without** the scale.
#
# **The chapter's example**: `Q = K = [[1, 0], [0, 1], [1, 1]]`, `V = [[10, 0], [0, 10], [5, 5]]`
# from `chapter_qkv()`. Set `chapter_weights_row0` and `chapter_output_row0` to the first
# query's weights and output. The chapter prints them as
# (0.422, 0.208, 0.370) and (6.07, 3.93). Before you trust the book, look at the first row of
# the scores, (0.707, 0, 0.707): what must be true of the weights of keys 0 and 2?

# %% nbgrader={"grade_id": "row_attention", "solution": true}
def row_attention(q, K, V, scaled=True):
    """Attention of a single query over every key.

    Args:
        q: (d_k,) one query. K: (T_k, d_k) keys. V: (T_k, d_v) values.
        scaled: divide the scores by sqrt(d_k) when True; use the raw dot products when False.

    Returns:
        out: (d_v,) the query's output, weights: (T_k,) its weights (they sum to 1).
    """
    ### BEGIN SOLUTION
    q, K, V = (np.asarray(a, dtype=float) for a in (q, K, V))
    scores = K @ q  # (T_k, d_k) @ (d_k,) -> (T_k,)
    if scaled:
        scores = scores / np.sqrt(q.shape[-1])  # (T_k,)
    weights = softmax_rows(scores[None, :])[0]  # (T_k,)
    return weights @ V, weights  # (T_k,) @ (T_k, d_v) -> (d_v,); (T_k,)
    ### END SOLUTION

# %% nbgrader={"grade_id": "worked_examples", "solution": true}
bank = bank_session()
chapter_Q, chapter_K, chapter_V = chapter_qkv()
### BEGIN SOLUTION
q_transfer = bank.queries[2]  # (4,)
bank_output, bank_weights = row_attention(q_transfer, bank.K, bank.V)  # (2,), (3,)
_, bank_weights_unscaled = row_attention(q_transfer, bank.K, bank.V, scaled=False)  # (3,)
chapter_output_row0, chapter_weights_row0 = row_attention(chapter_Q[0], chapter_K, chapter_V)  # (2,), (3,)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_worked_examples", "points": 1}
expect_close(np.ravel(bank_weights), [0.212, 0.576, 0.212], "transfer's weights",
             hint="Raw scores are (1, 3, 1); scaled by 1/sqrt(4) they are (0.5, 1.5, 0.5) (row_attention calls your "
                  "softmax_rows: if softmax_rows fails its own test, fix it first).")
expect_close(np.ravel(bank_output), [0.424, 0.788], "transfer's output", hint="Mix the value rows with those weights.")
expect_close(np.ravel(bank_weights_unscaled), [0.107, 0.787, 0.107], "transfer's unscaled weights",
             hint="Without the scale the row is softmax(1, 3, 1): sharper from the same vectors.")
w_row0 = np.ravel(np.asarray(chapter_weights_row0, dtype=float))  # (3,)
print("the chapter's first row, recomputed: weights", np.round(w_row0, 3), "output",
      np.round(np.ravel(np.asarray(chapter_output_row0, dtype=float)), 3))
expect_rows_sum_to_one(w_row0, "the chapter's first row of weights", "Weights of one query sum to 1.")
expect_close(w_row0[0], w_row0[2], "weight of key 0 against weight of key 2",
             hint="Keys 0 and 2 both score 0.707, so they get equal weight; the book's 0.422 / 0.370 is a misprint.")
expect_close(w_row0[1] / w_row0[0], np.exp(-1 / np.sqrt(2)), "weight of key 1 / weight of key 0",
             hint="The scores are (0.707, 0, 0.707): the middle key's weight is exp(-0.707) times the others'.")
expect_close(np.ravel(chapter_output_row0), w_row0 @ chapter_V, "the chapter's first output",
             hint="The output mixes the value rows with those weights; the book's (6.07, 3.93) mixes its misprinted weights.")

# %% nbgrader={"grade": true, "grade_id": "test_worked_examples_hidden", "points": 1}
# Hidden tests: row_attention on fresh queries, keys and values (d_k != T_k), scaled and not.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_row_attention(row_attention)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Two properties every attention output has
#
# Run these checks before you believe any heat map:
# * every row of the weights is a probability distribution: non-negative, and **each row on its
#   own** sums to 1 (a total or a mean of the row sums lets one row's excess hide another's
#   shortfall); a row holding NaN is no distribution, so the verdict on it is `False`;
# * every output row lies in the **convex hull** of the value rows: it is a weighted average,
#   so in each coordinate it lies between the smallest and the largest value.
#
# Write both as functions that return `True` or `False` (not raise), with a tolerance.

# %% nbgrader={"grade_id": "property_checks", "solution": true}
def rows_are_distributions(weights, atol=1e-6):
    """True when every row of (T_q, T_k) `weights` is non-negative and sums to 1 within atol (False on NaN)."""
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
# A verdict is a truth value: Python's True / False, or NumPy's np.True_ / np.False_ (hence == rather than `is`).
# Valid weights and outputs written out here (the ticket's, rounded), so this cell judges the two checks alone.
valid_w = np.array([[0.4, 0.4, 0.2], [0.25, 0.5, 0.25], [0.0, 1.0, 0.0]])  # (T_q, T_k): rows sum to 1
V_chk = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # (T_k, d_v)
out_chk = valid_w @ V_chk  # (T_q, d_v): real attention outputs
verdict = rows_are_distributions(valid_w)
expect(verdict == True, "rows_are_distributions(valid weights)", f"returned {verdict!r} on valid weights")
verdict = rows_are_distributions(valid_w * 0.9)
expect(verdict == False, "rows_are_distributions(weights * 0.9)", f"returned {verdict!r} although rows sum to 0.9")
verdict = outputs_in_value_range(out_chk, V_chk)
expect(verdict == True, "outputs_in_value_range(valid outputs)", f"returned {verdict!r} on real outputs")
verdict = outputs_in_value_range(out_chk + 5.0, V_chk)
expect(verdict == False, "outputs_in_value_range(out + 5)", f"returned {verdict!r} for outputs above every value")

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
importance = token_importance_by_masking(classifier, words)  # (4,): yours, whatever the test above said
heatmap_grid(
    {"attention weight (looks at)": looked_at[None, :], "|importance| (relies on)": np.abs(importance)[None, :]},
    ["ticket"], words, vmin=None, vmax=None,
);

# %% [markdown]
# ### 7b. A second method: gradient × input
#
# Masking asks "what if this word were gone?" and costs one prediction per word. A cheaper,
# different question is "how fast does the logit change if this word's vector is scaled?". For
# word *i* with vector xᵢ, **gradient × input** is the sum over the vector's components of
# xᵢ ⊙ ∂logit/∂xᵢ: the first-order change of the logit when xᵢ shrinks to zero. It reads the
# gradient through both paths of attention: through the values (what is mixed in) and through
# the scores (how the weights move).
#
# Write `gradient_x_input(classifier, words)` with torch autograd and the two given functions:
# `word_vectors(classifier, words)` returns the (T, d) word vectors as a new tensor, and
# `refund_logit(classifier, vectors)` the classifier's logit (before the sigmoid) as a function of
# them. Take the gradient of the **logit**, not of the probability, and return a (T,) NumPy array.

# %% nbgrader={"grade_id": "gradient_x_input", "solution": true}
import torch

from mlbook_helpers.attribution import refund_logit, word_vectors


def gradient_x_input(classifier, words):
    """Gradient x input attribution of each word to the classifier's logit.

    Args:
        classifier: a TicketClassifier (use word_vectors and refund_logit).
        words: T words.

    Returns:
        (T,) array: for each word i, sum over d of x_i * d logit / d x_i.
    """
    ### BEGIN SOLUTION
    x = word_vectors(classifier, words).requires_grad_(True)  # (T, d): a leaf that records gradients
    logit = refund_logit(classifier, x)  # (): before the sigmoid
    (grad,) = torch.autograd.grad(logit, x)  # (T, d): d logit / d x
    return (grad * x).sum(dim=-1).detach().numpy()  # (T,): one attribution per word
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_gradient_x_input", "points": 1}
gxi = np.asarray(gradient_x_input(classifier, words))
expect_shape(gxi, (4,), "gradient_x_input(classifier, words)", "One number per word: sum x_i * grad_i over the d components.")
expect_close(gxi[2:], [0.0, 0.0], "gradient x input of 'my' and 'bag'",
             hint="Their vectors are orthogonal to the query and to the read-out, so x_i . grad_i is 0; "
                  "a norm of the gradient would not be.")
expect(gxi[1] > 0 > gxi[0], "the signs of 'refund' and 'please'",
       f"your attributions are {np.round(gxi, 3)}: 'refund' raises the logit and 'please' lowers it; "
       "was the gradient multiplied by the input, and is the sign of the sum kept (no abs, no norm)?")
expect_close(gxi[1], 1.925, "gradient x input of 'refund'", atol=2e-3,
             hint="About 0.39 would be the gradient of the probability (p(1 - p) = 0.20 times the logit's); "
                  "take the gradient of refund_logit itself.")

# %% nbgrader={"grade": true, "grade_id": "test_gradient_x_input_hidden", "points": 2}
# Hidden tests: random classifiers and tickets of other lengths.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_gradient_x_input(gradient_x_input)
### END HIDDEN TESTS

# %% [markdown]
# ### 7c. Do two rankings agree? Spearman's rank correlation
#
# The methods give numbers on different scales (probabilities, logits, weights), so compare
# their **rankings**: Spearman's ρ is the Pearson correlation of the ranks. Rank each array
# (1 for the smallest); **tied values share the average of the ranks they occupy** (two values
# tied for ranks 2 and 3 both get 2.5); then correlate the two rank vectors. ρ = 1 means the same
# order, −1 the reverse order, 0 no monotone relation. A **constant** array has no ranking (its
# centred ranks are all 0): ρ is undefined and `spearman` returns `nan`, not 0.
#
# Write `spearman(a, b)` in NumPy (no `scipy.stats`): ties occur here, since the classifier gives
# equal weight to words it has no affinity for. Two warnings: `np.argsort` returns the *order*
# (which index is smallest), not the ranks; and the shortcut 1 − 6Σd²/(n(n² − 1)) holds only
# without ties.

# %% nbgrader={"grade_id": "spearman", "solution": true}
def spearman(a, b):
    """Spearman's rank correlation of two equally long 1-D arrays, ties ranked by their average rank.

    Args:
        a: (n,) numbers.
        b: (n,) numbers.

    Returns:
        float in [-1, 1]; nan when a or b is constant (no ranking to compare).
    """
    ### BEGIN SOLUTION
    def ranks(x):
        x = np.asarray(x, dtype=float)  # (n,)
        r = np.empty(len(x))  # (n,)
        r[np.argsort(x, kind="stable")] = np.arange(1, len(x) + 1)  # (n,): ranks 1..n, ties in index order
        for value in np.unique(x):
            tied = x == value  # (n,) bool
            r[tied] = r[tied].mean()  # tied values share their average rank
        return r

    ra, rb = ranks(a) - (len(a) + 1) / 2, ranks(b) - (len(b) + 1) / 2  # (n,) each, centred
    norm = np.sqrt((ra**2).sum() * (rb**2).sum())  # 0 when a or b is constant
    return float((ra * rb).sum() / norm) if norm > 0 else float("nan")
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_spearman", "points": 1}
expect_close(spearman([1, 2, 3, 4, 5], [2, 4, 6, 8, 100]), 1.0, "spearman of two increasing arrays",
             hint="0.743 is the Pearson correlation of the values: correlate their ranks instead.")
expect_close(spearman([1, 2, 3, 4], [8, 6, 4, 2]), -1.0, "spearman of an increasing and a decreasing array",
             hint="The reversed order has rho = -1: are the ranks centred before they are multiplied?")
expect_close(spearman([0.1, 0.9, 0.4, 0.3, 0.7], [3, 1, 5, 2, 4]), -0.2, "spearman without ties",
             hint="0.7 would be the correlation of np.argsort's output, which is the order, not the ranks; "
                  "rank i is where element i lands in the sorted array.")
expect_close(spearman([0.2, 0.5, 0.5, 0.9], [1, 2, 3, 4]), 0.9487, "spearman with a tie", atol=1e-4,
             hint="1.0 means the two tied values got different ranks (2 and 3): give both the average, 2.5.")

# %% nbgrader={"grade": true, "grade_id": "test_spearman_hidden", "points": 2}
# Hidden tests: fresh arrays of other lengths, with and without ties.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab01_hand_attention import hidden
hidden.check_spearman(spearman)
### END HIDDEN TESTS

# %% [markdown]
# ### 7d. The perturbation test over many tickets
#
# One ticket is an anecdote. The cell below takes 80 tickets of 3 to 7 distinct words, and for
# each compares the three readings of "important": the attention weight, masking one word at a
# time (your `token_importance_by_masking`, the reference, since it measures reliance directly)
# and gradient × input (your `gradient_x_input`). It does this for the hand-set classifier and
# for 80 random classifiers (`TicketClassifier.random`, one per ticket), and reports the mean
# rank correlation with the masking importance (in absolute value: a word that lowers the
# probability is relied on too) and how often the top word agrees. Tickets on which a ranking is
# constant (every weight equal) have no ρ and are counted apart.

# %% nbgrader={"grade_id": "many_tickets", "locked": true}
from mlbook_helpers.attribution import random_tickets

rng = np.random.default_rng(21)
for label, make in (("hand-set classifier", lambda: classifier), ("random classifiers", lambda: TicketClassifier.random(rng))):
    rho = {"attention": [], "gradient x input": []}
    top = {"attention": [], "gradient x input": []}
    for ticket_words in random_tickets(rng, 80):
        model = make()
        relied = np.abs(token_importance_by_masking(model, ticket_words))  # (T,)
        readings = {"attention": model.predict(ticket_words)[1],  # (T,)
                    "gradient x input": np.abs(gradient_x_input(model, ticket_words))}  # (T,)
        for name, values in readings.items():
            with np.errstate(invalid="ignore", divide="ignore"):  # a constant ranking has no rho (nan)
                rho[name].append(spearman(values, relied))
            top[name].append(np.argmax(values) == np.argmax(relied))
    for name in rho:
        r = np.array(rho[name])  # (80,)
        print(f"{label:19s} {name:17s}: mean rho with masking {np.nanmean(r):+.2f} "
              f"({np.isnan(r).sum()} of 80 without a ranking), same top word {np.mean(top[name]):.0%}")

# %% [markdown]
# For the hand-set classifier the attention weight ranks the words poorly (ρ ≈ 0.3) and names
# the word the prediction relies on most in only about a fifth of the tickets, while gradient ×
# input agrees with masking closely (ρ ≈ 0.9, the same top word in three tickets of four). For
# random classifiers attention happens to agree much better (ρ ≈ 0.8), and there gradient × input
# does no better than attention. Both results are the point: whether a heat map tracks reliance is a property of
# the model, to be measured on many inputs and checked against a second method, never assumed.
# Gradient × input is a linearisation: where the logit is far from linear in a word (the word
# takes over the pooling), it and masking can disagree, which is why neither is "the" truth.

# %% [markdown]
# ## 8. Written answer (graded by a TA)
#
# The classifier puts most of its attention on *please*, yet masking *refund* moves the
# prediction most. In four to six sentences: why are attention weights not an explanation of a
# prediction? Use what you measured above, on the one ticket and on the 80 tickets of section 7d,
# and say what Jain & Wallace (2019) and Wiegreffe & Pinter (2019) add. Say what you would do
# before showing a heat map to a user as "the reason".

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
# baseline). Over 80 tickets the hand-set classifier's weights rank words poorly against masking
# (mean rho about 0.3, the same top word in about a fifth of the tickets) while gradient x input
# agrees closely (about 0.9); for random classifiers attention agrees better, so agreement is a
# property of the model that has to be measured. Before calling a heat map a reason: run the
# perturbation test over many inputs of the real model, compare with a second attribution method,
# and present the map as a diagnostic.
#
# **Rubric (TA only):** 1 point: weights mix values, they do not measure reliance, with the
# lab's numbers (please vs refund, or the 80-ticket rank correlations). 1 point: names a finding
# of each paper correctly. 1 point: a concrete test before presenting a map (masking/perturbation
# over many examples, a second attribution method, agreement measured rather than assumed).
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
