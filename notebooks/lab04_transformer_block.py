# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 4 — The transformer block
#
# Attention for one head fits on a napkin. A transformer layer is more: several heads side by
# side, positions added to the tokens, residual connections, LayerNorm and a feed-forward
# network. This lab builds all of it in PyTorch, proves its properties with tests, derives the
# backward pass by hand in NumPy, and counts what it costs.
#
# You will:
# 1. split a (B, T, d_model) tensor into heads and merge it back, and see why the obvious
#    `view` is silently wrong;
# 2. write `MultiHeadAttention` and load the weights of `torch.nn.MultiheadAttention` into it
#    so both give the same numbers, for self- and cross-attention, with and without masks;
# 3. write the paper's sinusoidal positions, then rotary positions (RoPE) in both layouts in use,
#    test that a RoPE score depends only on the offset m − n, compare with the sinusoids and
#    ALiBi, and rotate one new token during cached decoding;
# 4. assemble a `TransformerBlock` and test it on six tokens: shapes, normalised
#    rows, permutations, the causal mask; then remove the residual and describe what changes;
# 5. write attention's forward **and backward** pass in NumPy and check it against autograd;
# 6. count FLOPs (memory is lab 6's); an ungraded extension finds where the n × n part of a
#    full layer starts to dominate;
# 7. (extension) measure why several heads beat one wide head, the rank of a head's scores,
#    dropout, path length, a fused QKV projection, and other position schemes.
#
# **Time.** About 2.5 hours for a student who has done the lesson: 50 minutes for sections 1–2,
# 35 for section 3 (15 of them sinusoids, 20 RoPE), 30 for section 4, 35 for section 5 and 10 for
# section 6. Two extensions follow: the first takes about 15 minutes and carries no points, the
# second about 30 minutes and carries 3 of the lab's points (skip both if you are short of time).
#
# **Conventions of this lab** (every cell relies on them):
# - a batch of token rows is (B, T, d_model); heads are (B, H, T, d_head) with
#   d_head = d_model / H; head h owns channels [h·d_head, (h+1)·d_head) of every token;
# - **a mask is True where attention is allowed**, broadcastable to the scores
#   (B, H, T_q, T_k). `torch.nn.MultiheadAttention` uses the opposite convention;
# - a matmul (m, k) @ (k, n) costs 2·m·k·n FLOPs (one multiply and one add per term);
# - RoPE's layout is always named: `"interleaved"` pairs channels (2i, 2i + 1), `"half"` pairs
#   (i, i + d/2).
#
# **Grading.** Cells with points are graded. Visible tests run as you go; hidden tests run when
# your notebook is graded, on fresh random inputs of other shapes. A failing test names the
# likely misconception. The written answer in section 4 is graded by a TA.

# %% [markdown]
# ## Setup
# Run this cell first.

# %% nbgrader={"grade_id": "setup", "locked": true}
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

from mlbook_helpers.checks import expect, expect_close, expect_rows_sum_to_one, expect_shape
from mlbook_helpers.examples import chapter_qkv
from mlbook_helpers.plotting import attention_heatmap, curves, heatmap_grid
from mlbook_helpers.transformer_block import head_owner_maps, output_statistics, toy_embeddings

torch.set_printoptions(precision=4, sci_mode=False)
np.set_printoptions(precision=4, suppress=True)
torch.manual_seed(0)

# %% [markdown]
# ## 1. Splitting the width into heads
#
# One `nn.Linear(d_model, d_model)` computes the queries of all heads at once: its output
# columns are already grouped by head, because W_Q is the side-by-side concatenation of the
# per-head W_Q^(h). To run the heads as a batch of independent attentions, each token's
# d_model channels are cut into H blocks of d_head and the head axis is moved next to the
# batch axis:
#
# (B, T, d_model) → view → (B, T, H, d_head) → transpose(1, 2) → (B, H, T, d_head)
#
# `merge_heads` undoes it. Both shapes in the middle matter. The picture below (it needs none
# of your code) shows where each entry of one (T, d_model) sequence should go, coloured by head,
# next to what a single `view(B, H, T, d_head)` does: the shapes match, but head 0 receives the
# first half of the *tokens* instead of the first d_head *channels* of every token.

# %% nbgrader={"grade_id": "heads_picture", "locked": true}
owners = head_owner_maps(T=6, d_model=8, n_heads=2)  # two (T, d_model) maps of head indices
heatmap_grid({f"{name}: head of each entry": m for name, m in owners.items()},
             query_labels=[f"token {t}" for t in range(6)], key_labels=[f"ch {c}" for c in range(8)],
             vmin=0, vmax=1, fmt=".0f", colorbar=False)
plt.show()

# %% [markdown]
# `.view` never moves data: it only reinterprets the strides, which works for the first step
# because a Linear's output is contiguous. After `transpose(1, 2)` the strides are permuted,
# and flattening the last two axes with `.view` has no valid stride interpretation. This cell
# shows the error on an unrelated tensor:

# %% nbgrader={"grade_id": "contiguous_demo", "locked": true}
t = torch.arange(24).reshape(2, 3, 4).transpose(0, 1)  # (3, 2, 4), strides permuted
print("is contiguous:", t.is_contiguous())
try:
    t.view(3, 8)
except RuntimeError as err:
    print("view failed:", str(err)[:80], "...")
print("after .contiguous():", t.contiguous().view(3, 8).shape)

# %% [markdown]
# Write `split_heads` through the intermediate (B, T, H, d_head) shape, and `merge_heads` back
# (transpose, then `.contiguous().view`).

# %% nbgrader={"grade_id": "split_heads", "solution": true}
def split_heads(x, n_heads):
    """Cut each token's channels into heads and move the head axis next to the batch axis.

    Args:
        x: (B, T, d_model) tensor; d_model is divisible by n_heads.
        n_heads: H.

    Returns:
        (B, H, T, d_head) with d_head = d_model // H; [b, h, t] holds
        x[b, t, h * d_head:(h + 1) * d_head].
    """
    ### BEGIN SOLUTION
    B, T, d_model = x.shape
    x = x.view(B, T, n_heads, d_model // n_heads)  # (B, T, H, d_head): no data movement
    return x.transpose(1, 2)  # (B, H, T, d_head)
    ### END SOLUTION


# %% nbgrader={"grade_id": "merge_heads", "solution": true}
def merge_heads(x):
    """Concatenate the heads back into each token's row: the inverse of split_heads.

    Args:
        x: (B, H, T, d_head) tensor, contiguous (attn @ v) or not (a transposed view).

    Returns:
        (B, T, H * d_head); token t's row is [head 0's channels, head 1's, ...].
    """
    ### BEGIN SOLUTION
    B, H, T, d_head = x.shape
    x = x.transpose(1, 2)  # (B, T, H, d_head)
    return x.contiguous().view(B, T, H * d_head)  # (B, T, d_model)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_split_heads", "points": 1}
# Channel c of token t holds the number 100 * t + c, so every entry says where it came from.
labels = (100 * torch.arange(6)[:, None] + torch.arange(8)[None, :]).float()[None]  # (1, 6, 8)
heads = split_heads(labels, 2)
expect_shape(heads, (1, 2, 6, 4), "split_heads of a (1, 6, 8) tensor into 2 heads",
             "Expected (B, H, T, d_head).")
expect(bool(torch.equal(heads[0, 0, 5], labels[0, 5, :4])), "head 0, token 5",
       f"holds {heads[0, 0, 5].tolist()} instead of token 5's channels 0-3",
       "The direct view (B, H, T, d_head) gives head 0 whole tokens: view as (B, T, H, d_head), then transpose.")
expect(bool(torch.equal(heads[0, 1, 0], labels[0, 0, 4:])), "head 1, token 0",
       f"holds {heads[0, 1, 0].tolist()} instead of token 0's channels 4-7",
       "Head h owns a contiguous block of d_head channels of every token.")

# %% nbgrader={"grade": true, "grade_id": "test_merge_heads", "points": 1}
per_head = labels.view(1, 6, 2, 4).permute(0, 2, 1, 3)  # (1, 2, 6, 4): the heads, as a non-contiguous tensor
merged = merge_heads(per_head)
expect_shape(merged, (1, 6, 8), "merge_heads of a (1, 2, 6, 4) tensor", "Expected (B, T, H * d_head).")
expect(bool(torch.equal(merged, labels)), "merge_heads of the labelled heads",
       f"token 1 came back as {merged[0, 1].tolist()}",
       "Merge without the transpose mixes tokens across heads: transpose back to (B, T, H, d_head) first.")
# attn @ v gives the heads contiguous, and after the transpose a flattening .view needs .contiguous() first.
expect(bool(torch.equal(merge_heads(per_head.contiguous()), labels)), "merge_heads of the same heads, contiguous",
       "does not give the labelled tokens back",
       "Transpose, then .contiguous().view(B, T, H * d_head) (or reshape).")

# %% nbgrader={"grade": true, "grade_id": "test_heads_hidden", "points": 2}
# Hidden tests: fresh shapes, a non-contiguous input to merge_heads, and the round trip.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_heads(split_heads, merge_heads)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Multi-head attention
#
# $$\text{MHA}(X_q, X_{kv}) = \text{Concat}(\text{head}_1, \dots, \text{head}_H)\,W^O,\qquad
# \text{head}_h = \text{softmax}\!\left(\frac{Q_h K_h^\top}{\sqrt{d_{head}}}\right) V_h$$
#
# with Q = X_q W^Q, K = X_kv W^K, V = X_kv W^V, split into heads. Each head's dot products have
# d_head terms, so each head scales by √d_head. Self-attention passes the same tensor twice
# (`mha(x, x)`); cross-attention passes queries from one sequence and keys/values from another,
# so T_q ≠ T_k is allowed, and the output always has the **query's** length.
#
# Use four separate `nn.Linear(d_model, d_model, bias=bias)` named `W_q`, `W_k`, `W_v`, `W_o`.
# Masked scores are filled before the softmax; `torch.finfo(scores.dtype).min` is safer than
# `-inf` (a fully masked row gives a uniform row instead of `nan`).
#
# Write the heads and the attention yourself: this cell must not call torch's whole layer
# (`nn.MultiheadAttention`, `F.multi_head_attention_forward`) or `F.scaled_dot_product_attention`,
# and neither may any function, alias or import of yours that it uses, in whichever cell you
# define it and under whatever name. The grader follows those names through the notebook and
# flags a cell that reaches one of these calls for your TA, who decides what it earns.

# %% nbgrader={"grade_id": "MultiHeadAttention", "solution": true}
class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention: self-attention when x_kv is x_q, cross otherwise."""

    def __init__(self, d_model, n_heads, bias=True):
        """Args:
            d_model: model width, divisible by n_heads.
            n_heads: H; each head has width d_head = d_model // H.
            bias: whether the four projections have biases.
        """
        super().__init__()
        ### BEGIN SOLUTION
        if d_model % n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)  # all heads' W_Q side by side
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)  # mixes the concatenated heads
        ### END SOLUTION

    def forward(self, x_q, x_kv, mask=None):
        """Args:
            x_q: (B, T_q, d_model) the sequence that asks.
            x_kv: (B, T_k, d_model) the sequence that is read (x_q itself for self-attention).
            mask: None, or bool of shape (T_q, T_k), (B, 1, T_q, T_k) or (B, H, T_q, T_k) (any shape
                that broadcasts to the scores), True where attention is allowed; each head and batch
                row uses its own slice of the mask, and only size-1 dimensions are shared.

        Returns:
            out: (B, T_q, d_model), and attn: (B, H, T_q, T_k) the weights of every head.
        """
        ### BEGIN SOLUTION
        q = split_heads(self.W_q(x_q), self.n_heads)  # (B, H, T_q, d_head)
        k = split_heads(self.W_k(x_kv), self.n_heads)  # (B, H, T_k, d_head)
        v = split_heads(self.W_v(x_kv), self.n_heads)  # (B, H, T_k, d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T_q, T_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (B, H, T_q, T_k)
        attn = scores.softmax(dim=-1)  # (B, H, T_q, T_k), rows sum to 1 over keys
        out = merge_heads(attn @ v)  # (B, H, T_q, d_head) -> (B, T_q, d_model)
        return self.W_o(out), attn
        ### END SOLUTION


# %% [markdown]
# `torch.nn.MultiheadAttention` keeps W^Q, W^K and W^V packed in one parameter,
# `in_proj_weight` of shape (3·d_model, d_model): its rows are [W_q; W_k; W_v], each block in
# `nn.Linear`'s (out, in) layout; `in_proj_bias` is packed the same way; the output projection is
# `out_proj`. With `bias=False` the biases are `None`. Copy them into your module.

# %% nbgrader={"grade_id": "load_from_torch", "solution": true}
def load_from_torch(mha, torch_mha):
    """Copy the weights of a torch.nn.MultiheadAttention into your MultiHeadAttention.

    Args:
        mha: your MultiHeadAttention(d_model, n_heads, bias).
        torch_mha: torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True).

    Returns:
        mha, with its parameters overwritten in place.
    """
    ### BEGIN SOLUTION
    d = torch_mha.embed_dim
    with torch.no_grad():
        for i, lin in enumerate((mha.W_q, mha.W_k, mha.W_v)):
            lin.weight.copy_(torch_mha.in_proj_weight[i * d:(i + 1) * d])  # (d, d) block i of (3d, d)
            if lin.bias is not None:
                lin.bias.copy_(torch_mha.in_proj_bias[i * d:(i + 1) * d])  # (d,)
        mha.W_o.weight.copy_(torch_mha.out_proj.weight)  # (d, d)
        if mha.W_o.bias is not None:
            mha.W_o.bias.copy_(torch_mha.out_proj.bias)  # (d,)
    return mha
    ### END SOLUTION


# %% [markdown]
# The tests compare with PyTorch's own layer. Its masks say the opposite of ours: its
# `key_padding_mask` and boolean `attn_mask` are True where attention is **blocked**, so our
# mask is `~` theirs. `average_attn_weights=False` returns one map per head.

# %% nbgrader={"grade": true, "grade_id": "test_mha_shapes", "points": 1}
torch.manual_seed(1)
mha = MultiHeadAttention(8, 2)
x_dec, x_enc = torch.randn(3, 5, 8), torch.randn(3, 7, 8)  # (B, T_q, d), (B, T_k, d)
with torch.no_grad():
    out_self, attn_self = mha(x_dec, x_dec)
    out_cross, attn_cross = mha(x_dec, x_enc)
expect_shape(out_self, (3, 5, 8), "self-attention output", "Expected (B, T_q, d_model).")
expect_shape(attn_self, (3, 2, 5, 5), "self-attention weights", "Expected (B, H, T_q, T_k): one map per head.")
expect_shape(out_cross, (3, 5, 8), "cross-attention output (T_q = 5, T_k = 7)",
             "The output has the query's length, whatever the keys' length.")
expect_shape(attn_cross, (3, 2, 5, 7), "cross-attention weights", "Expected (B, H, T_q, T_k).")
expect_rows_sum_to_one(attn_cross, "cross-attention weights", "Softmax over the keys, dim=-1.", atol=1e-5)

# %% nbgrader={"grade": true, "grade_id": "test_mha_matches_torch", "points": 2}
torch.manual_seed(2)
torch_mha = nn.MultiheadAttention(8, 2, batch_first=True)
mine = load_from_torch(MultiHeadAttention(8, 2), torch_mha)
x = torch.randn(2, 6, 8)  # (B, T, d_model)
causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))  # (T, T), True = allowed
with torch.no_grad():
    ref, ref_w = torch_mha(x, x, x, need_weights=True, average_attn_weights=False)
    got, got_w = mine(x, x)
    ref_c, _ = torch_mha(x, x, x, attn_mask=~causal, need_weights=True)  # torch: True = blocked
    got_c, got_cw = mine(x, x, causal[None, None])
expect_close(got_w, ref_w, "your weights vs torch's (no mask)", atol=1e-5,
             hint="Is each head scaled by sqrt(d_head) (not sqrt(d_model)), the packed in_proj_weight "
                  "copied as [W_q; W_k; W_v] without transposing, in_proj_bias copied the same way, and do "
                  "the section 1 tests pass?")
expect_close(got, ref, "your output vs torch.nn.MultiheadAttention (no mask)", atol=1e-5,
             hint="The weights agree, so look after them: merge the heads, then apply W_o and its bias.")
expect(float(got_cw[..., ~causal].abs().max()) < 1e-6, "weights with the causal mask",
       "future keys receive weight",
       "The mask is True where attention is ALLOWED: fill the scores where it is False, with "
       "torch.finfo(scores.dtype).min or -inf (a fill of 0 still gives those keys weight).")
expect_close(got_c, ref_c, "your output vs torch with a causal mask", atol=1e-5,
             hint="Fill disallowed scores before the softmax.")

# %% nbgrader={"grade": true, "grade_id": "test_mha_params", "points": 1}
# Heads split the width; they do not multiply the weights: 4 d_model^2 without biases, for any H.
counts = {H: sum(p.numel() for p in MultiHeadAttention(512, H, bias=False).parameters()) for H in (1, 2, 4, 8)}
print("parameters by number of heads:", counts)
for H, n in counts.items():
    expect(n == 4 * 512**2, f"parameters of MultiHeadAttention(512, {H}, bias=False)",
           f"{n:,} instead of 4 * 512^2 = {4 * 512**2:,}",
           "Q, K, V and O are each (d_model, d_model), whatever the number of heads.")

# %% nbgrader={"grade": true, "grade_id": "test_mha_hidden", "points": 4}
# Hidden tests against torch.nn.MultiheadAttention on fresh shapes and weights (float32; outputs
# within atol 1e-5 + rtol 1e-4, weights within atol 1e-5): no mask, causal, key padding,
# cross-attention with T_q != T_k (with and without padding), bias=False.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_mha(MultiHeadAttention, load_from_torch, split_heads, merge_heads)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Positions
#
# Self-attention never reads i or j as numbers: permute the tokens and the outputs are only
# permuted (you will test this in section 4). Order must enter through the token vectors. The
# paper adds fixed sinusoids of geometrically spaced frequencies:
#
# $$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right),\qquad
# PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right)$$
#
# Pair i shares one angle: sin on the even dimension 2i, cos on the odd dimension 2i + 1. Low i
# varies fast with the position, high i slowly.

# %% nbgrader={"grade_id": "sinusoidal_positions", "solution": true}
def sinusoidal_positions(T, d_model):
    """The paper's sinusoidal position codes.

    Args:
        T: number of positions 0..T-1.
        d_model: even width.

    Returns:
        (T, d_model) float64 NumPy array: sin on even dimensions, cos on odd ones.
    """
    ### BEGIN SOLUTION
    pos = np.arange(T)[:, None]  # (T, 1)
    pair = np.arange(d_model // 2)[None, :]  # (1, d_model / 2)
    angle = pos / 10000 ** (2 * pair / d_model)  # (T, d_model / 2)
    pe = np.zeros((T, d_model))  # (T, d_model)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sinusoidal", "points": 1}
pe = np.asarray(sinusoidal_positions(64, 16), dtype=float)
expect_shape(pe, (64, 16), "sinusoidal_positions(64, 16)", "One row per position, d_model columns.")
expect(abs(pe[0, 0]) < 1e-12 and abs(pe[0, 1] - 1) < 1e-12, "position 0",
       f"starts with {pe[0, :2].round(4).tolist()} instead of [sin 0, cos 0] = [0, 1]",
       "sin and cos swapped? Even dimensions (2i) carry sin, odd ones (2i + 1) cos.")
expect_close(pe[1, :4], [math.sin(1), math.cos(1), math.sin(10000 ** -0.125), math.cos(10000 ** -0.125)],
             "position 1, dimensions 0-3", atol=1e-9,
             hint="Dimensions 2i and 2i + 1 share the angle pos / 10000^(2i / d_model), with i the pair index.")
# The similarity of two positions depends only on their offset k, not on where you start.
for k in (1, 5, 12):
    sims = [pe[p] @ pe[p + k] for p in (0, 25, 40)]
    expect(max(sims) - min(sims) < 1e-12, f"PE(p) . PE(p + {k}) for p = 0, 25, 40",
           f"is {np.round(sims, 6).tolist()}", "Each pair (sin a, cos a) must use the same angle a.")

# %% nbgrader={"grade": true, "grade_id": "test_sinusoidal_hidden", "points": 2}
# Hidden tests: fresh lengths and widths, to 1e-9.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_sinusoidal(sinusoidal_positions)
### END HIDDEN TESTS

# %% [markdown]
# The cosine similarity of every pair of positions: a band along the diagonal that looks the
# same wherever you start on it.

# %% nbgrader={"grade_id": "positions_picture", "locked": true}
pe = np.asarray(sinusoidal_positions(64, 16), dtype=float)  # (64, 16): your table, whatever the test said
unit = pe / np.linalg.norm(pe, axis=-1, keepdims=True)  # (64, 16) unit rows
attention_heatmap(unit @ unit.T, vmin=None, vmax=None, annotate=False, cmap="magma",
                  title="cos(PE(p), PE(q)), d_model = 16").set(xlabel="position q", ylabel="position p")
plt.show()

# %% [markdown]
# ### Rotary positions (RoPE)
#
# Most current open models (Llama, Mistral, Qwen, ...) add nothing to the token vectors.
# **Rotary position embeddings** (Su et al., RoFormer, 2021) instead *rotate* every query and key
# inside each head, by an angle that grows with the token's position. The channels of a head
# (width d = d_head, even) are cut into d/2 pairs; pair i of the vector at position p turns by
# the angle p·θᵢ, with the same frequencies as the sinusoids above:
#
# $$\theta_i = \text{base}^{-2i/d},\quad \text{base} = 10000,\qquad
# \begin{pmatrix} y_1 \\ y_2 \end{pmatrix} =
# \begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\ \sin p\theta_i & \cos p\theta_i \end{pmatrix}
# \begin{pmatrix} x_1 \\ x_2 \end{pmatrix}$$
#
# A rotation keeps lengths, and two rotations of the same plane compose by adding angles. So
# the score of a query at position m with a key at position n is
# (R_m q)·(R_n k) = q·(R_{n−m} k): **it depends on the positions only through n − m**. Values
# are not rotated, and nothing is added to x.
#
# **Which channels form a pair** is where implementations differ, and both layouts are in use:
#
# | layout | pair i is channels | used by |
# |---|---|---|
# | `"interleaved"` | (2i, 2i + 1) | the RoFormer paper; Meta's original Llama (`apply_rotary_emb` in `llama/model.py`, as complex numbers) |
# | `"half"` | (i, i + d/2) | Hugging Face transformers (`rotate_half` and `apply_rotary_pos_emb` in `modeling_llama.py`), GPT-NeoX |
#
# They are the same rotation with the channels listed in another order: permuting the
# channels as perm = (0, 2, 4, ..., 1, 3, 5, ...) maps the interleaved layout onto the
# half-split one, which is how Llama checkpoints are converted between the two codebases (the
# rows of W_Q and W_K are permuted). A checkpoint read in the wrong layout runs without any
# error and computes garbage, so a function must say which layout it means.
#
# Write `apply_rope` for **both layouts** (they differ only in which channels you pair up and
# how you put the pairs back: a line or two each). The angle is `positions[t] * theta_i`, where
# `positions` holds the *absolute* position of each row: `torch.arange(T)` for a whole
# sequence, or `torch.tensor([p])` for a single new token at position p during cached decoding.
# **dtypes:** compute theta_i and the angles in float64, whatever x's dtype, then cast cos and sin
# to x's dtype: the result has x's dtype (float32 in, float32 out). Float32 angles are *not*
# accepted: at positions of a few thousand they are off by about 1e-4 radians, and the grader
# compares a float32 input at such positions within 1e-5 (float64 angles are off by < 1e-6 there).

# %% nbgrader={"grade_id": "apply_rope", "solution": true}
def apply_rope(x, positions, layout="interleaved", base=10000.0):
    """Rotate each channel pair of x by the angle positions[t] * base^(-2i/d).

    Args:
        x: (..., T, d) float tensor, d even: queries or keys of one or more heads, e.g. (B, H, T, d_head).
        positions: (T,) integer tensor: the absolute position of each of the T rows.
        layout: "interleaved" (pair i is channels 2i, 2i + 1) or "half" (pair i is channels i, i + d/2).
        base: the frequency base (10000 in the paper and in Llama 1 and 2).

    Returns:
        (..., T, d) tensor of x's dtype: the rotated vectors, channels in the same layout.
    """
    ### BEGIN SOLUTION
    if layout not in ("interleaved", "half"):
        raise ValueError(f"layout must be 'interleaved' or 'half', not {layout!r}")
    d = x.shape[-1]
    pair = torch.arange(d // 2, dtype=torch.float64)  # (d/2,) pair index i
    theta = base ** (-2 * pair / d)  # (d/2,) frequencies theta_i
    angle = torch.as_tensor(positions, dtype=torch.float64)[:, None] * theta  # (T, d/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)  # (T, d/2) each
    if layout == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each: pair i = channels (2i, 2i + 1)
    else:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]  # (..., T, d/2) each: pair i = channels (i, i + d/2)
    y1 = x1 * cos - x2 * sin  # (..., T, d/2)
    y2 = x1 * sin + x2 * cos  # (..., T, d/2)
    if layout == "interleaved":
        return torch.stack([y1, y2], dim=-1).flatten(-2)  # (..., T, d/2, 2) -> (..., T, d)
    return torch.cat([y1, y2], dim=-1)  # (..., T, d)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_apply_rope", "points": 1}
# Hand-sized: d = 4, unit vectors at position 1. Pair 0 turns by 1 radian, pair 1 by 10000^(-2/4) = 0.01.
eye4 = torch.eye(4, dtype=torch.float64)  # (4, 4): row c is the unit vector of channel c
at1 = torch.tensor([1])  # (1,): one row at position 1
c1, s1, c01, s01 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
expect_close(apply_rope(eye4[:1], at1, "interleaved"), [[c1, s1, 0, 0]], "apply_rope(e_0, [1], 'interleaved')",
             atol=1e-12, hint="Interleaved: channel 0 pairs with channel 1 and turns to (cos 1, sin 1). "
                              "(cos 1, 0, sin 1, 0) is the half-split layout; (sin 1, cos 1, ...) swaps sin and cos.")
expect_close(apply_rope(eye4[:1], at1, "half"), [[c1, 0, s1, 0]], "apply_rope(e_0, [1], 'half')", atol=1e-12,
             hint="Half-split: channel i pairs with channel i + d/2, so e_0 turns into channels 0 and 2.")
expect_close(apply_rope(eye4[2:3], at1, "interleaved"), [[0, 0, c01, s01]], "apply_rope(e_2, [1], 'interleaved')",
             atol=1e-12, hint="Pair 1 turns by theta_1 = 10000^(-2 * 1 / 4) = 0.01 radians; "
                              "10000^(-1/4) = 0.1 would be the exponent i / d instead of 2i / d.")

# %% [markdown]
# The properties that make RoPE a *relative* position code, in float64 on random vectors: the
# identity at position 0, lengths kept, every score unchanged when both positions move by the
# same amount, the permutation between the layouts, and one token at position p rotated alone
# exactly as it is inside the whole sequence (what cached decoding relies on).

# %% nbgrader={"grade": true, "grade_id": "test_rope_properties", "points": 2}
g = torch.Generator().manual_seed(22)
q16 = torch.randn(2, 16, 8, generator=g, dtype=torch.float64)  # (H = 2, T = 16, d = 8) queries
k16 = torch.randn(2, 16, 8, generator=g, dtype=torch.float64)  # (2, 16, 8) keys
pos16 = torch.arange(16)  # (16,)
for layout in ("interleaved", "half"):
    expect_close(apply_rope(q16, torch.zeros(16, dtype=torch.long), layout), q16,
                 f"{layout}: every row at position 0", atol=1e-12, hint="Angle 0 leaves x unchanged; rows that move mean the angles come from the row index "
                      "(torch.arange(T)) instead of the positions argument.")
    expect_close(apply_rope(q16, pos16, layout).norm(dim=-1), q16.norm(dim=-1), f"{layout}: lengths of the rows",
                 atol=1e-10, hint="A rotation keeps lengths: each pair needs (x1 cos - x2 sin, x1 sin + x2 cos).")
    base_scores = apply_rope(q16, pos16, layout) @ apply_rope(k16, pos16, layout).transpose(-2, -1)  # (2, 16, 16)
    for shift in (3, 100, 1000):
        shifted = apply_rope(q16, pos16 + shift, layout) @ apply_rope(k16, pos16 + shift, layout).transpose(-2, -1)
        expect_close(shifted, base_scores, f"{layout}: all scores with both positions moved by {shift}", atol=1e-9,
                     hint="(R_m q).(R_n k) depends only on n - m when both use the same angles p * theta_i; near "
                          "position 1000, angles computed in float32 are off by about 1e-4: compute them in float64.")
perm8 = torch.cat([torch.arange(0, 8, 2), torch.arange(1, 8, 2)])  # (8,): (0, 2, 4, 6, 1, 3, 5, 7)
expect_close(apply_rope(q16[..., perm8], pos16, "half"), apply_rope(q16, pos16, "interleaved")[..., perm8],
             "half-split RoPE of the permuted channels vs interleaved RoPE, permuted", atol=1e-12,
             hint="Channel 2i (interleaved) is channel i (half), channel 2i + 1 is channel i + d/2: do both layouts "
                  "use theta_i for pair i?")
expect_close(apply_rope(q16[:, 9:10], torch.tensor([9]), "half"), apply_rope(q16, pos16, "half")[:, 9:10],
             "row 9 rotated alone at position 9 vs inside the sequence", atol=1e-12,
             hint="The angle must come from positions, not from the row's index in x (torch.arange(T)).")

# %% nbgrader={"grade": true, "grade_id": "test_apply_rope_hidden", "points": 3}
# Hidden tests: fresh shapes (..., T, d), both layouts, unsorted large positions, another base,
# float32 and float64, against the grader's own rotation.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_apply_rope(apply_rope)
### END HIDDEN TESTS

# %% [markdown]
# **Three ways to put positions into a score**, measured. One query and one key vector
# (content, d = 16) sit at positions m and n; the cell prints the score for (m, n) = (5, 2) and
# for both positions moved by s. Sinusoidal: the codes are added to the vectors, and the score
# is (q + PE_m)·(k + PE_n). RoPE: (R_m q)·(R_n k). ALiBi (Press et al., 2022) adds nothing
# to the vectors: it subtracts slope·(m − n) from the score of a query m for a key n ≤ m
# (one fixed slope per head; 1/2 here).

# %% nbgrader={"grade_id": "positions_compared", "locked": true}
g = torch.Generator().manual_seed(3)
q_c, k_c = torch.randn(2, 16, generator=g, dtype=torch.float64)  # (16,) each: one query, one key
pe_c = torch.as_tensor(np.asarray(sinusoidal_positions(1100, 16)), dtype=torch.float64)  # (1100, 16)
scorers = {
    "sinusoidal (added)": lambda m, n: float((q_c + pe_c[m]) @ (k_c + pe_c[n])),
    "RoPE, half-split": lambda m, n: float(apply_rope(q_c[None], torch.tensor([m]), "half")[0]
                                           @ apply_rope(k_c[None], torch.tensor([n]), "half")[0]),
    "ALiBi, slope 1/2": lambda m, n: float(q_c @ k_c) - 0.5 * (m - n),
}
shifts = (0, 10, 100, 1000)
print(f"{'score of (5 + s, 2 + s)':24}" + "".join(f"{'s = ' + str(s):>11}" for s in shifts) + "   spread")
for name, score in scorers.items():
    row = [score(5 + s, 2 + s) for s in shifts]
    print(f"{name:24}" + "".join(f"{v:11.4f}" for v in row) + f"   {max(row) - min(row):.1e}")

# %% [markdown]
# RoPE and ALiBi give the same score wherever the pair sits; the added sinusoids do not. Their
# own dot product PE_m·PE_n depends only on m − n (you tested it above), but the cross terms
# q·PE_n and PE_m·k mix content with *absolute* positions. RoPE and ALiBi differ in what the
# offset does: ALiBi subtracts a penalty that grows linearly with the distance, the same for
# every query and key, while RoPE turns the key relative to the query, so how the score
# changes with the distance depends on the content of q and k, frequency by frequency.
#
# **Cached decoding.** When a model generates one token at a time, it keeps the keys (and
# values) of the earlier tokens in a cache (lab 6 has more on it). With RoPE the cache stores
# keys *already rotated* at their own positions: a key's rotation does not depend on which query
# reads it. The new token, at position t (0-based, so t is the number of cached keys), rotates
# its query and its key by t; its key joins the cache. Meta's Llama takes the angles
# `freqs_cis[start_pos : start_pos + seqlen]`; Hugging Face passes `position_ids`. Getting t
# wrong by one raises no error. If every step is off by one, each score even comes out right
# (RoPE is relative), but the prompt's keys, rotated in one pass at positions 0..P−1, no longer
# fit the keys the steps add, and every score after the prompt is off.
#
# Write `rope_step_scores` with your `apply_rope`: the new token's scaled scores against every
# cached key and its own, and the grown cache.

# %% nbgrader={"grade_id": "rope_step_scores", "solution": true}
def rope_step_scores(q_new, k_new, k_cache, layout="interleaved"):
    """One decoding step with a cache of rotated keys.

    Args:
        q_new: (B, H, 1, d_head) the new token's query, not rotated yet.
        k_new: (B, H, 1, d_head) the new token's key, not rotated yet.
        k_cache: (B, H, t, d_head) the keys of positions 0..t-1, already rotated (t may be 0).
        layout: "interleaved" or "half", as in apply_rope.

    Returns:
        scores: (B, H, 1, t + 1) the rotated query's dot products with keys 0..t, divided by sqrt(d_head);
        k_cache: (B, H, t + 1, d_head) the cache with the new rotated key appended.
    """
    ### BEGIN SOLUTION
    t = k_cache.shape[-2]  # number of cached keys = the new token's 0-based position
    at_t = torch.tensor([t])  # (1,)
    q = apply_rope(q_new, at_t, layout)  # (B, H, 1, d_head)
    k_cache = torch.cat([k_cache, apply_rope(k_new, at_t, layout)], dim=-2)  # (B, H, t + 1, d_head)
    return q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1]), k_cache  # (B, H, 1, t + 1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rope_step", "points": 1}
# The 16 tokens of q16, k16: the first P keys rotated in one pass (a prompt), then one step per token.
# Each step's scores must be the new token's row of the full sequence's scores, up to its own key.
for layout, P in (("interleaved", 0), ("half", 6)):
    full = (apply_rope(q16, pos16, layout) @ apply_rope(k16, pos16, layout).transpose(-2, -1)
            / math.sqrt(8))[None]  # (1, 2, 16, 16)
    # The prompt's keys (B, H, P, d); an empty prompt is the empty cache itself, so this test never asks
    # apply_rope for T = 0 (nor does rope_step_scores: it rotates only the one new token).
    cache = apply_rope(k16[None, :, :P], torch.arange(P), layout) if P else k16[None, :, :0]  # (1, 2, P, d)
    for t in range(P, 16):
        step, cache = rope_step_scores(q16[None, :, t:t + 1], k16[None, :, t:t + 1], cache, layout)
        expect_shape(step, (1, 2, 1, t + 1), f"{layout}: scores at step {t}", "One row: keys 0..t (the cache and the new key).")
        expect_close(step[:, :, 0], full[:, :, t, :t + 1], f"{layout}: scores of token {t} after a prompt of {P}",
                     atol=1e-10, hint="The new token sits at position t = number of cached keys (0-based): rotate "
                                      "BOTH its query and its key by t before the dot products, and divide by sqrt(d_head) "
                                      "(this uses your apply_rope: if apply_rope fails its own test, fix it first).")
    expect_close(cache, apply_rope(k16, pos16, layout)[None], f"{layout}: the cache after 16 tokens", atol=1e-12,
                 hint="Each cached key is rotated at its own 0-based position: append the rotated key, not the raw "
                      "one, rotated by t = number of cached keys.")

# %% nbgrader={"grade": true, "grade_id": "test_rope_step_hidden", "points": 2}
# Hidden tests: fresh (B, H, d_head), caches of several lengths (the empty one too), both layouts.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_rope_step(rope_step_scores)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. One transformer block
#
# The paper's block (post-LN):
#
# h = LayerNorm₁(x + MHA(x, x)),   y = LayerNorm₂(h + FFN(h)),   FFN(h) = W₂ GELU(W₁ h + b₁) + b₂
#
# Many current models normalise **before** each sublayer instead (pre-LN):
# h = x + MHA(LN₁(x)), y = h + FFN(LN₂(h)). The `pre_ln` flag selects it. The `residual` flag
# removes the two "x +" and "h +" terms, for the experiment at the end of this section.
#
# The constructor is given; write `forward`. Pass the mask on to the attention sublayer and
# return its weights next to the output.

# %% nbgrader={"grade_id": "TransformerBlock", "solution": true}
class TransformerBlock(nn.Module):
    """Multi-head self-attention and a GELU feed-forward network, each with a residual and LayerNorm."""

    def __init__(self, d_model, n_heads, d_ff, pre_ln=False, residual=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)  # belongs to the attention sublayer
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln2 = nn.LayerNorm(d_model)  # belongs to the feed-forward sublayer
        self.pre_ln, self.residual = pre_ln, residual

    def forward(self, x, mask=None):
        """Args:
            x: (B, T, d_model).
            mask: None, or bool broadcastable to (B, H, T, T), True where attention is allowed.

        Returns:
            y: (B, T, d_model), and attn: (B, H, T, T) the attention sublayer's weights.
        """
        ### BEGIN SOLUTION
        r = 1.0 if self.residual else 0.0  # multiplies the skip paths
        if self.pre_ln:
            z = self.ln1(x)  # (B, T, d)
            a, attn = self.attn(z, z, mask)  # (B, T, d), (B, H, T, T)
            h = r * x + a  # (B, T, d)
            return r * h + self.ff(self.ln2(h)), attn
        a, attn = self.attn(x, x, mask)  # (B, T, d), (B, H, T, T)
        h = self.ln1(r * x + a)  # (B, T, d): add, then normalise
        return self.ln2(r * h + self.ff(h)), attn  # (B, T, d)
        ### END SOLUTION


# %% [markdown]
# ### A block of the lesson's size, on six tokens
#
# Two heads, d_model = 8, d_ff = 32, seeded random weights (nothing is trained). The tokens,
# the initialisation and the layers are this lab's own, not the lesson's, so its printed numbers
# are not the lesson's; the three properties are, and they hold for any weights. The graded
# cells below check, in order: the output shape and the normalised rows; that permuting the
# tokens only permutes the outputs without positions, and no longer does with positions; that
# with a causal mask, changing the last token leaves every earlier output unchanged. (The
# lesson's own check prints "with positions - still only permutes: False": the label reads as a
# claim, but False is the point, the same one your second check makes.)

# %% nbgrader={"grade_id": "lesson_block", "locked": true}
def run(block, x, mask=None):
    """The block's output without gradients: (B, T, d_model)."""
    with torch.no_grad():
        return block(x, mask)[0]


torch.manual_seed(39)
X6 = torch.randn(1, 6, 8)  # (B, T, d_model): six tokens
perm = torch.tensor([3, 0, 5, 1, 4, 2])  # a shuffle of the six positions
causal6 = torch.tril(torch.ones(6, 6, dtype=torch.bool))[None, None]  # (1, 1, T, T), True = allowed
block6 = TransformerBlock(d_model=8, n_heads=2, d_ff=32).eval()

# %% nbgrader={"grade": true, "grade_id": "test_block_shape_norm", "points": 1}
Y6, A6 = block6(X6)
expect_shape(Y6, (1, 6, 8), "block output", "A block maps (B, T, d_model) to the same shape.")
expect_shape(A6, (1, 2, 6, 6), "block attention weights", "Return the attention sublayer's (B, H, T, T) weights.")
row_means = Y6.detach().mean(-1)  # (1, 6)
expect(float(row_means.abs().max()) < 1e-5, "row means of the post-LN output",
       f"are {row_means.numpy().round(4).tolist()}, not 0",
       "In a post-LN block the LayerNorm comes after the residual add: y = LN2(h + FFN(h)).")
row_stds = Y6.detach().std(-1, unbiased=False)  # (1, 6)
expect(float((row_stds - 1).abs().max()) < 1e-3, "row standard deviations of the post-LN output",
       f"are {row_stds.numpy().round(4).tolist()}, not 1", "The last operation of a post-LN block is LayerNorm2.")

# %% nbgrader={"grade": true, "grade_id": "test_block_permutation", "points": 2}
P6 = torch.as_tensor(np.asarray(sinusoidal_positions(6, 8)), dtype=torch.float32)  # (T, d_model)
gap_plain = float((run(block6, X6[:, perm]) - run(block6, X6)[:, perm]).abs().max())
gap_pos = float((run(block6, X6[:, perm] + P6) - run(block6, X6 + P6)[:, perm]).abs().max())
print(f"without positions: max |block(X[perm]) - block(X)[perm]| = {gap_plain:.2e}")
print(f"with positions:    max |block(X[perm] + P) - block(X + P)[perm]| = {gap_pos:.2e}")
expect(gap_plain < 1e-5, "permuting the tokens without positions", f"changes outputs by {gap_plain:.3g}",
       "Without positions every part of the block treats tokens alike: is anything position-dependent "
       "(a head split that mixes tokens, see section 1)?")
expect(gap_pos > 1e-2, "permuting the tokens after adding positions", f"changes outputs by only {gap_pos:.3g}",
       "With positions the shuffled sequence is a different input: does sinusoidal_positions return varying codes?")

# %% nbgrader={"grade": true, "grade_id": "test_block_causal", "points": 1}
X6_changed = X6.clone()
X6_changed[0, -1] += 5.0  # change only the last token
gap_causal = float((run(block6, X6_changed, causal6)[:, :-1] - run(block6, X6, causal6)[:, :-1]).abs().max())
gap_open = float((run(block6, X6_changed)[:, :-1] - run(block6, X6)[:, :-1]).abs().max())
print(f"earlier outputs move by {gap_causal:.2e} with the causal mask, {gap_open:.2e} without")
expect(gap_causal < 1e-6, "earlier outputs under the causal mask", f"move by {gap_causal:.3g}",
       "The mask must reach the attention sublayer (True = allowed), and nothing else may mix tokens "
       "(do the section 1 and 2 tests pass?).")
expect(gap_open > 1e-3, "earlier outputs without a mask", f"move by only {gap_open:.3g}",
       "Without a mask every token reads the last one, so its change must show up.")

# %% nbgrader={"grade": true, "grade_id": "test_block_hidden", "points": 3}
# Hidden tests: post-LN and pre-LN, with and without residual, with a causal mask, on fresh
# shapes; the block's attention is swapped for the grader's, so only your wiring is tested.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_block(TransformerBlock)
### END HIDDEN TESTS

# %% [markdown]
# ### Every head on a short sentence
#
# Untrained word vectors plus positions, through a fresh block: rows are queries, columns keys.
# Nothing was learned, so which word reads which is arbitrary; the point is that each head draws
# its own map, and a causal mask would zero the upper triangle of every one.

# %% nbgrader={"grade_id": "heads_heatmaps", "locked": true}
words = ["the", "bag", "arrived", "late", "so", "refund", "it"]
torch.manual_seed(7)
sentence_block = TransformerBlock(d_model=16, n_heads=4, d_ff=64).eval()
x_words = toy_embeddings(words, 16) + torch.as_tensor(np.asarray(sinusoidal_positions(len(words), 16)),
                                                      dtype=torch.float32)  # (1, T, 16)
with torch.no_grad():
    _, word_attn = sentence_block(x_words)  # (1, H, T, T)
heatmap_grid({f"head {h}": word_attn[0, h] for h in range(word_attn.shape[1])}, words, annotate=False, ncols=2)
plt.show()

# %% [markdown]
# ### Remove the residual
#
# The cell below runs the same block (same weights, same input: a 12-token sentence, d_model =
# 64, 4 heads) with and without the residual connections, first once, then stacked six times,
# and prints summaries of the output: the mean and standard deviation of each token's row, the
# cosine between a token's output and its own input, and the mean cosine between different
# tokens' outputs.

# %% nbgrader={"grade_id": "residual_experiment", "locked": true}
long_words = "my bag arrived two days late and the airline still has not sent a refund".split()[:12]
x_long = toy_embeddings(long_words, 64) + torch.as_tensor(np.asarray(sinusoidal_positions(12, 64)),
                                                          dtype=torch.float32)  # (1, 12, 64)
print(f"the input itself:          cos_between_tokens {output_statistics(x_long, x_long)['cos_between_tokens']:+.3f}")
for n_blocks in (1, 6):
    for residual in (True, False):
        torch.manual_seed(11)  # the same weights for both settings
        stack = [TransformerBlock(64, 4, 256, residual=residual).eval() for _ in range(n_blocks)]
        y = x_long
        for blk in stack:
            y = run(blk, y)
        s = output_statistics(x_long, y)
        print(f"{n_blocks} block(s), residual={residual!s:5}: " + ", ".join(f"{k} {v:+.3f}" for k, v in s.items()))

# %% [markdown] nbgrader={"grade": true, "grade_id": "residual_answer", "points": 3, "solution": true}
# **Written answer (3 points).** What changes in the output statistics when the residual is
# removed, and what stays the same? Explain both with how the block computes its output (why can
# LayerNorm not hide the difference?), and say what this means for a stack of many blocks.
#
# ### BEGIN SOLUTION
# The row mean and standard deviation do not change (0 and 1 in every setting): in a post-LN
# block the last operation is LayerNorm, which fixes every token's mean and scale whatever came
# in. What changes is what the rows contain. With the residual, a token's output stays close to
# its own input (cosine 0.88 after one block, still 0.70 after six) and the tokens stay distinct
# (cosine between tokens 0.20 and 0.38, near the input's own 0.27). Without it, the output keeps
# almost nothing of the token's own input (cosine 0.05, then -0.12) and all tokens come out nearly
# the same (cosine between tokens 0.99 after one block, 1.00 after six). The reason: attention
# outputs a convex combination of the value vectors, an average over tokens, so without the skip
# path the block replaces each token by a mixture shared with every other token; the FFN acts per
# token and cannot bring back what was averaged away. With the residual, x passes through
# unchanged and attention only adds an update to it. In a stack the averaging compounds (rank
# collapse: every token converges to the same vector), and without the identity path the gradient
# must also pass through every sublayer, which is why residuals make deep transformers trainable.
# LayerNorm cannot hide any of this: it fixes each row's mean and scale, not its direction.
#
# **Rubric (TA only):** 1 point: row mean/std unchanged because LayerNorm comes last, with the
# printed numbers. 1 point: cosine to input drops and cosine between tokens rises, with the
# numbers, explained by attention averaging (convex mixing) without the skip path. 1 point: the
# consequence for a stack (collapse compounds / the identity path keeps information and gradients).
# ### END SOLUTION

# %% [markdown]
# ## 5. Forward and backward by hand (NumPy)
#
# One head, one sequence, float64. The forward pass with an optional additive **score bias**
# B (T_q, T_k), as used by relative-position schemes such as ALiBi, added after the scale:
#
# S = Q Kᵀ / √d_k + B,  masked scores filled,  A = softmax_rows(S),  Y = A V
#
# The backward pass goes through the same steps in reverse, given dY = ∂loss/∂Y:
#
# - Y = A V is a matmul: dV = Aᵀ dY (T_k, d_v) and dA = dY Vᵀ (T_q, T_k).
# - Each row of A is a softmax of the same row of S, and rows do not interact. For one row
#   a = softmax(s), ∂aᵢ/∂sⱼ = aᵢ(δᵢⱼ − aⱼ). Derive ds from da for one row, then write it for all
#   rows at once, without building a T × T Jacobian per row.
# - S = Q Kᵀ / √d_k + B is a matmul again: derive dQ and dK from dS.
#
# Check each shape as you write it: the transpose in dK is the one people drop. Masked entries
# need no special case: A = 0 there, so dS = 0 too. `attention_forward` returns a `cache`
# (a dict of whatever your backward needs).
#
# Scores can be large: a score bias such as ALiBi's grows with the distance. Take the softmax
# as lab 1 does, subtracting **each row's own max** before `np.exp`: without it exp(1000)
# overflows, and a max over the whole matrix leaves the rows far below it at exp = 0 (0 / 0).
# The hidden test adds offsets of about ±1000 to whole rows of the bias, which change no weight.

# %% nbgrader={"grade_id": "attention_forward", "solution": true}
def attention_forward(Q, K, V, mask=None, bias=None):
    """Single-head attention forward in NumPy.

    Args:
        Q: (T_q, d_k), K: (T_k, d_k), V: (T_k, d_v).
        mask: None or (T_q, T_k) bool, True where attention is allowed (every row keeps one key).
        bias: None or (T_q, T_k) additive score bias, added after the 1/sqrt(d_k) scale.

    Returns:
        Y: (T_q, d_v), and cache: a dict for attention_backward and score_bias_grad.
    """
    ### BEGIN SOLUTION
    d_k = Q.shape[-1]
    S = Q @ K.T / np.sqrt(d_k)  # (T_q, T_k)
    if bias is not None:
        S = S + bias  # (T_q, T_k)
    if mask is not None:
        S = np.where(mask, S, -np.inf)  # (T_q, T_k)
    S = S - S.max(axis=-1, keepdims=True)  # (T_q, T_k) stable softmax
    E = np.exp(S)  # (T_q, T_k)
    A = E / E.sum(axis=-1, keepdims=True)  # (T_q, T_k), rows sum to 1
    return A @ V, {"Q": Q, "K": K, "V": V, "A": A}
    ### END SOLUTION


# %% nbgrader={"grade_id": "attention_backward", "solution": true}
def attention_backward(dY, cache):
    """Gradients of a loss with respect to Q, K and V, given dY = dLoss/dY.

    Args:
        dY: (T_q, d_v).
        cache: what attention_forward returned.

    Returns:
        dQ: (T_q, d_k), dK: (T_k, d_k), dV: (T_k, d_v).
    """
    ### BEGIN SOLUTION
    Q, K, V, A = cache["Q"], cache["K"], cache["V"], cache["A"]
    scale = np.sqrt(Q.shape[-1])
    dV = A.T @ dY  # (T_k, T_q) @ (T_q, d_v) -> (T_k, d_v)
    dA = dY @ V.T  # (T_q, T_k)
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))  # (T_q, T_k), softmax backward per row
    dQ = dS @ K / scale  # (T_q, d_k)
    dK = dS.T @ Q / scale  # (T_k, T_q) @ (T_q, d_k) -> (T_k, d_k)
    return dQ, dK, dV
    ### END SOLUTION


# %% [markdown]
# **The gradient of a score bias** (chapter exercise 5). Because S = Q Kᵀ / √d_k + B, the
# derivative of S with respect to B is the identity, so dB is the gradient with respect to the
# scores, dS, with no scale factor. A learned bias table shared across positions collects the sum
# of dS over every (query, key) pair that maps to the same entry.

# %% nbgrader={"grade_id": "score_bias_grad", "solution": true}
def score_bias_grad(dY, cache):
    """Gradient of the loss with respect to an additive score bias B.

    Args:
        dY: (T_q, d_v).
        cache: what attention_forward returned.

    Returns:
        dB: (T_q, T_k).
    """
    ### BEGIN SOLUTION
    A, V = cache["A"], cache["V"]
    dA = dY @ V.T  # (T_q, T_k)
    return A * (dA - (dA * A).sum(axis=-1, keepdims=True))  # (T_q, T_k) = dS
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_forward", "points": 1}
Qc, Kc, Vc = chapter_qkv()  # the chapter's T = 3, d_k = 2 example
Yc, _ = attention_forward(Qc, Kc, Vc)
expect_shape(Yc, (3, 2), "attention_forward on the chapter's example", "Y is (T_q, d_v).")
expect_close(Yc[0], [6.017, 3.983], "the chapter's first output row", atol=2e-3,
             hint="softmax((0.707, 0, 0.707)) = (0.401, 0.198, 0.401) mixes V's rows into (6.017, 3.983) "
                  "(the chapter misprints the weights and prints (6.07, 3.93)).")
Ym, _ = attention_forward(Qc, Kc, Vc, mask=np.tril(np.ones((3, 3), dtype=bool)))
expect_close(Ym[0], Vc[0], "the first row under a causal mask", atol=1e-12,
             hint="Token 0 may only read itself: fill masked scores with -inf before the softmax (a score of 0 "
                  "still gets weight).")

# %% nbgrader={"grade": true, "grade_id": "test_attention_forward_hidden", "points": 1}
# Hidden tests: T_q != T_k, d_v != d_k, random masks and a score bias, to 1e-12; then a bias whose
# rows are offset by about ±1000 (which changes no weight).
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_attention_forward(attention_forward)
### END HIDDEN TESTS

# %% [markdown]
# The test builds the same computation in PyTorch with `requires_grad=True`, back-propagates
# the same dY and compares in float64.

# %% nbgrader={"grade_id": "autograd_reference", "locked": true}
def autograd_grads(Q, K, V, dY, mask=None, bias=None):
    """dQ, dK, dV and dB from torch autograd, float64, for the tests below."""
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True)
         for a in (Q, K, V, np.zeros((len(Q), len(K))) if bias is None else bias)]
    S = t[0] @ t[1].T / math.sqrt(Q.shape[-1]) + t[3]  # (T_q, T_k)
    if mask is not None:
        S = S.masked_fill(~torch.as_tensor(mask), float("-inf"))
    (S.softmax(-1) @ t[2] * torch.as_tensor(dY)).sum().backward()
    return [x.grad.numpy() for x in t]


rng = np.random.default_rng(5)
Q5, K5, V5, dY5 = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
Q4, dY4, B45 = rng.normal(size=(4, 4)), rng.normal(size=(4, 3)), rng.normal(size=(4, 5))  # T_q = 4, T_k = 5

# %% nbgrader={"grade": true, "grade_id": "test_attention_backward", "points": 2}
dQ_ref, dK_ref, dV_ref, _ = autograd_grads(Q5, K5, V5, dY5)
dQ, dK, dV = attention_backward(dY5, attention_forward(Q5, K5, V5)[1])
expect_close(dV, dV_ref, "dV vs autograd (T = 5)", atol=1e-10, hint="dV = A^T dY: transpose A.")
expect_close(dQ, dQ_ref, "dQ vs autograd (T = 5)", atol=1e-10,
             hint="dS = A * (dA - rowsum(dA * A)): the row-wise sum runs over the keys (axis=-1, keepdims); "
                  "then dQ = dS K / sqrt(d_k).")
expect_close(dK, dK_ref, "dK vs autograd (T = 5)", atol=1e-10,
             hint="dK = dS^T Q / sqrt(d_k): did you transpose dS?")
dQ_ref, dK_ref, dV_ref, _ = autograd_grads(Q4, K5, V5, dY4, mask=np.tril(np.ones((4, 5), dtype=bool)))
dQ, dK, dV = attention_backward(dY4, attention_forward(Q4, K5, V5, mask=np.tril(np.ones((4, 5), dtype=bool)))[1])
for name, g, r in (("dQ", dQ, dQ_ref), ("dK", dK, dK_ref), ("dV", dV, dV_ref)):
    expect_close(g, r, f"{name} vs autograd (T_q = 4, T_k = 5, masked)", atol=1e-10,
                 hint="With T_q != T_k every transpose shows: dK = dS^T Q / sqrt(d_k) is (T_k, d_k).")

# %% nbgrader={"grade": true, "grade_id": "test_attention_backward_hidden", "points": 3}
# Hidden tests: fresh shapes, masks and biases, against autograd in float64 to 1e-10.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_attention_backward(attention_forward, attention_backward)
### END HIDDEN TESTS

# %% [markdown]
# **What the backward costs.** Count the matmuls you just wrote: dV = Aᵀ dY, dA = dY Vᵀ,
# dQ = dS K, dK = dSᵀ Q, four of the forward's sizes against its two (Q Kᵀ and A V), so the
# backward of the n × n part is 2× its forward. FlashAttention does not keep A and recomputes
# Q Kᵀ, a fifth matmul: 5 / 2 = 2.5×. The chapter says both "roughly twice" and "five matmuls
# against two"; they are the two cases, not one.

# %% nbgrader={"grade": true, "grade_id": "test_score_bias_grad", "points": 1}
dB_ref = autograd_grads(Q4, K5, V5, dY4, bias=B45)[3]
dB = score_bias_grad(dY4, attention_forward(Q4, K5, V5, bias=B45)[1])
expect_close(dB, dB_ref, "dB vs autograd (T_q = 4, T_k = 5, with a bias)", atol=1e-10,
             hint="dB = dS = A * (dA - rowsum(dA * A)), with no 1/sqrt(d_k): the bias is added after the scale.")

# %% nbgrader={"grade": true, "grade_id": "test_score_bias_grad_hidden", "points": 1}
# Hidden tests: fresh shapes, masks and biases, against autograd in float64 to 1e-10.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_score_bias_grad(attention_forward, score_bias_grad)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. What a layer costs
#
# Forward FLOPs of one attention layer, batch B, length T, width d (all heads together):
#
# | operation | shape | FLOPs |
# |---|---|---|
# | Q, K, V, O projections | four (B·T, d) @ (d, d) | 4 × 2·B·T·d² |
# | Q Kᵀ | H × (T, d_head) @ (d_head, T) | 2·B·T²·d |
# | A V | H × (T, T) @ (T, d_head) | 2·B·T²·d |
#
# The number of heads cancels out of the n × n part: H heads of width d/H. A full layer adds a
# feed-forward network with d_ff = 4d, two more matmuls. Softmax, LayerNorm and memory traffic are
# ignored.

# %% nbgrader={"grade_id": "attention_flops", "solution": true}
def attention_flops(B, T, d_model):
    """Forward FLOPs of one multi-head attention layer.

    Returns:
        dict with "projections" (Q, K, V and O), "qk_t", "av" and "total", as integers.
    """
    ### BEGIN SOLUTION
    projections = 4 * 2 * B * T * d_model * d_model
    qk_t = 2 * B * T * T * d_model
    av = 2 * B * T * T * d_model
    return {"projections": projections, "qk_t": qk_t, "av": av, "total": projections + qk_t + av}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_flops", "points": 2}
gpt2 = attention_flops(1, 1024, 768)  # GPT-2 small, one sequence of 1,024 tokens
print({k: f"{v / 1e9:.2f} GFLOP" for k, v in gpt2.items()})
expect_close(gpt2["projections"] / 1e9, 4.8, "GPT-2 small projections in GFLOP", atol=0.05,
             hint="Four (T, d) @ (d, d) matmuls at 2 m k n FLOPs each.")
expect_close((gpt2["qk_t"] + gpt2["av"]) / 1e9, 3.2, "GPT-2 small QK^T + AV in GFLOP", atol=0.05,
             hint="Each is 2 B T^2 d over all heads: count 2 FLOPs per multiply-add.")
expect(gpt2["total"] == gpt2["projections"] + gpt2["qk_t"] + gpt2["av"], "total", "is not the sum of the parts")
at_2d = attention_flops(3, 2 * 512, 512)
expect(at_2d["qk_t"] + at_2d["av"] == at_2d["projections"], "attention alone at T = 2 d_model",
       "the n x n part does not equal the projections", "The two terms cross at T = 2 d_model.")

# %% nbgrader={"grade": true, "grade_id": "test_attention_flops_hidden", "points": 1}
# Hidden tests: fresh (B, T, d_model), exact integers.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_attention_flops(attention_flops)
### END HIDDEN TESTS

# %% [markdown]
# **Long context.** At T = 8,192 with GPT-2 small's width, the chapter says the n × n part is
# 6.5× the projections. The table gives (QKᵀ + AV) / projections = 4·B·T²·d / (8·B·T·d²) =
# T / (2d) = 8,192 / 1,536 ≈ 5.33×; the next cell asks your `attention_flops`.

# %% nbgrader={"grade_id": "long_context_ratio", "locked": true}
long = attention_flops(1, 8192, 768)
print(f"T = 8,192, d = 768: n x n part / projections = {(long['qk_t'] + long['av']) / long['projections']:.2f}")

# %% [markdown]
# **Memory.** A naive implementation stores the weights of every head: B·H·T² entries per
# layer, independent of d_head, before the copy kept for the backward pass (at B = 8, H = 32,
# T = 4,096 in bf16 that is 8.6 GB for one layer). Lab 6 counts these bytes
# (`attention_matrix_bytes`) and computes exact attention in tiles that never store the matrix,
# as FlashAttention does.

# %% [markdown]
# **Parameters do not grow with heads or with length.** Attention holds 4·d² weights (you tested
# it in section 2) and the 4× FFN 8·d²; at d_model = 512 that is about 1.0 and 2.1 million
# per block. Longer context costs activations and FLOPs, not weights.

# %% nbgrader={"grade_id": "param_counts", "locked": true}
block512 = TransformerBlock(512, 8, 2048)
ffn_weights = sum(p.numel() for p in block512.ff.parameters() if p.dim() == 2)
attn_weights = sum(p.numel() for p in block512.attn.parameters() if p.dim() == 2)
print(f"attention weights {attn_weights:,} = 4 d^2: {attn_weights == 4 * 512**2}")
print(f"FFN weights       {ffn_weights:,} = 8 d^2: {ffn_weights == 8 * 512**2}")


# %% [markdown]
# ## Extension (ungraded): where a full layer's n × n part takes over
#
# Optional, about 15 minutes, no points: arithmetic on top of your `attention_flops`, and nothing
# after it depends on it.
#
# With the FFN (two (T, d) @ (d, 4d)-sized matmuls) the per-token part of a layer is
# 24·B·T·d² FLOPs; the n × n part is still 4·B·T²·d. Before running the cells, work out on paper
# (1) the fraction of a layer's FLOPs spent on the n × n part at T = 4,096 for d_model = 768,
# 1,024 and 4,096, and (2) the length T at which the n × n part equals the per-token part, for
# attention alone and for the full layer. The cell computes both from your `attention_flops`;
# the lesson's values are 47 %, 40 % and 14 %, and T = 2·d_model and 6·d_model.

# %% nbgrader={"grade_id": "full_layer_share", "locked": true}
def layer_share(T, d_model):
    """Share of one layer's forward FLOPs (attention and a 4x FFN) spent on QK^T and AV, from attention_flops."""
    f = attention_flops(1, T, d_model)
    ffn = 2 * (2 * T * d_model * 4 * d_model)  # two (T, d) @ (d, 4d)-sized matmuls
    return (f["qk_t"] + f["av"]) / (f["total"] + ffn)


for d_model, published in ((768, 0.47), (1024, 0.40), (4096, 0.14)):
    print(f"d_model = {d_model:5d}: {layer_share(4096, d_model):.1%} of a layer's FLOPs on the n x n part "
          f"at 4,096 tokens (lesson: {published:.0%})")
for d_model in (512, 1024):
    f = attention_flops(1, 1, d_model)  # per token: projections; per token and per T: QK^T + AV
    alone = f["projections"] / (f["qk_t"] + f["av"])
    full = (f["projections"] + 16 * d_model**2) / (f["qk_t"] + f["av"])
    print(f"d_model = {d_model}: the parts meet at T = {alone:.0f} (attention alone) and {full:.0f} (full layer)")

# %% nbgrader={"grade_id": "share_curves", "locked": true}
lengths = [2**k for k in range(8, 17)]
curves(lengths, {f"d_model = {d}": [layer_share(T, d) for T in lengths] for d in (768, 1024, 4096)},
       xlabel="tokens T", ylabel="share of layer FLOPs in the n x n part", logx=True,
       title="Where the n x n part takes over")
plt.show()

# %% [markdown]
# ## Extension: why several heads, and other positions (about 30 minutes)
#
# **Optional**, about 30 minutes. One small function, `fused_qkv`, carries 3 of the lab's points
# (1 visible, 2 hidden): skip the section if you are short of time. Everything else here is a
# measured demonstration to run and read; each cell runs in about a second.
#
# It uses your `MultiHeadAttention` from section 2, so finish that first.

# %% [markdown]
# ### E1. Several heads beat one wide head
#
# A toy task that one head cannot do: every token must output **two** things at once, the
# content of the token one step back (first half of the target) and of the token two steps
# back (second half). One head's output is a single weighted average of values: if it spreads
# its weight over both tokens, the two contents are blended and W_O cannot pull them apart.
# Two heads of half the width can each look at one token. Same d_model, same parameter count
# (4·d² either way); only H changes. Tokens carry random content (8 channels) next to a one-hot
# position (8 channels), and positions wrap around (token 0's "one step back" is token 7).

# %% nbgrader={"grade_id": "ext_heads_toy", "locked": true}
def two_lookback_batch(gen, B=32, T=8, c=8):
    """x (B, T, c + T): [content | one-hot position]; y (B, T, 2c): [content[t-1] | content[t-2]]."""
    content = torch.randn(B, T, c, generator=gen)  # (B, T, c)
    pos = torch.eye(T).expand(B, T, T)  # (B, T, T) one-hot positions
    x = torch.cat([content, pos], dim=-1)  # (B, T, c + T) = (B, T, d_model)
    y = torch.cat([content.roll(1, dims=1), content.roll(2, dims=1)], dim=-1)  # (B, T, 2c)
    return x, y


def train_heads(n_heads, steps=80, lr=2e-2, seed=0):
    """Train one MultiHeadAttention(16, n_heads) on the task; return (held-out MSE, model)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small only lose time to threading
    try:
        return _train_heads(n_heads, steps, lr, seed)
    finally:
        torch.set_num_threads(threads)


def _train_heads(n_heads, steps, lr, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    mha = MultiHeadAttention(16, n_heads)
    opt = torch.optim.Adam(mha.parameters(), lr=lr)
    for _ in range(steps):
        x, y = two_lookback_batch(gen)  # (64, 8, 16), (64, 8, 16)
        loss = ((mha(x, x)[0] - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = two_lookback_batch(torch.Generator().manual_seed(99), B=256)  # held-out batch
    with torch.no_grad():
        return ((mha(x, x)[0] - y) ** 2).mean().item(), mha


toy = {H: train_heads(H) for H in (1, 2, 4)}
for H, (mse, _) in toy.items():
    print(f"H = {H} heads of width {16 // H:2d}: held-out MSE {mse:.3f}   (predicting zeros scores 1.0)")

# %% [markdown]
# One head stays near 0.5, the error of a blend of the two lags; two heads solve the task.
# More heads is not automatically better: four heads of width 4 must share each lag between two
# of them, and at this short training budget they land in between.
#
# **Heads specialise.** For the two-head model, how much weight does each head put on the token
# one step back and two steps back (averaged over queries)? The heads were never told which
# lag is theirs; training split the job between them.

# %% nbgrader={"grade_id": "ext_heads_specialise", "locked": true}
x_toy, _ = two_lookback_batch(torch.Generator().manual_seed(7), B=32)  # (32, 8, 16)
with torch.no_grad():
    w_toy = toy[2][1](x_toy, x_toy)[1].mean(dim=0)  # (H, T, T) weights, averaged over the batch
t_idx = torch.arange(8)
for h in range(2):
    lag1 = w_toy[h, t_idx, (t_idx - 1) % 8].mean().item()  # weight on token t-1
    lag2 = w_toy[h, t_idx, (t_idx - 2) % 8].mean().item()  # weight on token t-2
    print(f"head {h}: weight on t-1 = {lag1:.2f}, on t-2 = {lag2:.2f}")

# %% [markdown]
# ### E2. Each head's scores have rank at most d_head — its weights do not
#
# A head's scores are Q_h K_hᵀ with Q_h (T, d_head) and K_h (T, d_head): a (T, T) matrix that is
# a product through d_head dimensions has rank at most d_head, however long T is. That is the
# "low-rank bottleneck" of a narrow head. The softmax, applied entry by entry after the
# exponential, does not keep that rank: the weight matrix is generally of full rank T. Measured
# on random inputs through your module (T = 32, d_model = 32, so d_head = 32 / H):

# %% nbgrader={"grade_id": "ext_rank", "locked": true}
torch.manual_seed(1)
x_rank = torch.randn(1, 32, 32, dtype=torch.float64)  # (1, T, d_model)
for H in (8, 4, 2):
    m = MultiHeadAttention(32, H).double()
    with torch.no_grad():
        q = split_heads(m.W_q(x_rank), H)  # (1, H, T, d_head)
        k = split_heads(m.W_k(x_rank), H)  # (1, H, T, d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(32 // H)  # (1, H, T, T)
        weights = scores.softmax(dim=-1)  # (1, H, T, T)
    r_s = torch.linalg.matrix_rank(scores[0]).tolist()  # rank of each head's scores
    r_w = torch.linalg.matrix_rank(weights[0]).tolist()  # rank of each head's weights
    print(f"H = {H}, d_head = {32 // H:2d}: score ranks {r_s}, weight ranks {r_w}")

# %% [markdown]
# ### E3. Dropout on the attention weights
#
# The original transformer applies dropout to the weights A before A V (`nn.MultiheadAttention`'s
# `dropout=`). In training mode each weight is zeroed with probability p and the survivors are
# divided by 1 − p, so each row sums to 1 only *on average*: a query randomly loses some of the
# keys it chose. In `eval()` mode dropout is the identity and rows sum to 1 again. Measured on
# 1,000 softmax rows over 16 keys, p = 0.1:

# %% nbgrader={"grade_id": "ext_dropout", "locked": true}
torch.manual_seed(2)
A = torch.randn(1000, 16).softmax(dim=-1)  # (rows, T_k), each row sums to 1
drop = nn.Dropout(p=0.1)
drop.train()
sums_train = drop(A).sum(dim=-1)  # (rows,)
zeroed = (drop(A) == 0).float().mean().item()
drop.eval()
sums_eval = drop(A).sum(dim=-1)  # (rows,)
print(f"train: row sums mean {sums_train.mean():.3f}, std {sums_train.std():.3f}, "
      f"min {sums_train.min():.3f}, max {sums_train.max():.3f}; {100 * zeroed:.1f} % of weights zeroed")
print(f"eval:  row sums all 1: {bool(torch.allclose(sums_eval, torch.ones(1000)))}")

# %% [markdown]
# ### E4. Path length: attention against an RNN and a CNN
#
# How many steps must a signal take from token 0 to token T − 1?
#
# | layer | sequential steps | longest path between two tokens | cost per layer |
# |---|---|---|---|
# | self-attention | 1 | 1 | O(T²·d) |
# | RNN | T | T − 1 (one step per token) | O(T·d²) |
# | CNN, kernel k, stacked | 1 per layer | ⌈(T − 1)/(k − 1)⌉ layers | O(k·T·d²) |
# | CNN, kernel k, dilated (1, k, k², ...) | 1 per layer | ⌈log_k T⌉ layers | O(k·T·d²) |
#
# A stack of kernel-k convolutions widens the receptive field by k − 1 per layer. The cell
# checks the stacked row by gradients: the last output of a stack of L kernel-3 convolutions
# depends on input 0 only once L reaches ⌈(T − 1)/2⌉.

# %% nbgrader={"grade_id": "ext_path_length", "locked": true}
def reaches_first(L, T=64, k=3):
    """Whether output T-1 of L stacked Conv1d(kernel k, no padding on the right) depends on input 0."""
    x = torch.ones(1, 1, T, requires_grad=True)  # (B, C, T)
    h = x
    for _ in range(L):
        h = nn.functional.conv1d(nn.functional.pad(h, (k - 1, 0)), torch.ones(1, 1, k))  # causal, (1, 1, T)
    h[0, 0, -1].backward()
    return bool(x.grad[0, 0, 0] != 0)


T_path = 64
L_cnn = math.ceil((T_path - 1) / 2)  # the formula's depth for kernel 3
print(f"kernel-3 CNN, T = {T_path}: {L_cnn - 1} layers reach token 0: {reaches_first(L_cnn - 1, T_path)}, "
      f"{L_cnn} layers: {reaches_first(L_cnn, T_path)}")
print(f"longest path at T = {T_path}: attention 1, RNN {T_path - 1}, kernel-3 CNN {L_cnn} layers, "
      f"dilated kernel-3 CNN {math.ceil(math.log(T_path, 3))} layers")

# %% [markdown]
# ### E5. A fused QKV projection (graded, 3 points)
#
# Q, K and V are three (d, d) projections of the same x. Stacking their weights side by side
# gives one (d, 3d) matrix W_qkv = [W_Q | W_K | W_V] (in the x @ W layout), so one matmul
# computes all three: x @ W_qkv = [x W_Q | x W_K | x W_V]. Real implementations do this
# (`nn.MultiheadAttention`'s `in_proj_weight` is the same stack in `nn.Linear`'s transposed
# layout), because one large matmul uses the hardware better than three small ones.
#
# Write `fused_qkv(x, W_qkv, n_heads)`: one matmul, then cut the 3d output channels into q, k
# and v (d each, in that order), and each into heads as `split_heads` does.

# %% nbgrader={"grade_id": "fused_qkv", "solution": true}
def fused_qkv(x, W_qkv, n_heads):
    """Queries, keys and values of every head from one fused projection.

    Args:
        x: (B, T, d_model) tensor.
        W_qkv: (d_model, 3 * d_model) tensor, columns [W_Q | W_K | W_V] (x @ W layout).
        n_heads: H; d_model is divisible by H.

    Returns:
        q, k, v: each (B, H, T, d_head), equal to split_heads(x @ W_Q, H) and so on.
    """
    ### BEGIN SOLUTION
    B, T, d = x.shape
    qkv = x @ W_qkv  # (B, T, 3d): one matmul for the three projections
    qkv = qkv.view(B, T, 3, n_heads, d // n_heads)  # (B, T, 3, H, d_head)
    qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, B, H, T, d_head)
    return qkv[0], qkv[1], qkv[2]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fused_qkv", "points": 1}
# Against three separate projections, on labelled inputs where every channel has its own weight column.
torch.manual_seed(3)
x_f = torch.randn(2, 5, 12, dtype=torch.float64)  # (B, T, d_model)
W_f = torch.randn(12, 36, dtype=torch.float64)  # (d_model, 3 d_model)
q_f, k_f, v_f = fused_qkv(x_f, W_f, 3)
for name, got, cols in (("q", q_f, slice(0, 12)), ("k", k_f, slice(12, 24)), ("v", v_f, slice(24, 36))):
    want = (x_f @ W_f[:, cols]).view(2, 5, 3, 4).transpose(1, 2)  # (B, H, T, d_head)
    expect_shape(got, (2, 3, 5, 4), f"fused_qkv's {name}", "Expected (B, H, T, d_head).")
    expect_close(got, want, f"fused_qkv's {name} against x @ W_{name.upper()}, split into heads", atol=1e-9,
                 hint="Cut the 3d columns into q, k, v first (d each, in that order), then each into heads "
                      "through (B, T, H, d_head) and a transpose.")

# %% nbgrader={"grade": true, "grade_id": "test_fused_qkv_hidden", "points": 2}
# Hidden tests: fresh shapes and weights, against three separate projections.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab04_transformer_block import hidden
hidden.check_fused_qkv(fused_qkv)
### END HIDDEN TESTS

# %% [markdown]
# **Is it faster?** The same work, timed on this machine at B·T = 1,024 tokens and d = 512
# (after a warm-up, the best of several repeats). On a GPU the gain comes mostly from one kernel
# launch instead of three; on a CPU the matmul library is already efficient for (d, d) blocks,
# so the difference may be small, and your numbers may differ from the reference run's.

# %% nbgrader={"grade_id": "ext_fused_timing", "locked": true}
import time


def best_time(fn, repeats=5):
    """Best wall time of fn() in milliseconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * min(times)


x_t = torch.randn(1024, 512)  # (B*T, d)
W_t = torch.randn(512, 1536) / 512**0.5  # (d, 3d)
Wq_t, Wk_t, Wv_t = (W_t[:, i * 512:(i + 1) * 512].contiguous() for i in range(3))  # three (d, d)
fused_ms = best_time(lambda: x_t @ W_t)
three_ms = best_time(lambda: (x_t @ Wq_t, x_t @ Wk_t, x_t @ Wv_t))
print(f"one (d, 3d) matmul {fused_ms:.2f} ms, three (d, d) matmuls {three_ms:.2f} ms, "
      f"same result: {bool(torch.allclose(x_t @ W_t, torch.cat([x_t @ Wq_t, x_t @ Wk_t, x_t @ Wv_t], -1), atol=1e-4))}")

# %% [markdown]
# ### E6. Other ways to give attention positions
#
# Section 3's sinusoids are added to the tokens. Three alternatives, compared on what can be
# measured without training a model:
# - **learned absolute positions**: a (T_max, d) table of parameters, `nn.Embedding(T_max, d)`,
#   added to the tokens like the sinusoids. It has no row for position T_max or beyond;
# - **ALiBi** (Press et al., 2022): no embedding at all; head h adds −m_h·(i − j) to the score of
#   query i on key j ≤ i, with slopes m_h = 2^(−8h/H) for h = 1..H. Zero parameters, defined for
#   any length; steep heads look locally, shallow heads far;
# - **T5's relative buckets** (Raffel et al., 2020): one learned scalar per head and *bucket* of
#   the distance i − j, added to the scores. Small distances get a bucket each; larger ones share
#   logarithmically wider buckets up to `max_distance`, beyond which all share the last bucket.
#
# The bucket function, for a causal model (keys at or before the query):

# %% nbgrader={"grade_id": "ext_t5_bucket", "locked": true}
def t5_bucket(distance, num_buckets=32, max_distance=128):
    """T5's bucket of distances i - j >= 0 (causal): exact below num_buckets // 2, then logarithmic.

    Args:
        distance: (...) integer tensor of i - j >= 0.
    Returns:
        (...) integer tensor of buckets in [0, num_buckets).
    """
    exact = num_buckets // 2
    n = distance.clamp(min=0)  # (...)
    log_bucket = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                          * (num_buckets - exact)).long()  # (...)
    return torch.where(n < exact, n, log_bucket.clamp(max=num_buckets - 1))  # (...)


dist = torch.arange(0, 300)  # (300,) distances
b = t5_bucket(dist)  # (300,)
print("distance -> bucket:", {int(d): int(b[d]) for d in (0, 1, 15, 16, 20, 32, 64, 127, 128, 299)})
print(f"{len(torch.unique(b))} buckets cover distances 0..299; distances 16..127 share "
      f"{len(torch.unique(b[16:128]))} buckets, every distance >= 128 is bucket {int(b[128])}")

# %% [markdown]
# **Measured side by side.** For a length-T model with H = 8 heads and d = 512: how many
# parameters each scheme holds, whether its effect on the scores depends on the
# distance i − j only, by construction (so a pattern learnt at one place works at every place),
# and whether it is defined for a sequence twice as long as training. Then ALiBi's slopes at work: with all content scores zero, how many
# keys (exp of the entropy) does the last of 512 queries effectively read in each head?

# %% nbgrader={"grade_id": "ext_positions_compare", "locked": true}
T_tr, H_p, d_p = 512, 8, 512
learned = nn.Embedding(T_tr, d_p)  # (T_max, d) table
i, j = torch.arange(T_tr)[:, None], torch.arange(T_tr)[None, :]  # (T, 1), (1, T)
slopes = 2.0 ** (-8 * torch.arange(1, H_p + 1) / H_p)  # (H,)
alibi = -slopes[:, None, None] * (i - j).clamp(min=0)  # (H, T, T) bias, causal part used
t5_table = torch.randn(H_p, 32)  # (H, num_buckets) learned scalars
t5_bias = t5_table[:, t5_bucket(i - j)]  # (H, T, T)


def shift_invariant(bias):
    """Whether bias[i, j] equals bias[i + 1, j + 1] everywhere (depends on i - j only)."""
    return bool(torch.equal(bias[..., 1:, 1:], bias[..., :-1, :-1]))


with torch.no_grad():
    learned_dots = learned.weight @ learned.weight.T  # (T, T): what position adds to q.k, through p_i . p_j
print(f"learned absolute: {learned.weight.numel():,} parameters, p_i . p_j distance-only: "
      f"{shift_invariant(learned_dots)}, position {2 * T_tr - 1} defined: {2 * T_tr - 1 < learned.num_embeddings}")
print(f"ALiBi:            0 parameters, distance-only: {shift_invariant(alibi)}, defined at any length: True")
print(f"T5 buckets:       {t5_table.numel()} parameters, distance-only: {shift_invariant(t5_bias)}, "
      f"bucket of distance {2 * T_tr - 1}: {int(t5_bucket(torch.tensor(2 * T_tr - 1)))} (the last one)")
w_last = alibi[:, -1, :].softmax(dim=-1)  # (H, T): the last query's weights, content scores zero
eff_keys = torch.exp(-(w_last * w_last.clamp(min=1e-30).log()).sum(dim=-1))  # (H,)
print("ALiBi slopes     ", [round(s, 4) for s in slopes.tolist()])
print("effective keys   ", [round(e, 1) for e in eff_keys.tolist()])
