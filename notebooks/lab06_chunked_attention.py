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
# and then **measure** what it saves on this CPU. Then the other half of attention's memory
# story, generation: the key-value cache that makes decoding one token cheap, and the grouped
# key/value heads that make that cache small.
#
# You will:
# 1. size the full attention matrix for the chapter's configurations;
# 2. write the online-softmax update: a running max, a running denominator and a running
#    weighted sum, rescaled whenever the max grows;
# 3. write `chunked_attention`, tiled over queries and keys, causal or not, exact to float
#    tolerance against `torch.nn.functional.scaled_dot_product_attention`;
# 4. write the backward pass from the saved log-sum-exp (T numbers, not T²) and check it
#    against autograd;
# 5. measure the peak memory of naive and chunked attention;
# 6. write decoding with a KV cache (the cache, the step with its offset causal mask), check that it
#    gives exactly the full causal pass at every step, measure its time per token against
#    decoding without a cache, and count its bytes;
# 7. write grouped-query attention (and so multi-query attention), check it against PyTorch, and
#    size the cache of Llama-2-70B with and without grouping.
#
# **Time.** About 2.5 hours: 10 minutes for sections 1–2, 45 for sections 3–4, 30 for section 5,
# 10 for section 6, 25 for section 7 (the KV cache), 15 for section 8 (grouped-query attention)
# and 15 for the written answer. Sections 10 and 11 are extensions without points, about 10
# minutes each: chunked attention timed against PyTorch's fused kernel; and memory traffic
# (this CPU's bandwidth, its FLOP rate, arithmetic intensity), a fused softmax measured, and a
# table of which attention to use when.
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, on fresh random inputs: other lengths (not multiples of the
# chunk size), chunk sizes 1 and ≥ T, very large scores, causal and not, float32 and float64,
# and a memory check, measured from outside your kernel, that fails any version whose memory grows
# like a T × T matrix (or, in `chunked_attention`, like a T × chunk_size one); for decoding, caches
# of fresh lengths and greedy decoding with a model of fresh weights. A failing test names the
# likely misconception. The written answer in section 9 is graded by a TA.

# %% [markdown]
# ## Setup
# Run this cell first. PyTorch and NumPy run on **one thread** in this lab, so that the timings
# in sections 7 and 10 are repeatable on a shared machine.

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
from mlbook_helpers.decoding import empty_cache
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
#   straddle the diagonal still need the mask inside the block (the grade checks the results and
#   the memory, not the time: a version that visits the future blocks and masks every key in them
#   is exact too and loses no points, but it does twice the work);
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
                  "m = -inf, l = 0, acc = 0, use scores scaled by 1/sqrt(d_k), and divide acc by l once, after the last block "
                  "(this calls your online_softmax_update: if online_softmax_update fails its own test, fix it first).")
expect_close(lse, torch.logsumexp(q @ k.T / 8, dim=-1), "lse of chunked_attention(T=512, c=64)", atol=1e-4,
             hint="lse = m + log(l) for each row, from the state after its last block.")

q, k, v = torch.randn(300, 16, generator=g), torch.randn(300, 16, generator=g), torch.randn(300, 24, generator=g)
expect_close(chunked_attention(q, k, v, 64)[0], F.scaled_dot_product_attention(q, k, v),
             "chunked_attention(T=300, c=64, d_k=16, d_v=24)", atol=1e-5,
             hint="300 is not a multiple of 64: is the last, shorter block of keys (and tile of queries) "
                  "processed? And d_v differs from d_k here: the scale is 1/sqrt(d_k), from q's width.")

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
# Hidden test: the peak memory of calls at T near 3,500 and 7,000, causal and not, is measured
# from outside your kernel (and their results are checked): it must grow about linearly with T,
# by far less than a T x T or a T x chunk_size matrix per token. Memory made before the call (a
# global buffer, a cache) that the call reads or writes counts as the call's, and so do the bytes
# it reads or writes through files.
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
                 hint="dV = A^T dY, with this block's columns of A rebuilt as exp(S - lse): subtract lse in the "
                      "exponent, and when causal, mask keys j > i in S first so that their weights are exactly 0.")
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
# measuring, call `peak_memory(attention_fn, q, k, v)` and keep its `.bytes`. A peak is a
# measurement: the Python objects made during the call add a few hundred bytes that vary, so the
# check accepts your number within 1% plus 16 KiB of `peak_memory` on the same function with inputs
# drawn beforehand (which of your three tensors you draw first, or pass as `q`, `k` or `v`, does
# not matter: they are alike).

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
expect(all(isinstance(p, (int, float, np.integer, np.floating)) for p in probe), "memory_sweep of a probe",
       f"returned {[type(p).__name__ for p in probe]}",
       "Return numbers: the .bytes of each peak_memory(...) result.")
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
# ## 7. Decoding with a KV cache
#
# A decoder generates one token at a time: it runs the model on the sequence so far, takes the
# last row of logits, picks the next token, and starts again. Run naively, step t recomputes the
# queries, keys and values of all t tokens and the whole t × t causal attention, to use one new
# row of it. But under the causal mask, token j's key and value depend only on tokens 0 … j: they
# are **the same at every later step**. So a decoder keeps them, the **KV cache**: one pair of
# tensors (K, V) per layer, which grows by one row per head each time a token is fed, and each
# step computes q, k, v for the new token(s) only and attends from them to everything cached.
#
# Shapes in this section are batched over heads, as in lab 3: `q_new` is (B, H, T_new, d_k), the
# cache is the pair `(K, V)` of (B, H, T_cache, d_k) and (B, H, T_cache, d_v) tensors, and a cache
# holding no tokens yet has T_cache = 0 (`empty_cache(B, H, d_k, d_v)` from
# `mlbook_helpers.decoding` makes one).
#
# First the cache itself: `kv_cache_append` returns the cache with the new keys and values
# **appended after** the cached ones, along the time axis (dim −2), so that row t of K is still
# token t's key.

# %% nbgrader={"grade_id": "kv_cache_append", "solution": true}
def kv_cache_append(cache, k_new, v_new):
    """The cache grown by T_new tokens.

    Args:
        cache: (K, V), K (B, H, T_cache, d_k) and V (B, H, T_cache, d_v); T_cache may be 0.
        k_new: (B, H, T_new, d_k) keys of the new tokens. v_new: (B, H, T_new, d_v) their values.

    Returns:
        (K, V) of shapes (B, H, T_cache + T_new, d_k) and (B, H, T_cache + T_new, d_v), the cached
        tokens first, then the new ones in order.
    """
    ### BEGIN SOLUTION
    K, V = cache
    return torch.cat([K, k_new], dim=-2), torch.cat([V, v_new], dim=-2)  # (B, H, T_cache + T_new, d_k), (..., d_v)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_append", "points": 1}
k0, v0 = torch.randn(1, 2, 1, 4, dtype=torch.float64), torch.randn(1, 2, 1, 3, dtype=torch.float64)  # token 0
cache = kv_cache_append(empty_cache(1, 2, 4, 3), k0, v0)
expect(len(cache) == 2, "kv_cache_append(empty cache, one token)", f"returned {len(cache)} values", "Return the pair (K, V).")
expect_shape(cache[0], (1, 2, 1, 4), "K after one token", "Append along the time axis, dim -2: (B, H, T, d_k).")
expect_shape(cache[1], (1, 2, 1, 3), "V after one token", "V keeps its own width d_v: (B, H, T, d_v).")
k12, v12 = torch.randn(1, 2, 2, 4, dtype=torch.float64), torch.randn(1, 2, 2, 3, dtype=torch.float64)  # tokens 1, 2
K, V = kv_cache_append(cache, k12, v12)
expect_shape(K, (1, 2, 3, 4), "K after three tokens", "The time axis grows: T_cache + T_new rows per head.")
expect_close(K, torch.cat([k0, k12], dim=2), "K after three tokens, row by row",
             hint="The cached keys come first and the new ones after them, in order (append, do not prepend).")
expect_close(V, torch.cat([v0, v12], dim=2), "V after three tokens, row by row",
             hint="Append the new values after the cached ones, like the keys.")

# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_append_hidden", "points": 1}
# Hidden tests: other batch sizes, head counts and widths, empty and long caches, float32 and float64.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_kv_cache_append(kv_cache_append)
### END HIDDEN TESTS

# %% [markdown]
# Now the step. `decode_step` receives the new tokens' queries, keys and values and the cache,
# and returns their attention outputs and the grown cache:
#
# 1. append `k_new`, `v_new` to the cache with `kv_cache_append` **first**: a new token reads
#    its own key too;
# 2. score the new queries against all T_total = T_cache + T_new cached keys, scaled by 1/√d_k:
#    (B, H, T_new, T_total);
# 3. mask them with the rule of lab 3's `causal_mask_with_cache(T_new, T_total)`: the new queries
#    are the **last** T_new positions, so query i sits at absolute position T_total − T_new + i and
#    may read keys 0 … T_total − T_new + i. With one new token that allows every key; when a whole
#    prompt goes through at once (T_cache = 0) it is the ordinary causal mask; with several new
#    tokens after a cache it is neither. Write those two or three lines here (do not import lab 3's
#    function: this notebook does not have it);
# 4. softmax over the keys, and weight the cached values.
#
# The cache holds keys and values, never scores, weights or outputs: a score or a weight belongs
# to one query, and every later query needs its own.

# %% nbgrader={"grade_id": "decode_step", "solution": true}
def decode_step(q_new, k_new, v_new, cache):
    """One step of cached causal attention: the new tokens attend to every cached token and themselves.

    Args:
        q_new: (B, H, T_new, d_k) queries of the new tokens, the last T_new positions.
        k_new: (B, H, T_new, d_k) their keys. v_new: (B, H, T_new, d_v) their values.
        cache: (K, V) of the T_cache earlier tokens, (B, H, T_cache, d_k) and (B, H, T_cache, d_v).

    Returns:
        out: (B, H, T_new, d_v) attention outputs of the new tokens.
        cache: (K, V) grown to T_total = T_cache + T_new tokens.
    """
    ### BEGIN SOLUTION
    cache = kv_cache_append(cache, k_new, v_new)  # first: the new tokens read their own keys too
    K, V = cache  # (B, H, T_total, d_k), (B, H, T_total, d_v)
    T_new, T_total = q_new.shape[-2], K.shape[-2]
    scores = q_new @ K.transpose(-2, -1) / math.sqrt(q_new.shape[-1])  # (B, H, T_new, T_total)
    query_pos = torch.arange(T_total - T_new, T_total)[:, None]  # (T_new, 1): absolute positions of the new queries
    key_pos = torch.arange(T_total)[None, :]  # (1, T_total)
    scores = scores.masked_fill(key_pos > query_pos, -math.inf)  # (B, H, T_new, T_total)
    out = torch.softmax(scores, dim=-1) @ V  # (B, H, T_new, d_v)
    return out, cache
    ### END SOLUTION

# %% [markdown]
# The tests compare each step with the full causal attention over all the tokens so far, of which
# the step must give the last T_new rows: one token on an empty cache (its output is its own
# value), one token after three cached ones, a whole prompt at once, and two new tokens after a
# cache of three.

# %% nbgrader={"grade": true, "grade_id": "test_decode_step", "points": 2}
def full_causal(q, k, v):
    """Causal attention over all T tokens at once: (B, H, T, d_v)."""
    T = q.shape[-2]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True) if T > 0 else q.new_zeros(*q.shape[:-1], v.shape[-1])


g = torch.Generator().manual_seed(7)
q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))  # (B, H, T, d)
want = full_causal(q, k, v)  # (2, 3, 6, 4)
out, cache = decode_step(q[:, :, :1], k[:, :, :1], v[:, :, :1], empty_cache(2, 3, 4, 4))
expect_shape(out, (2, 3, 1, 4), "decode_step(one token, empty cache)", "One output row per new query: (B, H, T_new, d_v).")
expect_close(out, v[:, :, :1], "decode_step(one token, empty cache)",
             hint="The only key the first token can read is its own: append k_new, v_new to the cache before scoring.")
expect_shape(cache[0], (2, 3, 1, 4), "the cache after the first token", "Return the grown cache (K, V).")
out, cache = decode_step(q[:, :, 3:4], k[:, :, 3:4], v[:, :, 3:4], (k[:, :, :3], v[:, :, :3]))
expect_close(out, want[:, :, 3:4], "decode_step(token 3, cache of tokens 0-2)",
             hint="One new token is the LAST position, T_total - T_new: it reads every cached key and its own, so the mask "
                  "must be offset by the cache length (lab 3's causal_mask_with_cache); is its own key appended first?")
out, cache = decode_step(q, k, v, empty_cache(2, 3, 4, 4))
expect_close(out, want, "decode_step(the whole prompt of 6 tokens, empty cache)",
             hint="With no cache the new queries are positions 0..T-1: the mask is the ordinary causal mask (key j <= query i).")
out, cache = decode_step(q[:, :, 3:5], k[:, :, 3:5], v[:, :, 3:5], (k[:, :, :3], v[:, :, :3]))
expect_close(out, want[:, :, 3:5], "decode_step(tokens 3-4, cache of tokens 0-2)",
             hint="The new queries are the LAST T_new positions: query i is at T_total - T_new + i (lab 3's "
                  "causal_mask_with_cache), so the mask must be offset by the cache length, and token 3 must not read token 4.")
expect_shape(cache[0], (2, 3, 5, 4), "the cache after tokens 3-4", "The cache grows by T_new: T_cache + T_new rows per head.")
expect_close(cache[1], v[:, :, :5], "the cache's V after tokens 3-4",
             hint="The cache holds every token's values, v_new appended after the cached ones, not the step's attention outputs.")

# %% nbgrader={"grade": true, "grade_id": "test_decode_step_hidden", "points": 3}
# Hidden tests: fresh batch sizes, heads, widths (d_k != d_v), cache lengths 0 to 40, one and
# several new tokens, float32 and float64, and the cache returned.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_decode_step(decode_step)
### END HIDDEN TESTS

# %% [markdown]
# ### The check that matters: decoding with the cache changes nothing
#
# `TinyCausalLM` (in `mlbook_helpers.decoding`) is a two-layer causal language model in float64
# with fixed random weights. `model.full_logits(tokens)` runs the full causal forward pass over a
# whole sequence; `model.decode(prompt, n_new, step)` generates greedily with one cache per layer,
# calling **your** `decode_step` for every layer's attention: the prompt in one call (T_new =
# len(prompt)), then each generated token on its own (T_new = 1).
#
# A cache is an optimisation, so it must change nothing: after decoding, the full pass over the
# same tokens must give the same logits at **every** position, to float64 rounding (1e-10), for
# prompts of several lengths. (That also proves the generated tokens are the full model's greedy
# choices: each is the argmax of a row that agrees.)

# %% nbgrader={"grade": true, "grade_id": "test_greedy_decoding", "points": 2}
from mlbook_helpers.decoding import TinyCausalLM

lm = TinyCausalLM(seed=0)
for prompt in ([3], [5, 1, 4, 1], [2, 7, 1, 8, 2, 8, 1, 8, 2]):
    tokens, step_logits = lm.decode(prompt, 12, decode_step)
    full = lm.full_logits(tokens[:-1])  # (T, vocab): every position that was fed
    expect(len(tokens) == len(prompt) + 12, f"decode(prompt of {len(prompt)}, 12 new tokens)",
           f"{len(tokens)} tokens", "decode_step must return (out, cache).")
    cached = torch.cat(step_logits)  # (T, vocab), position by position as the steps produced them
    for pos in range(cached.shape[0]):  # the prompt's rows, then one row per generated token
        expect_close(cached[pos], full[pos], f"logits at position {pos} (prompt of {len(prompt)}), cached vs full pass",
                     atol=1e-10, rtol=0,
                     hint="Cached decoding must equal the full pass at every step: append k_new, v_new before scoring, "
                          "offset the mask by the cache length, give a prompt's queries the causal mask among themselves, "
                          "and cache keys and values, not attention outputs.")
print("cached decoding = full causal pass, at every step, for prompts of 1, 4 and 9 tokens")

# %% nbgrader={"grade": true, "grade_id": "test_greedy_decoding_hidden", "points": 2}
# Hidden tests: a model with fresh weights and more heads, fresh prompts of several lengths, and
# your decode_step's cache handed back to it at every step, compared with the full pass.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_greedy_decoding(decode_step)
### END HIDDEN TESTS

# %% [markdown]
# ### What the cache saves, and what it costs
#
# Per generated token, at sequence length T, for one layer of width d_model:
#
# * **without a cache**, the step recomputes q, k, v for all T tokens (T · d_model² work) and the
#   whole T × T causal attention (T² · d_model): per-token time grows like **T²** once the
#   attention dominates, and the whole generation like T³;
# * **with a cache**, it projects one token (d_model²) and scores one query against T keys
#   (T · d_model), plus copying the cache as it grows (`torch.cat` makes a new tensor): per-token
#   time grows at most like **T**, and is nearly flat while the fixed cost of a dozen small torch
#   calls dominates.
#
# The cell below measures both for one layer (d_model = 256, 4 heads of 64, float32, one
# thread), each after a warm-up run, the fastest of 7 runs (3 without the cache at the two largest
# lengths), at T = 64 … 1,024, and prints the growth from one length to the next and over the whole
# range. It takes a few seconds. Over the 16-fold range of T, expect the time without the cache to
# grow by far more than 16× (towards the 256× of T², once the attention outweighs the
# projections), and the time with the cache by about 16× at most: copying the growing cache is
# linear in T, and while the fixed cost of a few torch calls dominates it grows much less. What
# stays true on any machine is the gap between the two growth factors, and the gap between the
# two times at the largest T. One ratio between neighbouring lengths is noisier than the whole
# range on a shared machine. On the machine this lab was checked on (2 cores, with other work
# running), two runs gave 0.06–0.2 ms per cached token at T = 64 … 256 and 0.2–1 ms at T = 1,024,
# and 0.4–0.5 ms per uncached token at T = 64 against 60–100 ms at T = 1,024; your CPU and its
# load set your numbers. Read yours.

# %% nbgrader={"grade_id": "decode_timing", "locked": true}
D_MODEL_T, H_T = 256, 4
D_HEAD_T = D_MODEL_T // H_T
w_qkv = torch.randn(D_MODEL_T, 3 * D_MODEL_T) / math.sqrt(D_MODEL_T)  # (d_model, 3 d_model), float32


def split_heads(x):
    """(T, d_model) -> (1, H, T, d_head)."""
    return x.reshape(x.shape[0], H_T, D_HEAD_T).transpose(0, 1)[None]


def step_without_cache(x_all):
    """Recompute q, k, v for all T tokens and the full causal attention; keep the last token's output."""
    q, k, v = (split_heads(t) for t in (x_all @ w_qkv).split(D_MODEL_T, dim=-1))  # (1, H, T, d_head) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(D_HEAD_T)  # (1, H, T, T)
    future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)  # (T, T)
    return (torch.softmax(scores.masked_fill(future, -math.inf), dim=-1) @ v)[:, :, -1:]  # (1, H, 1, d_head)


def step_with_cache(x_new, cache):
    """Project the new token only and attend to the cache with your decode_step."""
    q, k, v = (split_heads(t) for t in (x_new @ w_qkv).split(D_MODEL_T, dim=-1))  # (1, H, 1, d_head) each
    return decode_step(q, k, v, cache)


T_DECODE = [64, 128, 256, 512, 1024]
x_seq = torch.randn(T_DECODE[-1], D_MODEL_T)  # (T_max, d_model) token inputs
with_cache, without_cache = [], []
for T in T_DECODE:
    _, k_c, v_c = (split_heads(t).contiguous() for t in (x_seq[:T - 1] @ w_qkv).split(D_MODEL_T, dim=-1))  # cache: T - 1 tokens
    with_cache.append(best_time(step_with_cache, x_seq[T - 1:T], (k_c, v_c), repeat=7, warmup=1))
    without_cache.append(best_time(step_without_cache, x_seq[:T], repeat=7 if T < 512 else 3, warmup=1))
for i, T in enumerate(T_DECODE):
    growth = "" if i == 0 else (f"   x{with_cache[i] / with_cache[i - 1]:4.2f} and x{without_cache[i] / without_cache[i - 1]:4.2f} "
                                f"since T = {T_DECODE[i - 1]}")
    print(f"T={T:5d}: with the cache {with_cache[i] * 1e3:7.3f} ms/token   without {without_cache[i] * 1e3:8.3f} ms/token{growth}")
span = T_DECODE[-1] // T_DECODE[0]
print(f"from T = {T_DECODE[0]} to {T_DECODE[-1]} (x{span}): with the cache x{with_cache[-1] / with_cache[0]:.1f}, "
      f"without x{without_cache[-1] / without_cache[0]:.0f} (T would give x{span}, T^2 x{span ** 2}); "
      f"at T = {T_DECODE[-1]} the cached step is {without_cache[-1] / with_cache[-1]:.0f}x faster")
t_ratio = np.array(T_DECODE) / T_DECODE[-1]
ax = curves(T_DECODE, {"with the cache": np.array(with_cache) * 1e3, "without the cache": np.array(without_cache) * 1e3,
                       "∝ T (through the last cached point)": with_cache[-1] * 1e3 * t_ratio,
                       "∝ T² (through the last uncached point)": without_cache[-1] * 1e3 * t_ratio ** 2},
            xlabel="T (tokens so far)", ylabel="time per token (ms)", title="One decoding step, one layer, one thread",
            logx=True, logy=True)
plt.show()

# %% [markdown]
# The price of the cache is memory. Per token it holds a key and a value for every kv head of
# every layer: **2 · n_layers · n_kv_heads · d_head** entries (the 2 is K and V), and a batch of
# B sequences of T tokens holds B · T times that. In this section n_kv_heads is the number of
# heads; the next section makes it smaller. Write `kv_cache_bytes`, then run the cell after it:
# it measures the bytes of the cache `decode_step` actually built above and compares.

# %% nbgrader={"grade_id": "kv_cache_bytes", "solution": true}
def kv_cache_bytes(n_layers, n_kv_heads, d_head, T, batch=1, bytes_per_entry=2):
    """Bytes of the key-value cache of a decoder.

    Args:
        n_layers: layers, each with its own cache.
        n_kv_heads: key/value heads per layer (the number of heads, for plain multi-head attention).
        d_head: width of one head's keys (and of its values).
        T: tokens cached per sequence.
        batch: sequences.
        bytes_per_entry: 2 for bf16/fp16, 4 for float32.

    Returns:
        The number of bytes, an int.
    """
    ### BEGIN SOLUTION
    return int(2 * n_layers * n_kv_heads * d_head * T * batch * bytes_per_entry)  # K and V
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes", "points": 1}
# Llama-2-7B: 32 layers, 32 heads of 128, no grouping: 2 GiB per sequence at 4,096 tokens in 16 bits.
expect(kv_cache_bytes(32, 32, 128, 4096) == 2 * 2**30, "kv_cache_bytes(32, 32, 128, 4096), Llama-2-7B",
       f"got {kv_cache_bytes(32, 32, 128, 4096):,}",
       "2 tensors (K and V) x 32 layers x 32 heads x 128 x 4,096 tokens x 2 bytes = 2 GiB: did you count both K and V, "
       "in every layer?")
expect(kv_cache_bytes(1, 4, 64, 1, bytes_per_entry=4) == 2048, "one token of one float32 layer with 4 heads of 64",
       f"got {kv_cache_bytes(1, 4, 64, 1, bytes_per_entry=4):,}", "2 x 4 x 64 entries of 4 bytes.")
expect(kv_cache_bytes(32, 32, 128, 4096, batch=8) == 16 * 2**30, "Llama-2-7B, a batch of 8 sequences",
       f"got {kv_cache_bytes(32, 32, 128, 4096, batch=8):,}", "Every sequence of the batch has its own cache.")

# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes_hidden", "points": 1}
# Hidden tests: other layer counts, heads, widths, lengths, batches and entry sizes.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_kv_cache_bytes(kv_cache_bytes)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "cache_bytes_measured", "locked": true}
from mlbook_helpers.decoding import TinyCausalLM

lm = TinyCausalLM(seed=0)  # the model of the greedy-decoding test, built here too
_, timing_cache = step_with_cache(x_seq[-1:], (k_c, v_c))  # the cache after T_max tokens, built by decode_step
measured = sum(t.numel() * t.element_size() for t in timing_cache) / T_DECODE[-1]
print(f"timing layer (1 layer, {H_T} heads of {D_HEAD_T}, float32): measured {measured:,.0f} bytes per token, "
      f"formula {kv_cache_bytes(1, H_T, D_HEAD_T, 1, bytes_per_entry=4):,}")
print(f"TinyCausalLM ({lm.n_layers} layers, {lm.n_heads} heads of {lm.d_head}, float64): "
      f"{kv_cache_bytes(lm.n_layers, lm.n_heads, lm.d_head, 1, bytes_per_entry=8):,} bytes per token")
print(f"Llama-2-7B (32 layers, 32 heads of 128, 16-bit): {kv_cache_bytes(32, 32, 128, 1):,} bytes per token, "
      f"{kv_cache_bytes(32, 32, 128, 4096) / 2**30:.2f} GiB at 4,096 tokens")

# %% [markdown]
# ## 8. Multi-query and grouped-query attention
#
# At 512 KiB per token, Llama-2-7B's cache for one 4,096-token sequence (2 GiB) is a sixth of its
# 13 GB of 16-bit weights, and a batch of 8 such sequences outweighs them. Decoding reads the
# whole cache for every generated token, so its size sets both the memory and the time of a step.
# **Multi-query attention** (Shazeer, 2019) keeps all H query heads but a single key/value head
# that every query head shares; **grouped-query attention** (Ainslie et al., 2023) keeps
# `n_kv_heads` = G key/value heads, with G dividing H, each shared by a group of H / G query heads.
# G = H is plain multi-head attention, G = 1 is multi-query. The cache shrinks by H / G.
#
# The mapping: with `group = H // G` query heads per kv head, **query head h uses kv head
# h // group**, so query heads 0 … group − 1 share kv head 0, the next group share kv head 1, and
# so on. (That is the layout of `F.scaled_dot_product_attention(..., enable_gqa=True)` and of
# `k.repeat_interleave(group, dim=1)`. Note that `k.repeat(1, group, 1, 1)` tiles the heads
# instead, 0, 1, …, G − 1, 0, 1, …: query head h would get kv head h % G, another model.)
#
# Write `grouped_query_attention` for q (B, H, T_q, d_k) and k, v with G heads, without calling
# `scaled_dot_product_attention` (the test compares with it). With `causal=True`, T_q = T_k and
# key j is masked for query i when j > i.

# %% nbgrader={"grade_id": "grouped_query_attention", "solution": true}
def grouped_query_attention(q, k, v, causal=False):
    """Attention where groups of query heads share key/value heads.

    Args:
        q: (B, H, T_q, d_k) queries of H heads.
        k: (B, G, T_k, d_k) keys of G key/value heads, G dividing H. v: (B, G, T_k, d_v) values.
        causal: mask key j for query i when j > i (requires T_q == T_k).

    Returns:
        (B, H, T_q, d_v): query head h attends with kv head h // (H // G).
    """
    ### BEGIN SOLUTION
    H, G = q.shape[1], k.shape[1]
    if H % G:
        raise ValueError(f"n_kv_heads={G} does not divide n_heads={H}")
    group = H // G  # query heads per kv head
    k = k.repeat_interleave(group, dim=1)  # (B, H, T_k, d_k): head h gets kv head h // group
    v = v.repeat_interleave(group, dim=1)  # (B, H, T_k, d_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    if causal:
        future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)  # (T_q, T_k) True where j > i
        scores = scores.masked_fill(future, -math.inf)
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T_q, d_v)
    ### END SOLUTION

# %% [markdown]
# The tests: with G = H it is plain multi-head attention; it matches PyTorch's own grouped-query
# attention (`enable_gqa=True`, in torch ≥ 2.5; your installed torch is printed) and the explicit
# `repeat_interleave` of the kv heads, causal or not, for G = 2 and G = 1 (multi-query); and a
# probe whose value heads are constant (kv head g's values all equal g) shows which kv head each
# query head read.

# %% nbgrader={"grade": true, "grade_id": "test_grouped_query_attention", "points": 2}
print(f"torch {torch.__version__}")
g = torch.Generator().manual_seed(8)
q, k, v = (torch.randn(2, 4, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))  # (B, H, T, d)
expect_close(grouped_query_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), "G = H = 4: plain multi-head",
             atol=1e-10, hint="With as many kv heads as query heads every head uses its own keys and values: "
                              "query head h reads kv head h // (H // G) = h.")
expect_close(grouped_query_attention(q, k, v, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True),
             "G = H = 4, causal", atol=1e-10, hint="Causal: mask key j for query i when j > i, before the softmax.")
probe_v = torch.arange(4, dtype=torch.float64).reshape(1, 4, 1, 1).expand(1, 4, 5, 1)  # kv head g: values all g
used = grouped_query_attention(torch.randn(1, 12, 3, 8, dtype=torch.float64), torch.randn(1, 4, 5, 8, dtype=torch.float64),
                               probe_v)[0, :, 0, 0]  # (12,): the kv head each query head read
expect_close(used, [h // 3 for h in range(12)], "kv head read by each of 12 query heads with G = 4",
             hint="Query heads 0-2 share kv head 0, 3-5 kv head 1, ...: h // (H // G). Reading h % G tiles the heads instead.")
q = torch.randn(2, 8, 6, 8, generator=g, dtype=torch.float64)  # (B, 8 query heads, T, d)
for G in (2, 1):
    k, v = torch.randn(2, G, 6, 8, generator=g, dtype=torch.float64), torch.randn(2, G, 6, 3, generator=g, dtype=torch.float64)
    for causal in (False, True):
        got = grouped_query_attention(q, k, v, causal=causal)
        expect_shape(got, (2, 8, 6, 3), f"grouped_query_attention(H=8, G={G})", "One output per query head: (B, H, T_q, d_v).")
        repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(8 // G, 1), v.repeat_interleave(8 // G, 1),
                                                  is_causal=causal)  # (2, 8, 6, 3)
        expect_close(got, repeated, f"H=8, G={G}, causal={causal} vs repeat_interleave", atol=1e-10,
                     hint="Query head h reads kv head h // (H // G): repeat_interleave, not repeat (which gives h % G).")
        if "enable_gqa" in F.scaled_dot_product_attention.__doc__:
            expect_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                         f"H=8, G={G}, causal={causal} vs torch's enable_gqa=True", atol=1e-10,
                         hint="Query head h reads kv head h // (H // G), as in torch's enable_gqa.")

# %% nbgrader={"grade": true, "grade_id": "test_grouped_query_attention_hidden", "points": 3}
# Hidden tests: fresh batch sizes, H and G (G = H, G = 1 and in between), T_q != T_k, d_k != d_v,
# causal and not, float32 and float64.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab06_chunked_attention import hidden
hidden.check_grouped_query_attention(grouped_query_attention)
### END HIDDEN TESTS

# %% [markdown]
# What grouping saves, at the shape of a real model: **Llama-2-70B** (Touvron et al., 2023; its
# published configuration: 80 layers, 64 query heads of width 128, 8 key/value heads, d_model =
# 8,192, a 4,096-token context, released as 16-bit weights). It was trained with G = 8; the cell
# compares that with the same model as plain multi-head (G = 64) and as multi-query (G = 1)
# attention. Its weights alone take about 140 GB in 16 bits.

# %% nbgrader={"grade_id": "gqa_cache_table", "locked": true}
LLAMA2_70B = dict(n_layers=80, d_head=128, T=4096)
for name, n_kv in [("MHA, G = 64", 64), ("GQA, G = 8 (as released)", 8), ("MQA, G = 1", 1)]:
    per_token = kv_cache_bytes(LLAMA2_70B["n_layers"], n_kv, LLAMA2_70B["d_head"], 1)
    per_seq = kv_cache_bytes(n_kv_heads=n_kv, **LLAMA2_70B)
    batch32 = kv_cache_bytes(n_kv_heads=n_kv, batch=32, **LLAMA2_70B)
    print(f"{name:26s}: {per_token / 2**10:7,.0f} KiB per token, {per_seq / 1e9:6.2f} GB per 4,096-token sequence, "
          f"{batch32 / 1e9:7.1f} GB for a batch of 32")

# %% [markdown]
# ## 9. Written answer (graded by a TA)
#
# In five to eight sentences, using **your** measurements above: (a) how did the peak memory of
# naive and chunked attention grow with T, what ratio did you measure at T = 4,096, and what
# would the full matrix cost for the chapter's B = 8, H = 32, T = 4,096 layer? (b) How did the
# time per generated token grow with T with and without the KV cache, in your measurement, and
# why; what does the cache cost per token, and what does grouped-query attention change for
# Llama-2-70B? (c) What does the forward pass have to save for your backward pass, and why is that enough?

# %% [markdown] nbgrader={"grade": true, "grade_id": "written_measurements", "points": 3, "solution": true}
# ### BEGIN SOLUTION
# (a) Naive attention's peak grew 4x per doubling of T (it holds the T x T scores and the T x T
# weights: 129 MiB at T = 4,096 in float32), while chunked attention grew well under 2x: a few
# 256 x 256 tiles plus the (T, 64) output, 1.9 MiB at T = 4,096. The measured ratio there was
# about 68x, and it doubles with every further doubling of T (176x at 8,192). The chapter's
# B = 8, H = 32, T = 4,096 layer would need 8.6 GB in bf16 for one copy of the full matrix.
# (b) Without the cache every step recomputes q, k, v for all T tokens and the whole T x T causal
# attention, so its time per token grew by about x256 from T = 64 to 1,024 on the machine this was
# checked on (0.4 ms to 64-98 ms, one layer, d_model = 256, one thread), about x4 per doubling once
# the T^2 d_model attention outweighs the T d_model^2 projections. With the cache a step projects
# one token and scores one query against T cached keys (T d_model work, plus copying the cache,
# which torch.cat does at every step), so its time grew by x17 at most over the same range (0.06
# to 1 ms, nearly flat at first while the fixed cost of a few torch calls dominates): about
# 100x faster at T = 1,024, with exactly the same logits. The price is memory: 2 n_layers n_kv_heads d_head
# entries per token, 2,048 bytes for the float32 timing layer (measured and by the formula),
# 512 KiB for Llama-2-7B in 16 bits (2 GiB per 4,096-token sequence). Llama-2-70B's 8 kv heads
# for 64 query heads cut its cache 8x, from 2.5 MiB to 320 KiB per token (10.7 GB to 1.34 GB per
# 4,096-token sequence; 0.17 GB as multi-query).
# (c) Only out and lse (one number per query row, T per head rather than T^2): lse rebuilds any
# block of weights exactly as exp(S - lse), and D = rowsum(dout * out) replaces rowsum(dA * A),
# so the backward never needs the stored matrix; the price is recomputing S block by block.
#
# **Rubric (TA only):** 1 point: (a) quotes their own growth factors (about 4x vs at most 2x)
# and ratio, and gives the chapter's 8.6 GB. 1 point: (b) quotes their own per-token times or
# growth factors with and without the cache (any numbers are right if they are the ones measured;
# do not require exactly 4x or 2x), explains the T^2 (recompute everything) against T (one query
# row against the cache) work, and gives the cache's bytes per token (2 n_layers n_kv_heads d_head
# entries) and the 8x saving of Llama-2-70B's GQA (1.34 GB against 10.7 GB per sequence).
# 1 point: (c) out and lse (T numbers), A = exp(S - lse),
# D = rowsum(dout * out).
# ### END SOLUTION

# %% [markdown]
# ## 10. Extension (ungraded): chunked attention against the clock
#
# Nothing in this section carries points: it is for a student with time left, and its check only
# tells you whether your two numbers are computed from your own measurement.
#
# Chunking saves memory, but on a CPU with a Python loop it costs interpreter time per tile.
# The cell below times naive attention, PyTorch's fused `scaled_dot_product_attention` (a C++
# kernel that also never stores the matrix) and your `chunked_attention` for chunk sizes from 32
# to T at T = 1,024, d = 64: each after a warm-up run, the fastest of 10 runs (5 for chunked).
# To compare like with like, the naive baseline timed here returns the output only, as SDPA
# does (`naive_attention` above also computes a log-sum-exp, one more pass over the T x T
# scores). With `chunk_size = T` there is a single tile: the naive computation plus the
# bookkeeping.
#
# Do not expect a fixed winner. Which of the three is fastest depends on the CPU, its caches,
# the number of threads and what else the machine is doing; on a CPU, PyTorch's fused kernel is
# not always the fastest. Eight repeats of this cell in one kernel (one thread, on the 2-core
# machine this lab was checked on, with other work running) gave medians of 9.0 ms for naive
# attention, 9.4 ms for SDPA and 7.9 ms for chunked attention at c = 128, the fastest chunk size
# in 7 of the 8 repeats (naive with its log-sum-exp took 12 ms). There SDPA was no faster than
# naive attention, and chunked attention at its best chunk size beat both, most likely because a
# 128 x 128 tile of scores (64 KiB) stays in the CPU's cache while the naive T x T matrix
# (4 MiB) does not. Your numbers are the ones to explain.

# %% nbgrader={"grade_id": "time_results", "locked": true}
T_TIME, CHUNK_SIZES = 1024, [32, 64, 128, 256, 512, 1024]
q, k, v = (torch.randn(T_TIME, 64) for _ in range(3))


def naive_output_only(q, k, v):
    """The naive baseline for timing: the T x T weights, then the output (no log-sum-exp)."""
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v  # (T_q, d_v)


naive_time = best_time(naive_output_only, q, k, v, repeat=10, warmup=1)
sdpa_time = best_time(F.scaled_dot_product_attention, q, k, v, repeat=10, warmup=1)
chunk_times = {c: best_time(chunked_attention, q, k, v, c, repeat=5, warmup=1) for c in CHUNK_SIZES}
print(f"naive {naive_time * 1e3:7.1f} ms   SDPA {sdpa_time * 1e3:7.1f} ms")
for c, t in chunk_times.items():
    print(f"chunked, c = {c:4d}: {t * 1e3:7.1f} ms  ({math.ceil(T_TIME / c) ** 2:5d} tiles)")
ax = curves(CHUNK_SIZES, {"chunked": [t * 1e3 for t in chunk_times.values()],
                          "naive": [naive_time * 1e3] * len(CHUNK_SIZES), "SDPA": [sdpa_time * 1e3] * len(CHUNK_SIZES)},
            xlabel="chunk size", ylabel="time (ms)", title=f"T = {T_TIME}, d = 64, one thread", logx=True, logy=True)
plt.show()

# %% [markdown]
# From your measurement: which chunk size was fastest here, and what was the ratio of chunked
# attention's time at that chunk size to SDPA's time (above 1: chunked was slower than SDPA;
# below 1: faster)? Compute both from the dictionaries above (do not type numbers: they change
# from run to run).

# %% nbgrader={"grade_id": "timing_answers", "solution": true}
### BEGIN SOLUTION
fastest_chunk = min(chunk_times, key=chunk_times.get)
slowdown_vs_sdpa = chunk_times[fastest_chunk] / sdpa_time
### END SOLUTION
print(f"fastest chunk size here: {fastest_chunk}; {slowdown_vs_sdpa:.1f}x the time of SDPA")

# %% nbgrader={"grade_id": "timing_self_check", "locked": true}
# Self-check (no points).
expect(fastest_chunk == min(chunk_times, key=chunk_times.get), "fastest_chunk", f"{fastest_chunk}",
       "Take the chunk size with the smallest measured time in chunk_times.")
expect(abs(slowdown_vs_sdpa - chunk_times[fastest_chunk] / sdpa_time) < 1e-6 * slowdown_vs_sdpa,
       "slowdown_vs_sdpa", f"{slowdown_vs_sdpa:.3g}", "Divide the fastest chunked time by SDPA's time.")

# %% [markdown]
# ## 11. Extension (ungraded): memory traffic, fusion, and which attention to use
#
# No points here either. Why does it pay to avoid the T × T matrix even when the arithmetic stays
# the same? Because moving bytes between main memory and the processor is often slower than the
# arithmetic done on them. A GPU has a few tens of GB of high-bandwidth memory (HBM, on the order
# of 1–3 TB/s) and a few tens of MB of on-chip SRAM that is several times faster; a CPU has its
# DRAM and its caches (L1, L2, L3). FlashAttention's point is to keep each tile in the fast
# memory and write only the output and the log-sum-exp back to the slow one.
#
# A kernel's **arithmetic intensity** is its FLOPs per byte moved to and from main memory. A
# machine's **ridge point** is its peak FLOP/s divided by its memory bandwidth: below it a kernel
# is memory-bound (faster memory traffic would speed it up, faster arithmetic would not), above
# it compute-bound. The cell measures both numbers of this CPU on one thread (the bandwidth from
# copying 64 MiB into a buffer allocated beforehand, the arithmetic from a 512 × 512 matrix product) and computes the
# intensity of each pass of naive attention at T = 2,048, d = 64, float32.

# %% nbgrader={"grade_id": "io_awareness", "locked": true}
x_big = torch.randn(16 * 2**20)  # (16 Mi,) float32: 64 MiB, more than a typical CPU's caches
x_dst = torch.empty_like(x_big)  # allocated (and touched) once, so the copy times memory traffic, not page faults
copy_seconds = best_time(x_dst.copy_, x_big, repeat=5, warmup=1)
bandwidth = 2 * x_big.numel() * 4 / copy_seconds  # bytes read + bytes written per second
a_mm = torch.randn(512, 512)  # (512, 512)
flop_rate = 2 * 512**3 / best_time(torch.mm, a_mm, a_mm, repeat=5, warmup=1)  # FLOP/s
ridge = flop_rate / bandwidth
print(f"this CPU, one thread: {bandwidth / 1e9:.1f} GB/s copying, {flop_rate / 1e9:.1f} GFLOP/s in a matmul: "
      f"ridge point {ridge:.1f} FLOP/byte")
T_io, d_io = 2048, 64
passes = {  # (FLOPs, bytes moved to and from main memory), float32
    "S = Q K^T / sqrt(d)": (2 * T_io**2 * d_io, 4 * (2 * T_io * d_io + T_io**2)),
    "A = softmax(S)": (5 * T_io**2, 4 * 2 * T_io**2),  # max, subtract, exp, sum, divide; read S, write A
    "Y = A V": (2 * T_io**2 * d_io, 4 * (T_io**2 + 2 * T_io * d_io)),
}
for name, (flop, moved) in passes.items():
    side = "memory-bound" if flop / moved < ridge else "compute-bound"
    print(f"{name:20s}: {flop / moved:5.1f} FLOP/byte -> {side} here")

# %% [markdown]
# By its FLOP count the softmax pass is far below the ridge point of any current machine: on a GPU
# it is memory traffic. On one CPU thread an exp costs the time of many FLOPs, so compare the fused
# softmax's time with the time of reading and writing the matrix once at the bandwidth you
# measured (both are printed below): the gap is the exp arithmetic. Written as separate operations
# (a max, a subtraction, an exp, a sum, a division), each operation is its own kernel that reads
# the whole T × T matrix again and most write a new one; PyTorch's `torch.softmax` is one
# **fused** kernel that reads it and writes the result. The cell times both on a
# 2,048 × 2,048 float32 matrix (16 MiB). FlashAttention fuses further: the matmuls, the mask, the
# softmax and the weighting of the values in one kernel per tile, so S and A never reach main
# memory at all. Your ratio is printed: above 1, the fused kernel saved memory passes; near 1 or
# below, this CPU's caches or its kernels hid the difference (then say so, with your numbers).

# %% nbgrader={"grade_id": "fusion_measured", "locked": true}
S_io = torch.randn(T_io, T_io)  # (T, T) float32 scores


def softmax_unfused(s):
    """Softmax as five separate passes over the (T, T) matrix."""
    row_max = s.max(dim=-1, keepdim=True).values  # (T, 1)
    e = torch.exp(s - row_max)  # (T, T): a subtraction pass, then an exp pass
    return e / e.sum(dim=-1, keepdim=True)  # (T, T): a sum pass, then a division pass


fused_seconds = best_time(torch.softmax, S_io, -1, repeat=5, warmup=1)
unfused_seconds = best_time(softmax_unfused, S_io, repeat=5, warmup=1)
print(f"softmax of a {T_io} x {T_io} float32 matrix: fused {fused_seconds * 1e3:.1f} ms, five separate passes "
      f"{unfused_seconds * 1e3:.1f} ms (x{unfused_seconds / fused_seconds:.2f})")
print(f"reading and writing the matrix once at the copy's {bandwidth / 1e9:.1f} GB/s would take "
      f"{2 * S_io.numel() * 4 / bandwidth * 1e3:.1f} ms (both softmaxes also allocate their results, which costs time too)")

# %% [markdown]
# **Which attention, when.** A summary of this lab and the chapter's table:
#
# | situation | choice | why |
# |---|---|---|
# | learning, an interview, debugging a mask | explicit attention (`naive_attention`) | every shape and the mask are visible |
# | training or a prompt's prefill, T up to a few thousand | `F.scaled_dot_product_attention` | exact, fused, dispatches to the best kernel of the device; no code to maintain |
# | long T, where the T × T matrix no longer fits | FlashAttention (SDPA's flash backend on a GPU), or tiles as in section 4 | exact, memory O(T) instead of O(T²), and fewer trips to main memory |
# | generating tokens one at a time | decoding with a KV cache (section 7), with grouped-query or multi-query heads (section 8) | per-token work O(T) instead of O(T²); then the cache, not the matrix, is the memory, and GQA shrinks it by H / G |
# | T in the hundreds of thousands | sparse, sliding-window or linear attention | exact attention stays quadratic in compute; these change what is computed (an approximation, or a different model) |
