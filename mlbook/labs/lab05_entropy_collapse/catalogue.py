"""Lab 5's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue)."""

from ..kit import Alternative, Mutant, patch

# The given signature and docstring of each answer cell, for alternatives that write the body
# another way (mutants are patches of the reference answers of
# source/lab05_entropy_collapse/lab05_entropy_collapse.ipynb).
_ENTROPY_DEF = '''def attention_entropy(attn):
    """Mean attention entropy in nats per head, from (B, H, T_q, T_k) weights."""
'''
_SCALE_DEF = '''def scale_qk_init(model, factor):
    """Multiply W_q and W_k of every block by factor, in place."""
'''
_TRAIN_DEF = '''def train_copy_task(model, steps, lr=0.1, batch_size=32, seed=0, qk_decay=0.0, log_every=10):
    """Train on the copy task with SGD; log loss and per-layer entropy every log_every steps."""
'''

# Lines of the reference answers that several mutants change, and the cells those mutants must fail.
_SAFE = "    safe = torch.where(attn > 0, attn, torch.ones_like(attn))  # (B, H, T_q, T_k): log 1 = 0 where A = 0\n"
_LOG_OF_SAFE = "torch.log(safe)"
_SCALE_K = "            block.W_k.mul_(factor)  # (d_model, d_model)\n"
_QK_DECAY = '''        if qk_decay > 0:
            with torch.no_grad():
                for block in model.blocks:
                    block.W_q.mul_(1 - lr * qk_decay)
                    block.W_k.mul_(1 - lr * qk_decay)
'''
_ENTROPY_CELLS = ("test_attention_entropy", "test_attention_entropy_hidden")
# The row entropies averaged over the batch and the heads: one value per query instead of per head.
_MEAN_PER_QUERY = patch("row_entropy.mean(dim=(0, 2))  # (H,)", "row_entropy.mean(dim=(0, 1))  # (T_q,)")
_SCALE_CELLS = ("test_scale_qk_init", "test_scale_qk_init_hidden")

MUTANTS = [
    Mutant(name="entropy-wrong-axis",
           misconception="entropy averaged over the batch and the heads instead of the batch and the queries",
           cells={"attention_entropy": _MEAN_PER_QUERY}, must_fail=_ENTROPY_CELLS, message=r"axis|axes", demo=True),
    Mutant(name="entropy-log-of-zero",
           misconception="log of exactly-zero weights gives 0 * -inf = nan instead of counting 0 log 0 as 0",
           cells={"attention_entropy": (patch(_SAFE, ""), patch(_LOG_OF_SAFE, "torch.log(attn)"))},
           must_fail=_ENTROPY_CELLS, message=r"nan", demo=True),
    Mutant(name="entropy-in-bits", misconception="entropy computed with log2 (bits) where nats are asked",
           cells={"attention_entropy": patch(_LOG_OF_SAFE, "torch.log2(safe)")},
           must_fail=_ENTROPY_CELLS + ("test_collapse",), message=r"bits", demo=True),
    Mutant(name="scale-wv-too",
           misconception="W_V scaled along with W_Q and W_K, although only W_Q and W_K set the scores' size",
           cells={"scale_qk_init": patch(_SCALE_K, _SCALE_K + "            block.W_v.mul_(factor)\n")},
           must_fail=_SCALE_CELLS, message=r"W_V", demo=True),
    Mutant(name="scale-every-weight",
           misconception="every weight of the model scaled instead of only the query and key projections",
           cells={"scale_qk_init": patch(
               "        for block in model.blocks:\n"
               "            block.W_q.mul_(factor)  # (d_model, d_model), a view into in_proj_weight\n" + _SCALE_K,
               "        for p in model.parameters():\n            p.mul_(factor)\n")},
           must_fail=_SCALE_CELLS, message=r"every weight"),
    Mutant(name="scale-first-block-only", misconception="only the first block's W_Q and W_K scaled",
           cells={"scale_qk_init": patch("for block in model.blocks:", "for block in model.blocks[:1]:")},
           must_fail=_SCALE_CELLS, message=r"every block"),
    Mutant(name="train-no-step0-log",
           misconception="the untrained model (step 0) is not logged, so the collapse at initialisation is invisible",
           cells={"train_copy_task": patch("    log(0)\n", "")},
           must_fail=("test_train_copy_task", "test_train_copy_task_hidden"), message=r"step 0"),
    Mutant(name="train-decay-every-weight",
           misconception="qk_decay passed to the optimiser as weight_decay, so it decays every weight",
           cells={"train_copy_task": (patch("momentum=0.9)", "momentum=0.9, weight_decay=qk_decay)"),
                                      patch(_QK_DECAY, ""))},
           must_fail=("test_train_copy_task_hidden",), message=r"every weight"),
    Mutant(name="train-no-optimiser-step",
           misconception="the loop computes the gradients but never calls optimiser.step(), and reports a "
                         "plausible falling loss curve anyway",
           cells={"train_copy_task": (  # the logged loss: the real step-0 loss, then 5 % less at every update
               patch("        optimiser.step()\n", ""),
               patch("copy_loss(logits, eval_y).item()", "copy_loss(logits, eval_y).item() * 0.95 ** step"),
           )},
           must_fail=("test_train_copy_task_hidden", "test_collapse"), message=r"does not learn|is the optimiser"),
]

ALTERNATIVES = [
    Alternative(name="entropy-special-entr",
                description="entropy through torch.special.entr, which defines entr(0) = 0", cells={
        "attention_entropy": _ENTROPY_DEF + '''    return torch.special.entr(attn).sum(dim=-1).mean(dim=(0, 2))
''',
    }),
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
                description="one loop over steps + 1 that logs before updating, decay through the packed weight",
                cells={
        "train_copy_task": _TRAIN_DEF + '''    gen = torch.Generator().manual_seed(seed)
    eval_x, eval_y = model.task.batch(batch_size, gen)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
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
        with torch.no_grad():
            for block in model.blocks:
                d = block.attn.embed_dim
                block.attn.in_proj_weight[: 2 * d] *= 1 - lr * qk_decay
    return {"step": steps_log, "loss": losses, "entropy": entropies}
''',
    }),
]
