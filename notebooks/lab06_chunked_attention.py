# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 6 — Attention without the T × T matrix
#
# Every earlier lab built the score matrix `S = Q Kᵀ / √d_k` in full: T × T numbers per head
# and layer. At long context that one tensor is what stops training, not the arithmetic.
# FlashAttention (Dao et al., 2022) computes **exactly the same output** while never holding
# more than a small tile of S. Its core is an old trick, the *online softmax*, and it fits in a
# page of Python. In this lab you build it, check it against PyTorch, derive its backward pass
# and then **measure** what it saves on this CPU.
#
# You will:
# 1. size the full attention matrix for the chapter's configurations;
# 2. write the online-softmax update: a running max, a running denominator and a running
#    weighted sum, rescaled whenever the max grows;
# 3. write `chunked_attention`, tiled over queries and keys, causal or not, exact to float
#    tolerance against `torch.nn.functional.scaled_dot_product_attention`;
# 4. write the backward pass from the saved log-sum-exp (T numbers, not T²) and check it
#    against autograd;
# 5. measure peak memory and time of naive, chunked and PyTorch's fused attention;
# 6. measure this CPU's roofline (how fast it multiplies, how fast it moves bytes) and place
#    naive and tiled attention on it by their arithmetic intensity;
# 7. measure what kernel fusion saves: one pass over memory instead of five;
# 8. write linear attention, the kernelised form of attention, as an O(T) recurrence, and
#    see when to use which attention.
#
# **Time.** About 2.5 hours for sections 1 to 12; the extension at the end is optional and
# ungraded (15 minutes). Running every cell takes under a minute.
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, on fresh random inputs: other lengths (not multiples of the
# chunk size), chunk sizes 1 and ≥ T, very large scores, causal and not, float32 and float64,
# and a memory check, measured from outside your kernel, that fails any version whose memory grows
# like a T × T matrix (or, in `chunked_attention`, like a T × chunk_size one). A failing test names
# the likely misconception. The written answer (section 8) is graded by a TA.

# %% [markdown]
# ## Setup
# Run this cell first. PyTorch and NumPy run on **one thread** in this lab, so that the timings
# in section 7 are repeatable on a shared machine.

# %% nbgrader={"grade_id": "setup", "locked": true}
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy and torch start their thread pools

import math
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from mlbook_helpers.checks import as_array, expect, expect_close, expect_finite, expect_shape
from mlbook_helpers.examples import chapter_qkv
from mlbook_helpers.measure import best_time, format_bytes, peak_memory
from mlbook_helpers.plotting import attention_heatmap, curves

warnings.filterwarnings("ignore", category=UserWarning)
torch.set_num_threads(1)
torch.manual_seed(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## 1. How big is the matrix?
#
# The weight matrix `A = softmax(S)` has one entry per (query, key) pair, for every head of
# every sequence in the batch: **B · H · T²** entries, whatever the head width d_head. The
# chapter sizes it in bf16 (2 bytes per entry) for one layer:
#
# | B | H | T | bytes (bf16) |
# |---|---|---|---|
# | 1 | 12 | 1,024 | 25 MB |
# | 8 | 32 | 4,096 | 8.6 GB |
# | 8 | 32 | 32,768 | 550 GB |
#
# and the lesson per head (B = H = 1): 2.1 MB at 1,024 tokens, 8.39 MB at 2,048 and 33.55 MB
# at 4,096. Each doubling of T quadruples the bytes. (MB and GB are decimal here: 10⁶ and 10⁹.)
#
# Write `attention_matrix_bytes`, then run the cell after it to reproduce both tables.

# %% nbgrader={"grade_id": "attention_matrix_bytes", "solution": true}
def attention_matrix_bytes(B, H, T, bytes_per_entry=2):
    """Bytes needed to store the full attention matrix of one layer.

    Args:
        B: batch size (sequences).
        H: heads.
        T: sequence length (queries = keys = T).
        bytes_per_entry: 2 for bf16/fp16, 4 for float32.

    Returns:
        The number of bytes, an int.
    """
    ### BEGIN SOLUTION
    return int(B * H * T * T * bytes_per_entry)  # B * H matrices of T x T entries
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_attention_matrix_bytes", "points": 1}
for (B, H, T), published in [((1, 12, 1024), 25e6), ((8, 32, 4096), 8.6e9), ((8, 32, 32768), 550e9)]:
    got = attention_matrix_bytes(B, H, T)
    expect(abs(got - published) / published < 0.01, f"attention_matrix_bytes(B={B}, H={H}, T={T}) in bf16",
           f"got {got:.4g} bytes, the chapter prints {published:.3g}",
           "The matrix has B * H * T * T entries of 2 bytes each: did you square T and include both B and H?")
for T, published in [(1024, 2.1e6), (2048, 8.39e6), (4096, 33.55e6)]:
    got = attention_matrix_bytes(1, 1, T)
    expect(abs(got - published) / published < 0.01, f"one head's matrix at T={T}",
           f"got {got:.4g} bytes, the lesson prints {published:.4g}",
           "One head, one sequence: T * T entries of 2 bytes.")

# %% nbgrader={"grade": true, "grade_id": "test_attention_matrix_bytes_hidden", "points": 1}
# Hidden tests: other batch sizes, head counts, lengths and entry sizes.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_attention_matrix_bytes(attention_matrix_bytes)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "memory_table", "locked": true}
for B, H, T in [(1, 12, 1024), (8, 32, 4096), (8, 32, 32768), (1, 1, 1024), (1, 1, 2048), (1, 1, 4096)]:
    n = attention_matrix_bytes(B, H, T)
    print(f"B={B:2d} H={H:2d} T={T:6,d}: {n / 1e6:12,.2f} MB = {n / 1e9:8.3f} GB")

# %% [markdown]
# ## 2. The baseline, and where its memory goes
#
# `naive_attention` is the attention of the earlier labs, for one head. It is given: it is
# the baseline you will measure against. Conventions for the whole lab:
#
# * one head at a time: `q` is (T_q, d_k), `k` is (T_k, d_k), `v` is (T_k, d_v);
# * `causal=True` means query *i* may read key *j* only when *j* ≤ *i* (then T_q = T_k);
# * besides the output, every attention function returns the **log-sum-exp** of each score
#   row, `lse[i] = log Σⱼ exp(S[i, j])` (over allowed keys only), a (T_q,) vector. It is all the
#   backward pass will need to rebuild any weight: `A[i, j] = exp(S[i, j] − lse[i])`.

# %% nbgrader={"grade_id": "naive_attention", "locked": true}
def naive_attention(q, k, v, causal=False):
    """Attention that stores the full score matrix (the baseline).

    Args:
        q: (T_q, d_k) queries. k: (T_k, d_k) keys. v: (T_k, d_v) values.
        causal: mask key j for query i when j > i.

    Returns:
        out: (T_q, d_v) outputs. lse: (T_q,) log-sum-exp of each row of scores.
    """
    scores = q @ k.T / math.sqrt(q.shape[-1])  # (T_q, T_k): the T x T matrix
    if causal:
        future = torch.ones(scores.shape, dtype=torch.bool).triu(1)  # (T_q, T_k) True where j > i
        scores = scores.masked_fill(future, -math.inf)  # (T_q, T_k)
    weights = torch.softmax(scores, dim=-1)  # (T_q, T_k): a second T x T matrix
    return weights @ v, torch.logsumexp(scores, dim=-1)  # (T_q, d_v), (T_q,)


# %% [markdown]
# Here are the causal weights for T = 12, with a grid every 4 positions: the tiles that a
# chunked computation with `chunk_size = 4` handles one at a time. Look at the tiles above the
# diagonal: every weight in them is exactly 0. A chunked computation never needs to visit
# them. The tiles on the diagonal are half allowed, half masked.

# %% nbgrader={"grade_id": "tile_picture", "locked": true}
tile = 4
q_demo, k_demo, v_demo = (torch.randn(12, 8) for _ in range(3))
_, lse_demo = naive_attention(q_demo, k_demo, v_demo, causal=True)
demo_scores = q_demo @ k_demo.T / math.sqrt(8)  # (12, 12)
demo_weights = torch.exp(demo_scores - lse_demo[:, None]).tril()  # (12, 12): A rebuilt from lse
ax = attention_heatmap(demo_weights, title=f"causal weights, tiles of {tile} x {tile}", annotate=False, vmax=None)
for edge in range(tile, 12, tile):
    ax.axhline(edge, color="white", linewidth=2)
    ax.axvline(edge, color="white", linewidth=2)
plt.show()

# %% [markdown]
# ## 3. The online softmax
#
# Take one query row and its scores `s₁ … s_T`. The softmax-weighted sum of values is
#
# $$ y = \frac{\sum_j e^{s_j - m}\, v_j}{\sum_j e^{s_j - m}}, \qquad m = \max_j s_j , $$
#
# where subtracting the max changes nothing mathematically and keeps every exponent ≤ 0. The
# keys arrive in **blocks**. After some blocks we keep three numbers per query row:
#
# * `m`: the largest score seen so far;
# * `l`: the running denominator, `Σ e^{s_j − m}` over the keys seen so far;
# * `acc`: the running weighted sum, `Σ e^{s_j − m} v_j` (a d_v-vector, **not** yet divided by `l`).
#
# A new block of scores `S_b` (with values `V_b`) arrives. The new max is
# `m' = max(m, rowmax(S_b))`. Everything accumulated so far was computed relative to `m`;
# relative to `m'` each old term `e^{s − m}` is `e^{s − m'} = e^{m − m'} · e^{s − m}`. So both
# running sums are **rescaled** by `α = e^{m − m'}` (which is 1 if the max did not grow) before
# the block is added:
#
# $$ \ell' = \alpha\,\ell + \mathrm{rowsum}\big(e^{S_b - m'}\big), \qquad
#    \mathrm{acc}' = \alpha\,\mathrm{acc} + e^{S_b - m'}\,V_b . $$
#
# Start from `m = −∞`, `l = 0`, `acc = 0` (so α = e^{−∞} = 0 on the first block), and divide
# **once**, after the last block: `y = acc / l`. The row's log-sum-exp comes for free:
# `lse = m + log l`.
#
# Masked keys arrive as scores of `−inf`: they contribute `e^{−∞} = 0`. A block may mask a whole
# row as long as that row has already seen an allowed key (its `m` is finite).

# %% nbgrader={"grade_id": "online_softmax_update", "solution": true}
def online_softmax_update(m, l, acc, scores_block, v_block):
    """Fold one block of keys into the running softmax state of a block of query rows.

    Args:
        m: (n_q,) running max of each row's scores so far (-inf before the first block).
        l: (n_q,) running denominator, sum of exp(score - m) so far.
        acc: (n_q, d_v) running sum of exp(score - m) * value, not divided by l.
        scores_block: (n_q, n_k) scaled scores of these rows against the new keys; -inf = masked.
        v_block: (n_k, d_v) the new keys' values.

    Returns:
        (m_new, l_new, acc_new) with the shapes of (m, l, acc), relative to the new max.
    """
    ### BEGIN SOLUTION
    m_new = torch.maximum(m, scores_block.max(dim=-1).values)  # (n_q,)
    alpha = torch.exp(m - m_new)  # (n_q,): rescales what was accumulated against the old max
    p = torch.exp(scores_block - m_new[:, None])  # (n_q, n_k), entries in [0, 1]
    l_new = alpha * l + p.sum(dim=-1)  # (n_q,)
    acc_new = alpha[:, None] * acc + p @ v_block  # (n_q, d_v)
    return m_new, l_new, acc_new
    ### END SOLUTION

# %% [markdown]
# The first test replays the chapter's example, `Q = K = [[1, 0], [0, 1], [1, 1]]`,
# `V = [[10, 0], [0, 10], [5, 5]]`, for query 0 with **one key per block**. Its scaled scores are
# (0.707, 0, 0.707); its weights (0.401, 0.198, 0.401) and its output (6.02, 3.98). The second
# test is by hand: state `m = 0, l = 1, acc = [1]`, then a block with score 2 and value 3. The max
# grows to 2, α = e^{−2} = 0.1353, so `l' = 0.1353 + 1 = 1.1353` and `acc' = 0.1353 + 3 = 3.1353`.

# %% nbgrader={"grade": true, "grade_id": "test_online_softmax_update", "points": 2}
def empty_state(n_rows, d_v):
    """(m, l, acc) before the first block, float64: (n_rows,), (n_rows,), (n_rows, d_v)."""
    f64 = dict(dtype=torch.float64)
    return torch.full((n_rows,), -math.inf, **f64), torch.zeros(n_rows, **f64), torch.zeros(n_rows, d_v, **f64)


chapter_Q, chapter_K, chapter_V = (torch.tensor(a) for a in chapter_qkv())
row0 = chapter_Q[0:1] @ chapter_K.T / math.sqrt(2)  # (1, 3) scaled scores of query 0
m, l, acc = empty_state(1, 2)
for j in range(3):
    m, l, acc = online_softmax_update(m, l, acc, row0[:, j:j + 1], chapter_V[j:j + 1])
expect_close(m, [0.7071], "running max after the chapter's three keys",
             hint="m' = max(m, rowmax(scores_block)): the largest score seen so far.")
expect_close(l, [1 + math.exp(-0.7071) + 1], "running denominator after three keys",
             hint="l sums exp(score - m) over the keys seen: rescale l by exp(m_old - m_new) when the max changes.")
expect_close(as_array(acc) / as_array(l)[:, None], [[6.017, 3.983]], "acc / l for the chapter's query 0",
             hint="acc is the running sum of exp(score - m) * value, rescaled like l; divide by l only at the end.")

m1, l1, acc1 = online_softmax_update(torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([[1.0]]),
                                     torch.tensor([[2.0]]), torch.tensor([[3.0]]))
expect_close(m1, [2.0], "new max when a larger score arrives", hint="m' = max(m, rowmax(scores_block)).")
expect_close(l1, [1.1353], "denominator after the max grew from 0 to 2",
             hint="The old denominator was relative to the old max: rescale it by exp(m_old - m_new) "
                  "before adding the block.")
expect_close(acc1, [[3.1353]], "accumulator after the max grew from 0 to 2",
             hint="acc was relative to the old max too: rescale the accumulator by exp(m_old - m_new), and keep it "
                  "un-normalised (do not divide it by the denominator inside the update).")

# A long row in uneven blocks must give softmax(row) @ V exactly.
g = torch.Generator().manual_seed(1)
scores_row = 3 * torch.randn(4, 23, generator=g, dtype=torch.float64)  # (4, 23)
values = torch.randn(23, 5, generator=g, dtype=torch.float64)  # (23, 5)
m, l, acc = empty_state(4, 5)
for start in range(0, 23, 6):
    m, l, acc = online_softmax_update(m, l, acc, scores_row[:, start:start + 6], values[start:start + 6])
expect_close(as_array(acc) / as_array(l)[:, None], torch.softmax(scores_row, -1) @ values,
             "4 rows of 23 scores folded in blocks of 6 (last block 5)", atol=1e-9,
             hint="Streaming must reproduce softmax(row) @ V: rescale both l and acc whenever the max grows.")
expect_close(as_array(m) + np.log(as_array(l)), torch.logsumexp(scores_row, -1), "m + log(l) after the last block",
             atol=1e-9, hint="m + log(l) is the row's log-sum-exp when l is relative to m.")

# %% nbgrader={"grade": true, "grade_id": "test_online_softmax_update_hidden", "points": 3}
# Hidden tests: random states where the max grows in some rows and not others, masked keys,
# scores near +-1000, float32 and float64.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_online_softmax_update(online_softmax_update)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Chunked attention
#
# Now cut the whole computation into tiles of `chunk_size`:
#
# * **queries** in tiles of `chunk_size` rows: each tile keeps its own `(m, l, acc)`, so the state
#   is `chunk_size` rows, not T;
# * **keys and values** in blocks of `chunk_size`, streamed through `online_softmax_update`; the
#   scores of one tile against one block are a `chunk_size × chunk_size` matrix, never T × T;
# * the **last** tile and block may be shorter when T is not a multiple of `chunk_size`;
# * with `causal=True`, a key block whose first key comes after the tile's last query is entirely
#   in the future of every query in the tile: skip it (this halves the work). The blocks that
#   straddle the diagonal still need the mask inside the block;
# * after a tile's last block: `out = acc / l` and `lse = m + log l` for its rows.
#
# Remember to scale the scores by `1 / √d_k`, and create new tensors with the inputs' dtype
# (`q.new_zeros`, `q.new_full`, or `dtype=q.dtype`) so that float64 inputs stay float64.
#
# Write the tiling yourself: `chunked_attention` must not call PyTorch's fused attention
# (`F.scaled_dot_product_attention`, or `F.multi_head_attention_forward`) on the tiles or on the
# whole. The grader flags a cell that does for your TA, who decides what it earns.

# %% nbgrader={"grade_id": "chunked_attention", "solution": true}
def chunked_attention(q, k, v, chunk_size, causal=False):
    """Exact attention computed tile by tile, without the T x T score matrix.

    Args:
        q: (T_q, d_k) queries. k: (T_k, d_k) keys. v: (T_k, d_v) values.
        chunk_size: rows per query tile and keys per key block (the last ones may be shorter).
        causal: mask key j for query i when j > i (requires T_q == T_k), and skip the key
            blocks that lie entirely in the future of a query tile.

    Returns:
        out: (T_q, d_v) the attention output.
        lse: (T_q,) log-sum-exp of each row of scaled (and masked) scores.
    """
    ### BEGIN SOLUTION
    T_q, d_k = q.shape
    T_k, d_v = v.shape
    scale = 1.0 / math.sqrt(d_k)
    out = q.new_empty(T_q, d_v)  # (T_q, d_v)
    lse = q.new_empty(T_q)  # (T_q,)
    for q_start in range(0, T_q, chunk_size):
        q_stop = min(q_start + chunk_size, T_q)
        q_tile = q[q_start:q_stop] * scale  # (n_q, d_k)
        m = q.new_full((q_stop - q_start,), -math.inf)  # (n_q,)
        l = q.new_zeros(q_stop - q_start)  # (n_q,)
        acc = q.new_zeros(q_stop - q_start, d_v)  # (n_q, d_v)
        # Causal: a block starting at or after q_stop is in the future of every query in the tile.
        k_end = min(q_stop, T_k) if causal else T_k
        for k_start in range(0, k_end, chunk_size):
            k_stop = min(k_start + chunk_size, T_k)
            scores = q_tile @ k[k_start:k_stop].T  # (n_q, n_k)
            if causal and k_stop - 1 > q_start:  # the block reaches past the tile's first query
                key_pos = torch.arange(k_start, k_stop)  # (n_k,)
                query_pos = torch.arange(q_start, q_stop)  # (n_q,)
                scores = scores.masked_fill(key_pos[None, :] > query_pos[:, None], -math.inf)  # (n_q, n_k)
            m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop])
        out[q_start:q_stop] = acc / l[:, None]  # (n_q, d_v): the only division
        lse[q_start:q_stop] = m + torch.log(l)  # (n_q,)
    return out, lse
    ### END SOLUTION

# %% [markdown]
# The visible tests follow the chapter's exercise (T = 512, c = 64, against
# `scaled_dot_product_attention`), then an uneven length, a causal run, the edge chunk sizes 1
# and ≥ T, and scores so negative that `exp(score)` underflows to 0.

# %% nbgrader={"grade": true, "grade_id": "test_chunked_attention", "points": 3}
g = torch.Generator().manual_seed(2)
q, k, v = (torch.randn(512, 64, generator=g) for _ in range(3))
out, lse = chunked_attention(q, k, v, 64)
expect_shape(out, (512, 64), "out of chunked_attention(T=512, c=64)", "One output row per query, d_v columns.")
expect_shape(lse, (512,), "lse of chunked_attention(T=512, c=64)", "One log-sum-exp per query row.")
expect_close(out, F.scaled_dot_product_attention(q, k, v), "chunked_attention(T=512, c=64) vs PyTorch's SDPA", atol=1e-5,
             hint="T is a multiple of c and nothing is masked, so only the streaming matters: start each tile at "
                  "m = -inf, l = 0, acc = 0, use scores scaled by 1/sqrt(d_k), and divide acc by l once, after the last block.")
expect_close(lse, torch.logsumexp(q @ k.T / 8, dim=-1), "lse of chunked_attention(T=512, c=64)", atol=1e-4,
             hint="lse = m + log(l) for each row, from the state after its last block.")

q, k, v = torch.randn(300, 16, generator=g), torch.randn(300, 16, generator=g), torch.randn(300, 24, generator=g)
expect_close(chunked_attention(q, k, v, 64)[0], F.scaled_dot_product_attention(q, k, v), "chunked_attention(T=300, c=64)",
             atol=1e-5, hint="300 is not a multiple of 64: is the last, shorter block of keys (and tile of queries) processed?")

q, k, v = (torch.randn(512, 64, generator=g) for _ in range(3))
out, lse = chunked_attention(q, k, v, 64, causal=True)
expect_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), "causal chunked_attention(T=512, c=64)",
             atol=1e-5, hint="Causal: visit every key block that starts at or before the tile's last query (the diagonal "
                             "block included) and mask keys j > i inside it; skip only the blocks entirely in the future.")
expect_close(lse, naive_attention(q, k, v, causal=True)[1], "causal lse (T=512, c=64)", atol=1e-4,
             hint="Masked keys must not enter l: their scores are -inf before the update.")

q, k, v = (torch.randn(13, 4, generator=g, dtype=torch.float64) for _ in range(3))
for c in (1, 13, 40):
    for causal in (False, True):
        expect_close(chunked_attention(q, k, v, c, causal=causal)[0], naive_attention(q, k, v, causal=causal)[0],
                     f"chunked_attention(T=13, chunk_size={c}, causal={causal})", atol=1e-9,
                     hint="chunk_size = 1 makes one-key blocks; chunk_size >= T makes one tile and one block: "
                          "loop with range(0, T, chunk_size) and clip each stop at T.")

shift = torch.zeros(13, 5, dtype=torch.float64)
shift[:, -1] = 60.0  # adds 60 * (-60) / sqrt(5) = -1610 to every score
qs, ks = torch.cat([q, -shift[:, -1:]], 1), torch.cat([k, shift[:, -1:]], 1)
expect_close(chunked_attention(qs, ks, v, 4)[0], naive_attention(qs, ks, v)[0],
             "chunked_attention when every score is near -1610", atol=1e-9,
             hint="exp(-1610) is 0 in float64: the running max must start at -inf (not 0) so scores are shifted by "
                  "their true max.")

# %% nbgrader={"grade": true, "grade_id": "test_chunked_attention_hidden", "points": 4}
# Hidden tests: fresh lengths not divisible by chunk_size, T_q != T_k, chunk_size 1 and >= T,
# causal and not, scores up to +-1000, float32 and float64, out and lse.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_chunked_attention(chunked_attention)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_chunked_attention_memory", "points": 2}
# Hidden test: the peak memory of calls at T near 2,000 and 4,000, causal and not, is measured
# from outside your kernel (and their results are checked): it must grow about linearly with T,
# by far less than a T x T or a T x chunk_size matrix per token.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_chunked_memory(chunked_attention)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The backward pass from the log-sum-exp
#
# The chapter (§2.8) derives, for `Y = A V` with `A = softmax(S)` and `S = Q Kᵀ / √d_k`:
#
# $$ dV = A^\top dY,\quad dA = dY\,V^\top,\quad dS = A \odot \big(dA - \mathrm{rowsum}(dA \odot A)\big),\quad
#    dQ = \frac{dS\,K}{\sqrt{d_k}},\quad dK = \frac{dS^\top Q}{\sqrt{d_k}} . $$
#
# It needs `A` and `dA`, never `S` on its own, and `A` can be **recomputed** from the forward's
# saved `lse`: `A[i, j] = exp(S[i, j] − lse[i])`. One key block at a time, that is a (T_q, c) slice
# of A, exact without seeing the rest of the row, which is what `lse` buys. The row sum needs no
# T × T either:
#
# $$ \mathrm{rowsum}(dA \odot A)_i = \sum_j A_{ij}\,(dY_i \cdot v_j) = dY_i \cdot \sum_j A_{ij} v_j = dY_i \cdot Y_i , $$
#
# so `D = rowsum(dout * out)` (`dout` is dY in code) is a (T_q,) vector computed before the loop.
# The forward therefore stores only `out` and `lse` (T numbers per head), and the backward streams
# over key blocks:
# each block's `dV` and `dK` rows are final when the block is done, and `dQ` accumulates. Masked
# entries need no special care beyond the mask itself: their recomputed weight is exactly 0.
#
# Write it streaming over **key blocks** of `chunk_size` (all queries at once is fine here:
# the largest temporary is then T × chunk_size).

# %% nbgrader={"grade_id": "attention_backward_from_lse", "solution": true}
def attention_backward_from_lse(q, k, v, out, dout, lse, chunk_size, causal=False):
    """Gradients of attention recomputed from the saved output and log-sum-exp.

    Args:
        q: (T_q, d_k) queries. k: (T_k, d_k) keys. v: (T_k, d_v) values.
        out: (T_q, d_v) the forward output. dout: (T_q, d_v) gradient of the loss w.r.t. out.
        lse: (T_q,) the forward's log-sum-exp of each row of scaled (masked) scores.
        chunk_size: keys per block.
        causal: the forward was causal (mask key j for query i when j > i).

    Returns:
        dq: (T_q, d_k), dk: (T_k, d_k), dv: (T_k, d_v).
    """
    ### BEGIN SOLUTION
    T_q, d_k = q.shape
    T_k = k.shape[0]
    scale = 1.0 / math.sqrt(d_k)
    D = (dout * out).sum(dim=-1)  # (T_q,) = rowsum(dA * A)
    dq = torch.zeros_like(q)  # (T_q, d_k), accumulated over key blocks
    dk = torch.empty_like(k)  # (T_k, d_k)
    dv = torch.empty_like(v)  # (T_k, d_v)
    for k_start in range(0, T_k, chunk_size):
        k_stop = min(k_start + chunk_size, T_k)
        k_blk, v_blk = k[k_start:k_stop], v[k_start:k_stop]  # (n_k, d_k), (n_k, d_v)
        scores = q @ k_blk.T * scale  # (T_q, n_k)
        if causal:
            future = torch.arange(k_start, k_stop)[None, :] > torch.arange(T_q)[:, None]  # (T_q, n_k)
            scores = scores.masked_fill(future, -math.inf)
        A_blk = torch.exp(scores - lse[:, None])  # (T_q, n_k): these columns of A, recomputed
        dv[k_start:k_stop] = A_blk.T @ dout  # (n_k, d_v)
        dA_blk = dout @ v_blk.T  # (T_q, n_k)
        dS_blk = A_blk * (dA_blk - D[:, None])  # (T_q, n_k)
        dq += dS_blk @ k_blk * scale  # (T_q, d_k)
        dk[k_start:k_stop] = dS_blk.T @ q * scale  # (n_k, d_k)
    return dq, dk, dv
    ### END SOLUTION

# %% [markdown]
# The test runs PyTorch's attention forward with autograd, backpropagates a random `dout`, and
# compares the three gradients with yours, fed only with `out` and `lse`.

# %% nbgrader={"grade": true, "grade_id": "test_attention_backward_from_lse", "points": 2}
def autograd_reference(q, k, v, dout, causal):
    """dq, dk, dv of sum(SDPA(q, k, v) * dout), by autograd."""
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves, is_causal=causal).backward(dout)
    return [t.grad for t in leaves]


g = torch.Generator().manual_seed(3)
for T_q, T_k, c, causal in [(96, 96, 32, False), (100, 100, 32, True), (70, 45, 16, False)]:
    f64 = dict(generator=g, dtype=torch.float64)
    q, k, v = torch.randn(T_q, 16, **f64), torch.randn(T_k, 16, **f64), torch.randn(T_k, 8, **f64)
    dout = torch.randn(T_q, 8, **f64)  # (T_q, d_v) upstream gradient
    out, lse = naive_attention(q, k, v, causal=causal)
    grads = attention_backward_from_lse(q, k, v, out, dout, lse, c, causal=causal)
    expect(len(grads) == 3, "attention_backward_from_lse", f"returned {len(grads)} values", "Return (dq, dk, dv).")
    case = f"(T_q={T_q}, T_k={T_k}, chunk_size={c}, causal={causal})"
    dq_ref, dk_ref, dv_ref = autograd_reference(q, k, v, dout, causal)
    expect_close(grads[2], dv_ref, f"dv {case} vs autograd", atol=1e-8,
                 hint="dV = A^T dY, with this block's columns of A rebuilt as exp(S - lse): subtract lse in the exponent.")
    expect_close(grads[1], dk_ref, f"dk {case} vs autograd", atol=1e-8,
                 hint="dK = dS^T Q / sqrt(d_k) (note the transpose), with dS = A * (dA - D) and D = rowsum(dout * out).")
    expect_close(grads[0], dq_ref, f"dq {case} vs autograd", atol=1e-8,
                 hint="dQ = dS K / sqrt(d_k), summed over all key blocks; dS = A * (dA - D), D = rowsum(dout * out).")

# %% nbgrader={"grade": true, "grade_id": "test_attention_backward_from_lse_hidden", "points": 3}
# Hidden tests: fresh shapes, causal and not, chunk_size 1 and >= T, float32, and the peak
# memory at two lengths, measured from outside your kernel, which must grow far more slowly
# than a T x T matrix.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_backward_from_lse(attention_backward_from_lse)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Measuring memory
#
# A formula says what *should* be allocated; a measurement says what *was*. The module
# `mlbook_helpers.measure` runs a call and records the largest number of bytes its arrays and
# tensors held at any moment: NumPy buffers through Python's `tracemalloc`, torch tensors
# through a hook that sees every tensor a torch function returns. Only memory allocated
# **during** the call counts, so create the inputs first. Check it on something known:

# %% nbgrader={"grade_id": "measure_demo", "locked": true}
print(f"torch.empty(1000, 1000), float32: {peak_memory(lambda: torch.empty(1000, 1000)).bytes:>10,} bytes (4,000,000 expected)")
x_demo = torch.randn(1000, 1000)  # (1000, 1000), allocated before measuring
print(f"x.T, a view of the input:         {peak_memory(lambda x: x.T, x_demo).bytes:>10,} bytes (no new tensor)")
print(f"x * 2 + 1:                        {peak_memory(lambda x: x * 2 + 1, x_demo).bytes:>10,} bytes "
      "(the temporary x * 2 is still alive while x * 2 + 1 is made)")

# %% [markdown]
# Write `memory_sweep`: for each T, draw `q`, `k`, `v` of shape (T, d) in float32 **before**
# measuring, call `peak_memory(attention_fn, q, k, v)` and keep its `.bytes`.

# %% nbgrader={"grade_id": "memory_sweep", "solution": true}
def memory_sweep(attention_fn, T_values, d=64):
    """Measured peak memory of attention_fn(q, k, v) for each sequence length.

    Args:
        attention_fn: called as attention_fn(q, k, v) with q, k, v of shape (T, d), float32.
        T_values: the lengths T to measure.
        d: head width (d_k = d_v = d).

    Returns:
        A list of ints: the peak bytes for each T, in the order of T_values.
    """
    ### BEGIN SOLUTION
    peaks = []
    for T in T_values:
        q, k, v = (torch.randn(T, d) for _ in range(3))  # (T, d) each, allocated before measuring
        peaks.append(peak_memory(attention_fn, q, k, v).bytes)
    return peaks
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_memory_sweep", "points": 1}
probe = memory_sweep(lambda q, k, v: torch.empty(q.shape[0], q.shape[0]), [200, 400], d=32)
expect(len(probe) == 2, "memory_sweep of a probe at T = 200, 400", f"returned {len(probe)} values", "One peak per T.")
expect(abs(probe[0] - 160_000) < 16_000 and abs(probe[1] - 640_000) < 16_000,
       "peak of a function that allocates one T x T float32 tensor, at T = 200 and 400",
       f"measured {probe[0]:,} and {probe[1]:,} bytes (expected about 160,000 and 640,000)",
       "Create q, k, v before calling peak_memory (inputs allocated inside the measured call are counted), "
       "and return the measured .bytes.")

# %% nbgrader={"grade": true, "grade_id": "test_memory_sweep_hidden", "points": 1}
# Hidden tests: other probes, lengths and widths.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_memory_sweep(memory_sweep)
### END HIDDEN TESTS

# %% [markdown]
# Now the sweep: naive and chunked attention for T = 256 … 4,096 with d = 64 and tiles of 256.
# Naive stores T × T scores (and a second T × T for the weights), so its peak should grow **4×**
# per doubling of T. Chunked holds a few 256 × 256 tiles plus the (T, d) output, so its peak
# should grow at most **2×** per doubling; at T = 256 a single tile covers everything and the
# two are alike. The sweep takes a few seconds; T = 8,192 would take four times as long and
# 0.5 GB for naive attention alone, and the ratio would double again.

# %% nbgrader={"grade_id": "memory_results", "locked": true}
T_VALUES = [256, 512, 1024, 2048, 4096]
MEMORY_CHUNK = 256
naive_peaks = memory_sweep(naive_attention, T_VALUES)
chunked_peaks = memory_sweep(lambda q, k, v: chunked_attention(q, k, v, MEMORY_CHUNK), T_VALUES)
for T, naive_b, chunked_b in zip(T_VALUES, naive_peaks, chunked_peaks):
    print(f"T={T:5d}: naive {format_bytes(naive_b):>10}  chunked {format_bytes(chunked_b):>10}  "
          f"ratio {naive_b / chunked_b:6.1f}")
memory_ratio = naive_peaks[-1] / chunked_peaks[-1]
print(f"measured peak memory ratio naive / chunked at T = {T_VALUES[-1]}: {memory_ratio:.0f}x")
ax = curves(T_VALUES, {"naive": np.array(naive_peaks) / 2**20, "chunked (c = 256)": np.array(chunked_peaks) / 2**20,
                       "one T x T float32 matrix": np.array(T_VALUES, dtype=float) ** 2 * 4 / 2**20},
            xlabel="T (tokens)", ylabel="peak memory (MiB)", title="Measured peak memory, d = 64", logx=True, logy=True)
plt.show()

# %% nbgrader={"grade": true, "grade_id": "test_memory_growth", "points": 2}
MiB = 2**20
naive_growth = naive_peaks[-1] / naive_peaks[-2]
chunked_growth = chunked_peaks[-1] / chunked_peaks[-2]
one_matrix = 4 * T_VALUES[-1] ** 2  # bytes of one T x T float32 matrix at the largest T
expect(3.5 < naive_growth < 4.5, "naive peak growth from T = 2,048 to 4,096",
       f"{naive_peaks[-2] / MiB:.2f} MiB -> {naive_peaks[-1] / MiB:.2f} MiB, x{naive_growth:.2f} "
       f"(like T^{math.log2(naive_growth):.2f})",
       "The naive baseline should grow 4x per doubling; is memory_sweep measuring the call itself?")
expect(chunked_growth < 2.5, "chunked peak growth from T = 2,048 to 4,096",
       f"{chunked_peaks[-2] / MiB:.2f} MiB -> {chunked_peaks[-1] / MiB:.2f} MiB, x{chunked_growth:.2f} "
       f"(like T^{math.log2(chunked_growth):.2f})",
       "Chunked attention should grow at most 2x per doubling of T: does chunked_attention build a T x T "
       "(or T_q x T_k) matrix somewhere?")
expect(chunked_peaks[-1] < one_matrix / 4, "chunked peak at T = 4,096",
       f"{chunked_peaks[-1] / MiB:.2f} MiB, {chunked_peaks[-1] / one_matrix:.2f} of one T x T float32 matrix "
       f"({one_matrix / MiB:.0f} MiB); naive {naive_peaks[-1] / MiB:.1f} MiB, ratio {memory_ratio:.1f}x",
       "Chunked attention keeps chunk_size x chunk_size tiles and (T, d) vectors, far below one T x T matrix "
       "in any dtype: does it build a T x T matrix (or T x chunk_size tiles) somewhere?")

# %% [markdown]
# ## 7. Measuring time
#
# Chunking saves memory, but on a CPU with a Python loop it costs interpreter time per tile.
# The cell below times naive attention, PyTorch's fused `scaled_dot_product_attention` (a C++
# kernel that also never stores the matrix) and your `chunked_attention` for chunk sizes from 32
# to T at T = 1,024, d = 64 (fastest of 2 runs each). With
# `chunk_size = T` there is a single tile: the naive computation plus the bookkeeping.

# %% nbgrader={"grade_id": "time_results", "locked": true}
T_TIME, CHUNK_SIZES = 1024, [32, 64, 128, 256, 512, 1024]
q, k, v = (torch.randn(T_TIME, 64) for _ in range(3))
naive_time = best_time(naive_attention, q, k, v, repeat=2)
sdpa_time = best_time(F.scaled_dot_product_attention, q, k, v, repeat=2)
chunk_times = {c: best_time(chunked_attention, q, k, v, c, repeat=2, warmup=0) for c in CHUNK_SIZES}
print(f"naive {naive_time * 1e3:7.1f} ms   SDPA {sdpa_time * 1e3:7.1f} ms")
for c, t in chunk_times.items():
    print(f"chunked, c = {c:4d}: {t * 1e3:7.1f} ms  ({math.ceil(T_TIME / c) ** 2:5d} tiles)")
ax = curves(CHUNK_SIZES, {"chunked": [t * 1e3 for t in chunk_times.values()],
                          "naive": [naive_time * 1e3] * len(CHUNK_SIZES), "SDPA": [sdpa_time * 1e3] * len(CHUNK_SIZES)},
            xlabel="chunk size", ylabel="time (ms)", title=f"T = {T_TIME}, d = 64, one thread", logx=True, logy=True)
plt.show()

# %% [markdown]
# From your measurement: which chunk size was fastest here, and how many times slower than SDPA
# was chunked attention at that chunk size? Compute both from the dictionaries above (do not
# type numbers: they change from run to run).

# %% nbgrader={"grade_id": "timing_answers", "solution": true}
### BEGIN SOLUTION
fastest_chunk = min(chunk_times, key=chunk_times.get)
slowdown_vs_sdpa = chunk_times[fastest_chunk] / sdpa_time
### END SOLUTION
print(f"fastest chunk size here: {fastest_chunk}; {slowdown_vs_sdpa:.1f}x the time of SDPA")

# %% nbgrader={"grade": true, "grade_id": "test_timing_answers", "points": 1}
expect(fastest_chunk == min(chunk_times, key=chunk_times.get), "fastest_chunk", f"{fastest_chunk}",
       "Take the chunk size with the smallest measured time in chunk_times.")
expect(abs(slowdown_vs_sdpa - chunk_times[fastest_chunk] / sdpa_time) < 1e-6 * slowdown_vs_sdpa,
       "slowdown_vs_sdpa", f"{slowdown_vs_sdpa:.3g}", "Divide the fastest chunked time by SDPA's time.")

# %% [markdown]
# ## 8. Written answer (graded by a TA)
#
# In five to eight sentences, using **your** measurements above: (a) how did the peak memory of
# naive and chunked attention grow with T, what ratio did you measure at T = 4,096, and what
# would the full matrix cost for the chapter's B = 8, H = 32, T = 4,096 layer? (b) Chunked
# attention does the same multiply-adds at every chunk size: why does its time depend so much
# on the chunk size, what limits it at each end, and how did it compare with naive attention and
# SDPA? (c) What does the forward pass have to save for your backward pass, and why is that enough?

# %% [markdown] nbgrader={"grade": true, "grade_id": "written_measurements", "points": 3, "solution": true}
# ### BEGIN SOLUTION
# (a) Naive attention's peak grew 4x per doubling of T (it holds the T x T scores and the T x T
# weights: 129 MiB at T = 4,096 in float32), while chunked attention grew well under 2x: a few
# 256 x 256 tiles plus the (T, 64) output, 1.9 MiB at T = 4,096. The measured ratio there was
# about 68x, and it doubles with every further doubling of T (176x at 8,192). The chapter's
# B = 8, H = 32, T = 4,096 layer would need 8.6 GB in bf16 for one copy of the full matrix.
# (b) The multiply-adds are the same, but every tile pays a fixed cost of about ten small torch
# calls through the Python interpreter, and small tiles make small, inefficient matrix
# multiplications: at c = 32 there are 1,024 tiles and that overhead dominates (several times
# slower than naive). With large tiles the overhead vanishes and chunked attention runs about as
# fast as SDPA here, which uses the same tiling in one fused C++ kernel; at c = T it is one tile,
# the naive computation again, with T x T temporaries and no memory saving. So the useful choice
# is the smallest chunk whose overhead is already negligible (256 to 512 here).
# (c) Only out and lse (one number per query row, T per head rather than T^2): lse rebuilds any
# block of weights exactly as exp(S - lse), and D = rowsum(dout * out) replaces rowsum(dA * A),
# so the backward never needs the stored matrix; the price is recomputing S block by block.
#
# **Rubric (TA only):** 1 point: (a) quotes their own growth factors (about 4x vs at most 2x)
# and ratio, and gives the chapter's 8.6 GB. 1 point: (b) per-tile interpreter/dispatch
# overhead and small matmuls at small c, naive-like temporaries at c = T, and the fused kernel
# of SDPA, quoting their own times. 1 point: (c) out and lse (T numbers), A = exp(S - lse),
# D = rowsum(dout * out).
# ### END SOLUTION

# %% [markdown]
# ## 9. Where the time goes: memory traffic and the roofline
#
# Sections 6 and 7 measured how much memory attention *holds* and how long it takes. What
# FlashAttention set out to reduce is a third quantity: how many bytes *travel* between the two
# memories of the machine.
#
# * A GPU computes out of a small, fast **on-chip SRAM**. An A100 has 192 KB of it beside each of
#   its 108 streaming multiprocessors (about 20 MB in all, read at about 19 TB/s), and 40 to 80 GB
#   of **HBM** read at 1.5 to 2.0 TB/s (the figures of the FlashAttention paper). Every operand
#   comes from HBM into SRAM, every result goes back.
# * A CPU has the same two levels under other names: the **caches** next to each core (L1, L2)
#   and shared (L3), and the **main memory** (DRAM).
#
# A computation's **arithmetic intensity** is its FLOPs divided by the bytes it moves to and from
# the large, slow memory. A machine of peak rate P (FLOP/s) and bandwidth W (bytes/s) runs a
# computation of intensity I at most at `min(P, I · W)` FLOP/s: the **roofline**. At the
# **ridge point** `I = P / W` the two limits meet. Left of it a computation waits for memory
# (memory-bound); right of it, for arithmetic (compute-bound).

# %% [markdown]
# The chapter's example is a GPT-2-small layer (d = 768, H = 12) at T = 1,024 and B = 8:
# projections 38 GFLOP, attention matmuls 26 GFLOP, and the softmax "about 0.1 GFLOP but touching
# 400 MB". Its rule of thumb: the softmax does about 1 FLOP per byte, while an H100 needs about 300
# to be compute-bound (989 TFLOP/s of bf16 over 3.35 TB/s of HBM). The cell recomputes each number.

# %% nbgrader={"grade_id": "chapter_traffic", "locked": true}
B_GPT, T_GPT, D_GPT, H_GPT = 8, 1024, 768, 12
projection_flops = 8 * B_GPT * T_GPT * D_GPT**2  # W_Q, W_K, W_V and W_O on every token
matmul_flops = 4 * B_GPT * T_GPT**2 * D_GPT  # Q K^T and A V, all heads
softmax_entries = B_GPT * H_GPT * T_GPT**2  # one weight per (sequence, head, query, key)
print(f"projections {projection_flops / 1e9:.1f} GFLOP, attention matmuls {matmul_flops / 1e9:.1f} GFLOP")
print(f"softmax: {softmax_entries / 1e9:.2f} G entries, {4 * softmax_entries / 1e6:.0f} MB to read once in float32")
for flops_per_entry in (1, 5):  # the chapter's count; max, subtract, exp, add and divide make 5
    print(f"  at {flops_per_entry} FLOP(s) per entry, read and written in float32: "
          f"{flops_per_entry / 8:.3f} FLOPs per byte")
print(f"H100 ridge point: {989e12 / 3.35e12:.0f} FLOPs per byte")

# %% [markdown]
# The numbers carry over. One correction of degree: counted either way, the softmax does *less*
# than 1 FLOP per byte (0.125 to 0.625), so "about 1" is generous, and the conclusion is the
# chapter's: hundreds of times left of a GPU's ridge, the softmax is memory-bound.
#
# Now **this machine**. `mlbook_helpers.roofline` times a 512 × 512 float32 matrix product (near
# the peak rate of one core) and copies of two buffers: 256 KiB, small enough for the caches, and
# 64 MiB, larger than most CPUs' caches. Your numbers are your machine's: the cell prints them,
# and what follows is computed from them.

# %% nbgrader={"grade_id": "machine_roofline", "locked": true}
from mlbook_helpers.roofline import copy_rate, matmul_rate, roofline_plot

peak_flops = matmul_rate(512)  # FLOP/s of one thread
bandwidth = {"cache (256 KiB copy)": copy_rate(2**18), "main memory (64 MiB copy)": copy_rate(2**26)}
ridge = peak_flops / bandwidth["main memory (64 MiB copy)"]  # FLOPs per byte
print(f"matrix product: {peak_flops / 1e9:.0f} GFLOP/s")
for name, bw in bandwidth.items():
    print(f"{name}: {bw / 1e9:.1f} GB/s, ridge point {peak_flops / bw:.1f} FLOPs per byte")

# %% [markdown]
# ### Counting the bytes of attention
#
# Count the entries each algorithm moves between the large memory and the small one, for one
# head (an entry is `bytes_per_entry` bytes; d_k = d_v = d). Both algorithms do the same FLOPs,
# `4 T² d` (Q Kᵀ and A V at 2 FLOPs per multiply-add; leave out the softmax's few per entry).
#
# * **Naive**: three kernels, each reading its inputs from memory and writing its output back.
#   `S = Q Kᵀ` reads Q and K (2Td) and writes S (T²); the softmax reads S and writes A (2T²);
#   `O = A V` reads A and V (T² + Td) and writes O (Td). In all **4Td + 4T²** entries.
# * **Tiled**, in the order of your `chunked_attention`: a tile of `chunk_size` query rows is read
#   once, then every key and value block streams past it while the tile's scores and running state
#   stay in the small memory. Q is read once (Td), K and V once per query tile
#   (2Td · ⌈T / chunk_size⌉, the last tile may be shorter), O written once (Td). In all
#   **2Td + 2Td · ⌈T / chunk_size⌉** entries: no T² term.
#
# Write `attention_traffic`: the FLOPs and the bytes moved, naive when `chunk_size` is None.

# %% nbgrader={"grade_id": "attention_traffic", "solution": true}
def attention_traffic(T, d, chunk_size=None, bytes_per_entry=4):
    """FLOPs and bytes moved to and from the large memory by one head's attention.

    Args:
        T: sequence length (T_q = T_k = T).
        d: head width (d_k = d_v = d).
        chunk_size: None for the naive three-kernel algorithm; else the rows of each query tile
            of the tiled one (the last tile may be shorter).
        bytes_per_entry: 4 for float32, 2 for bf16.

    Returns:
        (flops, bytes_moved), two ints.
    """
    ### BEGIN SOLUTION
    flops = 4 * T * T * d  # Q K^T and A V, 2 FLOPs per multiply-add
    if chunk_size is None:
        entries = 4 * T * d + 4 * T * T  # Q, K, V in and O out; S written and read, A written and read
    else:
        n_tiles = math.ceil(T / chunk_size)  # query tiles, each streaming all of K and V
        entries = 2 * T * d + 2 * T * d * n_tiles  # Q in and O out once; K and V once per tile
    return flops, entries * bytes_per_entry
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_attention_traffic", "points": 1}
flops, naive_bytes = attention_traffic(1024, 64)
expect(flops == 268_435_456, "FLOPs of attention at T = 1,024, d = 64", f"got {flops:,}",
       "4 T^2 d: two matmuls of T^2 d multiply-adds, 2 FLOPs each.")
expect(naive_bytes == 17_825_792, "naive traffic at T = 1,024, d = 64, float32", f"got {naive_bytes:,} bytes",
       "4Td + 4T^2 entries: the softmax reads S and writes A, and A V reads A again; 4 bytes an entry.")
_, tiled_bytes = attention_traffic(1024, 64, 128)
expect(tiled_bytes == 4_718_592, "tiled traffic at T = 1,024, d = 64, chunk_size = 128", f"got {tiled_bytes:,} bytes",
       "2Td + 2Td * ceil(T / chunk_size) entries: K and V are read once per query tile, and no T x T matrix moves.")
_, uneven_bytes = attention_traffic(1000, 64, 128)
expect(uneven_bytes == 4_608_000, "tiled traffic at T = 1,000, chunk_size = 128", f"got {uneven_bytes:,} bytes",
       "1,000 rows make 8 query tiles, the last one 104 rows long: round the number of tiles up.")
_, bf16_bytes = attention_traffic(1024, 64, 128, bytes_per_entry=2)
expect(bf16_bytes == 2_359_296, "tiled traffic in bf16", f"got {bf16_bytes:,} bytes",
       "Multiply the entries by bytes_per_entry.")

# %% nbgrader={"grade": true, "grade_id": "test_attention_traffic_hidden", "points": 1}
# Hidden tests: other lengths, widths, tile sizes (1, uneven, >= T) and entry sizes.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_attention_traffic(attention_traffic)
### END HIDDEN TESTS

# %% [markdown]
# The intensity is FLOPs / bytes. For large T the naive intensity tends to `d / bytes_per_entry`
# (16 FLOPs per byte at d = 64 in float32): its T² bytes grow exactly like its T² FLOPs, so longer
# sequences do not help. The tiled intensity tends to `2 · chunk_size / bytes_per_entry`: a bigger
# tile reuses every byte of K and V more often, as far as the small memory can hold the tile. The
# cell places both, and the softmax alone, on your machine's main-memory roof.

# %% nbgrader={"grade_id": "intensity_roofline", "locked": true}
T_IO, D_IO = 4096, 64
intensity = {"softmax alone": 5 / 8}  # FLOPs per byte: 5 per entry, one float32 read and write
flops, moved = attention_traffic(T_IO, D_IO)
intensity["naive"] = flops / moved
for c in (16, 64, 256):
    flops, moved = attention_traffic(T_IO, D_IO, c)
    intensity[f"tiled, chunk_size {c}"] = flops / moved
for name, value in intensity.items():
    side = "left of (memory-bound)" if value < ridge else "right of (compute-bound)"
    print(f"{name:22s} {value:6.1f} FLOPs per byte: {side} this machine's ridge at {ridge:.1f}")
roofline_plot(peak_flops, bandwidth, intensity, title=f"T = {T_IO}, d = {D_IO}, float32, one thread")
plt.show()

# %% [markdown]
# Read it with your numbers. On a GPU the ridge is near 300, so the softmax (below 1) and naive
# attention (16) sit far to its left, memory-bound: that is why tiling made attention faster
# there although FlashAttention does *more* FLOPs (its backward recomputes A). The chapter
# reports 15% end to end on BERT-large at T = 512 and 3× on GPT-2 at T = 1,024. One CPU core has
# a much lower ridge (your cell printed it), and its caches can hold a 1,024 × 1,024 float32
# matrix (4 MiB) whole, so on a CPU tiling buys memory capacity (section 6) more surely than it
# buys speed: section 7's timings need not favour the tiled code.

# %% [markdown]
# ## 10. Kernel fusion
#
# The naive count charged the softmax 2T² entries because it is one kernel. Written as five
# torch calls it is five kernels, and each streams its whole input from memory and its whole
# output back: the row max reads S; `S - max` reads S and writes a T × T result; `exp` reads that
# and writes another; the row sum reads it; the division reads it and writes A. That is 5 reads
# and 3 writes of a T × T matrix. `torch.softmax` is **fused**: it does all five steps on one row
# while that row sits in the cache, so main memory sees one read of S and one write of A,
# **4× fewer bytes**. The chapter calls fusing the mask, softmax and dropout "the first
# optimisation anyone applies", and FlashAttention the complete version of the idea: it fuses
# the two matmuls in as well, as PyTorch's SDPA of section 7 does.
#
# A compiler can fuse for you (`torch.compile` generates fused kernels), but on a CPU it needs a
# C++ compiler and seconds of compilation per shape; here the fused kernel is PyTorch's own.

# %% nbgrader={"grade_id": "softmax_five_kernels", "locked": true}
def softmax_five_kernels(S):
    """Row softmax as five separate torch calls: five passes over memory.

    Args:
        S: (T_q, T_k) scores.

    Returns:
        (T_q, T_k) weights, each row summing to 1.
    """
    row_max = S.amax(dim=-1, keepdim=True)  # (T_q, 1): reads S
    shifted = S - row_max  # (T_q, T_k): reads S, writes shifted
    e = torch.exp(shifted)  # (T_q, T_k): reads shifted, writes e
    z = e.sum(dim=-1, keepdim=True)  # (T_q, 1): reads e
    return e / z  # (T_q, T_k): reads e, writes the weights


# %% [markdown]
# The cell runs both at T = 256 (a 256 KiB matrix, small enough for the caches) and T = 2,048
# (16 MiB: with the five kernels' temporaries, more than the caches hold). It checks that they
# agree, measures the memory each holds at its peak (`peak_memory`: the five kernels keep three
# T × T results alive at once), and turns each time into the bandwidth that the counted bytes
# imply (8 passes of 4T² bytes for the five kernels, 2 for the fused one).

# %% nbgrader={"grade_id": "fusion_timing", "locked": true}
for T in (256, 2048):
    S = torch.randn(T, T)  # (T, T) scores
    matrix_bytes = 4 * T * T  # one float32 T x T matrix
    agree = torch.allclose(softmax_five_kernels(S), torch.softmax(S, -1), atol=1e-6)
    held = peak_memory(softmax_five_kernels, S).bytes / matrix_bytes, peak_memory(torch.softmax, S, -1).bytes / matrix_bytes
    unfused = best_time(softmax_five_kernels, S, repeat=2)
    fused = best_time(torch.softmax, S, -1, repeat=2)
    print(f"T = {T:4d}: same weights: {agree}; T x T matrices held at the peak: {held[0]:.1f} vs {held[1]:.1f}")
    print(f"  five kernels {unfused * 1e3:7.2f} ms ({8 * matrix_bytes / unfused / 1e9:5.1f} GB/s), "
          f"fused {fused * 1e3:6.2f} ms ({2 * matrix_bytes / fused / 1e9:5.1f} GB/s): {unfused / fused:.1f}x faster")

# %% [markdown]
# The fused softmax moves 4× fewer bytes and holds a third of the memory; how much time that
# saves depends on where the bytes come from, and on a machine shared with other work the times
# move from run to run. Compare your two ratios. Where the work is memory-bound (the 16 MiB
# matrix, on most machines) fewer bytes means less time, and each of the five kernels also
# allocates a fresh T × T result, which the operating system must supply page by page: often a
# larger cost than the bytes themselves. Where the matrix sits in the cache, the gap is mostly
# the fixed cost of five calls.

# %% [markdown]
# ## 11. Linear attention: attention as a kernel smoother
#
# Write one output row of attention with the kernel `κ(q, k) = exp(q · k / √d_k)`:
#
# $$ y(q) = \frac{\sum_j \kappa(q, k_j)\, v_j}{\sum_j \kappa(q, k_j)} . $$
#
# This is **Nadaraya–Watson kernel regression** (lab 2's extension met it with a Gaussian kernel):
# an average of the "observations" v_j, weighted by how close the query is to each "training
# input" k_j. Softmax attention is the exponential
# kernel's case, and nothing in the formula needs that kernel. `kernel_smoother` below is the
# formula for any kernel matrix `κ[i, j] = κ(q_i, k_j)`: O(T²), like naive attention. With the
# exponential kernel it gives the chapter's query 0 of section 3, (6.02, 3.98).

# %% nbgrader={"grade_id": "kernel_smoother", "locked": true}
def kernel_smoother(kappa, v, causal=False):
    """Nadaraya-Watson weighting of the values by a kernel matrix: O(T^2), kappa is T_q x T_k.

    Args:
        kappa: (T_q, T_k) positive kernel values kappa(q_i, k_j).
        v: (T_k, d_v) values.
        causal: keep only the keys j <= i (then T_q == T_k).

    Returns:
        (T_q, d_v): each row, the values weighted by its kernel row, divided by the row's sum.
    """
    if causal:
        kappa = kappa.tril()  # (T_q, T_k): 0 where j > i
    return (kappa @ v) / kappa.sum(dim=-1, keepdim=True)  # (T_q, d_v)


Qc, Kc, Vc = (torch.tensor(a) for a in chapter_qkv())  # (3, 2) each, float64: the chapter's example
exp_kernel = torch.exp(Qc @ Kc.T / math.sqrt(2))  # (3, 3)
print("exponential kernel smoother, query 0:", kernel_smoother(exp_kernel, Vc)[0].numpy())
print("softmax attention,           query 0:", naive_attention(Qc, Kc, Vc)[0][0].numpy())

# %% [markdown]
# ### A kernel that factorises
#
# If the kernel is a dot product of **feature maps**, `κ(q, k) = φ(q) · φ(k)` with φ mapping a
# d_k-vector to r positive numbers, the kernel matrix is `φ(Q) φ(K)ᵀ` and the product can be
# **re-associated**:
#
# $$ \big(\varphi(Q)\,\varphi(K)^\top\big)\, V = \varphi(Q)\,\big(\varphi(K)^\top V\big),
#    \qquad \text{denominators: } \varphi(Q)\, z, \quad z = \textstyle\sum_j \varphi(k_j) . $$
#
# The left side builds a T × T matrix (2T²r + 2T²d_v FLOPs); the right side builds an r × d_v
# state `Σ_j φ(k_j) v_jᵀ` and the r-vector z, for 4Trd_v FLOPs: **linear in T**. This is linear
# attention (Katharopoulos et al., 2020), the basis of Performer, which chooses φ so that
# φ(q) · φ(k) approximates the exponential kernel (see the extension). Here φ(x) = elu(x) + 1,
# positive everywhere.
#
# **By hand**, with the chapter's Q = K: φ maps (1, 0) to (2, 1), (0, 1) to (1, 2) and (1, 1) to
# (2, 2). Query 0's kernel row is (2·2 + 1·1, 2·1 + 1·2, 2·2 + 1·2) = (5, 4, 6), so its weights
# are (5, 4, 6) / 15 and its output (10·5 + 5·6, 10·4 + 5·6) / 15 = **(5.333, 4.667)**: another
# kernel, other weights than softmax's (6.02, 3.98).

# %% nbgrader={"grade_id": "elu_feature_map", "locked": true}
def elu_feature_map(x):
    """phi(x) = elu(x) + 1, elementwise: (..., d) -> (..., d), every entry > 0."""
    return F.elu(x) + 1.0  # (..., d)


print("phi of the chapter's queries:\n", elu_feature_map(Qc).numpy())

# %% [markdown]
# **Causal.** Query i may use only the keys j ≤ i, so both sums become running sums, updated one
# token at a time:
#
# $$ S_i = S_{i-1} + \varphi(k_i)\, v_i^\top, \qquad z_i = z_{i-1} + \varphi(k_i), \qquad
#    y_i = \frac{\varphi(q_i)^\top S_i}{\varphi(q_i)^\top z_i} . $$
#
# Key i joins the state **before** query i reads it (j ≤ i includes i). This is a recurrent
# network whose state is an r × d_v matrix: generating token 100,000 costs what token 10 did. By
# hand, causal query 0 sees only key 0 and returns v₀ = (10, 0); query 1 sees keys 0 and 1, kernel
# values (1·2 + 2·1, 1·1 + 2·2) = (4, 5), output (10·4, 10·5) / 9 = (4.444, 5.556).
#
# Write `linear_attention`, taking the features already mapped: without `causal` the re-associated
# form, with `causal` the recurrence (a loop over positions is fine). It must not build a
# T_q × T_k matrix: that is `kernel_smoother`'s job, and the tests compare the two.

# %% nbgrader={"grade_id": "linear_attention", "solution": true}
def linear_attention(phi_q, phi_k, v, causal=False):
    """Kernelised attention with the kernel phi(q) . phi(k), in O(T) time and memory.

    Args:
        phi_q: (T_q, r) feature-mapped queries, positive. phi_k: (T_k, r) feature-mapped keys,
            positive. v: (T_k, d_v) values.
        causal: query i uses only the keys j <= i (then T_q == T_k).

    Returns:
        (T_q, d_v) outputs, equal to kernel_smoother(phi_q @ phi_k.T, v, causal).
    """
    ### BEGIN SOLUTION
    if not causal:
        state = phi_k.T @ v  # (r, d_v): sum_j phi(k_j) v_j^T
        norm = phi_k.sum(dim=0)  # (r,): z = sum_j phi(k_j)
        return (phi_q @ state) / (phi_q @ norm)[:, None]  # (T_q, d_v)
    T, r = phi_q.shape
    state = phi_q.new_zeros(r, v.shape[1])  # (r, d_v): S_i, running
    norm = phi_q.new_zeros(r)  # (r,): z_i, running
    out = phi_q.new_empty(T, v.shape[1])  # (T, d_v)
    for i in range(T):
        state = state + torch.outer(phi_k[i], v[i])  # (r, d_v): key i joins before query i reads
        norm = norm + phi_k[i]  # (r,)
        out[i] = (phi_q[i] @ state) / (phi_q[i] @ norm)  # (d_v,)
    return out
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_linear_attention", "points": 2}
Qc, Kc, Vc = (torch.tensor(a) for a in chapter_qkv())  # (3, 2) each, float64
phi_Qc, phi_Kc = elu_feature_map(Qc), elu_feature_map(Kc)  # (3, 2) each: (2, 1), (1, 2), (2, 2)
out = linear_attention(phi_Qc, phi_Kc, Vc)  # (3, 2)
expect_shape(out, (3, 2), "linear_attention on the chapter's example", "One output row per query, d_v columns.")
expect_close(out[0], [5.333, 4.667], "linear attention, the chapter's query 0",
             hint="Divide phi(q) S by phi(q) . z, with S = phi(K)^T V (r x d_v) and z the sum of phi(k_j) over keys.")
causal_out = linear_attention(phi_Qc, phi_Kc, Vc, causal=True)  # (3, 2)
expect_close(causal_out[0], [10.0, 0.0], "causal linear attention, query 0",
             hint="Query 0 sees key 0 only, its own key: add key i to S and z before query i reads them, and let "
                  "the denominator sum only the keys j <= i, never future keys.")
expect_close(causal_out[1], [4.444, 5.556], "causal linear attention, query 1",
             hint="Both running sums, S and z, stop at key i: the denominator must not include future keys.")
expect_close(causal_out[2], out[2], "causal linear attention, query 2 (it sees every key)",
             hint="The last query sees every key: causal and non-causal agree on it.")

g = torch.Generator().manual_seed(4)
f64 = dict(generator=g, dtype=torch.float64)
q, k, v = torch.randn(70, 8, **f64), torch.randn(90, 8, **f64), torch.randn(90, 5, **f64)  # (70, 8), (90, 8), (90, 5)
fq, fk = elu_feature_map(q), elu_feature_map(k)  # (70, 8), (90, 8)
expect_close(linear_attention(fq, fk, v), kernel_smoother(fq @ fk.T, v), "linear_attention(T_q=70, T_k=90)",
             atol=1e-9, hint="The re-associated form phi(Q) (phi(K)^T V) / (phi(Q) z) must equal the kernel form.")
q, k, v = (torch.randn(60, 8, **f64) for _ in range(3))  # (60, 8) each
fq, fk = elu_feature_map(q), elu_feature_map(k)  # (60, 8) each
expect_close(linear_attention(fq, fk, v, causal=True), kernel_smoother(fq @ fk.T, v, causal=True),
             "causal linear_attention(T=60) vs the causal kernel form", atol=1e-9,
             hint="Query i sums keys 0..i in both S and z, its own key included.")

# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_hidden", "points": 3}
# Hidden tests: fresh lengths (T_q != T_k), feature widths r != d, other positive feature maps,
# causal and not, float32 and float64, against the O(T^2) kernel form.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_linear_attention(linear_attention)
### END HIDDEN TESTS

# %% [markdown]
# The point of the re-association is the cost. The cell times the O(T²) kernel form against your
# O(T) form, non-causal, for T = 1,024 to 4,096 with d = r = 64, and your causal recurrence once.

# %% nbgrader={"grade_id": "linear_timing", "locked": true}
for T in (1024, 2048, 4096):
    q, k, v = (torch.randn(T, 64) for _ in range(3))  # (T, 64) each
    fq, fk = elu_feature_map(q), elu_feature_map(k)  # (T, 64) features
    quadratic = best_time(lambda: kernel_smoother(fq @ fk.T, v), repeat=2)
    linear = best_time(linear_attention, fq, fk, v, repeat=2)
    print(f"T = {T:4d}: kernel form {quadratic * 1e3:7.2f} ms, linear form {linear * 1e3:5.2f} ms")
recurrence = best_time(linear_attention, fq[:1024], fk[:1024], v[:1024], causal=True, repeat=1, warmup=0)
print(f"causal recurrence at T = 1024, one Python step per token: {recurrence * 1e3:.1f} ms")

# %% [markdown]
# Per doubling of T the kernel form should take about 4× longer and the linear form at most about
# 2× (small sizes are noisy: read the trend on your numbers). Two cautions. Linear attention is
# exact for *its* kernel, but it is not softmax attention: the chapter's query 0 got (5.33, 4.67),
# not (6.02, 3.98), and a model must be trained with the kernel it uses. And a Python step per token is slow; real
# implementations run the causal form block by block: within a block the small kernel matrix,
# across blocks the running state.

# %% [markdown]
# ## 12. When to use what
#
# The chapter's table, with where this lab measured each row:
#
# | situation | choice | reason | in this lab |
# |---|---|---|---|
# | writing attention in an interview | explicit attention, three `Linear`s | the interviewer needs to see the shapes and the mask | `naive_attention` (section 2) |
# | production training, T ≤ 2,048 | `F.scaled_dot_product_attention` | dispatches to a fused kernel, exact, no code to maintain | one fused call (sections 7, 10) |
# | production training, T ≥ 4,096 | FlashAttention-2/3 through the SDPA backend | never materialises A: the only way to fit memory | peak memory grows like T, not T² (section 6) |
# | inference, decoding token by token | cached attention, T_q = 1 | the T² term disappears: one row of scores per new token | not built here |
# | cross-modal fusion | cross-attention, queries from the target modality | the output has the queries' length | T_q ≠ T_k in every test here |
# | T in the hundreds of thousands | sparse, sliding-window or linear attention | exact attention is quadratic in compute whatever the kernel does with memory | linear attention's time grows like T (section 11) |
#
# FlashAttention and SDPA change where the numbers live, never the result; sparse, sliding-window
# and linear attention change the result, which is why they are a modelling choice, not an
# optimisation.

# %% [markdown]
# ## Extension (optional, ungraded): random features for the softmax kernel
#
# The exponential kernel has no finite feature map, but it has a random one (Performer's
# positive random features). Scale q and k by d^(-1/4), so that `a · b = q · k / √d`, draw
# ω₁ … ω_m from N(0, I) and set `φ(x) = exp(ωᵀx − |x|² / 2) / √m`. Since E[exp(ωᵀu)] = exp(|u|² / 2),
# E[φ(a) · φ(b)] = exp(|a + b|² / 2 − |a|² / 2 − |b|² / 2) = exp(a · b): softmax's kernel, on
# average. Your `linear_attention` with these features approximates softmax attention in O(T m);
# the error shrinks like 1 / √m (half per 4× more features). Its variance grows like
# exp(|a + b|²), so the cell uses queries and keys of standard deviation 0.5: change the 0.5 to 1
# and see how many more features the same error would need.

# %% nbgrader={"grade_id": "random_features", "locked": true}
def positive_random_features(x, omega):
    """Performer's positive random features: (T, d) -> (T, m), with omega (d, m) drawn from N(0, 1)."""
    x = x / x.shape[-1] ** 0.25  # (T, d): a . b = q . k / sqrt(d)
    return torch.exp(x @ omega - (x * x).sum(dim=-1, keepdim=True) / 2) / math.sqrt(omega.shape[1])  # (T, m)


g = torch.Generator().manual_seed(5)
q, k = (0.5 * torch.randn(256, 16, generator=g, dtype=torch.float64) for _ in range(2))  # (256, 16) each
v = torch.randn(256, 16, generator=g, dtype=torch.float64)  # (256, 16)
exact = naive_attention(q, k, v)[0]  # (256, 16): softmax attention
for m in (16, 64, 256, 1024, 4096):
    omega = torch.randn(16, m, generator=g, dtype=torch.float64)  # (d, m)
    approx = linear_attention(positive_random_features(q, omega), positive_random_features(k, omega), v)  # (256, 16)
    print(f"m = {m:4d} features: relative error {((approx - exact).norm() / exact.norm()).item():.3f}")
