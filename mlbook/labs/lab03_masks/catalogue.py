"""Lab 3's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue).

Convention of the lab: a boolean mask is True where attention is allowed.
"""

from mlbook.authoring.catalogue import Alternative, Mutant

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
_PADINV_DOC = '''def padding_invariant(attn_fn, lengths=(5, 3)):
    """True if padding changes no real output and a batch equals one sequence at a time."""
'''
_CONVERSIONS = '''def to_key_padding_mask(sdpa_mask):
    """(B, 1, 1, T_k) True = attend -> (B, T_k) True = ignore."""
    return {kpm}


def to_sdpa_mask(key_padding_mask):
    """(B, T_k) True = ignore -> (B, 1, 1, T_k) True = attend."""
    return {sdpa}
'''

MUTANTS = [
    Mutant(
        name="fill-neg-inf",
        misconception="masked scores filled with -inf: a fully masked row becomes NaN",
        cells={"apply_mask": _APPLY_DOC + '''    if mask is None:
        return scores
    return scores.masked_fill(~mask, float("-inf"))
'''},
        must_fail=("test_apply_mask", "test_apply_mask_hidden", "test_scaled_dot_product_attention_hidden"),
        message=r"-inf",
        demo=True,
    ),
    Mutant(
        name="fill-neg-1e9",
        misconception="masked scores filled with -1e9, which is not representable in float16",
        cells={"apply_mask": _APPLY_DOC + '''    if mask is None:
        return scores
    return scores.masked_fill(~mask, -1e9)
'''},
        must_fail=("test_apply_mask", "test_apply_mask_hidden", "test_scaled_dot_product_attention_hidden"),
        message=r"overflow|-1e9|finfo",
        demo=True,
    ),
    Mutant(
        name="additive-overflow",
        misconception="an additive finfo.min mask in the scores' dtype, which overflows float16 for negative scores",
        cells={"apply_mask": _APPLY_DOC + '''    if mask is None:
        return scores
    additive = torch.zeros_like(scores).masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores + additive
'''},
        must_fail=("test_apply_mask_hidden",),
        message=r"overflow",
    ),
    Mutant(
        name="mask-after-softmax",
        misconception="mask applied to the weights after the softmax: rows no longer sum to 1",
        cells={"scaled_dot_product_attention": _SDPA_DOC + '''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    attn = F.softmax(scores, dim=-1)
    if mask is not None:
        attn = attn.masked_fill(~mask, 0.0)
    return attn @ v, attn
'''},
        must_fail=("test_scaled_dot_product_attention", "test_scaled_dot_product_attention_hidden", "test_causal_tables"),
        message=r"(after|before) the softmax",
        demo=True,
    ),
    Mutant(
        name="causal-diagonal-excluded",
        misconception="causal mask off by one: the diagonal is excluded, so a token cannot read itself",
        cells={"causal_mask": _CAUSAL_DOC + '''    return torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)[None, None]
'''},
        must_fail=("test_causal_mask", "test_causal_mask_hidden"),
        message=r"diagonal",
        demo=True,
    ),
    Mutant(
        name="causal-one-future-key",
        misconception="causal mask off by one: every query also sees the next key",
        cells={"causal_mask": _CAUSAL_DOC + '''    return torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=1)[None, None]
'''},
        must_fail=("test_causal_mask", "test_causal_mask_hidden"),
        message=r"future",
    ),
    Mutant(
        name="causal-inverted",
        misconception="causal mask of the wrong polarity: True marks the future (positions to block)",
        cells={"causal_mask": _CAUSAL_DOC + '''    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)[None, None]
'''},
        must_fail=("test_causal_mask", "test_causal_mask_hidden"),
        message=r"polarity",
    ),
    Mutant(
        name="cache-top-left",
        misconception="cached causal mask aligned with the first key instead of the newest position",
        cells={"causal_mask_with_cache": _CACHE_DOC + '''    return torch.tril(torch.ones(T_new, T_total, dtype=torch.bool))[None, None]
'''},
        must_fail=("test_causal_mask_with_cache", "test_causal_mask_with_cache_hidden"),
        message=r"LAST position|START|T_total - T_new",
    ),
    Mutant(
        name="padding-on-queries",
        misconception="padding mask applied to the queries (rows) instead of the keys (columns)",
        cells={"padding_mask": _PADDING_DOC + '''    return (~is_pad)[:, None, :, None]
'''},
        must_fail=("test_padding_mask", "test_padding_mask_hidden"),
        message=r"removes KEYS|query axis",
        demo=True,
    ),
    Mutant(
        name="padding-inverted",
        misconception="padding mask of the wrong polarity: True at the PAD tokens",
        cells={"padding_mask": _PADDING_DOC + '''    return is_pad[:, None, None, :]
'''},
        must_fail=("test_padding_mask", "test_padding_mask_hidden"),
        message=r"polarity|invert",
        demo=True,
    ),
    Mutant(
        name="combine-with-or",
        misconception="masks combined with OR instead of AND",
        cells={"combine_masks": _COMBINE_DOC + '''    combined = None
    for m in masks:
        if m is not None:
            combined = m if combined is None else combined | m
    return combined
'''},
        must_fail=("test_combine_masks", "test_combine_masks_hidden"),
        message=r"with OR|not OR",
    ),
    Mutant(
        name="conventions-not-inverted",
        misconception="SDPA's attn_mask passed as MultiheadAttention's key_padding_mask without inverting",
        cells={"mask_conversions": _CONVERSIONS.format(kpm="sdpa_mask[:, 0, 0, :]",
                                                       sdpa="key_padding_mask[:, None, None, :]")},
        must_fail=("test_mask_conversions", "test_mask_conversions_hidden"),
        message=r"IGNORE|ALLOWED|invert",
    ),
    Mutant(
        name="future-test-first-output-only",
        misconception="the causal property test changes the last token and looks only at the first output",
        cells={"outputs_ignore_future": _FUTURE_DOC + '''    x = torch.randn(B, T, D_MODEL)
    x2 = x.clone()
    x2[:, -1] = torch.randn(B, D_MODEL)
    return torch.allclose(attn_fn(x)[:, 0], attn_fn(x2)[:, 0], atol=1e-5)
'''},
        must_fail=("test_outputs_ignore_future_hidden",),
        message=r"leak went unnoticed",
    ),
    Mutant(
        name="padding-test-no-batch",
        misconception="the padding property test only appends padding to one sequence, never compares a batch",
        cells={"padding_invariant": _PADINV_DOC + '''    for n in lengths:
        x = torch.randn(1, n, D_MODEL)
        alone = attn_fn(x, torch.zeros(1, n, dtype=torch.bool))
        padded = torch.cat([x, torch.randn(1, 3, D_MODEL)], dim=1)
        is_pad = torch.tensor([[False] * n + [True] * 3])
        if not torch.allclose(attn_fn(padded, is_pad)[:, :n], alone, atol=1e-5):
            return False
    return True
'''},
        must_fail=("test_padding_invariant_hidden",),
        message=r"BATCH",
    ),
]

ALTERNATIVES = [
    Alternative(
        name="where-fill",
        description="torch.where with the dtype's finfo.min instead of masked_fill",
        cells={"apply_mask": _APPLY_DOC + '''    if mask is None:
        return scores
    return torch.where(mask, scores, torch.finfo(scores.dtype).min)
'''},
    ),
    Alternative(
        name="additive-per-dtype",
        description="an additive float mask built per dtype, added in float32 or wider and clamped at finfo.min",
        cells={"apply_mask": _APPLY_DOC + '''    if mask is None:
        return scores
    low = torch.finfo(scores.dtype).min
    work = torch.promote_types(scores.dtype, torch.float32)
    bias = torch.zeros(mask.shape, dtype=work).masked_fill(~mask, low)
    return (scores.to(work) + bias).clamp(min=low).to(scores.dtype)
'''},
    ),
    Alternative(
        name="causal-by-index",
        description="the causal masks built by comparing position indices",
        cells={
            "causal_mask": _CAUSAL_DOC + '''    pos = torch.arange(T)
    return (pos[None, :] <= pos[:, None]).view(1, 1, T, T)
''',
            "causal_mask_with_cache": _CACHE_DOC + '''    offset = T_total - T_new
    return torch.ones(T_new, T_total, dtype=torch.bool).tril(diagonal=offset).unsqueeze(0).unsqueeze(0)
''',
        },
    ),
    Alternative(
        name="torch-softmax-einsum",
        description="torch.softmax (not F.softmax) and einsum products",
        cells={"scaled_dot_product_attention": _SDPA_DOC + '''    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    attn = torch.softmax(apply_mask(scores, mask), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", attn, v), attn
'''},
    ),
    Alternative(
        name="unsqueeze-and-reduce",
        description="padding mask by logical_not and unsqueeze; masks combined with functools.reduce",
        cells={
            "padding_mask": _PADDING_DOC + '''    return torch.logical_not(is_pad).unsqueeze(1).unsqueeze(1)
''',
            "combine_masks": _COMBINE_DOC + '''    import functools
    present = [m for m in masks if m is not None]
    return functools.reduce(torch.logical_and, present) if present else None
''',
        },
    ),
    Alternative(
        name="one-position-at-a-time",
        description="property tests that change one token at a time and use left padding",
        cells={
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
        },
    ),
]
