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
# 5. rescue the collapsed run by decaying W_Q and W_K;
# 6. write `sink_mass`, a detector for the symptom "every query attends to position 0";
# 7. try the two other rescues the chapter names, warm-up and QK-LayerNorm (you write
#    `qk_layernorm`), on a collapse present at initialisation and on one caused by a large
#    learning rate;
# 8. find the *attention sinks* of a model trained on long sequences and show, with
#    `sliding_window_mask`, what a sliding-window cache that evicts the first token does to it
#    (the StreamingLLM observation);
# 9. explain with the softmax Jacobian why the collapsed run cannot recover by itself.
#
# An ungraded extension at the end looks at the opposite failure (scores too small) and at a
# learned temperature.
#
# Everything runs on a CPU in about a minute: the models have about 36 000 parameters and
# each run takes 100 to 200 steps.
#
# **Time.** About 2.5 hours: 45 minutes for sections 1–3, 45 minutes for the training loop and
# the experiments of sections 4–5, 45 minutes for sections 6–8 (three short functions and
# their experiments) and 15 minutes for the written answer. The extension takes about 15
# minutes more and carries no points.
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
# count those terms as 0. An epsilon inside the log, `log(A + eps)` or `log(A.clamp(min=eps))`
# with `eps` at most `1e-5`, is accepted: it lowers a row's entropy by at most `T_k * eps`, and
# the tests allow for that.
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
expect_close(h_uniform, [math.log(5)] * 3, "entropy of uniform rows over 5 keys", atol=2e-4,
             hint="Uniform rows give log T_k = 1.609 nats; 2.32 would be bits: use the natural log.")
one_hot = torch.zeros(2, 3, 4, 5)
one_hot[..., 2] = 1.0  # (B, H, T_q, T_k): every query reads key 2 only
h_one_hot = attention_entropy(one_hot)
expect_finite(h_one_hot, "entropy of one-hot rows", "0 * log 0 is nan in floating point; count those terms as 0.")
expect_close(h_one_hot, [0.0] * 3, "entropy of one-hot rows", atol=2e-4, hint="A one-hot row has entropy 0.")
causal = torch.tril(torch.ones(6, 6)) / torch.arange(1, 7).unsqueeze(1)  # (T, T): uniform over keys 0..i
h_causal = attention_entropy(causal[None, None])  # (1,)
expect_finite(h_causal, "entropy of uniform causal weights",
              "The masked weights are exactly 0 and 0 * log 0 gave nan: count those terms as 0.")
expect_close(h_causal, [causal_ceiling(6)], "entropy of uniform causal weights over T = 6", atol=2e-4,
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
# * **warm-up**: when `warmup > 0`, update $s$ (counting from $s = 1$) uses the learning rate
#   `lr * min(1, s / warmup)`, a straight line that reaches `lr` at update `warmup` and stays
#   there; `warmup = 0` means `lr` throughout. Set each `param_group["lr"]` of the optimiser
#   before its step, or use `torch.optim.lr_scheduler.LambdaLR` (mind where its count
#   starts: its first step uses the factor of 0);
# * after each optimiser step, if `qk_decay > 0`, multiply every block's W_q and W_k by
#   `1 - lr * qk_decay` (under `torch.no_grad()`; `lr` here is the argument, not the warmed-up
#   rate). This is *decoupled* weight decay, the AdamW kind, applied to the query and key
#   projections only;
# * log at every step $s$ in `0, log_every, 2·log_every, … ≤ steps`, that is after $s$ updates
#   (step 0 is the untrained model): the loss on the evaluation batch and, for each layer,
#   the mean over heads of `attention_entropy` on the evaluation batch, under
#   `torch.no_grad()`. The value logged at step $s$ is that of the model **after update $s$**
#   (and after its `qk_decay`), measured on the **evaluation batch**, never on the training
#   batch of the update: the hidden tests replay your updates and compare the losses you log
#   with the evaluation batch's, step by step.
#
# Return a dict with `"step"` (list of ints), `"loss"` (list of floats) and `"entropy"` (a list
# with one list of per-layer floats per logged step).
#
# The tests of this cell grade the loop, not `attention_entropy` a second time: the visible test
# compares your step-0 log with a run of 0 steps, whatever your `attention_entropy` gives, and the
# hidden tests run your loop with a correct `attention_entropy` in its place. A mistake in
# `attention_entropy` costs the points of section 1 (and of the experiment that reads its values),
# never these.
#
# *Why plain SGD?* The gradient argument of this lab is about the gradient's size. Adam divides
# each step by a running average of the gradient's magnitude, so it turns a tiny gradient into
# a normal-sized step. With Adam, the 10× run of this tiny model gets much further (its loss
# falls well below the baseline in 100 steps while its entropy stays near 0: the one-hot
# pattern is shoved from key to key), for a reason that has nothing to do with the softmax.
# Try it after the lab.

# %% nbgrader={"grade_id": "train_copy_task", "solution": true}
def train_copy_task(model, steps, lr=0.1, batch_size=32, seed=0, qk_decay=0.0, log_every=10, warmup=0):
    """Train `model` on the copy task with SGD and log its loss and attention entropy.

    Args:
        model: a TinyDecoder (its task is `model.task`).
        steps: number of optimiser updates.
        lr: SGD learning rate (momentum 0.9); the peak rate when warming up.
        batch_size: sequences per batch (training and evaluation).
        seed: seeds the torch.Generator that draws the evaluation batch, then the training batches.
        qk_decay: decoupled weight decay on W_q and W_k only: after each step they are
            multiplied by (1 - lr * qk_decay).
        log_every: log after every `log_every` updates, starting with the untrained model.
        warmup: if > 0, update s (from 1) uses lr * min(1, s / warmup).

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
        if warmup > 0:
            for group in optimiser.param_groups:
                group["lr"] = lr * min(1.0, step / warmup)
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
untrained = TinyDecoder(task)
short = train_copy_task(copy.deepcopy(untrained), steps=20)
expect(list(short.get("step", [])) == [0, 10, 20], "history['step'] of a 20-step run",
       f"is {short.get('step')}", "Log the untrained model (step 0), then after every 10 updates.")
expect_shape(np.asarray(short["loss"]), (3,), "history['loss'] of a 20-step run", "One loss per logged step.")
expect_shape(np.asarray(short["entropy"]), (3, 2), "history['entropy'] of a 20-step run",
             "One list per logged step, one entropy per layer (the mean over that layer's heads).")
# step 0 is the untrained model: the same log as a run of 0 steps, whatever attention_entropy computes
# (this cell tests the loop; section 1 tests attention_entropy).
none = train_copy_task(copy.deepcopy(untrained), steps=0)
expect(np.allclose(short["entropy"][0], none["entropy"][0], rtol=0, atol=1e-6, equal_nan=True)
       and np.allclose(short["loss"][0], none["loss"][0], rtol=0, atol=1e-6),
       "step 0 of a 20-step run", f"logs entropies {np.round(short['entropy'][0], 4).tolist()}, but the same "
       f"untrained model run for 0 steps logs {np.round(none['entropy'][0], 4).tolist()}",
       "Log the untrained model before the first update, on the evaluation batch.")
# warm-up: the first update of SGD with momentum moves the weights by lr_1 * gradient, so with
# warmup = 4 it is exactly a quarter of the update without warm-up, from the same model and seed.
start = TinyDecoder(task).state_dict()  # one initial model for both runs
moved = {}
for w in (0, 4):
    m = TinyDecoder(task)
    m.load_state_dict(start)
    train_copy_task(m, steps=1, warmup=w, log_every=1)
    moved[w] = (m.head.weight.detach() - start["head.weight"]).norm().item()  # size of the first update
expect_close(moved[4] / moved[0], 0.25, "first update with warmup=4 / first update without warm-up", atol=1e-3,
             hint="Update 1 uses lr * min(1, 1 / warmup): counting updates from 0 gives a first update of 0.")

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


def run(seed, factor=1.0, qk_decay=0.0, extra_scale=1.0, lr=0.1, warmup=0, **model_options):
    """Train one model; returns (its untrained copy, the trained model, its history).

    model_options go to TinyDecoder (qk_norm=..., learn_temperature=...), for sections 7 and the extension.
    """
    torch.manual_seed(seed)
    model = scale_qk_init(TinyDecoder(task, extra_scale=extra_scale, **model_options), factor)
    untrained = copy.deepcopy(model)
    history = train_copy_task(model, STEPS, lr=lr, seed=seed, qk_decay=qk_decay, warmup=warmup)
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
# ## 6. The symptom: every query attends to position 0
#
# The chapter's symptom list for a collapsed model: "attention maps show every query
# attending to one or two positions (often position 0)". A head's habit of reading the first
# token is one number: the **fraction of its attention mass that lands on key 0**, averaged
# over the batch and the queries. Two details:
#
# * under a causal mask query 0 can read only key 0, so it always puts all its mass there, and
#   the early queries read few keys. Leave out the queries before `from_query` to measure the
#   head rather than the mask;
# * the yardstick is uniform causal attention: query $i$ puts $1/(i+1)$ on each key it can
#   read, so a head that reads nothing in particular puts the mean of $1/(i+1)$ on key 0.
#
# Write `sink_mass(attn, from_query=1)`: (B, H, T_q, T_k) weights in, one number per head out.
# You will use the same function twice: here on the collapsed models, and in section 8 to
# find attention sinks.

# %% nbgrader={"grade_id": "sink_mass", "solution": true}
def sink_mass(attn, from_query=1):
    """Fraction of each head's attention that lands on key 0 (the first token).

    Args:
        attn: (B, H, T_q, T_k) attention weights; every row sums to 1.
        from_query: the first query counted; queries 0 .. from_query - 1 are left out.

    Returns:
        (H,) tensor: attn[b, h, i, 0] averaged over the batch b and the queries
        i = from_query .. T_q - 1.
    """
    ### BEGIN SOLUTION
    on_first_key = attn[:, :, from_query:, 0]  # (B, H, T_q - from_query)
    return on_first_key.mean(dim=(0, 2))  # (H,)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_sink_mass", "points": 2}
uniform6 = torch.tril(torch.ones(6, 6)) / torch.arange(1, 7).unsqueeze(1)  # (T, T): uniform causal weights
uniform_share = sum(1 / (i + 1) for i in range(1, 6)) / 5  # mean of 1 / (i + 1) over queries 1..5
got = sink_mass(uniform6.expand(2, 3, 6, 6))
expect_shape(got, (3,), "sink_mass of (2, 3, 6, 6) weights",
             "One value per head: average over the batch (axis 0) and the queries (axis 2) of the weights on key 0.")
expect_close(got, [uniform_share] * 3, "sink_mass of uniform causal weights over T = 6", atol=1e-6,
             hint=f"Query i puts 1 / (i + 1) on key 0; queries 1..5 give {uniform_share:.3f}. "
                  "Is query 0 (always 1.0) left out, and is it key 0's column (last axis) you read?")
expect_close(sink_mass(uniform6[None, None], from_query=3), [(1 / 4 + 1 / 5 + 1 / 6) / 3],
             "sink_mass(uniform causal weights, from_query=3)", atol=1e-6,
             hint="Only the queries from from_query on count.")
parked = uniform6.repeat(1, 2, 1, 1)  # (1, 2, T, T): head 0 uniform, head 1 below
parked[0, 1] = 0.0
parked[0, 1, :, 0] = 1.0  # head 1: every query reads key 0 only
expect_close(sink_mass(parked)[1], 1.0, "sink_mass of a head whose every query reads key 0", atol=1e-6,
             hint="A head that parks every query on the first token has sink mass 1.")

# %% nbgrader={"grade": true, "grade_id": "test_sink_mass_hidden", "points": 2}
# Hidden tests: random weights of other shapes (T_q != T_k), planted sink heads, other from_query, float32 and float64.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab05_entropy_collapse import hidden
hidden.check_sink_mass(sink_mass)
### END HIDDEN TESTS

# %% [markdown]
# Where do the heads of section 5's models look? The cell below measures every head of every
# trained model (seed 0 to 2, layer-0 and layer-1 heads) on the 32 sequences of section 3b,
# counting queries 4 to 15, against the uniform share of those queries.

# %% nbgrader={"grade_id": "symptom", "locked": true}
def head_masses(model, tokens, from_query):
    """(layers, H) sink mass of every head of `model` on `tokens`."""
    with torch.no_grad():
        return torch.stack([sink_mass(attn, from_query) for attn in model(tokens)[1]])  # (layers, H)


FROM_QUERY = 4
UNIFORM_SHARE = sum(1 / (i + 1) for i in range(FROM_QUERY, task.T)) / (task.T - FROM_QUERY)
print(f"uniform causal attention, queries {FROM_QUERY}..{task.T - 1}: {UNIFORM_SHARE:.3f} on key 0")
for name in RUNS:
    masses = np.array([head_masses(trained, x_demo, FROM_QUERY).numpy() for _, trained, _ in results[name]])  # (seeds, layers, H)
    print(f"{name:>15}: sink mass per head (seed, layer, head) = {np.round(masses.reshape(len(SEEDS), -1).astype(float), 2).tolist()}")

# %% [markdown]
# The symptom is there, but not on every seed. In seeds 0 and 1 of the 10× run, one layer-1
# head puts 0.91 and 0.67 of its mass on key 0 and a layer-0 head 0.51 and 0.36, up to eight
# times the uniform share of 0.108, while seed 2's frozen heads read other keys (0.01 to 0.21).
# A head frozen one-hot reads whichever key its random initial scores favour, and key 0, the one
# key every query can read, wins often. The normal and the decayed runs stay near the uniform
# share (0.04 to 0.14): their copy head reads the key 8 back, not the first. So sink mass alone
# does not tell a collapsed head from a useful sink (section 8): read it with the entropy and
# the loss.

# %% [markdown]
# ## 7. Two more rescues: warm-up and QK-LayerNorm
#
# The chapter names three interventions. You measured decay on W_Q and W_K. The other two:
#
# * **Warm-up** keeps the first updates small, so the scores do not grow before the rest of the
#   model is doing useful work. It is already in your loop (`warmup=`).
# * **QK-LayerNorm** normalises every query and every key vector of every head, over its
#   $d_{head}$ entries, before the dot product: $\hat q = (q - \bar q)/\sqrt{\operatorname{var}(q)
#   + \epsilon}$, the same for $k$. A vector of $d_{head}$ entries with mean 0 and variance 1 has
#   length $\sqrt{d_{head}}$, so $|\hat q\cdot\hat k|/\sqrt{d_{head}} \le \sqrt{d_{head}} = 5.7$
#   here, whatever W_Q and W_K become. Lab 2 bounded the scores with unit-length vectors (a
#   cosine); models that use QK-norm in practice do it with a LayerNorm or an RMSNorm per
#   head, as here (this one has no learned gain).
#
# LayerNorm does not see a vector's scale, $\operatorname{LN}(10q) = \operatorname{LN}(q)$ up to
# $\epsilon$, so with QK-LayerNorm the 10× model computes exactly the same attention as the
# normal one. It does not learn the same way: the gradient reaching W_Q through the
# normalisation is divided by the same factor 10.
#
# Write `qk_layernorm(q, k, eps)`: the normalised queries and keys, without a learned gain or
# bias, with the **population** variance (divide by $d_{head}$, as `torch.nn.LayerNorm` does).
# `TinyDecoder(task, qk_norm=qk_layernorm)` calls it on every layer's per-head queries and
# keys, each (B, H, T, d_head).

# %% nbgrader={"grade_id": "qk_layernorm", "solution": true}
def qk_layernorm(q, k, eps=1e-5):
    """LayerNorm without gain or bias of every query and key vector, over its last axis.

    Args:
        q: (..., T_q, d_head) queries.
        k: (..., T_k, d_head) keys (the same leading axes and d_head as q).
        eps: added to the variance before the square root.

    Returns:
        (q_hat, k_hat), shaped like q and k: each vector minus its mean, divided by
        sqrt(its population variance + eps).
    """
    ### BEGIN SOLUTION
    def normalise(x):
        mean = x.mean(dim=-1, keepdim=True)  # (..., T, 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., T, 1): divided by d_head
        return (x - mean) / torch.sqrt(var + eps)  # (..., T, d_head)

    return normalise(q), normalise(k)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_qk_layernorm", "points": 2}
q4 = torch.tensor([[1.0, 2.0, 3.0, 4.0]])  # (T_q, d_head) = (1, 4): mean 2.5, population variance 1.25
k4 = torch.tensor([[2.0, 2.0, 2.0, 6.0], [0.0, 1.0, 0.0, 1.0]])  # (T_k, d_head) = (2, 4)
q_hat, k_hat = qk_layernorm(q4, k4)
expect_shape(q_hat, (1, 4), "qk_layernorm's q_hat for q of shape (1, 4)", "Return (q_hat, k_hat) shaped like q and k.")
expect_shape(k_hat, (2, 4), "qk_layernorm's k_hat for k of shape (2, 4)", "Return (q_hat, k_hat) shaped like q and k.")
expect_close(q_hat, [[-1.342, -0.447, 0.447, 1.342]], "qk_layernorm of q = (1, 2, 3, 4)", atol=1e-3,
             hint="(q - 2.5) / sqrt(1.25): subtract each vector's mean over its d_head entries (the last axis), "
                  "divide by the population standard deviation (over d_head, not d_head - 1).")
expect_close(k_hat, torch.nn.functional.layer_norm(k4, (4,)), "qk_layernorm's keys against torch's layer_norm",
             atol=1e-5, hint="Normalise the keys too, each vector over its own d_head entries (the last axis).")
q_big = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(0))  # (B, H, T_q, d_head)
k_big = torch.randn(2, 3, 7, 8, generator=torch.Generator().manual_seed(1))  # (B, H, T_k, d_head)
expect_close(qk_layernorm(10 * q_big, 3 * k_big)[0], qk_layernorm(q_big, k_big)[0],
             "qk_layernorm(10 q, 3 k) against qk_layernorm(q, k)", atol=1e-4,
             hint="LayerNorm ignores a vector's scale: 10 q and q normalise to the same vector.")

# %% nbgrader={"grade": true, "grade_id": "test_qk_layernorm_hidden", "points": 2}
# Hidden tests: other shapes (T_q != T_k, other d_head), offsets and scales, other eps, float32 and float64.
### BEGIN HIDDEN TESTS
from mlbook.labs.lab05_entropy_collapse import hidden
hidden.check_qk_layernorm(qk_layernorm)
### END HIDDEN TESTS

# %% [markdown]
# Now the rescues side by side, on two kinds of collapse, three seeds each (about 20 s):
#
# * **collapse at initialisation**: the 10× model of section 5, with warm-up (20 updates) and
#   with QK-LayerNorm (decay you have already measured);
# * **collapse caused by training**: the normal model at learning rate 0.5 instead of 0.1,
#   without a rescue, with warm-up and with QK-LayerNorm.

# %% nbgrader={"grade_id": "rescues", "locked": true}
WARMUP = 20
HIGH_LR = 0.5
RESCUES = {
    "10x + warm-up": dict(factor=10.0, warmup=WARMUP),
    "10x + QK-LN": dict(factor=10.0, qk_norm=qk_layernorm),
    "lr 0.5": dict(lr=HIGH_LR),
    "lr 0.5 + warm-up": dict(lr=HIGH_LR, warmup=WARMUP),
    "lr 0.5 + QK-LN": dict(lr=HIGH_LR, qk_norm=qk_layernorm),
}
rescued_runs = {name: [run(seed, **cfg) for seed in SEEDS] for name, cfg in RESCUES.items()}
for name, rs in rescued_runs.items():
    median_loss[name] = np.median([h["loss"] for _, _, h in rs], axis=0)  # (n_logs,)
    median_entropy[name] = np.median([np.mean(h["entropy"], axis=1) for _, _, h in rs], axis=0)  # (n_logs,)
for name in ["10x W_Q, W_K", "10x + QK decay", *RESCUES]:
    finals = [h["loss"][-1] for _, _, h in (results.get(name) or rescued_runs[name])]
    print(f"{name:>16}: final loss per seed {np.round(finals, 3).tolist()}, median entropy "
          f"{median_entropy[name][0]:.2f} -> {median_entropy[name][-1]:.2f} nats")
fig, (ax_loss, ax_entropy) = plt.subplots(1, 2, figsize=(11, 3.8))
curves(steps, {n: median_loss[n] for n in RESCUES}, ax=ax_loss, xlabel="step", ylabel="loss (nats)",
       title="copy loss, median of 3 seeds")
ax_loss.axhline(UNIGRAM, ls="--", c="grey")
curves(steps, {n: median_entropy[n] for n in RESCUES}, ax=ax_entropy, xlabel="step", ylabel="entropy (nats)",
       title="attention entropy")
ax_entropy.axhline(CEILING, ls="--", c="grey")
fig.tight_layout()

# %% [markdown]
# What the three seeds show (seeds 0–9 agree, see the test below):
#
# * **Warm-up does not rescue a collapse present at initialisation.** 10× + warm-up ends where
#   10× ends (loss 2.2 to 2.8, entropy 0.02). Smaller first steps cannot un-saturate a softmax
#   that is saturated at step 0; only something that shrinks the scores whatever the gradient
#   says (decay), or takes their scale away (QK-LayerNorm), can.
# * **Warm-up did not rescue the large learning rate either.** At lr 0.5 the plain model
#   collapses *during* training: its entropy falls from 1.83 to 0.19 nats and the loss stays at
#   2.3 to 2.9 (on seeds 0–9: 8 stall, one diverges to nan, one learns). Twenty updates of
#   warm-up change nothing (2.5 to 2.8; fifty did no better when this lab was written): the
#   scores blow up once the rate reaches 0.5, and a few dozen small steps have not made the rest
#   of the model useful yet. Warm-up guards the first steps of a long run; it does not make a
#   rate that is too large safe. This is a measured negative result, not a bug in your loop.
# * **QK-LayerNorm rescues both.** With QK-LN the 10× model starts at 1.61 nats, exactly where
#   a QK-LN model at normal init starts (the factor never reaches the scores; QK-LN rows are a
#   little sharper than the plain model's 1.83 because normalised vectors have length
#   $\sqrt{d_{head}}$), and it learns (loss 0.02 to 0.34), more slowly than normal since its
#   gradient into W_Q and W_K is 10 times smaller. At lr 0.5 it learns on every seed shown (loss
#   at most 0.001), where the plain model collapsed: scores bounded by 5.7 keep the softmax
#   responsive whatever the optimiser does to W_Q and W_K.

# %% nbgrader={"grade": true, "grade_id": "test_rescues", "points": 2}
# Measured on seeds 0-9 with the reference solution (100 steps): 10x + warm-up ends at loss 2.20-2.78 and
# entropy <= 0.05 on every seed; 10x + QK-LN at loss 0.004-0.34 and entropy 1.37-1.45; lr 0.5 + QK-LN at
# loss <= 0.001 on 9 of 10 seeds (seed 3 diverges). The thresholds below hold for the median of seeds 0-2.
expect(median_loss["10x + warm-up"][-1] > 0.6 * UNIGRAM, "median final loss of the 10x run with warm-up",
       f"{median_loss['10x + warm-up'][-1]:.3f} nats, expected above 0.6 x the unigram baseline ({0.6 * UNIGRAM:.2f})",
       "Warm-up only makes the first steps smaller: it cannot undo a collapse present at step 0. Does your "
       "warm-up change anything other than the learning rate?")
expect(median_loss["10x + QK-LN"][-1] < 0.2 * UNIGRAM, "median final loss of the 10x run with QK-LayerNorm",
       f"{median_loss['10x + QK-LN'][-1]:.3f} nats, expected below 0.2 x the unigram baseline ({0.2 * UNIGRAM:.2f})",
       "QK-LayerNorm removes the factor 10 from the scores: does qk_layernorm normalise each vector over d_head?")
expect(median_entropy["10x + QK-LN"][0] > 0.7 * CEILING, "median initial entropy of the 10x run with QK-LayerNorm",
       f"{median_entropy['10x + QK-LN'][0]:.3f} nats, expected above 0.7 x the causal ceiling ({0.7 * CEILING:.2f})",
       "LN(10 q) = LN(q): with QK-LayerNorm the factor 10 never reaches the scores, so the inflated model "
       "starts spread out, far from the plain 10x run's near-0 entropy.")
expect(median_loss["lr 0.5 + QK-LN"][-1] < 0.2 * UNIGRAM, "median final loss at lr 0.5 with QK-LayerNorm",
       f"{median_loss['lr 0.5 + QK-LN'][-1]:.3f} nats, expected below 0.2 x the unigram baseline ({0.2 * UNIGRAM:.2f})",
       "Bounded scores keep the softmax responsive at a learning rate that collapses the plain model.")

# %% [markdown]
# ## 8. Attention sinks
#
# A language model that generates a long stream keeps a **KV cache**: the keys and values of
# every token so far. To bound its size, a *sliding window* keeps only the last W tokens and
# evicts older ones. Xiao et al. (2023, "Efficient Streaming Language Models with Attention
# Sinks", StreamingLLM) found that evicting the **first** tokens breaks a model at once, even
# though they carry little meaning, and that keeping the first few ("sink") tokens next to the
# window restores it. Many heads park attention on the first token when they have nothing to
# read: a softmax row must sum to 1, and a token whose value the model has learnt to ignore is
# a place to put the mass. Section 6's detector finds such heads.
#
# The copy task grows no such heads: every query after the separator has something to read,
# and the normal models of section 5 put about the uniform share on key 0 (section 6; so did
# normal models trained for 300 steps with a BOS token added, when this lab was written).
# Sinks need queries with nothing to do. `LookbackTask` (in
# `mlbook_helpers.copy_task`) gives them: sequences of T = 32 tokens that start with a fixed
# BOS token; a position holding one of 2 *flag* tokens (of 16) must output the token 4
# positions back, every other position its own token, which needs no attention at all. Three
# seeds of the same TinyDecoder, trained with Adam (200 updates of 16 sequences, about 4 s):

# %% nbgrader={"grade_id": "sink_models", "locked": true}
from mlbook_helpers.copy_task import LookbackTask, train_adam

long_task = LookbackTask(n_data=16, T=32, lag=4, n_flags=2)
SINK_STEPS = 200
SINK_BATCH = 16  # sequences per update
SINK_LR = 4e-3  # Adam's learning rate
sink_models = []
for seed in SEEDS:
    torch.manual_seed(seed)
    sink_model = TinyDecoder(long_task)
    train_adam(sink_model, SINK_STEPS, lr=SINK_LR, batch_size=SINK_BATCH, seed=seed)
    sink_models.append(sink_model.eval())
long_x, long_y = long_task.batch(256, torch.Generator().manual_seed(99))  # (256, T): evaluation sequences
LONG_FROM = long_task.T // 4  # count queries 8..31: well past the few-keys start
uniform_long = torch.tril(torch.ones(long_task.T, long_task.T)) / torch.arange(1, long_task.T + 1).unsqueeze(1)  # (T, T)
LONG_UNIFORM = sink_mass(uniform_long[None, None], LONG_FROM).item()
SINK_THRESHOLD = 2 * LONG_UNIFORM  # a sink head puts at least twice the uniform share on BOS
long_masses = np.array([head_masses(m, long_x, LONG_FROM).numpy() for m in sink_models])  # (seeds, layers, H)
print(f"uniform share on BOS (queries {LONG_FROM}..{long_task.T - 1}): {LONG_UNIFORM:.3f}; threshold {SINK_THRESHOLD:.3f}")
for seed, masses in zip(SEEDS, long_masses):
    heads = [(layer, head) for layer, head in zip(*np.nonzero(masses > SINK_THRESHOLD))]
    print(f"seed {seed}: sink mass per (layer, head) {np.round(masses.astype(float), 2).tolist()}; sink heads "
          f"{[(int(l), int(h)) for l, h in heads]}")

# %% [markdown]
# No head of this tiny model is as extreme as the sinks of a large language model, which can
# put most of their mass on the first token; but every seed has heads that put 0.13 to 0.18 of
# their mass on BOS, 2.4 to 3.2 times the uniform share of 0.056 (seeds 0–9: the largest head of
# each seed 0.13 to 0.27). Split by query (measured when this lab was written), a flagged query
# of a layer-0 sink head puts almost nothing on BOS (at most 0.03), it reads 4 back; the queries
# with nothing to fetch put 0.13 to 0.2 there. The copy models of section 5 have no such head: there every scored query has a key to
# read.
#
# **A sliding-window cache, through a mask.** With learned absolute positions (as here), a
# KV cache that keeps the last `window` tokens plus the first `n_sinks` gives exactly the
# outputs of a full forward pass in which query $i$ may read key $j$ when
#
# $$j \le i \quad\text{and}\quad \bigl(i - j < \texttt{window}\ \text{ or }\ j < \texttt{n\_sinks}\bigr),$$
#
# because every key and value in the cache, at every layer, was computed when its token was the
# newest query, under the same rule. (Models with rotary positions also have to decide which
# positions the kept tokens get; StreamingLLM re-numbers them inside the cache.)
#
# Write `sliding_window_mask(T, window, n_sinks=0)`: the (T, T) boolean mask, True where
# allowed. `window` counts the query itself: with `window = 1` a query reads only itself
# (plus the sinks).

# %% nbgrader={"grade_id": "sliding_window_mask", "solution": true}
def sliding_window_mask(T, window, n_sinks=0):
    """Which keys a query can read from a sliding-window KV cache that keeps sink tokens.

    Args:
        T: sequence length.
        window: how many of the most recent tokens the cache keeps, the query included (>= 1).
        n_sinks: how many of the first tokens it keeps as well (0: a plain sliding window).

    Returns:
        (T, T) bool tensor, True where query i may read key j: j <= i and
        (i - j < window or j < n_sinks).
    """
    ### BEGIN SOLUTION
    i = torch.arange(T).unsqueeze(1)  # (T, 1): queries
    j = torch.arange(T).unsqueeze(0)  # (1, T): keys
    recent = (j <= i) & (i - j < window)  # (T, T): the last `window` tokens, the query included
    sinks = (j <= i) & (j < n_sinks)  # (T, T): the first n_sinks tokens, once they exist
    return recent | sinks  # (T, T)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_sliding_window_mask", "points": 2}
small = torch.as_tensor(sliding_window_mask(6, 3, 1))  # a NumPy boolean array is read as a tensor too
expect_shape(small, (6, 6), "sliding_window_mask(6, 3, 1)", "One row per query, one column per key.")
expect(small.dtype == torch.bool, "sliding_window_mask(6, 3, 1)", f"has dtype {small.dtype}",
       "Return a boolean mask, True where the query may read the key.")
expect_close(small.int(), [[1, 0, 0, 0, 0, 0],
                           [1, 1, 0, 0, 0, 0],
                           [1, 1, 1, 0, 0, 0],
                           [1, 1, 1, 1, 0, 0],
                           [1, 0, 1, 1, 1, 0],
                           [1, 0, 0, 1, 1, 1]], "sliding_window_mask(6, 3, 1)", atol=0,
             hint="Query i reads keys i-2..i (3 tokens: the window counts the query itself, so reading "
                  "i-3 too is one key too many) and key 0, the sink; never a key after i.")
expect_close(torch.as_tensor(sliding_window_mask(5, 5)).int(), torch.tril(torch.ones(5, 5)).int(),
             "sliding_window_mask(5, 5, 0)", atol=0, hint="A window as long as the sequence is the causal mask.")
expect_close(torch.as_tensor(sliding_window_mask(4, 1, 2)).int(),
             [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]],
             "sliding_window_mask(4, 1, 2)", atol=0,
             hint="A sink token is read only once it exists: query 0 cannot read sink 1.")

# %% nbgrader={"grade": true, "grade_id": "test_sliding_window_mask_hidden", "points": 2}
# Hidden tests: other T, windows (1, longer than T) and numbers of sinks (0, more than the window).
### BEGIN HIDDEN TESTS
from mlbook.labs.lab05_entropy_collapse import hidden
hidden.check_sliding_window_mask(sliding_window_mask)
### END HIDDEN TESTS

# %% [markdown]
# Now evict. A flag reads 4 tokens back, so a window of W = 8 tokens keeps everything the task
# needs; what it loses is BOS. The cell measures, per seed, the loss and the largest change
# of any predicted probability against the full cache, for the window alone, for a window one
# token longer (the same number of cached tokens as window + 1 sink, but recent ones), and for
# the window plus 1, 2 and 4 sink tokens. Besides the loss, it counts the scored predictions whose
# most likely token changed.

# %% nbgrader={"grade_id": "eviction", "locked": true}
WINDOW = 8
CACHES = {"full cache": None, "window 8": (WINDOW, 0), "window 9": (WINDOW + 1, 0),
          "window 8 + 1 sink": (WINDOW, 1), "window 8 + 2 sinks": (WINDOW, 2), "window 8 + 4 sinks": (WINDOW, 4)}
eviction = {name: [] for name in CACHES}  # name -> per seed (loss, fraction of predictions changed)
scored = long_y != -100  # (256, T)
with torch.no_grad():
    for m in sink_models:
        full_pred = m(long_x)[0].argmax(dim=-1)  # (256, T)
        for name, cache in CACHES.items():
            allowed = None if cache is None else sliding_window_mask(long_task.T, *cache)  # (T, T)
            logits = m(long_x, allowed)[0]  # (256, T, vocab)
            changed = (logits.argmax(dim=-1) != full_pred)[scored].float().mean().item()
            eviction[name].append((copy_loss(logits, long_y).item(), changed))
eviction_loss = {name: float(np.median([l for l, _ in rows])) for name, rows in eviction.items()}
for name, rows in eviction.items():
    print(f"{name:>19}: loss per seed {[round(l, 4) for l, _ in rows]}, predictions changed "
          f"{[f'{c:.1%}' for _, c in rows]}")
seed0_head = np.unravel_index(np.argmax(long_masses[0]), long_masses[0].shape)  # (layer, head) of seed 0
with torch.no_grad():
    shown = {f"{name}, layer {seed0_head[0]} head {seed0_head[1]}":
             sink_models[0](long_x[:1], None if CACHES[name] is None else sliding_window_mask(long_task.T, *CACHES[name]))[1][seed0_head[0]][0, seed0_head[1]]
             for name in ("full cache", "window 8", "window 8 + 1 sink")}  # name -> (T, T)
heatmap_grid(shown, [str(t) if t < long_task.n_data else "B" for t in long_x[0].tolist()], ncols=3, annotate=False);

# %% [markdown]
# Evicting BOS breaks the model although the window keeps every token the task needs: the loss
# rises from 0.002–0.003 nats to 0.08–0.18 (35 to 80 times), and 3 to 6 % of the predictions
# change. A window one token longer (9 recent tokens, as many as window + 1 sink) is no better:
# what matters is the *first* token, not how many tokens the cache holds. Keeping BOS as a
# single sink next to the window brings the loss back to 0.003 to 0.013 and changes at most
# 0.4 % of the predictions; with 4 sinks the loss is within 0.002 nats of the full cache. (The
# models never saw a window during training, just as StreamingLLM's models had not.) The heat
# maps show where the mass goes: without BOS, the mass a sink head parked there lands on the
# tokens of the window, whose values are not harmless.

# %% nbgrader={"grade": true, "grade_id": "test_sinks", "points": 2}
# Measured on seeds 0-9 with the reference solution (200 Adam updates of 16 sequences): full cache
# 0.0017-0.0030 nats; window 8 alone 0.043-0.29 (at least 24 x the full cache on every seed);
# window 8 + 1 sink 0.003-0.017, at most 0.08 x the window alone on every seed; the largest
# sink mass of each seed 0.13-0.27, above the threshold 0.112 on every seed. The thresholds below
# hold for the median of seeds 0-2.
expect(all(masses.max() > SINK_THRESHOLD for masses in long_masses), "the largest sink mass of each seed's heads",
       f"is {np.round(long_masses.reshape(len(SEEDS), -1).max(axis=1), 3).tolist()}, expected above twice the uniform "
       f"share ({SINK_THRESHOLD:.3f}) for every seed", "Does sink_mass read key 0's column from from_query on?")
full_loss = eviction_loss["full cache"]
expect(eviction_loss["window 8"] > 10 * full_loss, "median loss with a window of 8 and no sink",
       f"{eviction_loss['window 8']:.4f} nats, expected above 10 x the full cache's {full_loss:.4f}",
       "Evicting BOS should hurt: does sliding_window_mask drop key 0 once it leaves the window?")
expect(eviction_loss["window 8 + 1 sink"] < 0.1 * eviction_loss["window 8"], "median loss with window 8 + 1 sink",
       f"{eviction_loss['window 8 + 1 sink']:.4f} nats, expected below 0.1 x the window alone "
       f"({eviction_loss['window 8']:.4f})", "A sink token must stay readable by every later query.")

# %% [markdown]
# ## 9. Written answer (graded by a TA)
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

# %% [markdown]
# ## Extension (ungraded)
#
# Two short experiments for a student with time left; no points, no hidden tests.

# %% [markdown]
# ### E1. The opposite failure: scores too small
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
# ### E2. A learned temperature, in training
#
# Lab 2 learned a temperature on fixed queries and keys. Here the model learns one per head:
# `TinyDecoder(task, learn_temperature=True)` multiplies each head's scores by
# $e^{u_h}$ (an inverse temperature, $u_h = 0$ at the start) and trains $u_h$ with everything
# else. The chapter's warning: a learned scale is defensible, but the optimiser can drive it
# toward saturation, one of the mechanisms of entropy collapse. The cell trains the normal model
# with learned temperatures on the three seeds and prints what the multipliers became.

# %% nbgrader={"grade_id": "learned_temperature", "locked": true}
temperature_runs = [run(seed, learn_temperature=True) for seed in SEEDS]
for seed, (_, trained, history) in zip(SEEDS, temperature_runs):
    multipliers = [np.round(block.log_temperature.exp().tolist(), 2).tolist() for block in trained.blocks]
    print(f"seed {seed}: score multiplier per (layer, head) {multipliers}; final loss {history['loss'][-1]:.3f}, "
          f"entropy {np.mean(history['entropy'][-1]):.2f} nats "
          f"(fixed scale: {np.mean(results['normal init'][seed][2]['entropy'][-1]):.2f})")

# %% [markdown]
# The optimiser drives every learned multiplier up: after 100 updates they are 1.2 to 6.7 and
# none is below 1, and the heads end sharper than with the fixed scale (0.25 to 0.46 nats
# against 0.54 to 0.72). Here that does no harm, the loss still reaches 0.001 to 0.013; but it is
# the first half of the chapter's warning. A learned scale that only grows moves the rows
# toward saturation, and section 3b's Jacobian says how little gradient comes back from there.
# A QK-LayerNorm with a learned gain has the same lever, which is why models that use one watch
# or bound that gain.
