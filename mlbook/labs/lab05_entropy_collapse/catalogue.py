"""Lab 5's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue)."""

from mlbook.authoring.catalogue import Alternative, Mutant

_ENTROPY_DEF = '''def attention_entropy(attn):
    """Mean attention entropy in nats per head, from (B, H, T_q, T_k) weights."""
'''
_SCALE_DEF = '''def scale_qk_init(model, factor):
    """Multiply W_q and W_k of every block by factor, in place."""
'''
_TRAIN_DEF = '''def train_copy_task(model, steps, lr=0.1, batch_size=32, seed=0, qk_decay=0.0, log_every=10):
    """Train on the copy task with SGD; log loss and per-layer entropy every log_every steps."""
'''

# The reference training loop with one line marked for replacement by each training mutant.
_TRAIN_BODY = '''    task = model.task
    gen = torch.Generator().manual_seed(seed)
    eval_x, eval_y = task.batch(batch_size, gen)
    optimiser = OPTIMISER
    history = {"step": [], "loss": [], "entropy": []}

    def log(step):
        with torch.no_grad():
            logits, attns = model(eval_x)
            history["step"].append(step)
            history["loss"].append(copy_loss(logits, eval_y).item())
            history["entropy"].append([attention_entropy(attn).mean().item() for attn in attns])

    FIRST_LOG
    for step in range(1, steps + 1):
        x, y = task.batch(batch_size, gen)
        logits, _ = model(x)
        loss = copy_loss(logits, y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if qk_decay > 0 and DECAY_QK:
            with torch.no_grad():
                for block in model.blocks:
                    block.W_q.mul_(1 - lr * qk_decay)
                    block.W_k.mul_(1 - lr * qk_decay)
        if step % log_every == 0:
            log(step)
    return history
'''


def _train(optimiser="torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)", first_log="log(0)",
           decay_qk="True") -> str:
    body = _TRAIN_BODY.replace("OPTIMISER", optimiser).replace("FIRST_LOG", first_log)
    return _TRAIN_DEF + body.replace("DECAY_QK", decay_qk)


def _train_without_step() -> str:
    """The loop without optimiser.step(), logging a plausible falling curve: the real step-0 loss,
    then 5 % less at every update (the gradients are computed and never applied)."""
    code = _train().replace("        optimiser.step()\n", "")
    return code.replace("history[\"loss\"].append(copy_loss(logits, eval_y).item())",
                        "history[\"loss\"].append(copy_loss(logits, eval_y).item() * 0.95 ** step)")


MUTANTS = [
    Mutant(
        name="entropy-wrong-axis",
        misconception="entropy averaged over the batch and the heads instead of the batch and the queries",
        cells={"attention_entropy": _ENTROPY_DEF + '''    safe = torch.where(attn > 0, attn, torch.ones_like(attn))
    row_entropy = -(attn * torch.log(safe)).sum(dim=-1)
    return row_entropy.mean(dim=(0, 1))
'''},
        must_fail=("test_attention_entropy", "test_attention_entropy_hidden"),
        message=r"axis|axes",
        demo=True,
    ),
    Mutant(
        name="entropy-log-of-zero",
        misconception="log of exactly-zero weights gives 0 * -inf = nan instead of counting 0 log 0 as 0",
        cells={"attention_entropy": _ENTROPY_DEF + '''    return -(attn * torch.log(attn)).sum(dim=-1).mean(dim=(0, 2))
'''},
        must_fail=("test_attention_entropy", "test_attention_entropy_hidden"),
        message=r"nan",
        demo=True,
    ),
    Mutant(
        name="entropy-in-bits",
        misconception="entropy computed with log2 (bits) where nats are asked",
        cells={"attention_entropy": _ENTROPY_DEF + '''    safe = torch.where(attn > 0, attn, torch.ones_like(attn))
    return -(attn * torch.log2(safe)).sum(dim=-1).mean(dim=(0, 2))
'''},
        must_fail=("test_attention_entropy", "test_attention_entropy_hidden", "test_collapse"),
        message=r"bits",
        demo=True,
    ),
    Mutant(
        name="scale-wv-too",
        misconception="W_V scaled along with W_Q and W_K, although only W_Q and W_K set the scores' size",
        cells={"scale_qk_init": _SCALE_DEF + '''    with torch.no_grad():
        for block in model.blocks:
            block.W_q.mul_(factor)
            block.W_k.mul_(factor)
            block.W_v.mul_(factor)
    return model
'''},
        must_fail=("test_scale_qk_init", "test_scale_qk_init_hidden"),
        message=r"W_V",
        demo=True,
    ),
    Mutant(
        name="scale-every-weight",
        misconception="every weight of the model scaled instead of only the query and key projections",
        cells={"scale_qk_init": _SCALE_DEF + '''    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)
    return model
'''},
        must_fail=("test_scale_qk_init", "test_scale_qk_init_hidden"),
        message=r"every weight",
    ),
    Mutant(
        name="scale-first-block-only",
        misconception="only the first block's W_Q and W_K scaled",
        cells={"scale_qk_init": _SCALE_DEF + '''    with torch.no_grad():
        model.blocks[0].W_q.mul_(factor)
        model.blocks[0].W_k.mul_(factor)
    return model
'''},
        must_fail=("test_scale_qk_init", "test_scale_qk_init_hidden"),
        message=r"every block",
    ),
    Mutant(
        name="train-no-step0-log",
        misconception="the untrained model (step 0) is not logged, so the collapse at initialisation is invisible",
        cells={"train_copy_task": _train(first_log="pass")},
        must_fail=("test_train_copy_task", "test_train_copy_task_hidden"),
        message=r"step 0",
    ),
    Mutant(
        name="train-decay-every-weight",
        misconception="qk_decay passed to the optimiser as weight_decay, so it decays every weight",
        cells={"train_copy_task": _train(
            optimiser="torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=qk_decay)",
            decay_qk="False")},
        must_fail=("test_train_copy_task_hidden",),
        message=r"every weight",
    ),
    Mutant(
        name="train-no-optimiser-step",
        misconception="the loop computes the gradients but never calls optimiser.step(), and reports a "
                      "plausible falling loss curve anyway",
        cells={"train_copy_task": _train_without_step()},
        must_fail=("test_train_copy_task_hidden", "test_collapse"),
        message=r"does not learn|is the optimiser",
    ),
]

ALTERNATIVES = [
    Alternative(
        name="entropy-special-entr",
        description="entropy through torch.special.entr, which defines entr(0) = 0",
        cells={"attention_entropy": _ENTROPY_DEF + '''    return torch.special.entr(attn).sum(dim=-1).mean(dim=(0, 2))
'''},
    ),
    Alternative(
        name="entropy-categorical",
        description="entropy of torch.distributions.Categorical(probs=attn), one distribution per row",
        cells={"attention_entropy": _ENTROPY_DEF + '''    return torch.distributions.Categorical(probs=attn).entropy().mean(dim=(0, 2))
'''},
    ),
    Alternative(
        name="entropy-xlogy-flatten",
        description="torch.xlogy on rows flattened per head, averaged with an explicit count",
        cells={"attention_entropy": _ENTROPY_DEF + '''    B, H, T_q, T_k = attn.shape
    rows = attn.transpose(0, 1).reshape(H, B * T_q, T_k)
    return -torch.xlogy(rows, rows).sum(dim=-1).sum(dim=-1) / (B * T_q)
'''},
    ),
    Alternative(
        name="scale-packed-in-proj",
        description="scaling the first 2 d_model rows of the packed in_proj_weight instead of the W_q/W_k views",
        cells={"scale_qk_init": _SCALE_DEF + '''    with torch.no_grad():
        for block in model.blocks:
            d = block.attn.embed_dim
            block.attn.in_proj_weight[: 2 * d] *= factor
    return model
'''},
    ),
    Alternative(
        name="train-single-loop",
        description="one loop over steps + 1 that logs before updating, decay through the packed weight",
        cells={"train_copy_task": _TRAIN_DEF + '''    gen = torch.Generator().manual_seed(seed)
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
'''},
    ),
]
