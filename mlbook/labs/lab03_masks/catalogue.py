"""Lab 3's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue).

Convention of the lab: a boolean mask is True where attention is allowed.
"""

from ..kit import Alternative, mutants_of, patch

# The given signature and docstring of each answer cell, for alternatives that write the body
# another way (mutants are patches of the reference answers of source/lab03_masks/lab03_masks.ipynb).
_CAUSAL_DOC = '''def causal_mask(T):
    """(1, 1, T, T) bool, True where attention is allowed."""
'''
_CACHE_DOC = '''def causal_mask_with_cache(T_new, T_total):
    """(1, 1, T_new, T_total) bool for the T_new newest queries."""
'''
_PADDING_DOC = '''def padding_mask(is_pad):
    """(B, T_k) bool True at PAD -> (B, 1, 1, T_k) bool, True at real keys."""
'''
_COMBINE_DOC = '''def combine_masks(*masks):
    """Logical AND of broadcastable masks; None entries are ignored."""
'''
_APPLY_DOC = '''def apply_mask(scores, mask):
    """Fill disallowed scores with the most negative finite value of their dtype."""
'''
_SDPA_DOC = '''def scaled_dot_product_attention(q, k, v, mask=None):
    """(B, H, T_q, d_k), (B, H, T_k, d_k), (B, H, T_k, d_v) -> out, attn."""
'''
_FUTURE_DOC = '''def outputs_ignore_future(attn_fn, T=6, B=2):
    """True if changing later tokens leaves every earlier output unchanged."""
'''
_MHA_DOC = '''def mha_batch_first(mha, x):
    """x (B, T, E) through a batch_first=False layer -> out (B, T, E), per-head weights (B, H, T, T)."""
'''
_TF_DOC = '''def teacher_forced_logits(decoder, targets, bos_id):
    """(B, T, V) logits of one causal pass over BOS, targets[:, :-1]."""
'''
_STEP_DOC = '''def step_by_step_logits(decoder, targets, bos_id):
    """(B, T, V) logits, one prefix at a time, each step's last position."""
'''
_PADINV_DOC = '''def padding_invariant(attn_fn, lengths=(5, 3)):
    """True if padding changes no real output and a batch equals one sequence at a time."""
'''

# apply_mask's fill value and causal_mask's lower triangle, which several entries change.
_FINFO_MIN = "torch.finfo(scores.dtype).min"
_TRIL = "torch.tril(torch.ones(T, T, dtype=torch.bool))"
# teacher forcing's shifted input, written once in each of the two functions
_SHIFT = "torch.cat([torch.full((B, 1), bos_id, dtype=targets.dtype), targets[:, :-1]], dim=1)"

# Rows are (name, misconception, edit, what the failure messages must match), one mutants_of call per
# answer cell, in the order the demo class takes its mutants.
MUTANTS = mutants_of("apply_mask", "test_apply_mask", [
    ("fill-neg-inf", "masked scores filled with -inf: a fully masked row becomes NaN",
     patch(_FINFO_MIN, 'float("-inf")'), r"-inf"),
    ("fill-neg-1e9", "masked scores filled with -1e9, which is not representable in float16",
     patch(_FINFO_MIN, "-1e9"), r"overflow|-1e9|finfo"),
], demo={"fill-neg-inf", "fill-neg-1e9"})  # the attention's hidden check lends it the grader's apply_mask
# Only the hidden check's negative float16 scores reveal the overflow; only the hidden check sees the
# caller's scores after the call (in grading, through the kernel: kit.call_seeing_args).
MUTANTS += mutants_of("apply_mask", ("test_apply_mask_hidden",), [
    ("additive-overflow",
     "an additive finfo.min mask in the scores' dtype, which overflows float16 for negative scores",
     patch("return scores.masked_fill(", "return scores + torch.zeros_like(scores).masked_fill("), r"overflow"),
    ("fill-in-place", "the caller's scores filled in place (masked_fill_), so the unmasked scores are lost to it",
     patch("return scores.masked_fill(", "return scores.masked_fill_("), r"in place"),
])
# An additive finfo.min mask, even added in float32 and clamped, keeps each masked score's offset (finfo.min + 40
# is -65472 in float16): a fully masked row is not uniform. The hidden check gives such a row large scores (the
# attention's hidden check lends the attention the grader's apply_mask: one mistake, one loss).
MUTANTS += mutants_of("apply_mask", ("test_apply_mask_hidden",), [
    ("additive-clamped",
     "an additive finfo.min mask added in float32 and clamped at finfo.min: masked scores keep their offsets",
     _APPLY_DOC + '''    if mask is None:
        return scores
    low = torch.finfo(scores.dtype).min
    work = torch.promote_types(scores.dtype, torch.float32)
    bias = torch.zeros(mask.shape, dtype=work).masked_fill(~mask, low)
    return (scores.to(work) + bias).clamp(min=low).to(scores.dtype)
''', r"ADDITIVE"),
])
# The same mistake written inside the attention (apply_mask of zeros added to the scores).
MUTANTS += mutants_of("scaled_dot_product_attention", ("test_scaled_dot_product_attention_hidden",), [
    ("sdpa-additive-mask", "an additive finfo.min mask added to the scores: a fully masked row is not uniform",
     patch("    scores = apply_mask(scores, mask)  # (B, H, T_q, T_k)\n",
           "    scores = scores + apply_mask(torch.zeros_like(scores), mask)  # (B, H, T_q, T_k)\n"), r"ADDITIVE"),
])
MUTANTS += mutants_of("scaled_dot_product_attention", "test_scaled_dot_product_attention", [
    ("mask-after-softmax", "mask applied to the weights after the softmax: rows no longer sum to 1", (
        patch("    scores = apply_mask(scores, mask)  # (B, H, T_q, T_k)\n", ""),
        patch("softmax over the keys\n",
              "softmax over the keys\n    if mask is not None:\n        attn = attn.masked_fill(~mask, 0.0)\n"),
    ), r"(after|before) the softmax"),
], also=("test_causal_tables",), demo={"mask-after-softmax"})
MUTANTS += mutants_of("causal_mask", "test_causal_mask", [
    ("causal-diagonal-excluded", "causal mask off by one: the diagonal is excluded, so a token cannot read itself",
     patch(_TRIL, "torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)"), r"diagonal"),
    ("causal-one-future-key", "causal mask off by one: every query also sees the next key",
     patch(_TRIL, "torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=1)"), r"future"),
    ("causal-inverted", "causal mask of the wrong polarity: True marks the future (positions to block)",
     patch(_TRIL, "torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)"), r"polarity"),
], demo={"causal-diagonal-excluded"})
MUTANTS += mutants_of("causal_mask_with_cache", "test_causal_mask_with_cache", [
    ("cache-top-left", "cached causal mask aligned with the first key instead of the newest position",
     patch("torch.arange(T_total - T_new, T_total)", "torch.arange(T_new)"),  # the queries counted from key 0
     r"LAST position|START|T_total - T_new"),
])
MUTANTS += mutants_of("padding_mask", "test_padding_mask", [
    ("padding-on-queries", "padding mask applied to the queries (rows) instead of the keys (columns)",
     patch("(~is_pad)[:, None, None, :]", "(~is_pad)[:, None, :, None]"), r"removes KEYS|query axis"),
    ("padding-inverted", "padding mask of the wrong polarity: True at the PAD tokens",
     patch("(~is_pad)", "is_pad"), r"polarity|invert"),
], demo={"padding-on-queries", "padding-inverted"})
MUTANTS += mutants_of("padding_mask", ("test_padding_mask_hidden",), [
    ("padding-inverted-in-place", "the caller's is_pad inverted in place (logical_not_) to make the mask",
     patch("(~is_pad)[:, None, None, :]", "is_pad.logical_not_()[:, None, None, :]"), r"in place"),
])
MUTANTS += mutants_of("combine_masks", "test_combine_masks", [
    ("combine-with-or", "masks combined with OR instead of AND", patch("combined & m", "combined | m"), r"with OR|not OR"),
])
MUTANTS += mutants_of("mask_conversions", "test_mask_conversions", [
    ("conventions-not-inverted",
     "SDPA's attn_mask passed as MultiheadAttention's key_padding_mask without inverting",
     (patch("return ~sdpa_mask", "return sdpa_mask"), patch("(~key_padding_mask)", "key_padding_mask")),
     r"IGNORE|ALLOWED|invert"),
])
# A bare squeeze() is right for every batch but a batch of one, which only the hidden check draws.
MUTANTS += mutants_of("mask_conversions", ("test_mask_conversions_hidden",), [
    ("conversion-bare-squeeze", "the two axes of size 1 dropped with a bare squeeze(), which drops B = 1 too",
     patch("return ~sdpa_mask[:, 0, 0, :]", "return ~sdpa_mask.squeeze()"), r"squeeze\(\) also drops"),
])
# The deliberate bug written with the polarity inverted: the allowed weights zeroed.
MUTANTS += mutants_of("mask_after_softmax", ("test_mask_after_softmax_hidden",), [
    ("after-softmax-inverted", "the weights zeroed where the mask is True (allowed) instead of False",
     patch("torch.softmax(scores, dim=-1) * mask", "torch.softmax(scores, dim=-1) * ~mask"), r"polarity"),
])
# The student's own property tests: only the hidden check hands them the leaky layers.
MUTANTS += mutants_of("outputs_ignore_future", ("test_outputs_ignore_future_hidden",), [
    ("future-test-first-output-only",
     "the causal property test changes the last token and looks only at the first output", (
         patch("x2[:, t + 1:] = torch.randn(B, T - t - 1, D_MODEL)  # change every token after t",
               "x2[:, -1] = torch.randn(B, D_MODEL)  # change the last token"),
         patch("torch.allclose(y[:, : t + 1], y2[:, : t + 1], atol=1e-5)", "torch.allclose(y[:, 0], y2[:, 0], atol=1e-5)"),
     ), r"leak went unnoticed"),
])
# A test that changes only the last token sees every leak that reads the last token, and misses one that
# reads a single earlier future token: the grader's own "first query reads the next key" layer.
MUTANTS += mutants_of("outputs_ignore_future", ("test_outputs_ignore_future_hidden",), [
    ("future-test-last-token-only",
     "the causal property test changes only the last token (checking every earlier output)", (
         patch("    for t in range(T - 1):\n", "    for t in (T - 2,):  # only the last token changes\n"),
     ), r"leak went unnoticed.*tokens AFTER t"),
])
MUTANTS += mutants_of("padding_invariant", ("test_padding_invariant_hidden",), [
    ("padding-test-no-batch",
     "the padding property test only appends padding to one sequence, never compares a batch", (
         patch("    batched = attn_fn(x, is_pad)  # (B, T, D_MODEL)\n", ""),  # the batch is built, never run
         patch("        if not torch.allclose(batched[b, :n], alone[b][0], atol=1e-5):\n"
               "            return False\n", ""),
     ), r"BATCH"),
])
MUTANTS += mutants_of("mha_batch_first", "test_mha_batch_first", [
    ("mha-batch-first-not-transposed", "batch-first tokens handed to a batch_first=False MultiheadAttention as they are",
     (patch("x_tbe = x.transpose(0, 1)", "x_tbe = x"), patch("return out.transpose(0, 1), weights", "return out, weights")),
     r"\(T, B, E\)|batch axis|transpose x"),
    ("mha-reshape-not-transpose", "the batch and sequence axes swapped with reshape, which regroups the tokens",
     (patch("x_tbe = x.transpose(0, 1)", "x_tbe = x.reshape(x.shape[1], x.shape[0], -1)"),
      patch("return out.transpose(0, 1), weights", "return out.reshape(x.shape), weights")), r"reshape|transpose"),
    ("mha-head-averaged-weights", "MultiheadAttention's default head-averaged weights taken for the per-head maps",
     patch("average_attn_weights=False", "average_attn_weights=True"), r"average_attn_weights=False|averaged over heads"),
])
MUTANTS += mutants_of("fill_values", ("test_fill_values",), [
    ("fill-additive-square", "the additive mask built (4, 4) instead of one query's (1, 4): one query becomes four",
     patch("torch.zeros(1, 4, dtype=torch.float16)", "torch.zeros(4, 4, dtype=torch.float16)"), r"\(1, 4\)"),
])
MUTANTS += mutants_of("cross_attention", ("test_cross_attention",), [
    ("cross-keys-values-swapped", "the encoder's keys and values swapped in the cross-attention call",
     patch("scaled_dot_product_attention(dec_q, enc_k, enc_v, enc_mask)",
           "scaled_dot_product_attention(dec_q, enc_v, enc_k, enc_mask)"), r"KEYS|swapped"),
])
MUTANTS += mutants_of("teacher_forcing", "test_teacher_forcing", [
    ("teacher-forcing-no-mask",
     "teacher forcing without the causal mask: each position reads the targets it must predict",
     patch("return decoder(inputs, causal_mask(T))", "return decoder(inputs, None)"), r"causal mask"),
    ("teacher-forcing-not-shifted", "the targets fed to the decoder unshifted (off by one): position t reads target t",
     patch(_SHIFT, "targets", count=2), r"shift|BOS"),
    ("step-first-position", "step-by-step decoding reads the first position's logits instead of the last",
     patch("steps.append(logits[:, -1])", "steps.append(logits[:, 0])"), r"LAST position"),
])

ALTERNATIVES = [
    Alternative(name="tensor-verdicts",
                description="property tests whose verdict is a one-entry boolean tensor (an AND of comparisons), "
                            "not a Python bool",
                cells={
        "outputs_ignore_future": _FUTURE_DOC + '''    x = torch.randn(B, T, D_MODEL)
    y = attn_fn(x)
    holds = torch.tensor(True)
    for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn(B, T - t - 1, D_MODEL)
        holds = holds & ((attn_fn(x2)[:, : t + 1] - y[:, : t + 1]).abs() < 1e-4).all()
    return holds
''',
        "padding_invariant": _PADINV_DOC + '''    seqs = [torch.randn(1, n, D_MODEL) for n in lengths]
    alone = [attn_fn(s, torch.zeros(1, s.shape[1], dtype=torch.bool))[0] for s in seqs]
    T = max(lengths) + 2
    x = torch.randn(len(seqs), T, D_MODEL)
    is_pad = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]
    for b, s in enumerate(seqs):
        x[b, : s.shape[1]] = s[0]
    batched = attn_fn(x, is_pad)
    holds = torch.tensor(True)
    for b, (s, y) in enumerate(zip(seqs, alone)):
        n = s.shape[1]
        holds &= torch.isclose(batched[b, :n], y, atol=1e-5).all()
        holds &= torch.isclose(attn_fn(x[b : b + 1], is_pad[b : b + 1])[0, :n], y, atol=1e-5).all()
    return holds
''',
    }),
    Alternative(name="where-fill", description="torch.where with the dtype's finfo.min instead of masked_fill",
                cells={"apply_mask": patch(f"scores.masked_fill(~mask, {_FINFO_MIN})",
                                           f"torch.where(mask, scores, {_FINFO_MIN})")}),
    Alternative(name="additive-wide-clamped",
                description="an additive mask whose bias is far below the scores' finfo.min (the wider dtype's), "
                            "added in float32 or wider and clamped at finfo.min: the same as replacing",
                cells={"apply_mask": _APPLY_DOC + '''    if mask is None:
        return scores
    work = torch.promote_types(scores.dtype, torch.float32)
    bias = torch.zeros(mask.shape, dtype=work).masked_fill(~mask, torch.finfo(work).min)
    return (scores.to(work) + bias).clamp(min=torch.finfo(scores.dtype).min).to(scores.dtype)
'''}),
    Alternative(name="causal-by-index", description="the causal masks built by comparing position indices", cells={
        "causal_mask": _CAUSAL_DOC + '''    pos = torch.arange(T)
    return (pos[None, :] <= pos[:, None]).view(1, 1, T, T)
''',
        "causal_mask_with_cache": _CACHE_DOC + '''    offset = T_total - T_new
    return torch.ones(T_new, T_total, dtype=torch.bool).tril(diagonal=offset).unsqueeze(0).unsqueeze(0)
''',
    }),
    Alternative(name="torch-softmax-einsum", description="torch.softmax (not F.softmax) and einsum products", cells={
        "scaled_dot_product_attention": _SDPA_DOC + '''    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    attn = torch.softmax(apply_mask(scores, mask), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", attn, v), attn
''',
    }),
    Alternative(name="unsqueeze-and-reduce",
                description="padding mask by logical_not and unsqueeze; masks combined with functools.reduce", cells={
        "padding_mask": _PADDING_DOC + '''    return torch.logical_not(is_pad).unsqueeze(1).unsqueeze(1)
''',
        "combine_masks": _COMBINE_DOC + '''    import functools
    present = [m for m in masks if m is not None]
    return functools.reduce(torch.logical_and, present) if present else None
''',
    }),
    Alternative(name="one-position-at-a-time",
                description="property tests that change one token at a time and use left padding", cells={
        "outputs_ignore_future": _FUTURE_DOC + '''    x = torch.randn(B, T, D_MODEL)
    y = attn_fn(x)
    for t in range(1, T):
        x2 = x.clone()
        x2[:, t] += 3.0
        if (attn_fn(x2)[:, :t] - y[:, :t]).abs().max() > 1e-4:
            return False
    return True
''',
        "padding_invariant": _PADINV_DOC + '''    T = max(lengths) + 1
    xs = [torch.randn(n, D_MODEL) for n in lengths]
    batch = torch.randn(len(xs), T, D_MODEL)
    is_pad = torch.ones(len(xs), T, dtype=torch.bool)
    for b, x in enumerate(xs):
        batch[b, T - len(x):] = x  # left padding
        is_pad[b, T - len(x):] = False
    out = attn_fn(batch, is_pad)
    for b, x in enumerate(xs):
        single = attn_fn(x[None], torch.zeros(1, len(x), dtype=torch.bool))[0]
        if not torch.allclose(out[b, T - len(x):], single, atol=1e-5):
            return False
    return True
''',
    }),
    Alternative(name="mha-permute-loop",
                description="per-sequence calls of MultiheadAttention with (T, 1, E) tokens, results concatenated",
                cells={"mha_batch_first": _MHA_DOC + '''    outs, maps = [], []
    for seq in x:
        col = seq[:, None, :]
        o, w = mha(col, col, col, average_attn_weights=False)
        outs.append(o[:, 0])
        maps.append(w)
    return torch.stack(outs), torch.cat(maps)
'''}),
    Alternative(name="mha-permute-movedim",
                description="permute in, movedim out, need_weights left at its default",
                cells={"mha_batch_first": _MHA_DOC + '''    seq_first = x.permute(1, 0, 2).contiguous()
    out, weights = mha(seq_first, seq_first, seq_first, average_attn_weights=False)
    return torch.movedim(out, 1, 0), weights
'''}),
    Alternative(name="teacher-forcing-pad-no-step-mask",
                description="the shift by F.pad; steps without a mask (a prefix's last row is all allowed) "
                            "written into a preallocated tensor",
                cells={"teacher_forcing": _TF_DOC + '''    T = targets.shape[1]
    shifted = F.pad(targets[:, :-1], (1, 0), value=bos_id)
    return decoder(shifted, torch.ones(T, T, dtype=torch.bool).tril())


''' + _STEP_DOC + '''    shifted = F.pad(targets[:, :-1], (1, 0), value=bos_id)
    result = None
    for t in range(targets.shape[1]):
        last = decoder(shifted[:, : t + 1], None)[:, -1]
        if result is None:
            result = torch.empty(targets.shape[0], targets.shape[1], last.shape[-1], dtype=last.dtype)
        result[:, t] = last
    return result
'''}),
    Alternative(name="teacher-forcing-roll-grow",
                description="the shift by roll, with BOS written over the wrapped-around last target",
                cells={"teacher_forcing": (
                    patch(_SHIFT, "targets.roll(1, dims=1)", count=2),
                    patch("return decoder(inputs, causal_mask(T))",
                          "inputs[:, 0] = bos_id\n    return decoder(inputs, causal_mask(T))"),
                    patch("    steps = []\n", "    inputs[:, 0] = bos_id\n    steps = []\n"),
                )}),
]
