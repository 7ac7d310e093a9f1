"""Lab 5's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue)."""

from ..kit import Alternative, mutants_of, patch

# The given signature and docstring of each answer cell, for alternatives that write the body
# another way (mutants are patches of the reference answers of
# source/lab05_entropy_collapse/lab05_entropy_collapse.ipynb).
_ENTROPY_DEF = '''def attention_entropy(attn):
    """Mean attention entropy in nats per head, from (B, H, T_q, T_k) weights."""
'''
_SCALE_DEF = '''def scale_qk_init(model, factor):
    """Multiply W_q and W_k of every block by factor, in place."""
'''
_TRAIN_DEF = '''def train_copy_task(model, steps, lr=0.1, batch_size=32, seed=0, qk_decay=0.0, log_every=10, warmup=0):
    """Train on the copy task with SGD; log loss and per-layer entropy every log_every steps."""
'''

# Lines of the reference answers that several mutants change.
_SAFE = "    safe = torch.where(attn > 0, attn, torch.ones_like(attn))  # (B, H, T_q, T_k): log 1 = 0 where A = 0\n"
_LOG_OF_SAFE = "torch.log(safe)"
_SCALE_K = "            block.W_k.mul_(factor)  # (d_model, d_model)\n"
_QK_DECAY = '''        if qk_decay > 0:
            with torch.no_grad():
                for block in model.blocks:
                    block.W_q.mul_(1 - lr * qk_decay)
                    block.W_k.mul_(1 - lr * qk_decay)
'''
_SINK_DEF = '''def sink_mass(attn, from_query=1):
    """(H,) mean weight on key 0 over the batch and the queries from from_query on."""
'''
_WINDOW_DEF = '''def sliding_window_mask(T, window, n_sinks=0):
    """(T, T) bool: j <= i and (i - j < window or j < n_sinks)."""
'''
_QKLN_DEF = '''def qk_layernorm(q, k, eps=1e-5):
    """LayerNorm without gain or bias of every query and key vector over its last axis."""
'''
_WARMUP = '''                group["lr"] = lr * min(1.0, step / warmup)'''
_ON_FIRST_KEY = "attn[:, :, from_query:, 0]"
# The row entropies averaged over the batch and the heads: one value per query instead of per head.
_MEAN_PER_QUERY = patch("row_entropy.mean(dim=(0, 2))  # (H,)", "row_entropy.mean(dim=(0, 1))  # (T_q,)")

# Rows are (name, misconception, edit, what the failure messages must match), one mutants_of call per
# answer cell, in the order the demo class takes its mutants.
MUTANTS = mutants_of("attention_entropy", "test_attention_entropy", [
    ("entropy-wrong-axis", "entropy averaged over the batch and the heads instead of the batch and the queries",
     _MEAN_PER_QUERY, r"axis|axes"),
    ("entropy-log-of-zero", "log of exactly-zero weights gives 0 * -inf = nan instead of counting 0 log 0 as 0",
     (patch(_SAFE, ""), patch(_LOG_OF_SAFE, "torch.log(attn)")), r"nan"),
], demo={"entropy-wrong-axis", "entropy-log-of-zero"})
# Entropies in bits are 1/ln 2 times too large, which the collapse experiment's thresholds notice.
MUTANTS += mutants_of("attention_entropy", "test_attention_entropy", [
    ("entropy-in-bits", "entropy computed with log2 (bits) where nats are asked",
     patch(_LOG_OF_SAFE, "torch.log2(safe)"), r"bits"),
], also=("test_collapse",), demo={"entropy-in-bits"})
MUTANTS += mutants_of("scale_qk_init", "test_scale_qk_init", [
    ("scale-wv-too", "W_V scaled along with W_Q and W_K, although only W_Q and W_K set the scores' size",
     patch(_SCALE_K, _SCALE_K + "            block.W_v.mul_(factor)\n"), r"W_V"),
    ("scale-every-weight", "every weight of the model scaled instead of only the query and key projections",
     patch("        for block in model.blocks:\n"
           "            block.W_q.mul_(factor)  # (d_model, d_model), a view into in_proj_weight\n" + _SCALE_K,
           "        for p in model.parameters():\n            p.mul_(factor)\n"), r"every weight"),
    ("scale-first-block-only", "only the first block's W_Q and W_K scaled",
     patch("for block in model.blocks:", "for block in model.blocks[:1]:"), r"every block"),
], demo={"scale-wv-too"})
MUTANTS += mutants_of("train_copy_task", "test_train_copy_task", [
    ("train-no-step0-log",
     "the untrained model (step 0) is not logged, so the collapse at initialisation is invisible",
     patch("    log(0)\n", ""), r"step 0"),
])
# Mistakes of the training loop that only the hidden check's own measurements reveal.
MUTANTS += mutants_of("train_copy_task", ("test_train_copy_task_hidden",), [
    ("train-decay-every-weight", "qk_decay passed to the optimiser as weight_decay, so it decays every weight",
     (patch("momentum=0.9)", "momentum=0.9, weight_decay=qk_decay)"), patch(_QK_DECAY, "")), r"every weight"),
])
MUTANTS += mutants_of("train_copy_task", ("test_train_copy_task_hidden", "test_collapse"), [
    ("train-no-optimiser-step",
     "the loop computes the gradients but never calls optimiser.step(), and reports a plausible falling loss curve "
     "anyway", (  # the logged loss: the real step-0 loss, then 5 % less at every update
         patch("        optimiser.step()\n", ""),
         patch("copy_loss(logits, eval_y).item()", "copy_loss(logits, eval_y).item() * 0.95 ** step"),
     ), r"does not learn|is the optimiser"),
])
MUTANTS += mutants_of("train_copy_task", "test_train_copy_task", [
    ("warmup-first-update-zero",
     "warm-up counted from update 0, so the first update has learning rate 0 (LambdaLR's off-by-one)",
     patch("min(1.0, step / warmup)", "min(1.0, (step - 1) / warmup)"), r"learning rate 0|update of 0"),
], demo={"warmup-first-update-zero"})
MUTANTS += mutants_of("train_copy_task", ("test_train_copy_task_hidden",), [
    ("warmup-never-ends", "the warm-up is not capped, so the learning rate keeps growing past lr",
     patch("lr * min(1.0, step / warmup)", "lr * step / warmup"), r"never ends"),
])
# Where and by how much qk_decay shrinks W_q and W_k: the longer run's norms cannot tell, the hidden check's
# replay of a few warmed-up, decayed updates can.
MUTANTS += mutants_of("train_copy_task", ("test_train_copy_task_hidden",), [
    ("qk-decay-before-step", "qk_decay applied after backward() but before optimiser.step() instead of after it",
     patch("        optimiser.step()\n" + _QK_DECAY, _QK_DECAY + "        optimiser.step()\n"),
     r"before optimiser\.step\(\)"),
    ("qk-decay-warmed-rate", "qk_decay's factor taken from the warmed-up learning rate instead of the lr argument",
     patch("mul_(1 - lr * qk_decay)", 'mul_(1 - optimiser.param_groups[0]["lr"] * qk_decay)', count=2),
     r"warmed-up learning rate"),
    ("qk-decay-without-lr", "W_q and W_k multiplied by (1 - qk_decay), without the learning rate",
     patch("mul_(1 - lr * qk_decay)", "mul_(1 - qk_decay)", count=2), r"left out lr"),
])
# A loop that ignores its lr matches the default run: the hidden check replays updates at another lr. A loop
# without zero_grad diverges, which must be named as such, not as an entropy of nan.
MUTANTS += mutants_of("train_copy_task", ("test_train_copy_task_hidden",), [
    ("train-lr-ignored", "the optimiser built with lr=0.1, the default, whatever lr the loop is given",
     patch("torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)",
           "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)"), r"lr argument was ignored"),
    ("train-no-zero-grad", "optimiser.zero_grad() never called, so the gradients add up from update to update",
     patch("        optimiser.zero_grad()\n", ""), r"zero_grad"),
])
# What is logged, on which batch and when: only the grader's replay of the logged losses can tell.
_LOG_AT_END = "        if step % log_every == 0:\n            log(step)\n"
MUTANTS += mutants_of("train_copy_task", ("test_train_copy_task_hidden",), [
    ("train-logs-training-batch", "the loss and entropy logged on the update's training batch instead of the "
     "evaluation batch", (patch("    def log(step):\n", "    def log(step, eval_x=eval_x, eval_y=eval_y):\n"),
                          patch("            log(step)\n", "            log(step, x, y)\n")), r"training batch"),
    ("train-logs-before-update", "step s logged before update s, so it shows the model after s - 1 updates",
     (patch(_LOG_AT_END, ""),
      patch("        x, y = task.batch(batch_size, gen)  # (B, T), (B, T)\n",
            "        if step % log_every == 0:\n            log(step)\n"
            "        x, y = task.batch(batch_size, gen)  # (B, T), (B, T)\n")), r"before the update"),
])
# A step-0 log taken after the first update differs from a run of 0 steps: the visible test sees it too.
MUTANTS += mutants_of("train_copy_task", "test_train_copy_task", [
    ("train-logs-one-late", "step s logged after update s + 1 (the log of step 0 taken after the first update)",
     (patch("    log(0)\n", ""),
      patch(_LOG_AT_END, "        if (step - 1) % log_every == 0:\n            log(step - 1)\n"
                         "    if steps % log_every == 0:\n        log(steps)\n")),
     r"s \+ 1 updates|before the first update"),
])
MUTANTS += mutants_of("sink_mass", "test_sink_mass", [
    ("sink-counts-query-0", "query 0, which under a causal mask can only read key 0, counted in the sink mass",
     patch(_ON_FIRST_KEY, "attn[:, :, :, 0]"), r"query 0"),
    ("sink-row-not-column", "query 0's row of weights read instead of key 0's column",
     patch(_ON_FIRST_KEY, "attn[:, :, 0, :]"), r"row|column"),
    ("sink-mean-over-heads", "the mass averaged over the batch and the heads, one value per query instead of per head",
     patch("on_first_key.mean(dim=(0, 2))  # (H,)", "on_first_key.mean(dim=(0, 1))  # (T,)"), r"axis"),
], demo={"sink-counts-query-0"})
MUTANTS += mutants_of("sliding_window_mask", "test_sliding_window_mask", [
    ("window-one-too-many", "the window counts back `window` tokens from the query, so it keeps window + 1 of them",
     patch("(i - j < window)", "(i - j <= window)"), r"one key too many|window \+ 1"),
    ("sinks-read-before-they-exist", "the sink tokens are allowed for every query, also before they exist (not causal)",
     patch("sinks = (j <= i) & (j < n_sinks)", "sinks = j < n_sinks"), r"exist|later token"),
], demo={"window-one-too-many"})
MUTANTS += mutants_of("sliding_window_mask", "test_sliding_window_mask", [
    ("sinks-dropped", "a plain sliding window: the sink tokens are evicted with the rest",
     patch("return recent | sinks  # (T, T)", "return recent  # (T, T)"), r"sink"),
], also=("test_sinks",))
MUTANTS += mutants_of("qk_layernorm", "test_qk_layernorm", [
    ("qkln-unbiased-variance", "the variance divided by d_head - 1 (torch's default unbiased=True) instead of d_head",
     patch("unbiased=False", "unbiased=True"), r"d_head - 1|population"),
    ("qkln-rms-no-centring", "RMSNorm instead of LayerNorm: the mean of each vector not subtracted",
     patch("return (x - mean) / torch.sqrt(var + eps)", "return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)"),
     r"mean"),
    ("qkln-queries-only", "only the queries normalised: the keys keep their scale, so the scores are not bounded",
     patch("return normalise(q), normalise(k)", "return normalise(q), k"), r"not normalised|keys"),
    ("qkln-over-positions", "each feature normalised over the positions (axis -2) instead of each vector over d_head",
     patch("dim=-1, keepdim=True", "dim=-2, keepdim=True", count=2), r"axis|positions"),
], demo={"qkln-unbiased-variance"})

ALTERNATIVES = [
    Alternative(name="entropy-special-entr",
                description="entropy through torch.special.entr, which defines entr(0) = 0", cells={
        "attention_entropy": _ENTROPY_DEF + '''    return torch.special.entr(attn).sum(dim=-1).mean(dim=(0, 2))
''',
    }),
    Alternative(name="entropy-log-eps",
                description="an epsilon inside the log, log(A + 1e-6), so that exact zeros give 0 * log(1e-6) = 0",
                cells={
        "attention_entropy": _ENTROPY_DEF + '''    terms = attn * torch.log(attn + 1e-6)  # 0 where attn is exactly 0
    return -terms.sum(dim=-1).mean(dim=(0, 2))
''',
    }),
    Alternative(name="entropy-log-eps-1e-5",
                description="an epsilon of 1e-5 inside the log, which lowers each row by at most T_k * 1e-5",
                cells={
        "attention_entropy": _ENTROPY_DEF + '''    return -(attn * torch.log(attn + 1e-5)).sum(dim=-1).mean(dim=(0, 2))
''',
    }),
    Alternative(name="entropy-log-eps-1e-8",
                description="an epsilon of 1e-8 inside the log", cells={
        "attention_entropy": _ENTROPY_DEF + '''    return -(attn * torch.log(attn + 1e-8)).sum(dim=-1).mean(dim=(0, 2))
''',
    }),
    Alternative(name="entropy-clamp-1e-5",
                description="the weights clamped to at least 1e-5 inside the log only", cells={
        "attention_entropy": _ENTROPY_DEF + '''    return -(attn * attn.clamp(min=1e-5).log()).sum(dim=-1).mean(dim=(0, 2))
''',
    }),
    Alternative(name="train-no-grad-eval-toggle",
                description="logging through a log_softmax loss under torch.no_grad() with model.eval()/train() "
                            "toggles, after the optional decay",
                cells={"train_copy_task": patch('''        with torch.no_grad():
            logits, attns = model(eval_x)  # (B, T, vocab), per layer (B, H, T, T)
            history["step"].append(step)
            history["loss"].append(copy_loss(logits, eval_y).item())''', '''        model.eval()
        with torch.no_grad():
            logits, attns = model(eval_x)  # (B, T, vocab), per layer (B, H, T, T)
            logp = torch.log_softmax(logits, dim=-1)  # (B, T, vocab)
            history["step"].append(step)
            nll = torch.nn.functional.nll_loss(logp.flatten(0, 1), eval_y.flatten(), ignore_index=-100)  # ()
            history["loss"].append(float(nll))
        model.train()
        with torch.no_grad():''')}),
    Alternative(name="entropy-categorical",
                description="entropy of torch.distributions.Categorical(probs=attn), one distribution per row", cells={
        "attention_entropy": _ENTROPY_DEF + '''    return torch.distributions.Categorical(probs=attn).entropy().mean(dim=(0, 2))
''',
    }),
    Alternative(name="entropy-xlogy-flatten",
                description="torch.xlogy on rows flattened per head, averaged with an explicit count", cells={
        "attention_entropy": _ENTROPY_DEF + '''    B, H, T_q, T_k = attn.shape
    rows = attn.transpose(0, 1).reshape(H, B * T_q, T_k)
    return -torch.xlogy(rows, rows).sum(dim=-1).sum(dim=-1) / (B * T_q)
''',
    }),
    Alternative(name="scale-packed-in-proj",
                description="scaling the first 2 d_model rows of the packed in_proj_weight instead of the W_q/W_k views",
                cells={
        "scale_qk_init": _SCALE_DEF + '''    with torch.no_grad():
        for block in model.blocks:
            d = block.attn.embed_dim
            block.attn.in_proj_weight[: 2 * d] *= factor
    return model
''',
    }),
    Alternative(name="train-single-loop",
                description="one loop over steps + 1 that logs before updating, warm-up through LambdaLR, decay "
                            "through the packed weight",
                cells={
        "train_copy_task": _TRAIN_DEF + '''    gen = torch.Generator().manual_seed(seed)
    eval_x, eval_y = model.task.batch(batch_size, gen)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # LambdaLR's first step uses the factor of 0, so update s (from 1) gets factor(s - 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: min(1.0, (e + 1) / warmup) if warmup else 1.0)
    steps_log, losses, entropies = [], [], []
    for step in range(steps + 1):
        if step % log_every == 0:
            model.eval()
            with torch.no_grad():
                logits, attns = model(eval_x)
            steps_log.append(step)
            losses.append(float(copy_loss(logits, eval_y)))
            entropies.append([float(attention_entropy(a).mean()) for a in attns])
            model.train()
        if step == steps:
            break
        x, y = model.task.batch(batch_size, gen)
        opt.zero_grad()
        copy_loss(model(x)[0], y).backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            for block in model.blocks:
                d = block.attn.embed_dim
                block.attn.in_proj_weight[: 2 * d] *= 1 - lr * qk_decay
    return {"step": steps_log, "loss": losses, "entropy": entropies}
''',
    }),
    Alternative(name="decay-subtracted",
                description="qk_decay written as W <- W - lr * qk_decay * W after each step",
                cells={"train_copy_task": (
                    patch("block.W_q.mul_(1 - lr * qk_decay)", "block.W_q.sub_(lr * qk_decay * block.W_q)"),
                    patch("block.W_k.mul_(1 - lr * qk_decay)", "block.W_k.sub_(lr * qk_decay * block.W_k)"))}),
    Alternative(name="warmup-first-group",
                description="warm-up written as a factor, set on the optimiser's only parameter group",
                cells={"train_copy_task": patch('''            for group in optimiser.param_groups:
                group["lr"] = lr * min(1.0, step / warmup)''', '''            factor = step / warmup if step < warmup else 1.0
            optimiser.param_groups[0]["lr"] = factor * lr''')}),
    Alternative(name="sink-select-sum",
                description="key 0's column by index_select, averaged as a sum over a count", cells={
        "sink_mass": _SINK_DEF + '''    B, H, T_q, T_k = attn.shape
    first = attn.index_select(-1, torch.tensor([0])).squeeze(-1)[:, :, from_query:]
    return first.sum(dim=(0, 2)) / (B * (T_q - from_query))
''',
    }),
    Alternative(name="sink-einsum-onehot",
                description="the weight on key 0 as a product with a one-hot vector, queries dropped by narrow", cells={
        "sink_mass": _SINK_DEF + '''    onehot = torch.zeros(attn.shape[-1], dtype=attn.dtype)
    onehot[0] = 1
    on_zero = torch.einsum("bhqk,k->bhq", attn, onehot)
    return on_zero.narrow(2, from_query, attn.shape[2] - from_query).mean(dim=0).mean(dim=-1)
''',
    }),
    Alternative(name="window-tril",
                description="the window and the sinks from torch.tril bands", cells={
        "sliding_window_mask": _WINDOW_DEF + '''    ones = torch.ones(T, T, dtype=torch.bool)
    causal = torch.tril(ones)
    recent = causal & ~torch.tril(ones, diagonal=-window)
    sinks = causal.clone()
    sinks[:, n_sinks:] = False
    return recent | sinks
''',
    }),
    Alternative(name="window-numpy",
                description="the mask as a NumPy boolean array, which the model and the tests read as a tensor",
                cells={
        "sliding_window_mask": _WINDOW_DEF + '''    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return (j <= i) & ((i - j < window) | (j < n_sinks))
''',
    }),
    Alternative(name="window-loops",
                description="one query at a time, in NumPy, turned into a tensor", cells={
        "sliding_window_mask": _WINDOW_DEF + '''    allowed = np.zeros((T, T), dtype=bool)
    for i in range(T):
        allowed[i, max(0, i - window + 1):i + 1] = True
        allowed[i, :min(n_sinks, i + 1)] = True
    return torch.from_numpy(allowed)
''',
    }),
    Alternative(name="qkln-functional",
                description="torch.nn.functional.layer_norm over the last axis", cells={
        "qk_layernorm": _QKLN_DEF + '''    norm = lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    return norm(q), norm(k)
''',
    }),
    Alternative(name="qkln-var-mean-rsqrt",
                description="torch.var_mean with correction=0 and rsqrt", cells={
        "qk_layernorm": _QKLN_DEF + '''    out = []
    for x in (q, k):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        out.append((x - mean) * torch.rsqrt(var + eps))
    return tuple(out)
''',
    }),
]
