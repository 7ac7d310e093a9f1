# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 5 — Entropy collapse
#
# Attention is trainable only while its softmax is *responsive*: while the weights of a row
# can still move when the scores move. In this lab you watch a tiny transformer lose that
# property on purpose and then get it back. You will:
#
# 1. write `attention_entropy`, the number that tells a spread-out head from a one-hot one,
#    and reproduce the lesson's "effective keys";
# 2. write `scale_qk_init`, which inflates only the query and key projections of a given model;
# 3. write `train_copy_task`, a small training loop that logs the loss and each layer's
#    entropy every 10 steps;
# 4. train the same model on the same seeds twice, with normal and with 10× W_Q / W_K, and
#    see one run learn while the other sits at the unigram baseline with entropy near 0;
# 5. rescue the collapsed run by decaying W_Q and W_K, and look at the opposite failure
#    (scores too small);
# 6. explain with the softmax Jacobian why the collapsed run cannot recover by itself.
#
# Everything runs on a CPU in well under a minute: the model has about 36 000 parameters and
# each run takes 100 steps.
#
# **Grading.** Cells marked with points are graded. Visible tests run as you go; hidden tests
# run when your notebook is graded, on fresh inputs, other shapes and other models. Claims
# about training are graded as trends: the median over three seeds, against thresholds
# stated in the test. The written answer at the end is graded by a TA.

# %% [markdown]
# ## Setup
# Run this cell first. One CPU thread is the fastest setting for a model this small.

# %% nbgrader={"grade_id": "setup", "locked": true}
import copy
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from mlbook_helpers.checks import expect, expect_close, expect_finite, expect_shape
from mlbook_helpers.copy_task import CopyTask, TinyDecoder, causal_ceiling, copy_loss
from mlbook_helpers.plotting import attention_heatmap, curves, heatmap_grid

torch.set_num_threads(1)
np.set_printoptions(precision=3, suppress=True)

task = CopyTask()  # 16 data tokens, copy length 8: inputs of T = 16 tokens
CEILING = causal_ceiling(task.T)  # largest possible mean entropy of causal attention over T = 16
UNIGRAM = task.unigram_baseline  # log 16: the loss of a model that has learnt nothing about copying
print(f"T = {task.T}, log T = {math.log(task.T):.3f}, causal ceiling = {CEILING:.3f} nats, "
      f"unigram baseline = {UNIGRAM:.3f} nats")

# %% [markdown]
# ## 1. Attention entropy
#
# For one query *i*, the weights $A_{i1},\dots,A_{iT}$ are a probability distribution over the
# keys, and its entropy
#
# $$H_i = -\sum_j A_{ij}\log A_{ij}\quad\text{(natural log: nats)}$$
#
# measures how spread out the row is: **uniform** weights over $T$ keys give $H_i = \log T$,
# a **one-hot** row gives $H_i = 0$. The number $e^{H_i}$ (equivalently $2$ to the entropy in
# bits) is the row's **effective number of keys**: 1 for one key, $T$ for all of them.
#
# A weight can be exactly 0: a causal mask sets every key after the query to 0, and a
# saturated softmax underflows to 0 in float32. Then $A\log A = 0\cdot(-\infty)$, which is
# `nan` in floating point, while the limit of $p\log p$ as $p\to 0$ is $0$. Your function must
# count those terms as 0.
#
# `attention_entropy` takes the weights of one layer, shaped (B, H, T_q, T_k), and returns one
# number per head: the entropy of each query's row, averaged over the batch and the queries.

# %% nbgrader={"grade_id": "attention_entropy", "solution": true}
def attention_entropy(attn):
    """Mean attention entropy in nats, one value per head.

    Args:
        attn: (B, H, T_q, T_k) attention weights; every row (last axis) sums to 1 and may
            contain exact zeros (masked or underflowed keys).

    Returns:
        (H,) tensor: for each head, -sum_j A_ij log A_ij of every row, averaged over the batch
        and the queries. Finite even where weights are exactly 0.
    """
    ### BEGIN SOLUTION
    safe = torch.where(attn > 0, attn, torch.ones_like(attn))  # (B, H, T_q, T_k): log 1 = 0 where A = 0
    row_entropy = -(attn * torch.log(safe)).sum(dim=-1)  # (B, H, T_q)
    return row_entropy.mean(dim=(0, 2))  # (H,)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_attention_entropy", "points": 2}
uniform = torch.full((2, 3, 4, 5), 1 / 5)  # (B, H, T_q, T_k)
h_uniform = attention_entropy(uniform)
expect_shape(h_uniform, (3,), "attention_entropy of (2, 3, 4, 5) weights",
             "One value per head: average over the batch (axis 0) and the queries (axis 2), sum over the keys.")
expect_close(h_uniform, [math.log(5)] * 3, "entropy of uniform rows over 5 keys", atol=1e-5,
             hint="Uniform rows give log T_k = 1.609 nats; 2.32 would be bits: use the natural log.")
one_hot = torch.zeros(2, 3, 4, 5)
one_hot[..., 2] = 1.0  # (B, H, T_q, T_k): every query reads key 2 only
h_one_hot = attention_entropy(one_hot)
expect_finite(h_one_hot, "entropy of one-hot rows", "0 * log 0 is nan in floating point; count those terms as 0.")
expect_close(h_one_hot, [0.0] * 3, "entropy of one-hot rows", atol=1e-6, hint="A one-hot row has entropy 0.")
causal = torch.tril(torch.ones(6, 6)) / torch.arange(1, 7).unsqueeze(1)  # (T, T): uniform over keys 0..i
h_causal = attention_entropy(causal[None, None])  # (1,)
expect_finite(h_causal, "entropy of uniform causal weights",
              "The masked weights are exactly 0 and 0 * log 0 gave nan: count those terms as 0.")
expect_close(h_causal, [causal_ceiling(6)], "entropy of uniform causal weights over T = 6", atol=1e-5,
             hint="Row i is uniform over i + 1 keys: the mean of log(i + 1). Average over the queries, not the keys.")
lesson_row = torch.tensor([0.401, 0.401, 0.198]).reshape(1, 1, 1, 3)  # the lesson's weights for 'bag'
expect_close(attention_entropy(lesson_row), [1.054], "entropy of the lesson's row (0.401, 0.401, 0.198)",
             hint="-(2 * 0.401 ln 0.401 + 0.198 ln 0.198) = 1.054 nats: 2.87 effective keys out of 3.")

# %% nbgrader={"grade": true, "grade_id": "test_attention_entropy_hidden", "points": 3}
# Hidden tests: random weights with exact zeros, other (B, H, T_q, T_k) with T_q != T_k, float32 and float64.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab05_entropy_collapse import hidden
hidden.check_attention_entropy(attention_entropy)
### END HIDDEN TESTS

# %% [markdown]
# ### 1b. The lesson's effective keys
#
# The lesson drew random queries and keys with unit-variance components (the situation at
# initialisation), 40 draws of 8 tokens for each head width $d_k$, and measured how many keys a
# row reads: scaled rows stay spread over **5.5 to 6.2 of 8 keys** at every $d_k$, while
# unscaled rows collapse to about **1.2 keys at $d_k = 256$**.
#
# The cell below repeats that measurement with your function. To get one entropy per *row*,
# it puts every row in its own "head": weights shaped (1, rows, 1, 8).

# %% nbgrader={"grade_id": "effective_keys", "locked": true}
def effective_keys(weights):
    """Mean effective number of keys e^H of the rows of (N, T_q, T_k) weights."""
    rows = weights.reshape(1, -1, 1, weights.shape[-1])  # (1, N * T_q, 1, T_k): one row per "head"
    return attention_entropy(rows).exp().mean().item()


d_ks = [2, 4, 8, 16, 32, 64, 128, 256]
gen = torch.Generator().manual_seed(0)
keys_scaled, keys_unscaled = [], []
for d_k in d_ks:
    Q = torch.randn(40, 8, d_k, generator=gen, dtype=torch.float64)  # (draws, T, d_k)
    K = torch.randn(40, 8, d_k, generator=gen, dtype=torch.float64)  # (draws, T, d_k)
    scores = Q @ K.transpose(-2, -1)  # (draws, T, T), unscaled
    keys_unscaled.append(effective_keys(torch.softmax(scores, dim=-1)))
    keys_scaled.append(effective_keys(torch.softmax(scores / math.sqrt(d_k), dim=-1)))
print("d_k:            ", d_ks)
print("scaled   keys:  ", np.round(keys_scaled, 2))
print("unscaled keys:  ", np.round(keys_unscaled, 2))
curves(d_ks, {"scaled by 1/sqrt(d_k)": keys_scaled, "unscaled": keys_unscaled}, logx=True,
       xlabel="d_k", ylabel="effective keys (of 8)", title="Effective keys at initialisation");

# %% nbgrader={"grade": true, "grade_id": "test_effective_keys", "points": 1}
expect(all(5.4 <= k <= 6.3 for k in keys_scaled), "effective keys of scaled rows",
       f"{np.round(keys_scaled, 2)} should all lie in the lesson's range 5.5 to 6.2 (give or take the "
       "0.1 sampling spread of 40 draws)",
       "Effective keys are exp(entropy in nats); entropy in bits would need 2 ** H instead.")
expect_close(keys_unscaled[-1], 1.2, "effective keys of unscaled rows at d_k = 256", atol=0.1,
             hint="The lesson measured about 1.2 keys: nearly one-hot.")

# %% [markdown]
# ## 2. The copy task and a tiny decoder
#
# `mlbook_helpers.copy_task` gives you the data and the model (read its docstrings):
#
# * a sequence is `x_0 … x_7 SEP x_0 … x_7`: eight random tokens, a separator, the same eight
#   again. The model sees the first 16 tokens and predicts the next token everywhere, and
#   only the eight predictions after the separator are scored. The first half is random, so a
#   model that has learnt nothing about copying scores the **unigram baseline**
#   $\log 16 = 2.77$ nats; a model that copies scores 0.
# * `TinyDecoder`: token and position embeddings, two pre-LayerNorm blocks of causal
#   self-attention (`torch.nn.MultiheadAttention`, d_model = 64, two heads of d_head = 32) and
#   a linear read-out. The blocks are attention-only: copying needs no MLP, and without one
#   training is faster (`d_ff=` adds one if you want to experiment). `model(tokens)` returns
#   the logits and **one (B, H, T, T) weight tensor per layer**.
# * each block's query and key projections are `block.W_q` and `block.W_k`: views of the rows
#   of the attention module's packed `in_proj_weight` (W_q, W_k, W_v stacked), in PyTorch's
#   (out, in) layout, `q = x @ W_q.T`. Changing a view in place changes the model.
#
# With causal attention query *i* can read only keys 0 … *i*, so its entropy is at most
# $\log(i+1)$, and the mean over the 16 queries is at most the **causal ceiling**
# printed in the setup (1.92 nats, the counterpart of $\log T$). Here is an untrained
# model's attention on one sequence: nothing is learned yet, so every row is spread out.

# %% nbgrader={"grade_id": "model_intro", "locked": true}
torch.manual_seed(0)
model = TinyDecoder(task)
print("parameters:", sum(p.numel() for p in model.parameters()))
probe, _ = task.batch(1, torch.Generator().manual_seed(123))  # (1, T): one sequence to look at
labels = [str(t) if t < task.n_data else "|" for t in probe[0].tolist()]


def head0_maps(model, title):
    """Head 0 of every layer on the probe sequence: {title + layer: (T, T) weights}."""
    with torch.no_grad():
        _, attns = model(probe)  # per layer (1, H, T, T)
    return {f"{title}, layer {i}": attn[0, 0] for i, attn in enumerate(attns)}


heatmap_grid(head0_maps(model, "untrained"), labels);

# %% [markdown]
# ## 3. Inflating W_Q and W_K
#
# A score is $q\cdot k/\sqrt{d_{head}}$ with $q = W_Q x$ and $k = W_K x$, so multiplying both
# projections by a factor $c$ multiplies every score by $c^2$: a factor 10 makes the scores
# 100 times larger, and the softmax of scores spread over ±50 is one-hot. Of the weight
# matrices, only W_Q and W_K set the scores' size: W_V, the output projection and the read-out
# change what is *mixed*, not *how peaked* the mixing is.
#
# Write `scale_qk_init(model, factor)`: multiply W_Q and W_K of **every** block by `factor`,
# in place, and leave every other weight alone. Do it under `torch.no_grad()` (changing a
# parameter in place is not a step autograd should record).

# %% nbgrader={"grade_id": "scale_qk_init", "solution": true}
def scale_qk_init(model, factor):
    """Multiply the query and key projections of every block of `model` by `factor`, in place.

    Args:
        model: a TinyDecoder; each of `model.blocks` has views `W_q`, `W_k` (d_model, d_model).
        factor: the multiplier (10.0 for the collapsed run).

    Returns:
        The same model (modified in place).
    """
    ### BEGIN SOLUTION
    with torch.no_grad():
        for block in model.blocks:
            block.W_q.mul_(factor)  # (d_model, d_model), a view into in_proj_weight
            block.W_k.mul_(factor)  # (d_model, d_model)
    return model
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_scale_qk_init", "points": 2}
torch.manual_seed(1)
m = TinyDecoder(task)
before = {name: p.detach().clone() for name, p in m.named_parameters()}
scale_qk_init(m, 10.0)
for name, p in m.named_parameters():
    if "in_proj_weight" not in name:
        expect_close(p, before[name], f"{name} after scale_qk_init", atol=1e-6,
                     hint="Only the query and key projections may change: was every weight scaled?")
for i, block in enumerate(m.blocks):
    packed = before[f"blocks.{i}.attn.in_proj_weight"]  # (3 d_model, d_model): W_q, W_k, W_v rows
    d = block.d_model
    expect_close(block.W_q, 10 * packed[:d], f"block {i}'s W_q after scale_qk_init(model, 10)", atol=1e-5,
                 hint="Every block's W_q must be multiplied by the factor, in place.")
    expect_close(block.W_k, 10 * packed[d:2 * d], f"block {i}'s W_k after scale_qk_init(model, 10)", atol=1e-5,
                 hint="Every block's W_k must be multiplied by the factor, in place.")
    expect_close(block.W_v, packed[2 * d:], f"block {i}'s W_v after scale_qk_init(model, 10)", atol=1e-6,
                 hint="Only W_Q and W_K set the scores' size: W_V must stay as it was.")

# %% nbgrader={"grade": true, "grade_id": "test_scale_qk_init_hidden", "points": 3}
# Hidden tests: other models (more layers and heads, other widths) and other factors.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab05_entropy_collapse import hidden
hidden.check_scale_qk_init(scale_qk_init)
### END HIDDEN TESTS

# %% [markdown]
# ### 3b. What the softmax passes back
#
# The lesson's numbers: the softmax's slopes are $a_i(1-a_i)$ on the diagonal and $-a_ia_j$
# off it, the Jacobian $\operatorname{diag}(a) - aa^\top$. Its largest entry is **0.22** for a
# uniform 3-way row and **0.02** for (0.98, 0.01, 0.01). The cell below measures the Jacobian
# with autograd, then looks at every row of the untrained model's first layer: a row's
# largest slope is $\max_i a_i(1-a_i)$, and a row whose slopes are all below 0.01 passes
# almost nothing back to its scores, hence to W_Q and W_K.

# %% nbgrader={"grade_id": "jacobian_demo", "locked": true}
for row in ([1 / 3, 1 / 3, 1 / 3], [0.98, 0.01, 0.01]):
    a = torch.tensor(row, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), a.log())  # (3, 3)
    print(f"a = {np.round(row, 3)}: largest |d a_i / d s_j| = {jac.abs().max().item():.4f}")


def largest_slopes(model, tokens):
    """Per query row of layer 0 (query 0, which has one key, left out): max_i a_i (1 - a_i)."""
    with torch.no_grad():
        attn = model(tokens)[1][0][:, :, 1:]  # (B, H, T - 1, T)
    return (attn * (1 - attn)).amax(dim=-1)  # (B, H, T - 1)


x_demo, _ = task.batch(32, torch.Generator().manual_seed(7))  # (B, T)
for factor in (1.0, 10.0):
    torch.manual_seed(0)
    slopes = largest_slopes(scale_qk_init(TinyDecoder(task), factor), x_demo)
    print(f"factor {factor:>4}: median largest slope {slopes.median().item():.1e}, "
          f"rows with a slope above 0.01: {(slopes > 0.01).float().mean().item():.0%}")

# %% [markdown]
# ## 4. A training loop that watches the entropy
#
# Write `train_copy_task(model, steps, ...)`. Specification:
#
# * one `torch.Generator` seeded with `seed` supplies every batch: first **one evaluation
#   batch** (`task.batch(batch_size, gen)`, with `task = model.task`), then one fresh training
#   batch per step;
# * the optimiser is `torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)`; the loss is
#   `copy_loss(logits, targets)`;
# * after each optimiser step, if `qk_decay > 0`, multiply every block's W_q and W_k by
#   `1 - lr * qk_decay` (under `torch.no_grad()`). This is *decoupled* weight decay, the
#   AdamW kind, applied to the query and key projections only;
# * log at every step $s$ in `0, log_every, 2·log_every, … ≤ steps`, that is after $s$ updates
#   (step 0 is the untrained model): the loss on the evaluation batch and, for each layer,
#   the mean over heads of `attention_entropy` on the evaluation batch, under
#   `torch.no_grad()`.
#
# Return a dict with `"step"` (list of ints), `"loss"` (list of floats) and `"entropy"` (a list
# with one list of per-layer floats per logged step).
#
# *Why plain SGD?* The gradient argument of this lab is about the gradient's size. Adam divides
# each step by a running average of the gradient's magnitude, so it turns a tiny gradient into
# a normal-sized step. With Adam, the 10× run of this tiny model gets much further (its loss
# falls well below the baseline in 100 steps while its entropy stays near 0: the one-hot
# pattern is shoved from key to key), for a reason that has nothing to do with the softmax.
# Try it after the lab.

# %% nbgrader={"grade_id": "train_copy_task", "solution": true}
def train_copy_task(model, steps, lr=0.1, batch_size=32, seed=0, qk_decay=0.0, log_every=10):
    """Train `model` on the copy task with SGD and log its loss and attention entropy.

    Args:
        model: a TinyDecoder (its task is `model.task`).
        steps: number of optimiser updates.
        lr: SGD learning rate (momentum 0.9).
        batch_size: sequences per batch (training and evaluation).
        seed: seeds the torch.Generator that draws the evaluation batch, then the training batches.
        qk_decay: decoupled weight decay on W_q and W_k only: after each step they are
            multiplied by (1 - lr * qk_decay).
        log_every: log after every `log_every` updates, starting with the untrained model.

    Returns:
        dict with "step": [0, log_every, ...], "loss": evaluation loss per logged step,
        "entropy": per logged step, a list with each layer's mean-over-heads entropy (nats).
    """
    ### BEGIN SOLUTION
    task = model.task
    gen = torch.Generator().manual_seed(seed)
    eval_x, eval_y = task.batch(batch_size, gen)  # (B, T), (B, T)
    optimiser = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    history = {"step": [], "loss": [], "entropy": []}

    def log(step):
        with torch.no_grad():
            logits, attns = model(eval_x)  # (B, T, vocab), per layer (B, H, T, T)
            history["step"].append(step)
            history["loss"].append(copy_loss(logits, eval_y).item())
            history["entropy"].append([attention_entropy(attn).mean().item() for attn in attns])

    log(0)
    for step in range(1, steps + 1):
        x, y = task.batch(batch_size, gen)  # (B, T), (B, T)
        logits, _ = model(x)  # (B, T, vocab)
        loss = copy_loss(logits, y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if qk_decay > 0:
            with torch.no_grad():
                for block in model.blocks:
                    block.W_q.mul_(1 - lr * qk_decay)
                    block.W_k.mul_(1 - lr * qk_decay)
        if step % log_every == 0:
            log(step)
    return history
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_train_copy_task", "points": 1}
torch.manual_seed(0)
short = train_copy_task(TinyDecoder(task), steps=20)
expect(list(short.get("step", [])) == [0, 10, 20], "history['step'] of a 20-step run",
       f"is {short.get('step')}", "Log the untrained model (step 0), then after every 10 updates.")
expect_shape(np.asarray(short["loss"]), (3,), "history['loss'] of a 20-step run", "One loss per logged step.")
expect_shape(np.asarray(short["entropy"]), (3, 2), "history['entropy'] of a 20-step run",
             "One list per logged step, one entropy per layer (the mean over that layer's heads).")
expect_finite(short["entropy"], "history['entropy']", "Is 0 * log 0 counted as 0 in attention_entropy?")
expect(0.8 * CEILING < short["entropy"][0][0] <= CEILING + 1e-3, "the untrained model's layer-0 entropy",
       f"is {short['entropy'][0][0]:.3f} nats, but an untrained head is spread out, just below the causal "
       f"ceiling {CEILING:.3f}", "Is the first log taken before any update, in nats, averaged over heads?")

# %% nbgrader={"grade": true, "grade_id": "test_train_copy_task_hidden", "points": 3}
# Hidden tests: smaller models and other logging intervals; the untrained model's log; that the model
# learns (median of three seeds); that qk_decay shrinks W_q and W_k and nothing else.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab05_entropy_collapse import hidden
hidden.check_train_copy_task(train_copy_task)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Two runs on the same seeds
#
# Now the experiment of the chapter's exercise 4, plus one intervention. For each of three
# seeds, the same initial model is trained three ways:
#
# * **normal init**;
# * **10× W_Q, W_K**: the same model after `scale_qk_init(model, 10)`;
# * **10× + QK decay**: the same inflated model, trained with `qk_decay = 0.2`.
#
# This cell trains nine small models (about 12 s).

# %% nbgrader={"grade_id": "experiment", "locked": true}
SEEDS = (0, 1, 2)
STEPS = 100
QK_DECAY = 0.2
RUNS = {
    "normal init": dict(factor=1.0, qk_decay=0.0),
    "10x W_Q, W_K": dict(factor=10.0, qk_decay=0.0),
    "10x + QK decay": dict(factor=10.0, qk_decay=QK_DECAY),
}


def run(seed, factor, qk_decay, extra_scale=1.0):
    """Train one model; returns (its untrained copy, the trained model, its history)."""
    torch.manual_seed(seed)
    model = scale_qk_init(TinyDecoder(task, extra_scale=extra_scale), factor)
    untrained = copy.deepcopy(model)
    history = train_copy_task(model, STEPS, seed=seed, qk_decay=qk_decay)
    return untrained, model, history


results = {name: [run(seed, **cfg) for seed in SEEDS] for name, cfg in RUNS.items()}
steps = results["normal init"][0][2]["step"]
median_loss = {name: np.median([h["loss"] for _, _, h in rs], axis=0) for name, rs in results.items()}  # (n_logs,)
median_entropy = {name: np.median([np.mean(h["entropy"], axis=1) for _, _, h in rs], axis=0)
                  for name, rs in results.items()}  # (n_logs,): mean over layers, median over seeds
for name in RUNS:
    print(f"{name:>15}: loss {median_loss[name][0]:.2f} -> {median_loss[name][-1]:.2f}, "
          f"entropy {median_entropy[name][0]:.2f} -> {median_entropy[name][-1]:.2f} nats (median of {len(SEEDS)} seeds)")

# %% [markdown]
# The curves, median over the seeds: loss on the left (the dashed line is the unigram
# baseline), the mean entropy over layers on the right (the dashed line is the causal ceiling).

# %% nbgrader={"grade_id": "curves", "locked": true}
fig, (ax_loss, ax_entropy) = plt.subplots(1, 2, figsize=(11, 3.8))
curves(steps, median_loss, ax=ax_loss, xlabel="step", ylabel="loss (nats)", title="copy loss")
ax_loss.axhline(UNIGRAM, ls="--", c="grey")
curves(steps, median_entropy, ax=ax_entropy, xlabel="step", ylabel="entropy (nats)", title="attention entropy")
ax_entropy.axhline(CEILING, ls="--", c="grey")
fig.tight_layout()

# %% [markdown]
# And the attention on the probe sequence, seed 0, before and after training, of the head
# that ends sharpest in the normal run. The normal run learns the copy pattern: after the
# separator, each query reads the key 8 positions back, an off-diagonal stripe. The 10× run
# starts one-hot, on arbitrary keys, and ends the same way.

# %% nbgrader={"grade_id": "heatmaps", "locked": true}
def probe_attention(model):
    """Per layer, the (H, T, T) weights of `model` on the probe sequence."""
    with torch.no_grad():
        return [attn[0] for attn in model(probe)[1]]


sharpest = min(((layer, head) for layer in range(2) for head in range(2)),
               key=lambda lh: attention_entropy(probe_attention(results["normal init"][0][1])[lh[0]][None])[lh[1]])
maps = {}
for name in ("normal init", "10x W_Q, W_K"):
    untrained, trained, _ = results[name][0]
    for when, model_ in (("before", untrained), ("after", trained)):
        maps[f"{name}, {when}"] = probe_attention(model_)[sharpest[0]][sharpest[1]]  # (T, T)
print(f"layer {sharpest[0]}, head {sharpest[1]}")
heatmap_grid(maps, labels, ncols=4, annotate=False);

# %% [markdown]
# ### Graded: the trends
#
# The thresholds come from the spread measured over many seeds; each test states its own.

# %% nbgrader={"grade": true, "grade_id": "test_collapse", "points": 3}
# Measured on seeds 0-9 with the reference solution (100 steps): the normal run starts at
# 1.82-1.84 nats and ends at loss <= 0.05; the 10x run starts at 0.04-0.06 nats, ends at
# <= 0.04 nats and loss 2.47-2.74. Every threshold below holds for each of those seeds alone.
normal, collapsed = "normal init", "10x W_Q, W_K"
h0 = median_entropy[normal][0]
expect(h0 <= CEILING + 1e-3, "median initial entropy of the normal run",
       f"{h0:.3f} nats is above the causal ceiling {CEILING:.3f}",
       "No distribution over at most i + 1 keys has more than log(i + 1) nats: entropy in bits instead of nats?")
expect(h0 > 0.9 * CEILING, "median initial entropy of the normal run",
       f"{h0:.3f} nats, expected above 0.9 x the causal ceiling ({0.9 * CEILING:.2f})",
       "An untrained head is nearly uniform: is the entropy averaged over queries (not summed over keys twice)?")
expect(median_entropy[collapsed][0] < 0.15, "median initial entropy of the 10x run",
       f"{median_entropy[collapsed][0]:.3f} nats, expected below 0.15",
       "Scores 100x larger make every row one-hot: did scale_qk_init scale W_q and W_k of every block?")
expect(median_entropy[collapsed][-1] < 0.15, "median final entropy of the 10x run",
       f"{median_entropy[collapsed][-1]:.3f} nats, expected below 0.15: the run left the collapse",
       "Did scale_qk_init scale only W_q and W_k, and does train_copy_task use SGD without decay here?")
expect(median_loss[collapsed][-1] > 0.8 * UNIGRAM, "median final loss of the 10x run",
       f"{median_loss[collapsed][-1]:.3f} nats, expected above 0.8 x the unigram baseline ({0.8 * UNIGRAM:.2f})",
       "The collapsed run should stall near log 16: is the optimiser plain SGD with momentum as specified?")
expect(median_loss[normal][-1] < 0.2 * UNIGRAM, "median final loss of the normal run",
       f"{median_loss[normal][-1]:.3f} nats, expected below 0.2 x the unigram baseline ({0.2 * UNIGRAM:.2f})",
       "The normal run learns to copy in 100 steps: are zero_grad, backward and step all called every step?")

# %% nbgrader={"grade": true, "grade_id": "test_rescue", "points": 2}
# Measured on seeds 0-9 (100 steps, qk_decay = 0.2): final loss <= 0.01, largest entropy >= 1.04 nats.
rescued = "10x + QK decay"
expect(median_loss[rescued][-1] < 0.2 * UNIGRAM, "median final loss of the 10x run with QK decay",
       f"{median_loss[rescued][-1]:.3f} nats, expected below 0.2 x the unigram baseline ({0.2 * UNIGRAM:.2f})",
       "qk_decay must multiply W_q and W_k by (1 - lr * qk_decay) after every step.")
expect(np.max(median_entropy[rescued]) > 0.5, "largest median entropy of the 10x run with QK decay",
       f"{np.max(median_entropy[rescued]):.3f} nats, expected above 0.5: the run never left the collapse",
       "Decaying W_q and W_k shrinks the scores until the softmax is responsive again.")

# %% [markdown]
# **Measure the difference.** The median over seeds, final loss and the first logged step
# at which the mean entropy rises above 0.5 nats, and how many rows of the trained model
# (seed 0) still pass gradient:

# %% nbgrader={"grade_id": "difference", "locked": true}
for name in RUNS:
    above = [s for s, h in zip(steps, median_entropy[name]) if h > 0.5]
    responsive = (largest_slopes(results[name][0][1], x_demo) > 0.01).float().mean().item()
    print(f"{name:>15}: final loss {median_loss[name][-1]:.3f} nats; "
          f"entropy above 0.5 nats from step {above[0] if above else 'never'}; "
          f"after training (seed 0) {responsive:.0%} of layer-0 rows have a slope above 0.01")

# %% [markdown]
# ## 6. The opposite failure: scores too small
#
# Dividing the scores by $\sqrt{d_{head}}$ **twice** (a real bug: the scale is applied inside a
# library call and again by hand) makes every score $\sqrt{32} \approx 5.7$ times smaller here
# ($d_{head} = 32$). At initialisation every row is then almost exactly uniform, entropy sits
# at the causal ceiling, and the model has to grow W_Q and W_K about 2.4× each before
# attention can select anything. `TinyDecoder(task, extra_scale=1 / sqrt(d_head))` has that
# bug; here is one seed against the normal run on the same seed.

# %% nbgrader={"grade_id": "too_small", "locked": true}
D_HEAD = 64 // 2  # the TinyDecoder's d_model // n_heads
_, _, twice = run(0, factor=1.0, qk_decay=0.0, extra_scale=1 / math.sqrt(D_HEAD))
_, _, normal_0 = results["normal init"][0]
fig, (ax_loss, ax_entropy) = plt.subplots(1, 2, figsize=(11, 3.8))
curves(steps, {"normal": normal_0["loss"], "scale applied twice": twice["loss"]}, ax=ax_loss,
       xlabel="step", ylabel="loss (nats)", title="copy loss, seed 0")
curves(steps, {"normal": np.mean(normal_0["entropy"], axis=1), "scale applied twice": np.mean(twice["entropy"], axis=1)},
       ax=ax_entropy, xlabel="step", ylabel="entropy (nats)", title="attention entropy, seed 0")
ax_entropy.axhline(CEILING, ls="--", c="grey")
fig.tight_layout()
print(f"scale applied twice: entropy {np.mean(twice['entropy'][0]):.3f} nats at step 0, "
      f"{np.mean(twice['entropy'][len(steps) // 2]):.3f} at step {steps[len(steps) // 2]} (ceiling {CEILING:.3f})")

# %% [markdown]
# ## 7. Written answer (graded by a TA)
#
# In five to eight sentences, using the softmax Jacobian $\operatorname{diag}(a) - aa^\top$ and
# the numbers you measured (section 3b and the curves):
#
# 1. why does the 10× run stay collapsed under gradient descent, while its loss stalls at the
#    unigram baseline?
# 2. why can the normal run sharpen its heads to low entropy and still keep learning?
# 3. why does decaying W_Q and W_K rescue the collapsed run, when the gradient cannot?

# %% [markdown] nbgrader={"grade": true, "grade_id": "written_jacobian", "points": 4, "solution": true}
# ### BEGIN SOLUTION
# The gradient reaching the scores of a row is $ds = (\operatorname{diag}(a) - aa^\top)\,da$, and
# every entry of that Jacobian is a product $a_i(\delta_{ij} - a_j)$: 0.22 at most for a
# uniform 3-way row, 0.02 for (0.98, 0.01, 0.01), and about $10^{-10}$ for the median row of
# the 10× model, whose scores are 100 times larger. Only the rows where two keys happen to
# tie (14 % of layer-0 rows at initialisation) pass any gradient to W_Q and W_K, and
# training resolves those ties too, so after 100 steps almost none are still responsive: 1 %
# or less (the cell printed 1 %, 14 of 960 rows, in the grading sandbox here; a run elsewhere
# printed 0 %). The one-hot pattern chosen at random by the initialisation is therefore
# frozen: a fixed point, not slow learning. The value path still trains, but reading one
# arbitrary key per query cannot copy, so the loss stays near $\log 16$, the unigram
# baseline. The normal run starts near the ceiling, where every row has a slope around 0.17,
# and sharpens only gradually and only where the task rewards it (the copying head ends
# near one key per query, the other heads stay spread), so the gradient keeps flowing while
# it learns. Decoupled decay multiplies W_Q and W_K by $1 - \eta\lambda$ at every step whether
# or not any gradient arrives, so the scores shrink geometrically until the rows are soft
# again; from there the Jacobian is large and ordinary learning resumes: the entropy rises
# first, then the loss falls.
#
# **Rubric (TA only):** 1 point: the Jacobian diag(a) - aa^T goes to 0 for one-hot rows
# (quotes a measured or lesson number), so W_Q/W_K receive (almost) no gradient. 1 point:
# the pattern is frozen at a random, useless selection, so the loss stays at the unigram
# baseline log 16 (a fixed point, not slow learning). 1 point: the normal run keeps a large
# Jacobian while it sharpens gradually. 1 point: decay shrinks W_Q, W_K independently of the
# gradient, un-saturating the softmax so the gradient returns.
# ### END SOLUTION
