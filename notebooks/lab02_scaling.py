# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 2 — Why divide by √d_k? Measure it
#
# Every attention layer divides its scores by √d_k. The usual one-line reason ("it keeps the
# variance at 1") is easy to recite and easy to get subtly wrong in an interview. In this lab
# you **measure** the reason on random vectors, the situation at initialisation, instead of
# reciting it.
#
# You will:
# 1. measure the spread of a dot product q · k as d_k grows and compare it with √d_k;
# 2. compute scores with and without the scale, and watch what a larger spread does to a softmax;
# 3. measure how many keys a row really uses (entropy and *effective keys*), scaled and unscaled;
# 4. repeat the chapter's exercise on 512 tokens, and see why d_k would be the wrong divisor;
# 5. write the softmax Jacobian and measure how much gradient reaches the scores;
# 6. learn the temperature instead of fixing it, and watch it run away;
# 7. replace the fixed scale by QK-norm, and measure what each does when the weights grow;
# 8. (extension) read attention as Nadaraya–Watson kernel regression, the scale as a bandwidth,
#    and linear attention as a kernel that factorises into a running state.
#
# **Time.** About 2 to 2.5 hours: an hour for sections 1–5, 30 minutes for sections 6–8, 45
# minutes for the temperature and QK-norm (sections 9–10). The extension at the end takes about
# 35 minutes more and carries 6 of the lab's points: skip it if you are short of time.
#
# **Conventions used throughout.** `Q` is (..., T_q, d_k) and `K` is (..., T_k, d_k), one token
# per row. Scores are (..., T_q, T_k): rows are queries, columns are keys, and every softmax runs
# over the last axis (the keys). Every function that draws random numbers takes a NumPy
# `Generator` called `rng` and draws **only** from it, so the same seed gives the same result.
# Random query and key components are independent standard normals (mean 0, variance 1).
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, with fresh seeds, other d_k and other sizes, and their
# tolerances come from the sample size. A failing test names the likely misconception. The
# written answer in section 6 is graded by a TA.

# %% [markdown]
# ## Setup
# Run this cell first. `softmax` is SciPy's: `softmax(scores, axis=-1)` normalises each row over
# the keys. You wrote your own in lab 1; here the softmax is a tool, not the subject.

# %% nbgrader={"grade_id": "setup", "locked": true}
import math

import matplotlib.pyplot as plt
import numpy as np
from scipy.special import softmax

from mlbook_helpers.checks import as_array, expect, expect_close, expect_shape
from mlbook_helpers.examples import ticket_example
from mlbook_helpers.plotting import attention_heatmap, curves, heatmap_grid

np.set_printoptions(precision=3, suppress=True)
D_KS = [2, 4, 8, 16, 32, 64, 128, 256]  # the widths of the lesson's table
ticket = ticket_example()
Q_ticket = ticket.X @ ticket.W_q  # (3, 2): the lesson's queries for bag, delayed, refund
K_ticket = ticket.X @ ticket.W_k  # (3, 2): their keys

# %% [markdown]
# ## 1. The spread of a dot product
#
# Take a query q and a key k with d_k components each, all independent with mean 0 and
# variance 1. The score is the sum s = q₁k₁ + … + q_{d_k}k_{d_k}.
#
# * One term: E[q_c k_c] = E[q_c] E[k_c] = 0, and Var(q_c k_c) = E[q_c²] E[k_c²] = 1 · 1 = 1.
# * Independent terms add their variances, so **Var(s) = d_k** and the standard deviation is √d_k.
#
# So the typical size of a raw score grows with the width of the head: about 2 at d_k = 4,
# 4 at d_k = 16, 8 at d_k = 64. Before trusting the algebra, measure it.
#
# Write `dot_product_std`: draw `n_pairs` independent pairs (q, k) from `rng`, compute one dot
# product per pair, and return the standard deviation of those `n_pairs` numbers.
# Draw all pairs at once as two (n_pairs, d_k) arrays (`rng.standard_normal`); mind which axis
# holds the components.

# %% nbgrader={"grade_id": "dot_product_std", "solution": true}
def dot_product_std(d_k, n_pairs, rng):
    """Measure the spread of q . k for random vectors with unit-variance components.

    Args:
        d_k: number of components of each vector.
        n_pairs: how many independent (q, k) pairs to draw.
        rng: a numpy.random.Generator; every random number comes from it.

    Returns:
        float: the standard deviation of the n_pairs dot products.
    """
    ### BEGIN SOLUTION
    q = rng.standard_normal((n_pairs, d_k))  # (n_pairs, d_k): one query per row
    k = rng.standard_normal((n_pairs, d_k))  # (n_pairs, d_k): one key per row
    dots = (q * k).sum(axis=-1)  # (n_pairs,): sum over the d_k components of each pair
    return float(dots.std())
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_dot_product_std", "points": 2}
# The lesson measured 3.99 with 20,000 pairs at d_k = 16 (the law says 4). Tolerance: a sample
# SD of n draws has standard error sigma * sqrt((kappa - 1) / (4 n)), where kappa = 3 + 6 / d_k is
# the kurtosis of q . k; at d_k = 16, n = 20,000 that is 4 * sqrt(2.375 / 80,000) = 0.022, and we
# allow 5 standard errors. At d_k = 64 the same rule gives 8 +- 5 * 0.042.
SPREAD_HINT = ("About 141 = sqrt(20000) means the std was taken over the wrong axis (across the pairs, "
               "not the d_k components); about 1 is the spread of a single product q_c k_c; "
               "about 16 is the variance, not the standard deviation.")
sd16 = dot_product_std(16, 20_000, np.random.default_rng(0))
expect_close(sd16, 4.0, "dot_product_std(16, 20000, rng)", atol=0.11, hint=SPREAD_HINT)
sd64 = dot_product_std(64, 20_000, np.random.default_rng(1))
expect_close(sd64, 8.0, "dot_product_std(64, 20000, rng)", atol=0.21, hint=SPREAD_HINT)
again = dot_product_std(16, 20_000, np.random.default_rng(0))
expect(again == sd16, "two calls with default_rng(0)", f"gave {sd16:.6g} and {again:.6g}",
       "Draw every random number from the rng argument, not from np.random.*, so a seed reproduces the result.")

# %% nbgrader={"grade": true, "grade_id": "test_dot_product_std_hidden", "points": 3}
# Hidden tests: fresh seeds, other d_k, reproducibility.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_dot_product_std(dot_product_std)
### END HIDDEN TESTS

# %% [markdown]
# Now the lesson's table: 20,000 pairs at every width from 2 to 256. On log–log axes a power
# law is a straight line, and √d_k has slope 1/2: √d_k is 1.41, 2, 2.83, 4, 5.66, 8, 11.3, 16.
# The lesson printed 1.3, 2.1, 2.9, 4.0, 5.7, 8.4, 11.3, 16.0. With 20,000 pairs the standard
# error of each SD is under 1 % (the rule in the test above), so your table should come within
# about 2 % of √d_k at every width (this seed gives 1.40, 1.96, 2.82, 4.00, 5.65, 8.04, 11.28,
# 16.07). The lesson does not say how many pairs its series used. Had it used 20,000, its 1.3 at
# d_k = 2 and 8.4 at d_k = 64 would be about ten standard errors from √d_k; with the sample of its
# other experiment, 40 draws of 8 tokens (320 pairs), they are 1.3 and 1.2 standard errors away:
# ordinary sampling noise, not a different law.

# %% nbgrader={"grade_id": "spread_table", "locked": true}
rng = np.random.default_rng(39)
measured = [dot_product_std(d_k, 20_000, rng) for d_k in D_KS]
for d_k, sd in zip(D_KS, measured):
    print(f"d_k = {d_k:3d}   measured SD of q.k = {sd:5.2f}   sqrt(d_k) = {math.sqrt(d_k):5.2f}")
curves(D_KS, {"measured SD of q . k": measured, "sqrt(d_k)": np.sqrt(D_KS)},
       xlabel="d_k", ylabel="standard deviation", logx=True, logy=True,
       title="The spread of a raw score grows like sqrt(d_k)")
plt.show()

# %% [markdown]
# ## 2. Scores, scaled and unscaled
#
# Dividing every score by √d_k divides its standard deviation by √d_k, which brings it back to
# 1 at every width. Write `attention_scores`. It must work for a single sequence (T, d_k) and
# for a batch (B, T, d_k), with T_q ≠ T_k: swap only the last two axes of K.

# %% nbgrader={"grade_id": "attention_scores", "solution": true}
def attention_scores(Q, K, scaled=True):
    """Score every query against every key.

    Args:
        Q: (..., T_q, d_k) queries, one per row.
        K: (..., T_k, d_k) keys, one per row.
        scaled: divide by sqrt(d_k) when True; return the raw dot products when False.

    Returns:
        (..., T_q, T_k) scores; entry [i, j] compares query i with key j.
    """
    ### BEGIN SOLUTION
    d_k = Q.shape[-1]
    scores = Q @ K.swapaxes(-2, -1)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    if scaled:
        scores = scores / math.sqrt(d_k)  # (..., T_q, T_k)
    return scores
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_attention_scores", "points": 2}
# The lesson's token 0 ("bag"): raw scores (1, 1, 0), scaled by sqrt(2): (0.707, 0.707, 0).
scaled0 = as_array(attention_scores(Q_ticket, K_ticket, scaled=True))[0]
expect_close(scaled0, [0.707, 0.707, 0.0], "scaled scores of token 0",
             hint="(0.5, 0.5, 0) would mean the scores were divided by d_k instead of sqrt(d_k); "
                  "(1, 1, 0) means no scaling at all.")
raw0 = as_array(attention_scores(Q_ticket, K_ticket, scaled=False))[0]
expect_close(raw0, [1.0, 1.0, 0.0], "unscaled scores of token 0", hint="scaled=False returns the raw dot products q . k.")
batch = attention_scores(np.ones((2, 5, 4)), np.ones((2, 7, 4)))
expect_shape(batch, (2, 5, 7), "scores of a (2, 5, 4) batch of queries against (2, 7, 4) keys",
             "Swap only the last two axes of K (K.swapaxes(-2, -1)); K.T also reverses the batch axis.")
expect_close(as_array(batch)[0, 0, 0], 2.0, "a score of the all-ones batch (d_k = 4)",
             hint="Four products of 1, divided by sqrt(4) = 2; divided by d_k it would be 1.")

# %% nbgrader={"grade": true, "grade_id": "test_attention_scores_hidden", "points": 2}
# Hidden tests: batched and single sequences, T_q != T_k, another d_k, float32.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_attention_scores(attention_scores)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. What a larger spread does to the softmax
#
# The softmax only sees differences between scores, and it turns them into ratios:
# e^Δ. Multiply all scores by a factor and every ratio is raised to that power. The three rows
# below are token 0's scores scaled (the lesson's weights), unscaled, and eight times larger.
# The key order never changes; only the sharpness does. No code of yours is needed for this map.

# %% nbgrader={"grade_id": "sharpening_map", "locked": true}
score_rows = {
    "scaled (0.707, 0.707, 0)": [0.707, 0.707, 0.0],
    "unscaled (1, 1, 0)": [1.0, 1.0, 0.0],
    "eight times larger (8, 8, 0)": [8.0, 8.0, 0.0],
}
sharpening = softmax(np.array(list(score_rows.values())), axis=-1)  # (3, 3): one score vector per row
attention_heatmap(sharpening, list(score_rows), list(ticket.tokens), fmt=".4f",
                  title="token 0's weights as the score spread grows")
plt.show()

# %% [markdown]
# Weights (0.401, 0.401, 0.198) become (0.422, 0.422, 0.155) without the scale, and
# (0.500, 0.500, 0.0002) at eight times the spread: the third key is ignored. The same happens
# to your scores:

# %% nbgrader={"grade_id": "sharpening_yours", "locked": true}
for scaled in (True, False):
    row0 = softmax(as_array(attention_scores(Q_ticket, K_ticket, scaled=scaled))[0])  # (3,)
    print(f"scaled={scaled!s:5}: token 0's weights {np.round(row0, 3)}")

# %% [markdown]
# ## 4. How many keys does a row use?
#
# A heat map shows sharpness, but a number is easier to compare across widths. The **entropy**
# of a row of weights a is H = −Σⱼ aⱼ log aⱼ (with 0 · log 0 = 0): 0 for a one-hot row,
# log T for a uniform row over T keys. The unit depends on the logarithm: base 2 gives **bits**,
# base e gives **nats**, and H_bits = H_nats / ln 2.
#
# The **effective number of keys** is 2^H_bits: 1 for a one-hot row, T for a uniform row,
# 2 for a row split evenly between two keys. Since 2^H_bits = e^H_nats, either unit gives the same
# count, as long as the base of the power matches the base of the entropy.
#
# Write `row_entropy` (one entropy per row, in the base you are given) and `effective_keys`.
# Rows with zero weights (masked keys) must give a number, not `nan`.

# %% nbgrader={"grade_id": "row_entropy", "solution": true}
def row_entropy(weights, base):
    """Entropy of each row of weights, with 0 log 0 = 0.

    Args:
        weights: (..., T_k) rows of non-negative weights, each summing to 1.
        base: base of the logarithm: 2 for bits, math.e for nats.

    Returns:
        (...) one entropy per row.
    """
    ### BEGIN SOLUTION
    logs = np.log(np.where(weights > 0, weights, 1.0))  # (..., T_k): log 1 = 0 where a weight is 0
    return -(weights * logs).sum(axis=-1) / math.log(base)  # (...)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_row_entropy", "points": 2}
uniform8 = np.full((1, 8), 1 / 8)  # (1, 8): one uniform row over 8 keys
expect_close(row_entropy(uniform8, 2), [3.0], "entropy of a uniform row over 8 keys, base 2",
             hint="2.079 = ln 8 would be an entropy in nats where bits were asked: divide the natural log by log(base).")
expect_close(row_entropy(uniform8, math.e), [math.log(8)], "entropy of a uniform row over 8 keys, base e",
             hint="3.0 = log2 8 would be an entropy in bits where nats were asked: with base=e keep the natural log.")
expect_close(row_entropy(np.array([[0.0, 1.0, 0.0]]), 2), [0.0], "entropy of a one-hot row",
             hint="A one-hot row has entropy 0; nan means 0 * log 0 was not counted as 0.")
expect_close(row_entropy(np.array([[0.401, 0.401, 0.198]]), 2), [1.520], "entropy of token 0's weights in bits",
             hint="H = -sum a log2 a over the row.")
expect_shape(row_entropy(np.full((2, 5, 7), 1 / 7), 2), (2, 5), "row_entropy of (2, 5, 7) weights",
             "One entropy per row: sum over the last axis (the keys) only.")

# %% nbgrader={"grade": true, "grade_id": "test_row_entropy_hidden", "points": 3}
# Hidden tests: batches of rows with zeros, one-hot and uniform rows, in bits and in nats.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_row_entropy(row_entropy)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "effective_keys", "solution": true}
def effective_keys(weights):
    """Effective number of keys of each row: 2 to the power of its entropy in bits.

    Args:
        weights: (..., T_k) rows of non-negative weights, each summing to 1.

    Returns:
        (...) one number per row, between 1 (one-hot) and T_k (uniform).
    """
    ### BEGIN SOLUTION
    return 2.0 ** row_entropy(weights, 2)  # (...)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_effective_keys", "points": 1}
KEYS_HINT = ("e^3 = 20.1 for a uniform row over 8 keys would be exp of an entropy in bits; "
             "2^2.079 = 4.23 would be 2 to the power of an entropy in nats. The base of the power must match the unit "
             "(effective_keys calls your row_entropy: if row_entropy fails its own test, fix it first).")
expect_close(effective_keys(uniform8), [8.0], "effective keys of a uniform row over 8 keys", hint=KEYS_HINT)
expect_close(effective_keys(np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])), [1.0, 2.0],
             "effective keys of a one-hot row and of an even two-way split", hint=KEYS_HINT)

# %% nbgrader={"grade": true, "grade_id": "test_effective_keys_hidden", "points": 2}
# Hidden tests: batches of rows with zeros, one-hot and uniform rows.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_effective_keys(effective_keys)
### END HIDDEN TESTS

# %% [markdown]
# ### 4b. The collapse experiment
#
# The lesson draws 40 sequences of 8 tokens at each width, with random queries and keys, and
# averages the effective keys over every row of every draw. Write `mean_effective_keys`: draw
# Q as (n_draws, n_tokens, d_k) and K as (n_draws, n_keys, d_k) standard normals from `rng`
# (n_keys defaults to n_tokens, the lesson's self-attention), compute the weights with
# **your** `attention_scores` and `softmax(..., axis=-1)`, and return the mean of **your**
# `effective_keys` over all rows. The hidden tests use more keys than queries or fewer, so
# the order of Q and K matters there.

# %% nbgrader={"grade_id": "mean_effective_keys", "solution": true}
def mean_effective_keys(d_k, rng, scaled=True, n_draws=40, n_tokens=8, n_keys=None):
    """Average effective keys of attention rows on random queries and keys.

    Args:
        d_k: width of the queries and keys.
        rng: a numpy.random.Generator; every random number comes from it.
        scaled: divide the scores by sqrt(d_k) (True) or not (False).
        n_draws: number of independent sequences.
        n_tokens: queries per sequence (T_q = n_tokens).
        n_keys: keys per sequence (T_k); None means n_tokens, as in self-attention.

    Returns:
        float: effective keys averaged over the n_draws * n_tokens rows.
    """
    ### BEGIN SOLUTION
    Q = rng.standard_normal((n_draws, n_tokens, d_k))  # (n_draws, T_q, d_k)
    K = rng.standard_normal((n_draws, n_tokens if n_keys is None else n_keys, d_k))  # (n_draws, T_k, d_k)
    weights = softmax(np.asarray(attention_scores(Q, K, scaled=scaled)), axis=-1)  # (n_draws, T_q, T_k)
    return float(np.asarray(effective_keys(weights)).mean())  # mean over draws and rows
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mean_effective_keys", "points": 2}
# The lesson: scaled rows keep 5.5 to 6.2 of 8 keys, unscaled rows fall to about 1.2 at d_k = 256.
# Tolerance: draws are independent, so the mean over 40 draws has standard error s / sqrt(40), where
# s is the SD of one draw's mean. A 20,000-draw run gives mean 5.76, s = 0.43 (scaled, d_k = 16) and
# mean 1.21, s = 0.14 (unscaled, d_k = 256); 5 standard errors are 0.34 and 0.11.
scaled16 = mean_effective_keys(16, np.random.default_rng(0), scaled=True)
expect_close(scaled16, 5.76, "mean_effective_keys(16, rng, scaled=True)", atol=0.34,
             hint="Close to 8 (uniform) would mean the scores were divided by d_k instead of sqrt(d_k); "
                  "close to 2 means the scale was not applied (this calls your attention_scores and effective_keys: "
                  "if either fails its own test, fix it first).")
raw256 = mean_effective_keys(256, np.random.default_rng(1), scaled=False)
expect_close(raw256, 1.21, "mean_effective_keys(256, rng, scaled=False)", atol=0.11,
             hint="Unscaled rows at d_k = 256 are nearly one-hot; a value near 5.8 means scaled=False was ignored "
                  "(if attention_scores or effective_keys fails its own test, fix it first).")

# %% nbgrader={"grade": true, "grade_id": "test_mean_effective_keys_hidden", "points": 3}
# Hidden tests: fresh seeds, other d_k, other numbers of queries and of keys (n_keys != n_tokens), scaled
# and unscaled.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_mean_effective_keys(mean_effective_keys)
### END HIDDEN TESTS

# %% [markdown]
# Both curves across the lesson's widths, and one attention row at four widths, scaled and
# unscaled, drawn from the same queries and keys.

# %% nbgrader={"grade_id": "collapse_plot", "locked": true}
rng = np.random.default_rng(40)
keys_scaled = [mean_effective_keys(d_k, rng, scaled=True) for d_k in D_KS]
keys_raw = [mean_effective_keys(d_k, rng, scaled=False) for d_k in D_KS]
for d_k, ks, kr in zip(D_KS, keys_scaled, keys_raw):
    print(f"d_k = {d_k:3d}   effective keys of 8: scaled {ks:4.2f}   unscaled {kr:4.2f}")
curves(D_KS, {"scaled by sqrt(d_k)": keys_scaled, "unscaled": keys_raw}, xlabel="d_k",
       ylabel="effective keys (of 8)", logx=True, title="Without the scale, rows collapse to one key")
plt.show()

# %% nbgrader={"grade_id": "row_heatmaps", "locked": true}
rng = np.random.default_rng(8)
widths = [2, 16, 64, 256]
rows = {"scaled": [], "unscaled": []}
for d_k in widths:
    q = rng.standard_normal((1, d_k))  # (1, d_k): one query
    K = rng.standard_normal((8, d_k))  # (8, d_k): eight keys
    rows["scaled"].append(softmax(as_array(attention_scores(q, K, scaled=True))[0]))  # (8,)
    rows["unscaled"].append(softmax(as_array(attention_scores(q, K, scaled=False))[0]))  # (8,)
heatmap_grid({name: np.array(r) for name, r in rows.items()}, [f"d_k = {d}" for d in widths],
             [f"k{j}" for j in range(8)], fmt=".1f")
plt.show()

# %% [markdown]
# ## 5. The chapter's exercise: 512 tokens
#
# Now a longer sequence: Q and K of shape 512 × d_k for d_k = 8, 64 and 512. For each width the
# cell reports the standard deviation of all entries of the raw scores QKᵀ, and the mean row
# entropy **in nats** with three divisors: none, √d_k, and d_k. The largest possible entropy is
# log 512 = 6.24 nats (every row uniform).

# %% nbgrader={"grade_id": "exercise_512", "locked": true}
T = 512
rng = np.random.default_rng(2017)
print(f"T = {T}, log T = {math.log(T):.2f} nats")
print("  d_k   SD(raw)   H unscaled   H / sqrt(d_k)   H / d_k")
for d_k in (8, 64, 512):
    Q = rng.standard_normal((T, d_k))  # (T, d_k)
    K = rng.standard_normal((T, d_k))  # (T, d_k)
    raw = as_array(attention_scores(Q, K, scaled=False))  # (T, T)
    H = {div: row_entropy(softmax(raw / div, axis=-1), math.e).mean() for div in (1.0, math.sqrt(d_k), d_k)}
    print(f"{d_k:5d}   {raw.std():7.2f}   {H[1.0]:10.2f}   {H[math.sqrt(d_k)]:13.2f}   {H[d_k]:7.2f}")

# %% [markdown]
# What to read in the table:
#
# * The raw spread is √d_k again: 2.90, 7.98 and 22.64 (√d_k = 2.83, 8 and 22.6).
# * **Scaled by √d_k**, the mean entropy is about 5.74 nats at every width. That is no accident: for
#   many keys whose scores have variance σ², the entropy is close to log T − σ²/2, and the scale
#   makes σ² = 1 at every d_k, so log 512 − 0.5 = 5.74.
# * **Unscaled**, the entropy falls from 3.39 nats at d_k = 8 to 0.86 at 64 and 0.24 at 512:
#   rows collapse toward one key.
# * **Divided by d_k**, the scores have variance 1/d_k, and the entropy climbs toward log T as
#   d_k grows (6.17, 6.23, 6.24): rows become uniform, and a uniform row reads every value
#   equally, whatever the query asked for.

# %% [markdown]
# ## 6. Written answer: why √d_k and not d_k?
#
# In four to six sentences: why is the divisor √d_k and not d_k (or 1)? Use the variance argument
# and **the numbers you measured** in sections 4 and 5, and say what goes wrong in each of the
# two other cases. This answer is graded by a TA.

# %% [markdown] nbgrader={"grade": true, "grade_id": "why_sqrt_not_dk", "points": 3, "solution": true}
# ### BEGIN SOLUTION
# A raw score is a sum of d_k independent unit-variance products, so its variance is d_k and its
# standard deviation √d_k (measured: 4.0 at d_k = 16, 16 at 256). What the softmax responds to is the
# spread of the scores, a standard deviation, so dividing by √d_k gives variance 1 at every width:
# the scaled rows kept about 5.7–6 of 8 keys and about 5.74 nats of 6.24 at every d_k. Without a
# divisor the spread grows, rows collapse toward one key (1.2 of 8 keys at d_k = 256, entropy 0.24
# nats at d_k = 512), and the softmax Jacobian diag(a) − aaᵀ goes to zero, so almost no gradient
# reaches W_Q and W_K. Dividing by d_k over-corrects: the variance becomes 1/d_k, the scores
# shrink together, and rows drift to uniform (6.23 and 6.24 nats, i.e. log T, at d_k = 64 and 512),
# so every query reads the same average of the values and the pattern carries no information.
# Only the power 1/2 makes the score distribution independent of d_k.
#
# **Rubric (TA only):** 1 point: variance of q·k is d_k, so the standard deviation is √d_k and
# dividing by it gives unit variance at every width (the divisor normalises a standard deviation,
# not a variance). 1 point: no scale → saturated, near one-hot rows with vanishing softmax gradient,
# supported by a measured number. 1 point: divide by d_k → variance 1/d_k, rows near uniform
# (entropy near log T), supported by a measured number.
# ### END SOLUTION

# %% [markdown]
# ## 7. The softmax Jacobian
#
# Why does a sharp row hurt? Learning changes W_Q and W_K only through the gradient that reaches
# the scores. For one row a = softmax(s), the derivative of aᵢ with respect to sⱼ is
# aᵢ(1[i = j] − aⱼ), that is, the matrix
#
# J = diag(a) − a aᵀ   (T × T, symmetric, every row sums to 0).
#
# Its largest entry is a diagonal aᵢ(1 − aᵢ): 2/9 = 0.22 for a uniform three-way row, but only
# 0.98 · 0.02 ≈ 0.02 for (0.98, 0.01, 0.01). Write `softmax_jacobian` for one row or a batch of rows.

# %% nbgrader={"grade_id": "softmax_jacobian", "solution": true}
def softmax_jacobian(a):
    """Jacobian of the softmax at its output: J[..., i, j] = d a_i / d s_j.

    Args:
        a: (..., T) one or more softmax rows (each sums to 1).

    Returns:
        (..., T, T) one Jacobian diag(a) - a a^T per row.
    """
    ### BEGIN SOLUTION
    t = a.shape[-1]
    diag = a[..., :, None] * np.eye(t)  # (..., T, T): a on the diagonal
    outer = a[..., :, None] * a[..., None, :]  # (..., T, T): a_i a_j
    return diag - outer
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_softmax_jacobian", "points": 2}
J_uniform = as_array(softmax_jacobian(np.full(3, 1 / 3)))
expect_close(J_uniform, np.eye(3) / 3 - 1 / 9, "Jacobian of a uniform 3-way row",
             hint="Diagonal a_i (1 - a_i) = 2/9 = 0.22, off-diagonal -a_i a_j = -1/9; a a^T is an outer product "
                  "(a T x T matrix), not a * a.")
J_sharp = as_array(softmax_jacobian(np.array([0.98, 0.01, 0.01])))
expect_close(J_sharp, [[0.0196, -0.0098, -0.0098], [-0.0098, 0.0099, -0.0001], [-0.0098, -0.0001, 0.0099]],
             "Jacobian of the row (0.98, 0.01, 0.01)", atol=1e-4,
             hint="Entry (i, j) is a_i (1[i = j] - a_j). a * a is elementwise; a a^T is the outer product, "
                  "with entries a_i a_j.")
expect_close(np.abs(J_sharp).max(), 0.0196, "largest slope of (0.98, 0.01, 0.01)", atol=1e-4,
             hint="0.98 * (1 - 0.98) = 0.0196: a saturated row passes almost no gradient.")
expect_close(J_sharp.sum(axis=-1), np.zeros(3), "row sums of the Jacobian",
             hint="Adding the same number to every score leaves the softmax unchanged, so every row of J sums to 0.")
expect_shape(softmax_jacobian(np.full((2, 4, 5), 0.2)), (2, 4, 5, 5), "Jacobian of a (2, 4, 5) batch of rows",
             "One (T, T) matrix per row: np.diag and np.outer take one vector only; for a batch, broadcast over a new axis.")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_jacobian_hidden", "points": 2}
# Hidden tests: a fresh row of another length, and a (2, 3, T) batch.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_softmax_jacobian(softmax_jacobian)
### END HIDDEN TESTS

# %% [markdown]
# ### 7b. How much gradient reaches the scores?
#
# Suppose the loss sends back a random gradient g = ∂L/∂a (standard normal, one per weight).
# The gradient that reaches a row of scores is J g. The cell below averages its length over the
# rows of 40 draws of 8 tokens, with your `attention_scores` and `softmax_jacobian`.

# %% nbgrader={"grade_id": "gradient_plot", "locked": true}
def score_gradient_norm(d_k, rng, scaled, n_draws=40, n_tokens=8):
    """Mean length of the gradient reaching one row of scores, for a random upstream gradient.

    Returns:
        float: the mean over n_draws * n_tokens rows of |J g|.
    """
    Q, K = rng.standard_normal((2, n_draws, n_tokens, d_k))  # each (n_draws, T, d_k)
    A = softmax(as_array(attention_scores(Q, K, scaled=scaled)), axis=-1)  # (n_draws, T, T)
    J = as_array(softmax_jacobian(A))  # (n_draws, T, T, T): one Jacobian per row
    g = rng.standard_normal(A.shape)  # (n_draws, T, T): dL/da, one per weight
    grad_scores = (J @ g[..., None])[..., 0]  # (n_draws, T, T): dL/ds, row by row
    return float(np.linalg.norm(grad_scores, axis=-1).mean())


rng = np.random.default_rng(42)
grad_scaled = [score_gradient_norm(d_k, rng, scaled=True) for d_k in D_KS]
grad_raw = [score_gradient_norm(d_k, rng, scaled=False) for d_k in D_KS]
for d_k, gs, gr in zip(D_KS, grad_scaled, grad_raw):
    print(f"d_k = {d_k:3d}   |dL/ds| per row: scaled {gs:5.3f}   unscaled {gr:5.3f}")
curves(D_KS, {"scaled by sqrt(d_k)": grad_scaled, "unscaled": grad_raw}, xlabel="d_k",
       ylabel="mean |dL/ds| per row", logx=True, title="Gradient reaching the scores")
plt.show()

# %% [markdown]
# With the scale, the gradient reaching the scores stays about the same at every width. Without
# it, the gradient shrinks steadily as rows saturate, to about a fifth at d_k = 256: the projections
# that produced those scores barely learn.
#
# ## 8. A sanity check you can do in an interview
#
# How large is the **largest** of T scores? For T independent normal scores with standard
# deviation σ, the maximum is of the order σ √(2 ln T). Unscaled at d_k = 64 with T = 512 that is
# √(2 · 64 · ln 512) ≈ 28; after scaling it is √(2 ln 512) ≈ 3.5. The bound is the leading term
# of the extreme-value estimate, so measured maxima come out a little below it.

# %% nbgrader={"grade_id": "extreme_value", "locked": true}
T, d_k = 512, 64
rng = np.random.default_rng(64)
Q = rng.standard_normal((T, d_k))  # (T, d_k)
K = rng.standard_normal((T, d_k))  # (T, d_k)
row_max = as_array(attention_scores(Q, K, scaled=False)).max(axis=-1)  # (T,): largest score of each query
bound = math.sqrt(2 * d_k * math.log(T))
print(f"sqrt(2 d_k ln T) = {bound:.1f};   largest unscaled score of a query, averaged over queries: {row_max.mean():.1f}")
print(f"sqrt(2 ln T)     = {bound / math.sqrt(d_k):.2f};   the same after scaling: {row_max.mean() / math.sqrt(d_k):.2f}")

# %% [markdown]
# A top score of about 24–28 against a typical score of 0 gives that key a weight e^25 times
# larger than an average key: the row is one-hot. A top score of about 3–3.5 gives e^3.5 ≈ 33 times
# an average key, spread over 512 keys: peaked, but far from saturated.

# %% [markdown]
# ## 9. A learned temperature
#
# The divisor √d_k is a **temperature** fixed before training. Some models learn it instead: the
# scores become q · k / (τ √d_k) with a learned τ > 0 (one per head, say). A τ below 1 sharpens
# every row, above 1 flattens it. τ is learned through its logarithm, u = log τ, so it stays
# positive and a step changes it by a factor rather than by an amount.
#
# How does the loss reach u? With S₀ = QKᵀ/√d_k, the scores are S = S₀ e^(−u), so ∂S/∂u = −S.
# The gradient that reaches the scores, dS (section 7's Jacobian applied row by row), gives
# ∂L/∂u = −Σ dS ⊙ S, summed over every score of every row. Autograd does this for you.
#
# Write `learn_temperature`: starting from u = 0 (τ = 1, the fixed scale), take `steps` steps
# of plain gradient descent u ← u − lr · ∂L/∂u on the loss L = mean over all entries of
# (softmax(S₀ / τ) V − Y)², and return τ = e^u as a float. Use torch autograd (make u a 0-d float64
# tensor with `requires_grad=True`) or write the gradient above in NumPy.
#
# **Tolerance.** Your τ after a few steps is compared with the grader's own float64 descent to a
# relative 1e-5. Working in float32 (torch's default dtype) moves τ by about 1e-7 and is accepted;
# a step more or fewer, or a step on τ instead of log τ, moves it by far more and is not.

# %% nbgrader={"grade_id": "temperature_data", "locked": true}
import torch

rng = np.random.default_rng(7)
Q_t = rng.standard_normal((16, 8, 16))  # (B, T, d_k): 16 sequences of 8 tokens
K_t = rng.standard_normal((16, 8, 16))  # (B, T, d_k)
V_t = rng.standard_normal((16, 8, 4))  # (B, T, d_v)
S0_t = Q_t @ K_t.swapaxes(-2, -1) / math.sqrt(16)  # (B, T, T): the usual scaled scores
Y_sharp = softmax(S0_t / 0.5, axis=-1) @ V_t  # (B, T, d_v): outputs of a head with tau = 0.5
Y_soft = softmax(S0_t / 2.0, axis=-1) @ V_t  # (B, T, d_v): outputs of a head with tau = 2

# %% nbgrader={"grade_id": "learn_temperature", "solution": true}
def learn_temperature(Q, K, V, Y, steps=200, lr=1.0):
    """Learn one temperature tau by gradient descent on u = log tau, from tau = 1.

    Args:
        Q: (..., T_q, d_k) queries; K: (..., T_k, d_k) keys; V: (..., T_k, d_v) values.
        Y: (..., T_q, d_v) target outputs.
        steps: number of gradient steps.
        lr: step size on u = log tau.

    Returns:
        float: tau after `steps` steps of u <- u - lr * dL/du, where
        L = mean((softmax(Q K^T / (tau sqrt(d_k))) V - Y) ** 2).
    """
    ### BEGIN SOLUTION
    q, k, v, y = (torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in (Q, K, V, Y))
    s0 = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    u = torch.zeros((), dtype=torch.float64, requires_grad=True)  # (): log tau, tau = 1 at the start
    for _ in range(steps):
        out = torch.softmax(s0 / torch.exp(u), dim=-1) @ v  # (..., T_q, d_v)
        loss = ((out - y) ** 2).mean()  # ()
        (grad,) = torch.autograd.grad(loss, u)  # ()
        with torch.no_grad():
            u -= lr * grad  # a step downhill on log tau
    return float(torch.exp(u.detach()))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_learn_temperature", "points": 2}
expect_close(learn_temperature(Q_t, K_t, V_t, Y_sharp, steps=1), 0.8784, "tau after one step from tau = 1",
             atol=1e-4, hint="0.8703 means the step was taken on tau itself, not on u = log tau; 1.1385 means the "
                             "step went uphill (u + lr * gradient) or tau multiplied the scores; 1.1335 means "
                             "sqrt(d_k) was left out of the scores. The loss is the MEAN squared error.")
expect_close(learn_temperature(Q_t, K_t, V_t, Y_sharp), 0.5, "learn_temperature on outputs made with tau = 0.5",
             atol=1e-3, hint="2.0 means sqrt(d_k) was left out of the scores (tau absorbed it: 0.5 x 4) or tau "
                             "multiplied the scores instead of dividing them.")
expect_close(learn_temperature(Q_t, K_t, V_t, Y_soft), 2.0, "learn_temperature on outputs made with tau = 2",
             atol=1e-3, hint="0.5 would be the inverse: the scores are divided by tau, so tau > 1 flattens the rows.")

# %% nbgrader={"grade": true, "grade_id": "test_learn_temperature_hidden", "points": 2}
# Hidden tests: fresh batches with T_q != T_k, other d_k and temperatures, a few steps and many.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_learn_temperature(learn_temperature)
### END HIDDEN TESTS

# %% [markdown]
# On outputs made by a head with τ = 0.5 or τ = 2, the learned τ finds that value: a learned
# temperature can fit the sharpness a task needs. Now give it a task whose best answer is a
# **one-hot** row: every query should return the value of its single best-matching key. No
# finite τ is optimal, so watch what gradient descent does with τ, and with the rows.

# %% nbgrader={"grade_id": "temperature_runaway", "locked": true}
best = (Q_t @ K_t.swapaxes(-2, -1)).argmax(axis=-1)  # (B, T): each query's best-matching key
Y_hard = np.take_along_axis(V_t, best[..., None].repeat(4, axis=-1), axis=-2)  # (B, T, d_v): that key's value
for steps in (25, 100, 400):
    tau = learn_temperature(Q_t, K_t, V_t, Y_hard, steps=steps)
    keys = np.asarray(effective_keys(softmax(S0_t / tau, axis=-1))).mean()  # mean over the B * T rows
    print(f"after {steps:3d} steps: tau = {tau:.4f}, mean effective keys {keys:.2f} of 8")

# %% [markdown]
# τ falls steadily (about 0.06 after 25 steps, 0.004 after 400) and never settles, and the rows
# go one-hot (1.02 keys of 8). This is the risk the chapter names: when peaked attention lowers
# the loss, an optimiser that controls the temperature drives it toward saturation, and section 7
# showed that saturated rows pass almost no gradient to the scores. A learned temperature, like weights that grow during training, can
# undo at step 10,000 what √d_k did at step 0.
#
# ## 10. QK-norm: bounding the scores instead of scaling them
#
# The √d_k fixes the spread of the scores only while |q| and |k| keep their size at
# initialisation. If training makes W_Q and W_K c times larger, every score grows c² times. **QK
# normalisation** removes that path: normalise each query and each key to unit length, then
# multiply by a gain g (fixed or learned):
#
# s_ij = g · (qᵢ / |qᵢ|) · (kⱼ / |kⱼ|) = g · cos(qᵢ, kⱼ),   so |s_ij| ≤ g whatever the weights do.
#
# At initialisation |q| ≈ |k| ≈ √d_k, so g = √d_k gives the same scores as q · k / √d_k; after
# that the scores no longer depend on the norms, only on directions. (Models that use QK-norm
# usually normalise with a LayerNorm or RMSNorm per head, which also fixes |q| at about √d_k;
# the cosine form here is that idea at its simplest.)
#
# Write `qk_norm_scores`. Normalise each vector, that is, over its d_k components (the last
# axis), not over the tokens. It must work for (T, d_k) and batched (..., T, d_k) inputs.

# %% nbgrader={"grade_id": "qk_norm_scores", "solution": true}
def qk_norm_scores(Q, K, gain):
    """Scores of unit-length queries and keys, times a gain.

    Args:
        Q: (..., T_q, d_k) queries; K: (..., T_k, d_k) keys; no row is all zeros.
        gain: the number g that multiplies every cosine.

    Returns:
        (..., T_q, T_k) scores g * cos(q_i, k_j), each in [-g, g].
    """
    ### BEGIN SOLUTION
    Q_unit = Q / np.linalg.norm(Q, axis=-1, keepdims=True)  # (..., T_q, d_k): every query of length 1
    K_unit = K / np.linalg.norm(K, axis=-1, keepdims=True)  # (..., T_k, d_k): every key of length 1
    return gain * (Q_unit @ K_unit.swapaxes(-2, -1))  # (..., T_q, T_k)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_qk_norm_scores", "points": 2}
grown = as_array(qk_norm_scores(10 * Q_ticket, 3 * K_ticket, 1.0))  # (3, 3)
expect_close(grown, as_array(qk_norm_scores(Q_ticket, K_ticket, 1.0)), "scores of 10 Q against 3 K",
             hint="Scaling the queries or keys must not change QK-norm scores: normalise both Q and K, each "
                  "row by its own length (axis=-1).")
cos0 = as_array(qk_norm_scores(Q_ticket, K_ticket, 1.0))[0]  # (3,): token 0 against the three keys
expect_close(cos0, [1.0, 0.7071, 0.0], "cosines of token 0 (gain 1)", atol=1e-4,
             hint="q0 = (1, 0) against keys (1, 0), (1, 1), (0, 1): cosines 1, 0.707, 0. (0.707, 0.5, 0) means the "
                  "cosines were divided by sqrt(d_k) as well: the gain replaces the scale. (0.5, 0.5, 0) means each "
                  "component was normalised across the tokens (axis 0), not each vector over its d_k components.")
batch_qk = as_array(qk_norm_scores(np.ones((2, 5, 4)), np.ones((2, 7, 4)), 3.0))
expect_shape(batch_qk, (2, 5, 7), "qk_norm_scores of a (2, 5, 4) batch against (2, 7, 4) keys",
             "Swap only the last two axes of the normalised keys.")
expect_close(batch_qk.max(), 3.0, "the largest score of identical directions, gain 3",
             hint="Identical directions have cosine 1, so the score is the gain itself.")

# %% nbgrader={"grade": true, "grade_id": "test_qk_norm_scores_hidden", "points": 2}
# Hidden tests: batched and single sequences, T_q != T_k, another d_k, rows of very different lengths.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_qk_norm_scores(qk_norm_scores)
### END HIDDEN TESTS

# %% [markdown]
# Now the measurement: the same random queries and keys (d_k = 64, 8 tokens, 40 draws), with
# W_Q and W_K grown by a factor c, so that q and k are c times longer. The fixed scale divides
# by √d_k; QK-norm uses the gain g = √d_k = 8, its value at initialisation.

# %% nbgrader={"grade_id": "qk_norm_growth", "locked": true}
rng = np.random.default_rng(11)
Q_g, K_g = rng.standard_normal((2, 40, 8, 64))  # each (40, 8, 64)
growth = [1, 2, 4, 8]
keys_fixed, keys_qknorm = [], []
for c in growth:
    keys_fixed.append(float(np.mean(effective_keys(softmax(as_array(attention_scores(c * Q_g, c * K_g)), axis=-1)))))
    keys_qknorm.append(float(np.mean(effective_keys(softmax(as_array(qk_norm_scores(c * Q_g, c * K_g, 8.0)), axis=-1)))))
    print(f"c = {c}: effective keys of 8, fixed scale {keys_fixed[-1]:.2f}, QK-norm {keys_qknorm[-1]:.2f}")
curves(growth, {"q.k / sqrt(d_k)": keys_fixed, "QK-norm, gain 8": keys_qknorm}, xlabel="growth c of |q| and |k|",
       ylabel="effective keys (of 8)", logx=True, title="Scores that grow with the weights, and scores that cannot")
plt.show()

# %% [markdown]
# At c = 1 the two agree (about 5.7 keys): the gain √d_k reproduces the fixed scale at
# initialisation. As the weights grow, the fixed-scale rows collapse (2.1 keys at c = 2, 1.2 at c = 4)
# while QK-norm rows do not move: their sharpness is set by the gain alone, which is bounded and
# can be learned as a temperature. That is why QK-norm is used as a rescue against entropy
# collapse (lab 5 trains with it); the √d_k only protects the start of training.

# %% [markdown]
# ## Summary
#
# * q · k of unit-variance components has variance d_k; you measured √d_k from 1.4 to 16.
# * Dividing by √d_k gives unit-variance scores: rows keep about 6 of 8 keys and about
#   log T − 1/2 nats at every width, and the gradient reaching the scores does not shrink.
# * No scale: rows collapse to one key and the softmax Jacobian, diag(a) − aaᵀ, goes to zero.
# * Dividing by d_k: rows drift to uniform. The scale fixes the start of training only; keeping
#   scores in range later is the job of warmup, QK-normalisation or weight decay.
# * A learned temperature fits the sharpness a task needs, and runs away toward one-hot rows
#   when the task rewards them.
# * QK-norm bounds every score by its gain: with g = √d_k it equals the fixed scale at
#   initialisation, and it stays put when the weights grow.

# %% [markdown]
# ## Extension: attention is kernel regression (about 35 minutes, 6 points)
#
# Optional if you are short of time; graded like the rest. Before transformers, a classic way
# to predict y at a new point x from examples (xⱼ, yⱼ) was the **Nadaraya–Watson** estimator: a
# weighted average of the examples' y, weighted by a kernel κ that is large when x is close to xⱼ,
#
# ŷ(x) = Σⱼ κ(x, xⱼ) yⱼ / Σⱼ κ(x, xⱼ).
#
# Read x as a query, the xⱼ as keys and the yⱼ as values: with κ(q, k) = exp(q · k / √d_k) this
# *is* one row of attention, softmax(q Kᵀ / √d_k) V. Attention is kernel regression whose kernel
# is learned (through W_Q and W_K) and whose examples are the current sequence; the
# normalisation is why an output always stays in the convex hull of the values (lab 1).
#
# The classic kernel is the Gaussian κ(x, xⱼ) = exp(−|x − xⱼ|² / (2h²)), with a **bandwidth** h.
# Expanding the square, −|x − xⱼ|²/(2h²) = x · xⱼ / h² − |xⱼ|²/(2h²) − |x|²/(2h²): a dot-product
# score divided by h², a bias per key, and a term per query that the normalisation cancels.
# So the bandwidth plays the part of the temperature: a small h makes sharp rows, a large h
# uniform ones.
#
# Write `nadaraya_watson` with the Gaussian kernel. Compute the weights as a softmax of the
# scores −|x − xⱼ|²/(2h²) over the examples: exponentiating the kernel directly gives 0 / 0 for
# a small bandwidth.

# %% nbgrader={"grade_id": "nadaraya_watson", "solution": true}
def nadaraya_watson(x_query, x_train, y_train, bandwidth):
    """Nadaraya-Watson regression with a Gaussian kernel.

    Args:
        x_query: (T_q, d) points to predict at.
        x_train: (T_k, d) example inputs.
        y_train: (T_k, d_v) example outputs.
        bandwidth: h > 0.

    Returns:
        (T_q, d_v) predictions: kernel-weighted averages of the rows of y_train.
    """
    ### BEGIN SOLUTION
    sq_dist = ((x_query[:, None, :] - x_train[None, :, :]) ** 2).sum(axis=-1)  # (T_q, T_k)
    weights = softmax(-sq_dist / (2 * bandwidth**2), axis=-1)  # (T_q, T_k): each row sums to 1 over the examples
    return weights @ y_train  # (T_q, d_v)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_nadaraya_watson", "points": 1}
x_ex = np.array([[0.0], [1.0], [2.0]])  # (3, 1): three examples on a line
y_ex = np.array([[0.0], [1.0], [4.0]])  # (3, 1)
nw = as_array(nadaraya_watson(np.array([[1.0]]), x_ex, y_ex, 1.0))  # (1, 1)
expect_close(nw, [[1.5481]], "the prediction at x = 1 with h = 1", atol=1e-4,
             hint="Weights exp(-1/2), 1, exp(-1/2), normalised: 0.274, 0.452, 0.274. 3.426 means the weights "
                  "were not normalised (a sum, not an average); 5.0 means they were normalised over the query "
                  "points (axis 0) instead of over the examples.")
nw_half = as_array(nadaraya_watson(np.array([[1.0]]), x_ex, y_ex, 0.5))  # (1, 1)
expect_close(nw_half, [[1.2130]], "the prediction at x = 1 with h = 0.5", atol=1e-4,
             hint="Scores -|x - x_j|^2 / (2 h^2) = (-2, 0, -2) at h = 0.5; 1.4239 means the bandwidth was not "
                  "squared (exp(-d^2 / (2h)) agrees with the Gaussian only at h = 1).")
tiny = as_array(nadaraya_watson(np.array([[0.4]]), x_ex, y_ex, 0.01))  # (1, 1)
expect_close(tiny, [[0.0]], "the prediction at x = 0.4 with h = 0.01", atol=1e-6,
             hint="With a tiny bandwidth the nearest example takes all the weight; nan means exp underflowed to 0 / 0: "
                  "take a softmax of the scores instead of exponentiating the kernel.")

# %% nbgrader={"grade": true, "grade_id": "test_nadaraya_watson_hidden", "points": 2}
# Hidden tests: fresh points in several dimensions, T_q != T_k, several bandwidths, a very small one.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_nadaraya_watson(nadaraya_watson)
### END HIDDEN TESTS

# %% [markdown]
# Two measurements. First, the identity: attention with the kernel exp(q · k / √d_k) written as a
# kernel average, and a Gaussian-kernel estimate written as attention (dot-product scores over h²
# plus a bias per key).

# %% nbgrader={"grade_id": "kernel_identity", "locked": true}
rng = np.random.default_rng(5)
q_nw, K_nw, V_nw = rng.standard_normal((4, 16)), rng.standard_normal((9, 16)), rng.standard_normal((9, 3))
kernel = np.exp(q_nw @ K_nw.T / math.sqrt(16))  # (4, 9): kappa(q_i, k_j)
kernel_average = kernel @ V_nw / kernel.sum(axis=-1, keepdims=True)  # (4, 3)
attention_rows = softmax(as_array(attention_scores(q_nw, K_nw)), axis=-1) @ V_nw  # (4, 3)
print(f"exp(q.k / sqrt(d_k)) kernel average vs attention: largest difference {np.abs(kernel_average - attention_rows).max():.1e}")
h = 2.0
as_attention = softmax(q_nw @ K_nw.T / h**2 - (K_nw**2).sum(axis=-1) / (2 * h**2), axis=-1) @ V_nw  # (4, 3)
print(f"Gaussian kernel (h = 2) vs dot-product attention with a key bias: "
      f"largest difference {np.abs(as_attention - as_array(nadaraya_watson(q_nw, K_nw, V_nw, h))).max():.1e}")

# %% [markdown]
# Second, the bandwidth at work on a one-dimensional regression: 40 noisy examples of
# y = sin(2πx), and the error of the prediction at 200 new points, for bandwidths from far too
# small to far too large.

# %% nbgrader={"grade_id": "bandwidth_sweep", "locked": true}
rng = np.random.default_rng(3)
x_train1 = rng.uniform(0, 1, size=(40, 1))  # (40, 1)
y_train1 = np.sin(2 * np.pi * x_train1) + 0.3 * rng.standard_normal((40, 1))  # (40, 1): noise SD 0.3
x_test1 = np.linspace(0, 1, 200)[:, None]  # (200, 1)
y_test1 = np.sin(2 * np.pi * x_test1)  # (200, 1): the noise-free curve
bandwidths = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
errors = [float(np.mean((as_array(nadaraya_watson(x_test1, x_train1, y_train1, h)) - y_test1) ** 2)) for h in bandwidths]
for h, err in zip(bandwidths, errors):
    print(f"h = {h:5.3f}: mean squared error {err:.3f}")
curves(bandwidths, {"test error": errors}, xlabel="bandwidth h", ylabel="mean squared error", logx=True,
       title="Too sharp copies the noise, too flat averages everything")
plt.show()

# %% [markdown]
# Both ends fail, as with attention rows: a bandwidth that is too small copies the nearest
# noisy example (a one-hot row), one that is too large returns nearly the mean of all examples
# (a uniform row, like dividing the scores by d_k), and the error is smallest in between. The
# √d_k, a learned temperature and a QK-norm gain are three ways of setting that bandwidth for
# attention.

# %% [markdown]
# ### Linear attention: a kernel that factorises (about 15 minutes, 3 points)
#
# The kernel view suggests a swap. Replace exp(q · k / √d_k) by a kernel that is a dot product
# of features, κ(q, k) = φ(q) · φ(k), with φ positive so that every weight stays positive. Then
# the sum over the keys factorises:
#
# out_i = Σⱼ (φ(qᵢ) · φ(kⱼ)) vⱼ / Σⱼ φ(qᵢ) · φ(kⱼ) = φ(qᵢ)ᵀ S / φ(qᵢ)ᵀ z,
# with S = Σⱼ φ(kⱼ) vⱼᵀ (d_k, d_v) and z = Σⱼ φ(kⱼ) (d_k,).
#
# With a causal mask the sums run over j ≤ i, so S and z are **running sums**: a state of fixed
# size that each new token updates once, as in a recurrent network. A sequence costs O(T) time
# and the state O(1) memory per step, against softmax attention's T × T weights. This is
# *linear attention* (Katharopoulos et al., 2020, "Transformers are RNNs"), with their feature
# map φ(x) = elu(x) + 1, given below.
#
# Write `linear_attention_step`: one causal step from the state after the earlier tokens and
# the new token's q, k, v to this token's output and the new state. The new token attends to
# itself (j ≤ i), so it joins the state before its output is read.

# %% nbgrader={"grade_id": "linear_attention_given", "locked": true}
def elu_feature(x):
    """phi(x) = elu(x) + 1, elementwise: x + 1 for x > 0, exp(x) otherwise; always positive."""
    x = np.asarray(x, dtype=float)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_attention_quadratic(Q, K, V):
    """Causal linear attention written with its (T, T) weight matrix: (T, d_k), (T, d_k), (T, d_v) -> (T, d_v)."""
    kernel = np.tril(elu_feature(Q) @ elu_feature(K).T)  # (T, T): phi(q_i) . phi(k_j) for j <= i
    return kernel @ V / kernel.sum(axis=-1, keepdims=True)  # (T, d_v)


def run_linear_attention(step, Q, K, V):
    """Feed the tokens to step one at a time from an empty state; returns ((T, d_v) outputs, final state)."""
    state = (np.zeros((Q.shape[1], V.shape[1])), np.zeros(Q.shape[1]))  # S (d_k, d_v), z (d_k,)
    outputs = []
    for q, k, v in zip(Q, K, V):
        out, state = step(state, q, k, v)
        outputs.append(as_array(out))
    return np.stack(outputs), state  # (T, d_v)

# %% nbgrader={"grade_id": "linear_attention_step", "solution": true}
def linear_attention_step(state, q, k, v):
    """One causal step of linear attention with the feature map elu_feature.

    Args:
        state: (S, z) after the earlier tokens: S (d_k, d_v) = sum of outer(phi(k_j), v_j),
            z (d_k,) = sum of phi(k_j); both zero before the first token.
        q, k: (d_k,) the new token's query and key; v: (d_v,) its value.

    Returns:
        out (d_v,), the new token's output, and the new state (S, z), this token included.
    """
    ### BEGIN SOLUTION
    S, z = state
    phi_k = elu_feature(k)  # (d_k,)
    S = S + np.outer(phi_k, v)  # (d_k, d_v): this token's key-value product joins the sum
    z = z + phi_k  # (d_k,)
    phi_q = elu_feature(q)  # (d_k,)
    out = phi_q @ S / (phi_q @ z)  # (d_v,)
    return out, (S, z)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_step", "points": 1}
rng = np.random.default_rng(11)
Q_lin, K_lin, V_lin = rng.standard_normal((5, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
outs_lin, (S_lin, z_lin) = run_linear_attention(linear_attention_step, Q_lin, K_lin, V_lin)
# Tolerance 1e-5: a step computed in float32 (torch's default dtype) is correct too.
expect_shape(as_array(S_lin), (3, 2), "the state S after 5 tokens", "S is (d_k, d_v) whatever the number of tokens.")
expect_close(as_array(S_lin), elu_feature(K_lin).T @ V_lin, "the state S after 5 tokens", atol=1e-5,
             hint="S is the running sum of outer(phi(k_j), v_j): add this token's product to it, do not replace "
                  "it, and apply elu_feature to the key.")
expect_close(as_array(z_lin), elu_feature(K_lin).sum(axis=0), "the state z after 5 tokens", atol=1e-5,
             hint="z is the running sum of phi(k_j): add this token's features to it, do not replace it.")
expect_close(outs_lin[0], V_lin[0], "the first token's output", atol=1e-5,
             hint="The first token sees only itself, so its weights are (1,) and its output is v_0. Was the output "
                  "read before the state was updated with this token, or not divided by phi(q) . z?")
expect_close(outs_lin, linear_attention_quadratic(Q_lin, K_lin, V_lin), "the outputs, step by step, vs the "
             "quadratic form", atol=1e-5,
             hint="out = phi(q) . S / phi(q) . z: apply elu_feature to the query as well as the key.")

# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_step_hidden", "points": 2}
# Hidden tests: fresh lengths with d_k != d_v, every step checked from the grader's own state.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab02_scaling import hidden
hidden.check_linear_attention_step(linear_attention_step)
### END HIDDEN TESTS

# %% [markdown]
# What it buys: the state's size does not depend on T, and neither does the cost of a step.
# The cell runs your step over sequences of growing length and times the quadratic form on the
# same inputs; a Python loop has a large constant cost per step, so compare how each column
# grows, not the columns with each other.

# %% nbgrader={"grade_id": "linear_attention_cost", "locked": true}
import time

rng = np.random.default_rng(2)
for T in (256, 1024, 2048):
    Q_T, K_T, V_T = rng.standard_normal((T, 16)), rng.standard_normal((T, 16)), rng.standard_normal((T, 16))
    start = time.perf_counter()
    outs_T, (S_T, z_T) = run_linear_attention(linear_attention_step, Q_T, K_T, V_T)
    per_step = (time.perf_counter() - start) / T
    start = time.perf_counter()
    quadratic_T = linear_attention_quadratic(Q_T, K_T, V_T)
    quadratic = time.perf_counter() - start
    state_bytes = as_array(S_T).nbytes + as_array(z_T).nbytes
    print(f"T = {T:5d}: {per_step * 1e6:6.1f} us a step, state {state_bytes:,} B | quadratic form {quadratic * 1e3:6.1f} ms, "
          f"weights {T * T * 8:,} B | largest difference {np.abs(outs_T - quadratic_T).max():.1e}")

# %% [markdown]
# The price is the kernel. exp(q · k) can make a row as sharp as it likes; elu(q) + 1 and
# elu(k) + 1 are positive features, and their dot product changes slowly with the scores. The
# cell compares the effective keys (section 4) of softmax rows and linear-attention
# rows on the same queries and keys, as the scores grow.

# %% nbgrader={"grade_id": "linear_attention_sharpness", "locked": true}
rng = np.random.default_rng(4)
Q_s, K_s = rng.standard_normal((64, 16)), rng.standard_normal((64, 16))
for gain in (0.5, 1.0, 2.0, 4.0):
    soft = softmax(gain * Q_s @ K_s.T / 4.0, axis=-1)  # (64, 64)
    lin = elu_feature(gain * Q_s) @ elu_feature(gain * K_s).T  # (64, 64)
    lin = lin / lin.sum(axis=-1, keepdims=True)
    keys = lambda w: float(np.mean(np.exp(-(w * np.log(w)).sum(axis=-1))))  # noqa: E731: mean effective keys
    print(f"queries and keys x {gain}: softmax rows use {keys(soft):5.1f} of 64 keys, linear-attention rows {keys(lin):5.1f}")

