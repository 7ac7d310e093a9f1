# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 3 — Causal and padding masks
#
# A decoder that reads the token it must predict reports a wonderful training loss and then
# generates garbage. A classifier whose padding is not masked gives a different answer for the
# same sentence depending on what it was batched with. A mask filled with the wrong constant
# turns a half-precision run into NaN. None of these bugs raises an error. In this lab you
# build the masks in PyTorch, put them in the right place, and write the tests that catch
# each of these bugs.
#
# You will:
# 1. build causal, cached-causal and padding masks, and combine them;
# 2. fill masked scores safely in every dtype and write `scaled_dot_product_attention`, matching
#    PyTorch's own;
# 3. reproduce the lesson's causal tables, and see what -inf, -1e9 and `finfo.min` do in float16;
# 4. see what masking *after* the softmax does, and write two property tests that catch leaks;
# 5. translate between PyTorch's two opposite mask conventions, and measure the defaults of
#    `nn.MultiheadAttention` and SDPA that change results without an error;
# 6. show that teacher forcing (a whole target sequence in one causal pass) gives exactly the
#    predictions of step-by-step decoding, and use the right mask for cross-attention.
#
# **Time.** About 2.5 hours for a student who has done the lesson: 40 minutes for sections 1–4,
# 30 for sections 5–7, 30 for the property tests of section 8, 30 for PyTorch's conventions and
# defaults (section 9), 20 for teacher forcing and cross-attention (sections 10–11). The extension
# at the end (permutation equivariance, about 15 minutes) is ungraded: skip it if you are short
# of time.
#
# **The convention of this lab (and of the course): a boolean mask is `True` where attention
# is allowed.** Masks broadcast against scores of shape `(B, H, T_q, T_k)`: batch, heads,
# queries, keys.
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, on fresh random inputs of other shapes and dtypes. A
# failing test names the likely misconception.

# %% [markdown]
# ## Setup
# Run this cell first. It loads torch, the lesson's examples and the plotting helpers.

# %% nbgrader={"grade_id": "setup", "locked": true}
import math
import time
import warnings

import numpy as np
import torch
from torch.nn import functional as F

from mlbook_helpers.checks import expect, expect_close, expect_finite, expect_rows_sum_to_one, expect_shape
from mlbook_helpers.examples import bank_session, ticket_example
from mlbook_helpers.masking import (BOS, D_MODEL, VOCAB, library_attention, library_causal_layer, library_padding_layer,
                                    tiny_decoder)
from mlbook_helpers.plotting import curves, heatmap_grid

warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")  # library notices, not errors
torch.set_printoptions(precision=3, sci_mode=False)
ticket = ticket_example()
bank = bank_session()
print("torch", torch.__version__, "| ticket tokens:", ticket.tokens, "| bank events:", bank.tokens)

# %% [markdown]
# ### What the lesson computed
#
# The three-token ticket *bag delayed refund* from lesson 1, without a mask and with the causal
# mask (the lesson's printed tables). Under the causal mask *bag* can only read itself, *delayed*
# reads *bag* and itself, and the last token is unchanged: it already sees everything before it.
# Your code reproduces the right-hand table in section 5.

# %% nbgrader={"grade_id": "lesson_tables", "locked": true}
lesson_plain = [[0.401, 0.401, 0.198], [0.198, 0.401, 0.401], [0.248, 0.503, 0.248]]  # (T_q, T_k)
lesson_causal = [[1.000, 0.000, 0.000], [0.330, 0.670, 0.000], [0.248, 0.503, 0.248]]  # (T_q, T_k)
heatmap_grid({"lesson: no mask": lesson_plain, "lesson: causal mask": lesson_causal}, ticket.tokens);

# %% [markdown]
# ## 1. The causal mask
#
# In a decoder, query *i* may read key *j* only when *j ≤ i*: itself and the past. As a
# `(T, T)` table that is the lower triangle, diagonal included. Return it with two leading axes
# of size 1, `(1, 1, T, T)`, so it broadcasts over the batch and the heads without copies.

# %% nbgrader={"grade_id": "causal_mask", "solution": true}
def causal_mask(T):
    """Causal mask: query i may attend to key j exactly when j <= i.

    Args:
        T: sequence length (queries and keys are the same T positions).

    Returns:
        (1, 1, T, T) bool, True where attention is allowed.
    """
    ### BEGIN SOLUTION
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))  # (T, T): j <= i
    return allowed[None, None]  # (1, 1, T, T)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_causal_mask", "points": 1}
m = causal_mask(3)
expect_shape(m, (1, 1, 3, 3), "causal_mask(3)", "Add two leading axes of size 1: (1, 1, T, T).")
expect(m.dtype == torch.bool, "causal_mask(3)", f"dtype is {m.dtype}", "Return a boolean mask (dtype torch.bool).")
expect(bool(m[0, 0, 2, 0]), "causal_mask(3)", "the last token may not read the first",
       "True means ALLOWED: the last token reads every earlier one. Is the polarity inverted (True marking the future)?")
expect(bool(m[0, 0, 0, 0]), "causal_mask(3)", "token 0 may not read itself",
       "The diagonal is allowed: a token reads itself (j <= i, not j < i).")
expect(not bool(m[0, 0, 0, 1]), "causal_mask(3)", "token 0 may read token 1, its future",
       "Future keys (j > i) are blocked. Check the diagonal offset, and that True means ALLOWED.")
expect_close(m[0, 0].float(), [[1, 0, 0], [1, 1, 0], [1, 1, 1]], "causal_mask(3) as 0/1",
             hint="The lower triangle, diagonal included, is True.")

# %% nbgrader={"grade": true, "grade_id": "test_causal_mask_hidden", "points": 2}
# Hidden tests: other lengths, including T = 1.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_causal_mask(causal_mask)
### END HIDDEN TESTS

# %% [markdown]
# ### 1b. The causal mask during cached decoding
#
# When a decoder generates, it keeps the keys and values of the tokens it has already seen
# (the *KV cache*: lab 6 builds it, in its section "Decoding with a KV cache") and only
# computes queries for the `T_new` newest tokens. The scores are then `(T_new, T_total)`: the
# queries are the **last** `T_new` positions, so query *i* is at absolute position `T_total - T_new + i` and may read keys
# `0 … T_total - T_new + i`.
#
# (PyTorch's `is_causal=True` aligns a non-square mask the other way, top-left: query 0 reads key 0
# only. That is not what a cache needs, so build this mask yourself.)

# %% nbgrader={"grade_id": "causal_mask_with_cache", "solution": true}
def causal_mask_with_cache(T_new, T_total):
    """Causal mask for the T_new newest queries against all T_total cached keys.

    Args:
        T_new: number of new query positions (the last T_new of the sequence).
        T_total: number of keys (cached plus new).

    Returns:
        (1, 1, T_new, T_total) bool, True where attention is allowed.
    """
    ### BEGIN SOLUTION
    q_pos = torch.arange(T_total - T_new, T_total)[:, None]  # (T_new, 1) absolute query positions
    k_pos = torch.arange(T_total)[None, :]  # (1, T_total)
    return (k_pos <= q_pos)[None, None]  # (1, 1, T_new, T_total)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_causal_mask_with_cache", "points": 1}
mc = causal_mask_with_cache(1, 4)
expect_shape(mc, (1, 1, 1, 4), "causal_mask_with_cache(1, 4)", "One new query against four keys: (1, 1, 1, 4).")
expect_close(mc[0, 0].float(), [[1, 1, 1, 1]], "causal_mask_with_cache(1, 4)",
             hint="The one new token is the LAST position: it reads every cached key and itself.")
expect_close(causal_mask_with_cache(2, 4)[0, 0].float(), [[1, 1, 1, 0], [1, 1, 1, 1]], "causal_mask_with_cache(2, 4)",
             hint="Query i is absolute position T_total - T_new + i (aligned with the end, not the start).")
expect_close(causal_mask_with_cache(3, 3)[0, 0].float(), [[1, 0, 0], [1, 1, 0], [1, 1, 1]], "causal_mask_with_cache(3, 3)",
             hint="Without a cache (T_new == T_total) this is the ordinary causal mask.")

# %% nbgrader={"grade": true, "grade_id": "test_causal_mask_with_cache_hidden", "points": 1}
# Hidden tests: other T_new and T_total.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_causal_mask_with_cache(causal_mask_with_cache)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The padding mask, and combining masks
#
# A batch holds sequences of different lengths, padded to a common `T` with a PAD token. The
# tokenizer hands you `is_pad`, `(B, T_k)`, **True at the PAD tokens**. Padded positions must
# not be read as **keys**, or their arbitrary vectors leak into every real token's output and
# the result depends on the batch. The padding mask is therefore per sequence and per key,
# `(B, 1, 1, T_k)`: it broadcasts over heads and over queries. Mind the polarity: `is_pad` says
# what to ignore, our masks say what is allowed.

# %% nbgrader={"grade_id": "padding_mask", "solution": true}
def padding_mask(is_pad):
    """Key-padding mask.

    Args:
        is_pad: (B, T_k) bool, True at PAD tokens.

    Returns:
        (B, 1, 1, T_k) bool, True where the key is a real token (attention allowed).
    """
    ### BEGIN SOLUTION
    return (~is_pad)[:, None, None, :]  # (B, 1, 1, T_k)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_padding_mask", "points": 1}
is_pad_demo = torch.tensor([[False, False, False, False], [False, False, True, True]])  # (B=2, T=4)
pm = padding_mask(is_pad_demo)
expect_shape(pm, (2, 1, 1, 4), "padding_mask of a (2, 4) is_pad",
             "Padding removes KEYS: (B, 1, 1, T_k), broadcasting over heads and queries (not (B, 1, T, 1)).")
expect_close(pm[:, 0, 0, :].float(), [[1, 1, 1, 1], [1, 1, 0, 0]], "padding_mask values",
             hint="True where the key is a real token: is_pad is the opposite polarity, invert it.")
expect(pm.dtype == torch.bool, "padding_mask", f"dtype is {pm.dtype}", "Return a boolean mask.")

# %% nbgrader={"grade": true, "grade_id": "test_padding_mask_hidden", "points": 1}
# Hidden tests: other batch sizes and padding patterns.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_padding_mask(padding_mask)
### END HIDDEN TESTS

# %% [markdown]
# A decoder over a padded batch needs both masks: a key is allowed only if **every** mask allows
# it. Write `combine_masks(*masks)`, the logical AND of any number of broadcastable masks, where
# `None` means "no mask" and is skipped. With no mask at all it returns `None`.

# %% nbgrader={"grade_id": "combine_masks", "solution": true}
def combine_masks(*masks):
    """Logical AND of broadcastable boolean masks; None entries are ignored.

    Args:
        *masks: bool tensors broadcastable to (B, H, T_q, T_k), or None.

    Returns:
        The broadcast AND of the masks, or None when every argument is None.
    """
    ### BEGIN SOLUTION
    combined = None
    for m in masks:
        if m is None:
            continue
        combined = m if combined is None else combined & m  # broadcasts, e.g. (1,1,T,T) & (B,1,1,T) -> (B,1,T,T)
    return combined
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_combine_masks", "points": 1}
# The masks written out here (not your causal_mask and padding_mask), so this cell judges combine_masks alone.
causal4 = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]  # (1, 1, 4, 4): True where key j <= query i
padding_demo = ~is_pad_demo[:, None, None, :]  # (2, 1, 1, 4): True at the real keys
both = combine_masks(causal4, None, padding_demo)
expect_shape(both, (2, 1, 4, 4), "combine_masks(causal (1,1,4,4), None, padding (2,1,1,4))",
             "Broadcasting the AND of (1, 1, T, T) and (B, 1, 1, T) gives (B, 1, T, T).")
expect_close(both[1, 0].float(), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]],
             "combined mask of the padded sequence",
             hint="AND, not OR: a key is allowed only if the causal AND the padding masks allow it.")
expect(combine_masks(None, None) is None, "combine_masks(None, None)", "did not return None",
       "No mask at all means None (attention everywhere).")

# %% nbgrader={"grade": true, "grade_id": "test_combine_masks_hidden", "points": 1}
# Hidden tests: three masks, masks with a head axis, a single mask among Nones.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_combine_masks(combine_masks)
### END HIDDEN TESTS

# %% [markdown]
# The three masks for a batch whose second sequence has two PAD tokens at the end. Allowed
# pairs are 1. The padding mask blocks whole *columns*; the padded query rows still read the real
# keys (their outputs are thrown away later, but they must not be NaN).

# %% nbgrader={"grade_id": "mask_heatmaps", "locked": true}
is_pad_demo = torch.tensor([[False, False, False, False], [False, False, True, True]])  # (B=2, T=4), as in the test
pad_labels = ["tok0", "tok1", "PAD", "PAD"]
heatmap_grid({
    "causal": causal_mask(4)[0, 0].float(),
    "padding (sequence 2)": padding_mask(is_pad_demo)[1, 0].expand(4, 4).float(),
    "causal AND padding": combine_masks(causal_mask(4), padding_mask(is_pad_demo))[1, 0].float(),
}, pad_labels, annotate=False);

# %% [markdown]
# ## 3. Filling masked scores: which number?
#
# A masked score must get zero weight after the softmax. The textbook writes -∞, and that is
# right until a **whole row** is masked (a padded query in a fully padded sequence, say): the
# softmax then computes `-inf - (-inf) = nan`, and one NaN row poisons the gradients of the whole
# batch. The safe fill is the most negative **finite** number of the scores' dtype,
# `torch.finfo(scores.dtype).min`: -65504 in float16, about -3.4e38 in float32 and bfloat16. A
# fully masked row then becomes uniform (harmless), and a masked key in a real row still gets
# `exp(-65504 - max) = 0`.
#
# The lab's convention for a fully masked row: its weights are exactly uniform, `1/T_k` on every
# key, and its output is the mean of the value rows (never NaN, never zeros), whatever its scores.
# So every masked score is **replaced** by exactly `torch.finfo(scores.dtype).min`
# (`masked_fill` or `torch.where`). An additive mask (`scores + bias`, bias 0 or `finfo.min`) is
# not the same: it keeps each masked score's offset (in float16, `-65504 + 40` is `-65472`), so a
# fully masked row is no longer uniform, and it overflows to -∞ for negative scores (section 6).
# An additive form is accepted only when it gives the same result: a bias far below `finfo.min`,
# added in a wider dtype, then clamped at `finfo.min`.
#
# Write `apply_mask`. Return a new tensor (do not modify `scores` in place) of the scores'
# dtype; `mask=None` returns the scores unchanged.

# %% nbgrader={"grade_id": "apply_mask", "solution": true}
def apply_mask(scores, mask):
    """Fill disallowed scores with the most negative finite value of their dtype.

    Args:
        scores: (B, H, T_q, T_k) pre-softmax scores, any floating dtype.
        mask: bool broadcastable to the scores, True where attention is allowed; or None.

    Returns:
        (B, H, T_q, T_k) scores of the same dtype, masked entries replaced.
    """
    ### BEGIN SOLUTION
    if mask is None:
        return scores
    return scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (B, H, T_q, T_k)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_apply_mask", "points": 2}
s16 = torch.tensor([[[[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]]]], dtype=torch.float16)  # (1, 1, 2, 3)
m16 = torch.tensor([[True, True, False], [False, False, False]])  # (2, 3): row 1 fully masked
try:
    filled = apply_mask(s16, m16)
except RuntimeError as err:
    expect(False, "apply_mask on float16 scores", f"raised RuntimeError: {err}",
           "A fixed fill such as -1e9 does not fit in float16 (largest magnitude 65504): use torch.finfo(scores.dtype).min.")
expect(filled.dtype == torch.float16, "apply_mask on float16 scores", f"returned {filled.dtype}",
       "Keep the scores' dtype.")
expect_finite(filled, "apply_mask on float16 scores",
              "-inf (or -1e9, which is -inf in float16) breaks fully masked rows: use torch.finfo(scores.dtype).min.")
expect_close(filled[0, 0, 0, :2], [1.0, 2.0], "allowed scores after apply_mask",
             hint="True means ALLOWED: those scores stay as they are.")
expect(float(filled[0, 0, 0, 2]) == torch.finfo(torch.float16).min, "the masked score in float16",
       f"is {float(filled[0, 0, 0, 2]):.6g}", "Fill with torch.finfo(scores.dtype).min (-65504 in float16).")
w16 = torch.softmax(filled, dim=-1)
expect_close(w16[0, 0], [[0.269, 0.731, 0.0], [1 / 3, 1 / 3, 1 / 3]], "softmax of the filled float16 scores",
             hint="The fully masked row should come out uniform, not NaN.")

# %% nbgrader={"grade": true, "grade_id": "test_apply_mask_hidden", "points": 2}
# Hidden tests: float16, bfloat16, float32, float64; masks of several broadcast shapes; fully masked rows
# with large positive and negative scores (masked scores must be exactly finfo.min).
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_apply_mask(apply_mask)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Scaled dot-product attention with a mask
#
# For already-projected, already-split heads, `q` is `(B, H, T_q, d_k)`, `k` is `(B, H, T_k, d_k)`
# and `v` is `(B, H, T_k, d_v)`:
#
# $$\text{attn} = \text{softmax}\!\left(\text{mask}\!\left(\frac{q k^\top}{\sqrt{d_k}}\right)\right), \qquad \text{out} = \text{attn}\; v .$$
#
# The mask acts on the **scores**, before the softmax, so the allowed weights still sum to 1. Your
# function must agree with `torch.nn.functional.scaled_dot_product_attention`, whose boolean
# `attn_mask` uses the same convention (True = may attend) and whose `is_causal=True` is our
# `causal_mask(T)`. It must work in every floating dtype and return the input's dtype.

# %% nbgrader={"grade_id": "scaled_dot_product_attention", "solution": true}
def scaled_dot_product_attention(q, k, v, mask=None):
    """Scaled dot-product attention for batched heads.

    Args:
        q: (B, H, T_q, d_k) queries.
        k: (B, H, T_k, d_k) keys.
        v: (B, H, T_k, d_v) values.
        mask: bool broadcastable to (B, H, T_q, T_k), True where attention is allowed; or None.

    Returns:
        out: (B, H, T_q, d_v) outputs; attn: (B, H, T_q, T_k) weights, every row sums to 1.
    """
    ### BEGIN SOLUTION
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T_q, d_k) @ (B, H, d_k, T_k) -> (B, H, T_q, T_k)
    scores = apply_mask(scores, mask)  # (B, H, T_q, T_k)
    attn = F.softmax(scores, dim=-1)  # (B, H, T_q, T_k), softmax over the keys
    out = attn @ v  # (B, H, T_q, T_k) @ (B, H, T_k, d_v) -> (B, H, T_q, d_v)
    return out, attn
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_scaled_dot_product_attention", "points": 2}
Qt, Kt, Vt = (torch.tensor(a)[None, None] for a in (ticket.W_q, ticket.W_k, ticket.W_v))  # (1, 1, 3, 2) each, float64
out_plain, attn_plain = scaled_dot_product_attention(Qt, Kt, Vt)  # the ticket's tokens are one-hot: Q = W_q
expect_close(attn_plain[0, 0], lesson_plain, "the ticket's weights without a mask",
             hint="Scores are divided by sqrt(d_k) = 1.414 and the softmax runs over the keys (dim=-1).")
expect_close(out_plain[0, 0], [[1.0, 1.0], [0.797, 1.203], [0.745, 1.255]], "the ticket's outputs",
             hint="out = attn @ v.")
gen = torch.Generator().manual_seed(3)
q_t, k_t, v_t = (torch.randn(2, 3, 5, 4, generator=gen) for _ in range(3))  # (B, H, T, d)
causal5 = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]  # (1, 1, 5, 5): written out, not your causal_mask
out_t, attn_t = scaled_dot_product_attention(q_t, k_t, v_t, causal5)
expect_rows_sum_to_one(attn_t, "causal weights on random inputs",
                       "Rows must sum to 1: was the mask applied after the softmax instead of to the scores?", atol=1e-5)
expect_close(out_t, F.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True), "causal outputs vs torch's SDPA",
             hint="Check the scale (1/sqrt(d_k)), the softmax axis and the mask polarity.", atol=1e-5)
pad_t = ~torch.tensor([[False] * 5, [False, False, False, True, True]])[:, None, None, :]  # (2, 1, 1, 5): True = real key
out_p, attn_p = scaled_dot_product_attention(q_t, k_t, v_t, pad_t)
expect_close(out_p, F.scaled_dot_product_attention(q_t, k_t, v_t, attn_mask=pad_t), "padded outputs vs torch's SDPA",
             hint="The boolean mask is True where attention is allowed, as in torch's attn_mask.", atol=1e-5)
expect(out_t.dtype == q_t.dtype and out_plain.dtype == Qt.dtype, "scaled_dot_product_attention", "changed the dtype",
       "Return the inputs' dtype.")

# %% nbgrader={"grade": true, "grade_id": "test_scaled_dot_product_attention_hidden", "points": 3}
# Hidden tests: T_q != T_k, d_k != d_v, masks broadcast over batch and heads, float16 / bfloat16 /
# float32 / float64, fully masked rows (uniform weights, whatever their scores; no NaN anywhere),
# compared with torch's SDPA on fresh inputs.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_scaled_dot_product_attention(scaled_dot_product_attention)
### END HIDDEN TESTS

# %% [markdown]
# The weights under each mask for the padded batch of section 2 (sequence 2, head 0). Masked
# keys get exactly 0 and every row still sums to 1.

# %% nbgrader={"grade_id": "weight_heatmaps", "locked": true}
g4 = torch.Generator().manual_seed(4)
q4, k4, v4 = (torch.randn(2, 1, 4, 8, generator=g4) for _ in range(3))  # (B, H, T, d) each
weights_under = {
    name: scaled_dot_product_attention(q4, k4, v4, mask)[1][1, 0]
    for name, mask in [("causal", causal_mask(4)), ("padding", padding_mask(is_pad_demo)),
                       ("causal AND padding", combine_masks(causal_mask(4), padding_mask(is_pad_demo)))]
}
heatmap_grid(weights_under, pad_labels);

# %% [markdown]
# ## 5. The lesson's causal tables
#
# Reproduce the lesson's numbers with **your** functions, as `(3, 3)` tensors of weights:
#
# * `ticket_causal`: the ticket *bag delayed refund* under the causal mask. The tokens are one-hot,
#   so the queries, keys and values are the rows of `W_q`, `W_k`, `W_v`: the tensors `Qt`, `Kt`, `Vt`
#   of the test in section 4, each `(1, 1, 3, 2)`, `d_k = 2`.
# * `bank_causal`: the bank session *login, new-device, transfer* with keys `bank.K`, values
#   `bank.V`, `d_k = 4`. The lesson only gives the queries of positions 1 and 2
#   (`bank.queries[1]`, `bank.queries[2]`); use a zero query for *login*, whose row is 1, 0, 0
#   under the causal mask whatever its query.

# %% nbgrader={"grade_id": "causal_tables", "solution": true}
### BEGIN SOLUTION
ticket_causal = scaled_dot_product_attention(Qt, Kt, Vt, causal_mask(3))[1][0, 0]  # (3, 3)
Qb = torch.tensor(np.stack([np.zeros(4), bank.queries[1], bank.queries[2]]))[None, None]  # (1, 1, 3, 4)
Kb, Vb = torch.tensor(bank.K)[None, None], torch.tensor(bank.V)[None, None]  # (1, 1, 3, 4), (1, 1, 3, 2)
bank_causal = scaled_dot_product_attention(Qb, Kb, Vb, causal_mask(3))[1][0, 0]  # (3, 3)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_causal_tables", "points": 2}
expect_shape(ticket_causal, (3, 3), "ticket_causal", "One row per query, one column per key: (3, 3).")
expect_close(ticket_causal, lesson_causal, "the ticket's causal weights",
             hint="The lesson's table: 1/0/0, 0.330/0.670/0, 0.248/0.503/0.248. Is the mask applied to the scores "
                  "before the softmax, with True = allowed?")
expect_close(bank_causal[1], [0.378, 0.622, 0.0], "the new-device row of the bank session",
             hint="Scaled scores (0, 0.5, 1.0) with the future key (transfer) masked: softmax over keys 0 and 1 only.")
expect_close(bank_causal[2], [0.212, 0.576, 0.212], "the transfer row of the bank session",
             hint="The last row sees every key and is unchanged by the causal mask. d_k = 4, so divide by 2.")
expect_close(bank_causal[0], [1.0, 0.0, 0.0], "the login row of the bank session",
             hint="The first position can only read itself, whatever its query.")

# %% [markdown]
# ## 6. Fill values in float16
#
# Show, in float16, what each candidate fill does. You are given one query's scores and a row in
# which every key is masked:
#
# * `w_neg_inf`: the softmax of `row` after filling the masked entries with `float("-inf")`;
# * `w_finfo`: the same with `torch.finfo(torch.float16).min`;
# * `neg_1e9_in_fp16`: the float16 tensor you get from `torch.tensor(-1e9).to(torch.float16)`;
# * `masked_fill_error`: the message (a string, `str(e)`) of the error torch raises when you
#   `masked_fill` the masked entries of `row` with -1e9; catch it with `try` /
#   `except RuntimeError as e`. (The wording differs between torch releases; torch 2.13 says the
#   value "cannot be converted to type c10::Half without overflow".)
# * `additive`: an **additive** mask is a float tensor that is 0 where allowed and `finfo.min`
#   where masked, added to the scores. Build it in float16 for `nothing`, with the shape of `row`;
# * `w_additive`: add `additive` to `row - 20` (scores that are more negative) and take the softmax.
#
# Every tensor stays in float16 and has the shape of `row`, `(1, 4)`: one query's scores give one
# query's weights. (A mask of another shape, such as `(4, 4)`, would broadcast the one query into
# four, so the shapes are part of the answer.)

# %% nbgrader={"grade_id": "fill_values_given", "locked": true}
row = torch.tensor([[2.0, -1.0, 0.5, 1.0]], dtype=torch.float16)  # (1, 4) one query's scores
nothing = torch.zeros(1, 4, dtype=torch.bool)  # (1, 4) every key masked
print("float16: largest magnitude", torch.finfo(torch.float16).max, "| finfo.min", torch.finfo(torch.float16).min)

# %% nbgrader={"grade_id": "fill_values", "solution": true}
### BEGIN SOLUTION
w_neg_inf = torch.softmax(row.masked_fill(~nothing, float("-inf")), dim=-1)  # (1, 4): all NaN
w_finfo = torch.softmax(row.masked_fill(~nothing, torch.finfo(torch.float16).min), dim=-1)  # (1, 4): uniform
neg_1e9_in_fp16 = torch.tensor(-1e9).to(torch.float16)  # -inf: beyond float16's range
try:
    row.masked_fill(~nothing, -1e9)
    masked_fill_error = None
except RuntimeError as e:
    masked_fill_error = str(e)
additive = torch.zeros(1, 4, dtype=torch.float16).masked_fill(~nothing, torch.finfo(torch.float16).min)  # (1, 4)
w_additive = torch.softmax((row - 20) + additive, dim=-1)  # (1, 4): -20 - 65504 overflows to -inf, then NaN
### END SOLUTION
print("softmax with -inf:", w_neg_inf, "\nsoftmax with finfo.min:", w_finfo)
print("-1e9 in float16:", neg_1e9_in_fp16, "\nmasked_fill(-1e9) says:", masked_fill_error)
print("softmax of scores - 20 with an additive finfo.min mask:", w_additive)

# %% nbgrader={"grade": true, "grade_id": "test_fill_values", "points": 2}
expect(bool(torch.isnan(w_neg_inf).all()), "w_neg_inf", f"is {w_neg_inf}",
       "A row of -inf gives -inf - (-inf) = nan inside the softmax: every entry should be NaN.")
expect(w_finfo.dtype == torch.float16, "w_finfo", f"dtype is {w_finfo.dtype}", "Stay in float16.")
expect_close(w_finfo, [[0.25, 0.25, 0.25, 0.25]], "w_finfo", hint="finfo.min is finite: a fully masked row becomes uniform.")
expect(neg_1e9_in_fp16.dtype == torch.float16 and bool(torch.isneginf(neg_1e9_in_fp16)), "neg_1e9_in_fp16",
       f"is {neg_1e9_in_fp16}", "Convert -1e9 to float16: it exceeds 65504, so it becomes -inf.")
expect(isinstance(masked_fill_error, str) and len(masked_fill_error) > 0, "masked_fill_error",
       f"is {masked_fill_error!r}",
       "masked_fill on a float16 tensor with -1e9 raises a RuntimeError: keep its message, str(e).")
for name, value in [("w_neg_inf", w_neg_inf), ("w_finfo", w_finfo), ("additive", additive), ("w_additive", w_additive)]:
    expect_shape(value, (1, 4), name, "One query's scores give one query's row: keep the shape of row, (1, 4). A mask "
                 "of another shape (such as (4, 4) or (2, 4)) broadcasts the one query into several.")
expect(additive.dtype == torch.float16 and bool((additive == torch.finfo(torch.float16).min).all()), "additive",
       f"is {additive}", "Every key of nothing is masked: the additive mask is finfo.min (-65504) in all four places.")
expect(w_additive.dtype == torch.float16 and bool(torch.isnan(w_additive).all()), "w_additive", f"is {w_additive}",
       "In float16, -20 + (-65504) rounds past the largest magnitude to -inf, so the fully masked row is NaN again.")

# %% [markdown]
# So: -∞ breaks fully masked rows in every dtype; -1e9 is not even representable in float16
# (`masked_fill` refuses it, a cast silently makes it -∞); an additive `finfo.min` mask overflows
# as soon as a score reaches -16 (-16 - 65504 rounds past the largest float16 to -∞).
# `masked_fill` with `finfo.min` of the scores' own dtype has none of these problems.

# %% [markdown]
# ## 7. Masking after the softmax (exercise 2)
#
# A common bug: compute the softmax over all keys and *then* zero the masked weights. Write that
# bug on purpose, as `mask_after_softmax`, so you can measure it. Then compare with your correct
# function on the ticket under the causal mask.

# %% nbgrader={"grade_id": "mask_after_softmax", "solution": true}
def mask_after_softmax(q, k, v, mask):
    """The WRONG order, on purpose: softmax over all keys, then zero the masked weights.

    Args:
        q: (B, H, T_q, d_k), k: (B, H, T_k, d_k), v: (B, H, T_k, d_v).
        mask: bool broadcastable to (B, H, T_q, T_k), True where attention is allowed.

    Returns:
        out: (B, H, T_q, d_v); attn: (B, H, T_q, T_k) weights whose rows sum to at most 1.
    """
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    attn = torch.softmax(scores, dim=-1) * mask  # (B, H, T_q, T_k), masked weights zeroed afterwards
    return attn @ v, attn  # (B, H, T_q, d_v), (B, H, T_q, T_k)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mask_after_softmax", "points": 1}
causal3 = torch.ones(3, 3, dtype=torch.bool).tril()[None, None]  # (1, 1, 3, 3): written out, not your causal_mask
out_bad, attn_bad = mask_after_softmax(Qt, Kt, Vt, causal3)
out_ok = F.scaled_dot_product_attention(Qt, Kt, Vt, attn_mask=causal3)  # (1, 1, 3, 2): torch's, not your attention
shrink = attn_bad.sum(-1)  # (1, 1, 3): row sums after the bug
expect_close(shrink[0, 0], [0.401, 0.599, 1.0], "row sums of the ticket's weights masked after the softmax",
             hint="Token 0 keeps only its own unmasked weight 0.401; the last row keeps everything.")
expect_close(out_bad, shrink[..., None] * out_ok, "the buggy outputs vs shrink * correct outputs",
             hint="Zero the masked weights without renormalising: each output is the correct one scaled by its row sum.")

# %% nbgrader={"grade": true, "grade_id": "test_mask_after_softmax_hidden", "points": 2}
# Hidden tests: random masks and shapes.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_mask_after_softmax(mask_after_softmax)
### END HIDDEN TESTS

# %% [markdown]
# Each output is the correct output multiplied by its row's sum, a factor that depends on the
# position: 0.401 for the first ticket token, 1 for the last. On a random sequence of T tokens the
# first position keeps about 1/T of its weight. The model can partly absorb this (a LayerNorm
# rescales), which is why the bug survives training; the tell is `attn.sum(-1) != 1`. Worse, the
# softmax's denominator still contains the future scores, so the future leaks in: section 8's test
# will catch that.

# %% nbgrader={"grade_id": "shrink_curve", "locked": true}
T_long = 12
g12 = torch.Generator().manual_seed(7)
q12, k12, v12 = (torch.randn(200, 1, T_long, 8, generator=g12) for _ in range(3))  # (200, 1, T, d) each
_, attn12 = mask_after_softmax(q12, k12, v12, causal_mask(T_long))
curves(range(T_long), {"mean row sum after the bug": attn12.sum(-1).mean(dim=(0, 1)), "1 (correct)": [1.0] * T_long},
       xlabel="query position", ylabel="sum of the row's weights", title="masking after the softmax, T = 12");

# %% [markdown]
# ## 8. Property tests that catch leaks
#
# A heat map will not show a leak; a test will. Write two property tests as functions that take
# a layer and return `True` when the property holds, `False` when it is violated. The grader will
# run them on correct layers and on layers with leaks it has prepared, so they must catch a leak
# of any size and must not fail a correct layer (compare with a tolerance, `torch.allclose`).
#
# **`outputs_ignore_future(attn_fn)`**: `attn_fn(x)` maps `x`, `(B, T, D_MODEL)` float32, to outputs
# of the same shape and claims to be causal. Changing a token must leave the outputs of every
# **earlier** position unchanged. Try several positions (a leak may come from just the next token).

# %% nbgrader={"grade_id": "outputs_ignore_future", "solution": true}
def outputs_ignore_future(attn_fn, T=6, B=2):
    """Property test: a causal layer's outputs do not depend on later tokens.

    Args:
        attn_fn: layer(x) -> y, x and y (B, T, D_MODEL) float32.
        T, B: length and batch size of the random inputs.

    Returns:
        True if, for every position t, changing the tokens after t leaves outputs 0..t unchanged.
    """
    ### BEGIN SOLUTION
    x = torch.randn(B, T, D_MODEL)  # (B, T, D_MODEL)
    y = attn_fn(x)  # (B, T, D_MODEL)
    for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn(B, T - t - 1, D_MODEL)  # change every token after t
        y2 = attn_fn(x2)  # (B, T, D_MODEL)
        if not torch.allclose(y[:, : t + 1], y2[:, : t + 1], atol=1e-5):
            return False
    return True
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_outputs_ignore_future", "points": 1}
# A verdict is a truth value: True / False, or a one-entry boolean tensor (hence == rather than `is`).
verdict = outputs_ignore_future(library_causal_layer(causal=True))
expect(verdict == True, "outputs_ignore_future(a causal SDPA layer)", f"returned {verdict!r}",
       "A correct causal layer must pass: compare only earlier positions, with torch.allclose.")
verdict = outputs_ignore_future(library_causal_layer(causal=False))
expect(verdict == False, "outputs_ignore_future(an SDPA layer without is_causal)", f"returned {verdict!r}",
       "This layer reads the future: changing a later token changes earlier outputs.")

# %% nbgrader={"grade": true, "grade_id": "test_outputs_ignore_future_hidden", "points": 2}
# Hidden tests: your test is run on a correct layer and on five layers with different leaks.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_outputs_ignore_future(outputs_ignore_future)
### END HIDDEN TESTS

# %% [markdown]
# **`padding_invariant(attn_fn)`**: `attn_fn(x, is_pad)` maps `x`, `(B, T, D_MODEL)` float32, and
# `is_pad`, `(B, T)` bool (True at PAD), to outputs `(B, T, D_MODEL)`. Two properties, both needed:
# 1. appending PAD tokens (any vectors) leaves the real tokens' outputs unchanged;
# 2. a padded batch of sequences of **different** lengths gives, at the real positions, the same
#    outputs as running each sequence alone.
#
# Compare real positions only: a padded position's output is discarded.

# %% nbgrader={"grade_id": "padding_invariant", "solution": true}
def padding_invariant(attn_fn, lengths=(5, 3)):
    """Property test: padding neither changes real outputs nor couples sequences of a batch.

    Args:
        attn_fn: layer(x, is_pad) -> y, x and y (B, T, D_MODEL) float32, is_pad (B, T) bool.
        lengths: lengths of the sequences in the test batch (at least two different ones).

    Returns:
        True if both properties hold.
    """
    ### BEGIN SOLUTION
    seqs = [torch.randn(1, n, D_MODEL) for n in lengths]  # each (1, n, D_MODEL)
    alone = [attn_fn(s, torch.zeros(1, s.shape[1], dtype=torch.bool)) for s in seqs]  # each (1, n, D_MODEL)
    T = max(lengths) + 2  # at least two PAD tokens on every sequence
    x = torch.randn(len(seqs), T, D_MODEL)  # (B, T, D_MODEL): random vectors at the PAD positions
    is_pad = torch.ones(len(seqs), T, dtype=torch.bool)  # (B, T)
    for b, s in enumerate(seqs):
        x[b, : s.shape[1]] = s[0]
        is_pad[b, : s.shape[1]] = False
    batched = attn_fn(x, is_pad)  # (B, T, D_MODEL)
    for b, s in enumerate(seqs):
        n = s.shape[1]
        if not torch.allclose(batched[b, :n], alone[b][0], atol=1e-5):
            return False
        one_padded = attn_fn(x[b : b + 1], is_pad[b : b + 1])  # (1, T, D_MODEL): this sequence plus padding
        if not torch.allclose(one_padded[0, :n], alone[b][0], atol=1e-5):
            return False
    return True
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_padding_invariant", "points": 1}
verdict = padding_invariant(library_padding_layer(use_padding=True))
expect(verdict == True, "padding_invariant(MultiheadAttention with key_padding_mask)", f"returned {verdict!r}",
       "A correct layer must pass: compare real positions only, with torch.allclose.")
verdict = padding_invariant(library_padding_layer(use_padding=False))
expect(verdict == False, "padding_invariant(MultiheadAttention without a padding mask)", f"returned {verdict!r}",
       "This layer reads the PAD tokens: appending padding changes the real outputs.")

# %% nbgrader={"grade": true, "grade_id": "test_padding_invariant_hidden", "points": 2}
# Hidden tests: your test is run on a correct layer and on three layers with different leaks.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_padding_invariant(padding_invariant)
### END HIDDEN TESTS

# %% [markdown]
# Now point your tests at **your own** attention: a one-head layer made of your
# `scaled_dot_product_attention` and masks, with fixed random projections.

# %% nbgrader={"grade_id": "own_layer_tests", "locked": true}
W_own = torch.randn(3, D_MODEL, D_MODEL, generator=torch.Generator().manual_seed(11)) / math.sqrt(D_MODEL)

def own_layer(x, mask):
    """One head of your attention on x (B, T, D_MODEL) under mask; returns (B, T, D_MODEL)."""
    q, k, v = (x @ W_own[i] for i in range(3))  # (B, T, D_MODEL) each
    return scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]  # (B, T, D_MODEL)

print("your causal layer ignores the future:", outputs_ignore_future(lambda x: own_layer(x, causal_mask(x.shape[1]))))
print("your padded layer is padding-invariant:", padding_invariant(lambda x, p: own_layer(x, padding_mask(p))))
print("masking after the softmax ignores the future:", outputs_ignore_future(
    lambda x: mask_after_softmax(*(x[:, None] @ W_own[i] for i in range(3)), causal_mask(x.shape[1]))[0][:, 0]))

# %% [markdown]
# ## 9. PyTorch's two opposite conventions
#
# `F.scaled_dot_product_attention` takes a boolean `attn_mask` that is **True where attention is
# allowed** (our convention). `nn.MultiheadAttention` takes a `key_padding_mask`, `(B, T_k)`,
# that is **True where a key is ignored**. Write the two conversions.

# %% nbgrader={"grade_id": "mask_conversions", "solution": true}
def to_key_padding_mask(sdpa_mask):
    """SDPA-style key mask -> nn.MultiheadAttention's key_padding_mask.

    Args:
        sdpa_mask: (B, 1, 1, T_k) bool, True where the key may be attended to.

    Returns:
        (B, T_k) bool, True where the key must be ignored.
    """
    ### BEGIN SOLUTION
    return ~sdpa_mask[:, 0, 0, :]  # (B, T_k)
    ### END SOLUTION


def to_sdpa_mask(key_padding_mask):
    """nn.MultiheadAttention's key_padding_mask -> SDPA-style key mask.

    Args:
        key_padding_mask: (B, T_k) bool, True where the key must be ignored.

    Returns:
        (B, 1, 1, T_k) bool, True where the key may be attended to.
    """
    ### BEGIN SOLUTION
    return (~key_padding_mask)[:, None, None, :]  # (B, 1, 1, T_k)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mask_conversions", "points": 1}
padding_demo = ~is_pad_demo[:, None, None, :]  # (2, 1, 1, 4): the SDPA mask written out, not your padding_mask
kpm = to_key_padding_mask(padding_demo)
expect_shape(kpm, (2, 4), "to_key_padding_mask of a (2, 1, 1, 4) mask", "key_padding_mask is (B, T_k).")
expect_close(kpm.float(), is_pad_demo.float(), "to_key_padding_mask(the SDPA mask of is_pad)",
             hint="key_padding_mask is True at the keys to IGNORE: it is is_pad again.")
expect_close(to_sdpa_mask(is_pad_demo).float(), padding_demo.float(), "to_sdpa_mask(is_pad)",
             hint="SDPA's attn_mask is True where attention is ALLOWED: invert, then add the two axes.")

# %% nbgrader={"grade": true, "grade_id": "test_mask_conversions_hidden", "points": 1}
# Hidden tests: both conversions, on random batch sizes and key lengths.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_mask_conversions(to_key_padding_mask, to_sdpa_mask)
### END HIDDEN TESTS

# %% [markdown]
# ### The silent failure, and fully masked rows
#
# Pass an SDPA-style mask (True = allowed) straight to `nn.MultiheadAttention` as its
# `key_padding_mask` and nothing complains: the layer simply ignores the real tokens and attends
# **only to the padding**. Compute, with the given `mha` layer and batch:
#
# * `weight_on_padding`: `(B, T)`, for every query, the total weight that lands on PAD keys when
#   `padding_mask(is_pad_mix)[:, 0, 0, :]` is passed as `key_padding_mask` by mistake (use the
#   weights `mha` returns);
# * `sdpa_dead` and `mha_dead`: the outputs of torch's `F.scaled_dot_product_attention` and of
#   `mha` for a sequence whose keys are **all** masked (`dead_sdpa_mask` / `dead_kpm` below).
#   What does each API return for a fully masked row?

# %% nbgrader={"grade_id": "convention_given", "locked": true}
mha = torch.nn.MultiheadAttention(D_MODEL, 2, batch_first=True).eval()
x_mix = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(5))  # (B, T, D_MODEL)
is_pad_mix = torch.tensor([[False, False, False, True, True], [False, False, False, False, True]])  # (B, T)
q_dead, k_dead, v_dead = x_mix[:1, None], x_mix[:1, None], x_mix[:1, None]  # (1, 1, 5, D_MODEL)
dead_sdpa_mask = torch.zeros(1, 1, 1, 5, dtype=torch.bool)  # SDPA style: no key allowed
dead_kpm = torch.ones(1, 5, dtype=torch.bool)  # MultiheadAttention style: every key ignored

# %% nbgrader={"grade_id": "convention_mixup", "solution": true}
### BEGIN SOLUTION
with torch.no_grad():
    _, w_wrong = mha(x_mix, x_mix, x_mix, key_padding_mask=padding_mask(is_pad_mix)[:, 0, 0, :])  # (B, T, T)
    weight_on_padding = (w_wrong * is_pad_mix[:, None, :]).sum(-1)  # (B, T)
    sdpa_dead = F.scaled_dot_product_attention(q_dead, k_dead, v_dead, attn_mask=dead_sdpa_mask)  # (1, 1, 5, D_MODEL)
    mha_dead, _ = mha(x_mix[:1], x_mix[:1], x_mix[:1], key_padding_mask=dead_kpm)  # (1, 5, D_MODEL)
### END SOLUTION
print("weight on PAD keys with the mask passed the wrong way round:\n", weight_on_padding)
print("SDPA, fully masked row:", sdpa_dead[0, 0, 0, :4], "\nMultiheadAttention, fully masked row:", mha_dead[0, 0, :4])

# %% nbgrader={"grade": true, "grade_id": "test_convention_mixup", "points": 2}
expect_shape(weight_on_padding, (2, 5), "weight_on_padding", "One number per (sequence, query): (B, T).")
expect_close(weight_on_padding, torch.ones(2, 5), "weight_on_padding",
             hint="With True = real token passed as key_padding_mask (True = ignore), MultiheadAttention ignores every "
                  "real token: all the weight lands on the padding.")
expect(bool((sdpa_dead == 0).all()) or bool(torch.isnan(sdpa_dead).all()), "sdpa_dead", f"is {sdpa_dead.flatten()[:4]}",
       "Call F.scaled_dot_product_attention with attn_mask=dead_sdpa_mask: recent torch returns zeros, older "
       "releases NaN.")
expect(bool(torch.isnan(mha_dead).all()), "mha_dead", f"is {mha_dead.flatten()[:4]}",
       "Call mha with key_padding_mask=dead_kpm: MultiheadAttention returns NaN for a fully masked row.")

# %% [markdown]
# So the same "no key allowed" situation gives zeros from SDPA (on torch 2.13; older torch
# releases return NaN there too, and the test accepts either), NaN from `nn.MultiheadAttention`,
# and a uniform average of the values from your `finfo.min` version. None of them raises an
# error. NaN is the dangerous one: one NaN row poisons the gradients of the whole batch. Keep fully
# masked rows finite, and keep padded positions out of the loss.

# %% [markdown]
# ### Defaults that change results without an error
#
# The lesson's table lists four defaults of PyTorch's attention that change what you compute.
# None of them raises an error; each cell below measures one.
#
# **`nn.MultiheadAttention(..., batch_first=False)`.** By default the layer reads `(T, B, E)`,
# sequence first. Hand it a batch-first `(B, T, E)` tensor and it attends over the **batch** axis:
# every "sequence" it sees is one position taken from each of your sequences. The output has the
# shape of the input, so nothing complains. Two tells: the attribute `mha.batch_first`, and the
# shape of the returned weights, `(T, B, B)` instead of `(B, T, T)`.

# %% nbgrader={"grade_id": "defaults_given", "locked": true}
mha_seq = torch.nn.MultiheadAttention(D_MODEL, 2).eval()  # the default batch_first=False: reads (T, B, E)
mha_bf = torch.nn.MultiheadAttention(D_MODEL, 2, batch_first=True).eval()  # reads (B, T, E)
mha_bf.load_state_dict(mha_seq.state_dict())  # the same weights: only the layout differs
x_bf = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(9))  # (B, T, D_MODEL), batch first
with torch.no_grad():
    out_right, w_right = mha_bf(x_bf, x_bf, x_bf)  # (B, T, D_MODEL), (B, T, T)
    out_silent, w_silent = mha_seq(x_bf, x_bf, x_bf)  # x_bf read as (T=2, B=5, E): wrong, and no error
print("mha_seq.batch_first:", mha_seq.batch_first, "| output shapes:", tuple(out_right.shape), tuple(out_silent.shape))
print("weights: batch_first=True", tuple(w_right.shape), "| silent transpose", tuple(w_silent.shape))
print(f"largest difference between the two outputs: {(out_right - out_silent).abs().max():.3f}")

# %% [markdown]
# **`need_weights=True, average_attn_weights=True`.** The weights the layer returns by default
# are the **mean over the heads**, `(B, T, T)`. A map read off that average may belong to no
# head at all (a "head that attends to *refund*" may not exist). `average_attn_weights=False`
# returns one map per head, `(B, H, T, T)`.

# %% nbgrader={"grade_id": "head_average", "locked": true}
with torch.no_grad():
    w_heads = mha_bf(x_bf, x_bf, x_bf, average_attn_weights=False)[1]  # (B, H, T, T)
print(f"default weights - mean of the per-head weights: {(w_right - w_heads.mean(1)).abs().max():.1e}")
print(f"head 0 and head 1 differ by up to {(w_heads[:, 0] - w_heads[:, 1]).abs().max():.3f}; "
      f"the average differs from head 0 by up to {(w_right - w_heads[:, 0]).abs().max():.3f}")

# %% [markdown]
# Write `mha_batch_first(mha, x)`: run a sequence-first layer (one built with the default
# `batch_first=False`) as self-attention on batch-first tokens `x`, `(B, T, E)`, and return its
# outputs batch first together with the weights of **every head**. Swap the axes with
# `transpose`, not `reshape` or `view` (those keep the memory order, so they regroup the tokens
# instead of swapping two axes). The weights the layer returns are batch first, `(B, H, T, T)`,
# whatever `batch_first` says.

# %% nbgrader={"grade_id": "mha_batch_first", "solution": true}
def mha_batch_first(mha, x):
    """Self-attention of batch-first tokens through a sequence-first nn.MultiheadAttention.

    Args:
        mha: nn.MultiheadAttention built with the default batch_first=False: it reads (T, B, E).
        x: (B, T, E) batch-first tokens, used as queries, keys and values.

    Returns:
        out: (B, T, E) the outputs, batch first;
        weights: (B, H, T, T) the weights of every head (not their average), H = mha.num_heads.
    """
    ### BEGIN SOLUTION
    x_tbe = x.transpose(0, 1)  # (T, B, E): the layout the layer expects
    out, weights = mha(x_tbe, x_tbe, x_tbe, need_weights=True, average_attn_weights=False)  # (T, B, E), (B, H, T, T)
    return out.transpose(0, 1), weights  # (B, T, E), (B, H, T, T)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mha_batch_first", "points": 1}
with torch.no_grad():
    out_mine, w_mine = mha_batch_first(mha_seq, x_bf)
expect_shape(out_mine, (2, 5, D_MODEL), "out of mha_batch_first(mha_seq, x_bf)",
             "Transpose the outputs back to batch first, (B, T, E).")
expect_close(out_mine, out_right, "mha_batch_first(mha_seq, x_bf) vs the batch_first=True layer", atol=1e-5,
             hint="Transpose x to (T, B, E) with x.transpose(0, 1) (not a reshape) before the call, and the outputs "
                  "back after it.")
expect_shape(w_mine, (2, 2, 5, 5), "weights of mha_batch_first(mha_seq, x_bf)",
             "Pass average_attn_weights=False: one (T, T) map per head, (B, H, T, T), already batch first.")
expect_close(w_mine.mean(1), w_right, "the mean over heads of your weights vs the layer's default weights", atol=1e-6,
             hint="Return the weights of the same call, per head.")

# %% nbgrader={"grade": true, "grade_id": "test_mha_batch_first_hidden", "points": 2}
# Hidden tests: layers of other widths and head counts, batch and length drawn different from each other.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_mha_batch_first(mha_batch_first)
### END HIDDEN TESTS

# %% [markdown]
# **SDPA's `scale=None` means `1/sqrt(E)`**, with `E = q.size(-1)`, the width of one **head**
# (not the model's width). Pass `scale=` only on purpose (a learned temperature, QK-norm): any
# other number silently changes how peaked the weights are.

# %% nbgrader={"grade_id": "sdpa_scale", "locked": true}
g_s = torch.Generator().manual_seed(12)
q_s, k_s, v_s = (torch.randn(1, 2, 5, 4, generator=g_s) for _ in range(3))  # (B, H, T, E) each, E = 4
by_hand = torch.softmax(q_s @ k_s.transpose(-2, -1) / math.sqrt(4), dim=-1) @ v_s  # (1, 2, 5, 4)
for label, kwargs in [("default (scale=None)", {}), ("scale=1/sqrt(4)", {"scale": 1 / math.sqrt(4)}),
                      ("scale=1/sqrt(8), the model's width", {"scale": 1 / math.sqrt(8)}), ("scale=1", {"scale": 1.0})]:
    gap = (F.scaled_dot_product_attention(q_s, k_s, v_s, **kwargs) - by_hand).abs().max()
    print(f"{label:>34}: largest difference from softmax(q k^T / sqrt(4)) v = {gap:.2e}")

# %% [markdown]
# **`is_causal=True` together with `attn_mask`.** The lesson's table says that passing both is
# an error. On torch 2.13 it is not: nothing is raised, and the cell below measures what SDPA
# computes instead. It equals SDPA under the **AND** of the causal and the padding masks (largest
# difference 0), not either mask alone. Because the lesson, written from the documentation, and
# the library disagree here, rely on neither: combine the masks yourself (`combine_masks`) and
# pass one `attn_mask`.

# %% nbgrader={"grade_id": "causal_and_mask", "locked": true}
pad_s = torch.tensor([[True, True, True, False, False]])  # (1, T_k): the last two keys are padding
causal_s = torch.ones(5, 5, dtype=torch.bool).tril()  # (T, T)
try:
    both_flags = F.scaled_dot_product_attention(q_s, k_s, v_s, attn_mask=pad_s, is_causal=True)  # (1, 2, 5, 4)
except RuntimeError as err:  # what the lesson describes; torch 2.13 does not raise
    print("this torch raises:", err)
else:
    for label, mask in [("causal only", causal_s), ("padding only", pad_s), ("causal AND padding", causal_s & pad_s)]:
        gap = (both_flags - F.scaled_dot_product_attention(q_s, k_s, v_s, attn_mask=mask)).abs().max()
        print(f"attn_mask=padding, is_causal=True vs {label:>18}: largest difference {gap:.3g}")

# %% [markdown]
# ## 10. Teacher forcing: one causal pass equals decoding step by step
#
# A decoder learns to predict token *t* of a target sequence from the tokens before it. To
# generate, it runs step by step: feed the prefix, read the prediction at the **last** position,
# append, repeat. In training the whole target is known, so it is fed at once (*teacher
# forcing*), shifted right by one: the decoder's input is `BOS, y_0, …, y_{T-2}`, and position *t*
# reads BOS and `y_0 … y_{t-1}` and predicts `y_t`. Under the causal mask row *t* of every layer
# depends only on positions ≤ *t*, so the T predictions of one pass are **exactly** those of T
# step-by-step passes, and all T losses come from one forward pass. Without the mask, position *t*
# would read the very token it must predict.
#
# `decoder_tf(tokens, mask)` below is a one-layer, two-head model with random weights
# (`tiny_decoder` in `mlbook_helpers.masking`): tokens `(B, T)` integer ids, a boolean mask
# (True = allowed) or None, logits `(B, T, VOCAB)`. Write
#
# * `teacher_forced_logits(decoder, targets, bos_id)`: **one** call of the decoder on the shifted
#   targets under your causal mask;
# * `step_by_step_logits(decoder, targets, bos_id)`: T calls, call *t* on the first *t + 1* tokens
#   of the shifted targets, each time keeping the logits of the **last** position. Each step
#   recomputes its whole prefix from scratch; keeping the keys and values of earlier steps instead
#   is the KV cache, built in lab 6's section "Decoding with a KV cache".

# %% nbgrader={"grade_id": "teacher_forcing_given", "locked": true}
decoder_tf = tiny_decoder(seed=3)  # decoder_tf(tokens (B, T), mask) -> (B, T, VOCAB) logits
targets_tf = torch.randint(1, VOCAB, (2, 8), generator=torch.Generator().manual_seed(13))  # (B, T), no BOS inside
print("VOCAB", VOCAB, "| BOS", BOS, "| targets:\n", targets_tf)

# %% nbgrader={"grade_id": "teacher_forcing", "solution": true}
def teacher_forced_logits(decoder, targets, bos_id):
    """All T next-token predictions of a target sequence in one causal pass.

    Args:
        decoder: decoder(tokens, mask) -> logits; tokens (B, T) ids, mask bool (True = allowed).
        targets: (B, T) integer token ids.
        bos_id: the begin-of-sequence id.

    Returns:
        (B, T, V) logits; row t predicts targets[:, t] from BOS and targets[:, :t].
    """
    ### BEGIN SOLUTION
    B, T = targets.shape
    inputs = torch.cat([torch.full((B, 1), bos_id, dtype=targets.dtype), targets[:, :-1]], dim=1)  # (B, T)
    return decoder(inputs, causal_mask(T))  # (B, T, V)
    ### END SOLUTION


def step_by_step_logits(decoder, targets, bos_id):
    """The same predictions by decoding one step at a time, recomputing the prefix each step.

    Args:
        decoder, targets, bos_id: as for teacher_forced_logits.

    Returns:
        (B, T, V) logits; row t is the last position's logits of the decoder run on the first
        t + 1 tokens of BOS, targets[:, :-1].
    """
    ### BEGIN SOLUTION
    B, T = targets.shape
    inputs = torch.cat([torch.full((B, 1), bos_id, dtype=targets.dtype), targets[:, :-1]], dim=1)  # (B, T)
    steps = []
    for t in range(T):
        logits = decoder(inputs[:, : t + 1], causal_mask(t + 1))  # (B, t + 1, V): the prefix, recomputed
        steps.append(logits[:, -1])  # (B, V): the prediction of the next token
    return torch.stack(steps, dim=1)  # (B, T, V)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_teacher_forcing", "points": 1}
tf_logits = teacher_forced_logits(decoder_tf, targets_tf, BOS)
step_logits = step_by_step_logits(decoder_tf, targets_tf, BOS)
expect_shape(tf_logits, (2, 8, VOCAB), "teacher_forced_logits(decoder_tf, targets_tf, BOS)", "One row per target: (B, T, V).")
expect_shape(step_logits, (2, 8, VOCAB), "step_by_step_logits(decoder_tf, targets_tf, BOS)",
             "Stack the T steps along dim 1: (B, T, V).")
expect_close(tf_logits, step_logits, "teacher_forced_logits vs step_by_step_logits", atol=1e-5,
             hint="One causal pass and T prefix passes must agree: pass the causal mask in the single pass, and keep "
                  "the LAST position's logits at every step (both call your causal_mask: if causal_mask fails its own "
                  "test, fix it first).")
expect_close(tf_logits[:, 0], decoder_tf(torch.full((2, 1), BOS), None)[:, 0], "position 0 of the teacher-forced logits",
             atol=1e-5, hint="Position 0 reads BOS alone: shift the targets right by one, BOS first.")
last_changed = targets_tf.clone()
last_changed[:, -1] = last_changed[:, -1] % (VOCAB - 1) + 1  # another token (never BOS) in the last place
expect_close(teacher_forced_logits(decoder_tf, last_changed, BOS), tf_logits, "the logits after changing the LAST target",
             atol=1e-6, hint="The last target is only predicted, never read: the input is BOS followed by targets[:, :-1].")

# %% nbgrader={"grade": true, "grade_id": "test_teacher_forcing_hidden", "points": 2}
# Hidden tests: a decoder with fresh weights, other vocabularies, lengths, batch sizes and BOS ids.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab03_masks import hidden
hidden.check_teacher_forcing(teacher_forced_logits, step_by_step_logits)
### END HIDDEN TESTS

# %% [markdown]
# Measured on `decoder_tf`: how far one pass is from the step-by-step predictions at each
# position, with the causal mask and without it, and what each costs for a longer sequence.

# %% nbgrader={"grade_id": "teacher_forcing_measured", "locked": true}
tf_logits = teacher_forced_logits(decoder_tf, targets_tf, BOS)  # (B, T, VOCAB): your one causal pass
step_logits = step_by_step_logits(decoder_tf, targets_tf, BOS)  # (B, T, VOCAB): your prefix-by-prefix loop
inputs_tf = torch.cat([torch.full((2, 1), BOS), targets_tf[:, :-1]], dim=1)  # (B, T): shifted right
no_mask = decoder_tf(inputs_tf, None)  # (B, T, VOCAB): every position reads the whole input
print("largest gap per position, causal pass:", [f"{g:.0e}" for g in (tf_logits - step_logits).abs().amax(dim=(0, 2))])
print("largest gap per position, no mask:    ", [f"{g:.2f}" for g in (no_mask - step_logits).abs().amax(dim=(0, 2))])
long_targets = torch.randint(1, VOCAB, (2, 48), generator=torch.Generator().manual_seed(14))  # (B, 48)
for name, fn in [("one causal pass", teacher_forced_logits), ("48 prefix passes", step_by_step_logits)]:
    fn(decoder_tf, long_targets, BOS)  # warm-up
    start = time.perf_counter()
    fn(decoder_tf, long_targets, BOS)
    print(f"{name:>17}: {1e3 * (time.perf_counter() - start):.1f} ms")

# %% [markdown]
# With the mask the gap is rounding (about 1e-7) at every position. Without it, every position but
# the last reads later tokens and changes; the last one sees the whole input either way, which is
# also why a step that keeps only the last position could drop the mask. The step-by-step loop
# runs the decoder T times on prefixes whose total length grows as T²/2: training pays for one
# pass, generation (without a cache) for all of them.

# %% [markdown]
# ## 11. Cross-attention needs a padding mask, never a causal one
#
# In cross-attention the queries come from the decoder and the keys and values from the
# encoder's output, which exists in full before decoding starts. There is no future to hide;
# only the encoder's PAD tokens must be masked. Given three decoder queries and five encoder
# states whose last one is PAD, compute with your functions (head 0, batch 0, as `(3, 5)` tensors):
#
# * `w_cross`: the weights under the encoder's padding mask;
# * `w_cross_causal`: the weights when someone also applies the decoder's causal mask, cut to
#   three query rows (`causal_mask(5)[:, :, :3, :]`) and combined with the padding mask;
# * `keys_read`: `(3,)` integers, how many encoder states each decoder query reads (weight > 0)
#   under the causal mistake.

# %% nbgrader={"grade_id": "cross_given", "locked": true}
g_cross = torch.Generator().manual_seed(8)
dec_q = torch.randn(1, 1, 3, 4, generator=g_cross)  # (B, H, T_dec, d_k) decoder queries
enc_k, enc_v = torch.randn(1, 1, 5, 4, generator=g_cross), torch.randn(1, 1, 5, 4, generator=g_cross)  # (B, H, T_enc, d)
enc_is_pad = torch.tensor([[False, False, False, False, True]])  # (B, T_enc)

# %% nbgrader={"grade_id": "cross_attention", "solution": true}
### BEGIN SOLUTION
enc_mask = padding_mask(enc_is_pad)  # (1, 1, 1, 5)
w_cross = scaled_dot_product_attention(dec_q, enc_k, enc_v, enc_mask)[1][0, 0]  # (3, 5)
wrong = combine_masks(causal_mask(5)[:, :, :3, :], enc_mask)  # (1, 1, 3, 5)
w_cross_causal = scaled_dot_product_attention(dec_q, enc_k, enc_v, wrong)[1][0, 0]  # (3, 5)
keys_read = (w_cross_causal > 0).sum(-1)  # (3,)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_cross_attention", "points": 2}
expect_shape(w_cross, (3, 5), "w_cross", "Three decoder queries by five encoder keys.")
expect_rows_sum_to_one(w_cross, "w_cross", "Every decoder query distributes its weight over the encoder.", atol=1e-5)
expect(bool((w_cross[:, 4] == 0).all()) and bool((w_cross[:, :4] > 0).all()), "w_cross",
       f"weights on the PAD key are {w_cross[:, 4]}", "Mask only the encoder's PAD key; every real encoder state stays readable.")
expect_close(torch.as_tensor(keys_read), [1, 2, 3], "keys_read under the causal mistake",
             hint="causal_mask(5)[:, :, :3, :] lets decoder query i read encoder states 0..i only.")
expect(bool((w_cross_causal[0, 1:] == 0).all()), "w_cross_causal", f"row 0 is {w_cross_causal[0]}",
       "Combine the cut causal mask with the padding mask and use your attention.")
# The weights must come from the KEYS and mix the VALUES: enc_k and enc_v differ, so torch's SDPA on the same
# encoder states tells a swap. (Keys and values of one width, so a swap runs: only the values tell.)
real_keys = ~enc_is_pad[:, None, None, :]  # (1, 1, 1, 5) True at real encoder states
for name, w, allowed in [("w_cross", w_cross, real_keys),
                         ("w_cross_causal", w_cross_causal, real_keys & torch.ones(3, 5, dtype=torch.bool).tril())]:
    expect_close(torch.as_tensor(w) @ enc_v[0, 0], F.scaled_dot_product_attention(dec_q, enc_k, enc_v, attn_mask=allowed)[0, 0],
                 f"{name} @ enc_v vs torch's SDPA on the same encoder states", atol=1e-5,
                 hint="The decoder queries are scored against the encoder KEYS (enc_k) and the weights average the "
                      "encoder VALUES (enc_v): keys and values were swapped, or the queries are not dec_q.")

# %% nbgrader={"grade_id": "cross_heatmaps", "locked": true}
heatmap_grid({"padding mask only (right)": w_cross, "causal mask too (wrong)": w_cross_causal},
             ["dec0", "dec1", "dec2"], ["enc0", "enc1", "enc2", "enc3", "PAD"]);

# %% [markdown]
# With the causal mask the first decoder position reads a single encoder state and most of the
# source is invisible to the early outputs. The model still trains, which is what makes the bug
# expensive: it is worse, not broken.
#
# ## Summary
#
# * A mask is True where attention is allowed; causal `(1, 1, T, T)`, cached `(1, 1, T_new, T_total)`
#   aligned with the end, padding `(B, 1, 1, T_k)` on keys; combine with AND.
# * Fill masked **scores** before the softmax with `torch.finfo(dtype).min`: not -∞ (NaN rows),
#   not -1e9 (-∞ in float16), not an additive mask (it keeps the masked scores' offsets and can
#   overflow). A fully masked row then gives uniform weights and the mean of the values.
# * Masking after the softmax shrinks outputs by a position-dependent factor and leaks the future
#   through the normaliser.
# * Test masks with properties (change the future; add padding; batch vs single), not heat maps.
# * SDPA's mask is True = attend; `nn.MultiheadAttention`'s `key_padding_mask` is True = ignore.
# * `nn.MultiheadAttention` is sequence first unless built with `batch_first=True`, and returns
#   head-averaged weights unless asked not to; SDPA's default scale is 1/sqrt(head width); combine
#   masks yourself rather than passing `is_causal` with `attn_mask`.
# * Teacher forcing is exact: one causal pass over the shifted targets gives the T predictions of
#   step-by-step decoding. Cross-attention takes a padding mask only.
# %% [markdown]
# ## Extension (ungraded): permutation equivariance (exercise 3, about 15 minutes)
#
# No points: skip it if you are short of time. Without a mask, attention has no idea of order:
# permuting the tokens (the rows of q, k and v together) permutes the outputs the same way,
# `Attn(Pq, Pk, Pv) = P·Attn(q, k, v)`. The causal mask depends on the *index*, not the content,
# so it breaks this. `permutation_gap` below measures the largest absolute difference between the
# two sides. Read it, predict both numbers the next cell prints, then run it; try other
# permutations, and a padding mask (which moves with its tokens only if you permute it too).

# %% nbgrader={"grade_id": "permutation_gap_given", "locked": true}
def permutation_gap(attn_fn, q, k, v, perm, mask=None):
    """How far attention is from permutation equivariance.

    Args:
        attn_fn: attention(q, k, v, mask) -> (out, attn), as your scaled_dot_product_attention.
        q: (B, H, T, d_k), k: (B, H, T, d_k), v: (B, H, T, d_v).
        perm: (T,) a permutation of the positions.
        mask: passed to attn_fn unchanged (None, or e.g. a (1, 1, T, T) causal mask).

    Returns:
        max |attn_fn(q[perm], k[perm], v[perm]).out - attn_fn(q, k, v).out[perm]| as a float,
        permuting the token axis (dim -2).
    """
    out, _ = attn_fn(q, k, v, mask)  # (B, H, T, d_v)
    out_perm, _ = attn_fn(q[..., perm, :], k[..., perm, :], v[..., perm, :], mask)  # (B, H, T, d_v)
    return float((out_perm - out[..., perm, :]).abs().max())

# %% nbgrader={"grade_id": "permutation_self_check", "locked": true}
g_p = torch.Generator().manual_seed(3)
q_p, k_p, v_p = (torch.randn(2, 3, 5, 4, generator=g_p) for _ in range(3))  # (B, H, T, d) each
perm5 = torch.tensor([3, 0, 4, 1, 2])  # library_attention: torch's SDPA, returning (out, None)
causal5 = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]  # (1, 1, 5, 5)
gap_plain = permutation_gap(library_attention, q_p, k_p, v_p, perm5)
gap_causal = permutation_gap(library_attention, q_p, k_p, v_p, perm5, causal5)
print(f"gap without a mask: {gap_plain:.2e} | with the causal mask: {gap_causal:.3f}")
expect(gap_plain < 1e-5 and gap_causal > 1e-2, "self-check of the extension", "the gaps are not 0 and > 0",
       "Without a mask the gap is rounding; the causal mask depends on positions, so it should change the outputs.")

# %% [markdown]
# The causal mask is thus a source of positional information by itself: a decoder without any
# position encoding can still tell where it is, which is why decoder-only models have been reported
# to learn positions without explicit position encodings.
