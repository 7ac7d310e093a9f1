"""Lab 4's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue).

Mutants are patches of the reference answers of source/lab04_transformer_block/lab04_transformer_block.ipynb:
each changes the lines of one mistake in an otherwise correct answer.
"""

from ..kit import Alternative, mutants_of, patch

# MultiHeadAttention and load_from_torch: its visible test is named after torch, its hidden one "mha".
_MHA_CELLS = ("test_mha_matches_torch", "test_mha_hidden")

# Rows are (name, misconception, edit, what the failure messages must match), one mutants_of call per
# answer cell, in the order the demo class takes its mutants. MultiHeadAttention uses the head
# split and merge, so its hidden check catches their mistakes too.
MUTANTS = mutants_of("split_heads", ("test_split_heads", "test_heads_hidden", "test_mha_hidden"), [
    ("direct-view-split", "heads split with one view(B, H, T, d_head): head 0 gets whole tokens instead of channels",
     patch("    x = x.view(B, T, n_heads, d_model // n_heads)  # (B, T, H, d_head): no data movement\n"
           "    return x.transpose(1, 2)  # (B, H, T, d_head)\n",
           "    return x.view(B, n_heads, T, d_model // n_heads)  # (B, H, T, d_head) straight from memory\n"),
     r"direct view"),
], demo={"direct-view-split"})
MUTANTS += mutants_of("merge_heads", ("test_merge_heads", "test_heads_hidden", "test_mha_hidden"), [
    ("merge-without-transpose",
     "heads merged by flattening (B, H, T, d_head) straight to (B, T, d_model), without the transpose",
     patch("    x = x.transpose(1, 2)  # (B, T, H, d_head)\n", ""), r"without the transpose"),
], demo={"merge-without-transpose"})
MUTANTS += mutants_of("MultiHeadAttention", _MHA_CELLS, [
    ("scale-by-sqrt-dmodel", "each head's scores divided by sqrt(d_model) instead of sqrt(d_head)",
     patch("/ math.sqrt(self.d_head)", "/ math.sqrt(self.n_heads * self.d_head)"),  # n_heads * d_head = d_model
     r"sqrt\(d_model\)"),
    ("mask-torch-convention",
     "the mask read with torch's convention (True = blocked) instead of the lab's (True = allowed)",
     patch("masked_fill(~mask,", "masked_fill(mask,"), r"allowed"),
], demo={"scale-by-sqrt-dmodel"})
# The visible test uses no per-head or 2-D masks: these two are for the hidden check alone.
MUTANTS += mutants_of("MultiHeadAttention", ("test_mha_hidden",), [
    ("mask-head0-for-all-heads",
     "a (B, H, T_q, T_k) mask reduced to head 0's and broadcast over the heads: every head gets the same mask",
     patch("masked_fill(~mask,", "masked_fill(~(mask[:, :1] if mask.dim() == 4 else mask),"), r"head 0's mask"),
    ("mask-2d-unsupported", "only 4-D masks accepted: a 2-D (T_q, T_k) mask raises instead of broadcasting",
     patch("        if mask is not None:\n",
           "        if mask is not None:\n"
           "            if mask.dim() != 4:\n"
           "                raise ValueError('mask must be (B, H, T_q, T_k)')\n"), r"2-D \(T_q, T_k\) mask"),
])
MUTANTS += mutants_of("load_from_torch", _MHA_CELLS, [
    ("load-transposed", "in_proj_weight blocks transposed when copied into nn.Linear (both are (out, in))", (
        patch("in_proj_weight[i * d:(i + 1) * d])", "in_proj_weight[i * d:(i + 1) * d].T)"),  # both weight copies
        patch("copy_(torch_mha.out_proj.weight)", "copy_(torch_mha.out_proj.weight.T)"),
    ), r"transpos"),
    # A tensor left uncopied keeps the module's own initial values: no formula of torch's weights
    # reproduces the output, so the hidden check names what is missing from the module's parameters.
    ("load-no-in-bias", "in_proj_bias not copied: W_q, W_k and W_v keep their initial biases",
     patch("            if lin.bias is not None:\n"
           "                lin.bias.copy_(torch_mha.in_proj_bias[i * d:(i + 1) * d])  # (d,)\n", ""), r"in_proj_bias"),
    ("load-no-out-bias", "out_proj.bias not copied: W_o keeps its initial bias",
     patch("        if mha.W_o.bias is not None:\n"
           "            mha.W_o.bias.copy_(torch_mha.out_proj.bias)  # (d,)\n", ""), r"its bias|out_proj\.bias"),
    ("load-no-out-weight", "out_proj.weight not copied: W_o keeps its initial weights",
     patch("        mha.W_o.weight.copy_(torch_mha.out_proj.weight)  # (d, d)\n", ""), r"W_o"),
    # Only what acts after the softmax is wrong: the weights match torch's, the output does not.
    ("load-out-weight-transposed", "out_proj.weight transposed when copied into W_o (both are (out, in))",
     patch("copy_(torch_mha.out_proj.weight)", "copy_(torch_mha.out_proj.weight.T)"), r"W_o"),
])
MUTANTS += mutants_of("sinusoidal_positions", "test_sinusoidal", [
    ("sin-cos-swapped", "cos on the even dimensions and sin on the odd ones",
     patch("    pe[:, 0::2] = np.sin(angle)\n    pe[:, 1::2] = np.cos(angle)\n",
           "    pe[:, 0::2] = np.cos(angle)\n    pe[:, 1::2] = np.sin(angle)\n"), r"sin and cos (are )?swapped"),
], demo={"sin-cos-swapped"})
MUTANTS += mutants_of("TransformerBlock", ("test_block_shape_norm", "test_block_hidden"), [
    ("layernorm-before-residual",
     "post-LN asked, but LayerNorm applied to the sublayer output before the residual add", (
         patch("self.ln1(r * x + a)  # (B, T, d): add, then normalise", "r * x + self.ln1(a)  # (B, T, d)"),
         patch("return self.ln2(r * h + self.ff(h)), attn", "return r * h + self.ln2(self.ff(h)), attn"),
     ), r"(after|before) the residual add"),
], demo={"layernorm-before-residual"})
MUTANTS += mutants_of("attention_forward", "test_attention_forward", [
    ("mask-after-softmax", "NumPy forward: the mask zeroes weights after the softmax, so rows no longer sum to 1", (
        patch("    if mask is not None:\n        S = np.where(mask, S, -np.inf)  # (T_q, T_k)\n", ""),
        patch("    A = E / E.sum(axis=-1, keepdims=True)  # (T_q, T_k), rows sum to 1\n",
              "    A = E / E.sum(axis=-1, keepdims=True)  # (T_q, T_k)\n"
              "    if mask is not None:\n"
              "        A = np.where(mask, A, 0.0)  # (T_q, T_k): masked weights zeroed after the softmax\n"),
    ), r"(before|after) the softmax"),
])
# Large scores (the hidden check offsets whole rows of the bias by about +-1000, which changes no weight).
MUTANTS += mutants_of("attention_forward", ("test_attention_forward_hidden",), [
    ("softmax-without-max-shift", "NumPy forward: exp of the raw scores, without subtracting the row max first",
     patch("    S = S - S.max(axis=-1, keepdims=True)  # (T_q, T_k) stable softmax\n", ""), r"row's own max"),
    ("softmax-global-max-shift", "NumPy forward: the scores shifted by the max of the whole matrix, not of each row",
     patch("S = S - S.max(axis=-1, keepdims=True)", "S = S - S.max()"), r"row's own max"),
])
MUTANTS += mutants_of("attention_backward", "test_attention_backward", [
    ("dk-without-transpose", "dK computed as dS Q instead of dS^T Q",
     patch("dK = dS.T @ Q / scale", "dK = dS @ Q / scale"), r"transpos"),
    ("softmax-backward-wrong-axis", "the softmax backward's row sum taken over the query axis (axis 0)",
     patch("sum(axis=-1, keepdims=True)", "sum(axis=0, keepdims=True)"), r"axis"),  # the row sum in dS
], demo={"dk-without-transpose", "softmax-backward-wrong-axis"})
MUTANTS += mutants_of("score_bias_grad", "test_score_bias_grad", [
    ("bias-grad-scaled",
     "the score-bias gradient divided by sqrt(d_k), as if the bias were added before the scale", (
         patch('A, V = cache["A"], cache["V"]', 'A, V, Q = cache["A"], cache["V"], cache["Q"]'),
         patch("return A * (dA - (dA * A).sum(axis=-1, keepdims=True))",
               "return A * (dA - (dA * A).sum(axis=-1, keepdims=True)) / np.sqrt(Q.shape[-1])"),
     ), r"added after the scale"),
])
MUTANTS += mutants_of("attention_flops", "test_attention_flops", [
    ("flops-as-macs", "multiply-adds counted once: a (m, k) @ (k, n) matmul taken as m k n FLOPs",
     (patch("projections = 4 * 2 * B", "projections = 4 * B"), patch("qk_t = 2 * B", "qk_t = B"),
      patch("av = 2 * B", "av = B")), r"2 m k n"),
])
MUTANTS += mutants_of("rope_step_scores", "test_rope_step", [
    ("rope-query-unrotated", "cached RoPE: the new key rotated, the new query not (keys rotated but not queries)",
     patch("q = apply_rope(q_new, at_t, layout)", "q = q_new"), r"query"),
    ("rope-offset-off-by-one",
     "cached RoPE: the new token rotated by t + 1 (its 1-based index) instead of its 0-based position t",
     patch("at_t = torch.tensor([t])", "at_t = torch.tensor([t + 1])"), r"0-based"),
], demo={"rope-query-unrotated"})
# dtypes (stated in the task text): angles in float64, the result in x's dtype; the hidden check's
# float32 input at positions of several thousand tells both apart.
MUTANTS += mutants_of("apply_rope", ("test_apply_rope_hidden",), [
    ("rope-float32-angles", "theta_i and the angles computed in float32 (as Hugging Face's inv_freq), not float64",
     (patch("    pair = torch.arange(d // 2, dtype=torch.float64)", "    pair = torch.arange(d // 2, dtype=torch.float32)"),
      patch("torch.as_tensor(positions, dtype=torch.float64)", "torch.as_tensor(positions, dtype=torch.float32)")),
     r"float32"),
    ("rope-result-float64", "cos and sin left in float64: a float32 input comes back as float64",
     patch("cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)", "cos, sin = angle.cos(), angle.sin()"),
     r"returned float64 for a float32 input"),
])
MUTANTS += mutants_of("apply_rope", "test_apply_rope", [
    ("rope-wrong-layout", "the layouts exchanged: 'interleaved' asked, channels (i, i + d/2) paired (and vice versa)",
     patch('    if layout == "interleaved":\n', '    if layout == "half":\n', count=2), r"layout"),
    ("rope-frequencies-without-two", "RoPE frequencies base^(-i/d) instead of base^(-2i/d)",
     patch("theta = base ** (-2 * pair / d)", "theta = base ** (-pair / d)"), r"2i ?/ ?d"),
    ("rope-sin-cos-swapped", "sin and cos exchanged in the rotation of each pair",
     (patch("y1 = x1 * cos - x2 * sin", "y1 = x1 * sin - x2 * cos"),
      patch("y2 = x1 * sin + x2 * cos", "y2 = x1 * cos + x2 * sin")), r"sin and cos"),
])
# Positions ignored: the visible property test (shifting both positions) catches it, as the hidden check does.
MUTANTS += mutants_of("apply_rope", ("test_rope_properties", "test_apply_rope_hidden"), [
    ("rope-row-index", "RoPE angles from the row index (arange(T)) instead of the positions argument",
     patch("torch.as_tensor(positions, dtype=torch.float64)[:, None]",
           "torch.arange(x.shape[-2], dtype=torch.float64)[:, None]"), r"row index"),
])
MUTANTS += mutants_of("fused_qkv", "test_fused_qkv", [
    ("fused-per-head-layout",
     "the fused (B, T, 3d) output read as H blocks of [q_h | k_h | v_h] instead of [q | k | v]", (
         patch("qkv.view(B, T, 3, n_heads, d // n_heads)  # (B, T, 3, H, d_head)",
               "qkv.view(B, T, n_heads, 3, d // n_heads)  # (B, T, H, 3, d_head)"),
         patch("qkv.permute(2, 0, 3, 1, 4)", "qkv.permute(3, 0, 2, 1, 4)"),
     ), r"into q, k, v first"),
    ("fused-direct-view", "q, k, v each viewed straight as (B, H, T, d_head) after the fused matmul", (
        patch("qkv.view(B, T, 3, n_heads, d // n_heads)  # (B, T, 3, H, d_head)",
              "qkv.view(B, T, 3, d).permute(2, 0, 1, 3)  # (3, B, T, d)"),
        patch("qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, B, H, T, d_head)",
              "qkv = qkv.reshape(3, B, n_heads, T, d // n_heads)  # (3, B, H, T, d_head) straight"),
    ), r"\(B, T, H, d_head\)"),
])
# A flattening .view right after the transpose works on a transposed view by accident (transposing it back gives
# contiguous memory) and fails on attn @ v, which is contiguous: the hidden check hands merge_heads both.
MUTANTS += mutants_of("merge_heads", ("test_merge_heads", "test_heads_hidden", "test_mha_hidden"), [
    ("merge-view-without-contiguous", "heads merged by transpose then .view, without .contiguous() in between",
     patch("return x.contiguous().view(B, T, H * d_head)", "return x.view(B, T, H * d_head)"), r"contiguous"),
])
MUTANTS += mutants_of("MultiHeadAttention", _MHA_CELLS, [
    ("mask-fill-zero", "masked scores set to 0 instead of a large negative number, so masked keys keep weight",
     patch("masked_fill(~mask, torch.finfo(scores.dtype).min)", "masked_fill(~mask, 0.0)"), r"a fill of 0|set to 0"),
])
MUTANTS += mutants_of("sinusoidal_positions", ("test_sinusoidal_hidden",), [
    ("positions-float32", "sinusoids computed in float32 (torch's default) where float64 is asked",
     patch("    return pe\n", "    return pe.astype(np.float32)\n"), r"float32 precision"),
])
MUTANTS += mutants_of("rope_step_scores", ("test_rope_step_hidden",), [
    ("rope-cache-rotated-again", "cached RoPE: the cached keys, already rotated, rotated again with the new one", (
        patch("    k_cache = torch.cat([k_cache, apply_rope(k_new, at_t, layout)], dim=-2)  # (B, H, t + 1, d_head)\n",
              "    k_cache = apply_rope(torch.cat([k_cache, k_new], dim=-2), torch.arange(t + 1), layout)\n"),
    ), r"rotated again"),
])

ALTERNATIVES = [
    Alternative(name="einsum-heads",
                description="heads handled by einsum on (B, T, H, d_head), without split_heads/merge_heads",
                cells={"MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.h = n_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, x_q, x_kv, mask=None):
        q = self.W_q(x_q).unflatten(-1, (self.h, -1))
        k = self.W_k(x_kv).unflatten(-1, (self.h, -1))
        v = self.W_v(x_kv).unflatten(-1, (self.h, -1))
        scores = torch.einsum("bqhc,bkhc->bhqk", q, k) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.einsum("bhqk,bkhc->bqhc", attn, v).flatten(-2)
        return self.W_o(out), attn
'''}),
    Alternative(name="fused-qkv",
                description="one fused (d, 3d) projection, split into q, k, v afterwards; "
                            "load_from_torch copies it whole",
                cells={
                    "MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x_q, x_kv, mask=None):
        d = x_q.shape[-1]
        w, b = self.qkv.weight, self.qkv.bias
        if x_q is x_kv:
            q, k, v = self.qkv(x_q).split(d, dim=-1)
        else:
            q = nn.functional.linear(x_q, w[:d], None if b is None else b[:d])
            k, v = nn.functional.linear(x_kv, w[d:], None if b is None else b[d:]).split(d, dim=-1)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        attn = scores.softmax(-1)
        return self.out(merge_heads(attn @ v)), attn
''',
                    "load_from_torch": '''def load_from_torch(mha, torch_mha):
    with torch.no_grad():
        mha.qkv.weight.copy_(torch_mha.in_proj_weight)
        mha.out.weight.copy_(torch_mha.out_proj.weight)
        if mha.qkv.bias is not None:
            mha.qkv.bias.copy_(torch_mha.in_proj_bias)
            mha.out.bias.copy_(torch_mha.out_proj.bias)
    return mha
''',
                }),
    Alternative(name="reshape-permute",
                description="split and merge with reshape and permute instead of view, transpose and contiguous",
                cells={
                    "split_heads": (patch("x = x.view(B, T, n_heads, d_model // n_heads)",
                                          "x = x.reshape(B, T, n_heads, -1)"),
                                    patch("return x.transpose(1, 2)", "return x.permute(0, 2, 1, 3)")),
                    "merge_heads": (patch("x = x.transpose(1, 2)", "x = x.permute(0, 2, 1, 3)"),
                                    patch("return x.contiguous().view(B, T, H * d_head)",
                                          "return x.reshape(B, T, H * d_head)")),
                }),
    Alternative(name="loop-over-heads",
                description="one small Linear per head and role, a Python loop over heads, then concatenation",
                cells={
                    "MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        d_head = d_model // n_heads
        self.q = nn.ModuleList([nn.Linear(d_model, d_head, bias=bias) for _ in range(n_heads)])
        self.k = nn.ModuleList([nn.Linear(d_model, d_head, bias=bias) for _ in range(n_heads)])
        self.v = nn.ModuleList([nn.Linear(d_model, d_head, bias=bias) for _ in range(n_heads)])
        self.o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x_q, x_kv, mask=None):
        outs, maps = [], []
        for h, (wq, wk, wv) in enumerate(zip(self.q, self.k, self.v)):
            q, k, v = wq(x_q), wk(x_kv), wv(x_kv)
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                m = mask.expand(x_q.shape[0], len(self.q), *s.shape[-2:])  # (B, H, T_q, T_k), any accepted shape
                s = s.masked_fill(~m[:, h], float("-inf"))  # (B, T_q, T_k): head h's own mask
            a = torch.softmax(s, dim=-1)
            outs.append(a @ v)
            maps.append(a)
        return self.o(torch.cat(outs, dim=-1)), torch.stack(maps, dim=1)
''',
                    "load_from_torch": '''def load_from_torch(mha, torch_mha):
    d, H = torch_mha.embed_dim, torch_mha.num_heads
    dh = d // H
    with torch.no_grad():
        for role, heads in enumerate((mha.q, mha.k, mha.v)):
            for h, lin in enumerate(heads):
                rows = slice(role * d + h * dh, role * d + (h + 1) * dh)
                lin.weight.copy_(torch_mha.in_proj_weight[rows])
                if lin.bias is not None:
                    lin.bias.copy_(torch_mha.in_proj_bias[rows])
        mha.o.weight.copy_(torch_mha.out_proj.weight)
        if mha.o.bias is not None:
            mha.o.bias.copy_(torch_mha.out_proj.bias)
    return mha
''',
                }),
    Alternative(name="explicit-jacobian",
                description="softmax backward through each row's full Jacobian diag(a) - a a^T, in loops",
                cells={
                    "attention_backward": patch(
                        "    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))"
                        "  # (T_q, T_k), softmax backward per row\n",
                        """    dS = np.zeros_like(A)  # (T_q, T_k)
    for i, a in enumerate(A):  # row i of the softmax: its Jacobian diag(a) - a a^T times dA[i]
        dS[i] = (np.diag(a) - np.outer(a, a)) @ dA[i]
"""),
                    "score_bias_grad": patch(
                        "return A * (dA - (dA * A).sum(axis=-1, keepdims=True))  # (T_q, T_k) = dS",
                        "return np.stack([(np.diag(a) - np.outer(a, a)) @ g for a, g in zip(A, dA)])"
                        "  # (T_q, T_k) = dS"),
                }),
    Alternative(name="torch-style-positions-and-branches",
                description="positions with the exp-log frequency form in torch; block with four explicit branches",
                cells={
                    "sinusoidal_positions": '''def sinusoidal_positions(T, d_model):
    position = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.numpy()
''',
                    "TransformerBlock": '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, pre_ln=False, residual=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln2 = nn.LayerNorm(d_model)
        self.pre_ln, self.residual = pre_ln, residual

    def forward(self, x, mask=None):
        if self.pre_ln:
            n = self.ln1(x)
            a, w = self.attn(n, n, mask=mask)
            h = x + a if self.residual else a
            f = self.ff(self.ln2(h))
            return (h + f if self.residual else f), w
        a, w = self.attn(x, x, mask=mask)
        h = self.ln1(x + a) if self.residual else self.ln1(a)
        f = self.ff(h)
        return (self.ln2(h + f) if self.residual else self.ln2(f)), w
''',
                }),
    Alternative(name="rope-complex",
                description="RoPE as complex multiplication (torch.polar, view_as_complex, as Meta's llama does), "
                            "the half-split layout by permuting the channels to interleaved and back",
                cells={"apply_rope": '''def apply_rope(x, positions, layout="interleaved", base=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.outer(torch.as_tensor(positions).to(torch.float64), freqs)
    rot = torch.polar(torch.ones_like(angle), angle)
    if layout == "half":
        to_inter = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], dim=-1).flatten()
        x = x[..., to_inter]
    z = torch.view_as_complex(x.to(torch.float64).contiguous().reshape(*x.shape[:-1], d // 2, 2))
    y = torch.view_as_real(z * rot).flatten(-2).to(x.dtype)
    if layout == "half":
        y = y[..., torch.argsort(to_inter)]
    return y
'''}),
    Alternative(name="rope-rotation-matrices",
                description="explicit 2x2 rotation matrices applied with einsum on index-gathered pairs; the step "
                            "with torch.full positions and einsum scores",
                cells={
                    "apply_rope": '''def apply_rope(x, positions, layout="interleaved", base=10000.0):
    d = x.shape[-1]
    i = np.arange(d // 2)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * base ** (-2.0 * i / d)
    c, s = np.cos(ang), np.sin(ang)
    R = torch.as_tensor(np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2), dtype=x.dtype)
    if layout == "interleaved":
        idx = torch.as_tensor(np.stack([2 * i, 2 * i + 1], -1))
    else:
        idx = torch.as_tensor(np.stack([i, i + d // 2], -1))
    pairs = x[..., idx]
    out = torch.einsum("tpab,...tpb->...tpa", R, pairs)
    y = torch.empty_like(x)
    y[..., idx] = out
    return y
''',
                    "rope_step_scores": '''def rope_step_scores(q_new, k_new, k_cache, layout="interleaved"):
    pos = torch.full((1,), k_cache.size(2), dtype=torch.long)
    q = apply_rope(q_new, pos, layout)
    k = apply_rope(k_new, pos, layout)
    keys = torch.cat((k_cache, k), dim=2)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, keys) * q.size(-1) ** -0.5
    return scores, keys
''',
                }),
    Alternative(name="rope-rotate-half",
                description="Hugging Face's form, x * cos + rotate(x) * sin with cos and sin repeated per channel; "
                            "interleaved through a rotate-every-two",
                cells={"apply_rope": '''def apply_rope(x, positions, layout="interleaved", base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).double() / d))
    freqs = torch.as_tensor(positions).double()[:, None] * inv_freq[None, :]
    if layout == "half":
        emb = torch.cat((freqs, freqs), dim=-1)
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        rotated = torch.cat((-x2, x1), dim=-1)
    else:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).reshape(x.shape)
    return x * emb.cos().to(x.dtype) + rotated * emb.sin().to(x.dtype)
'''}),
    Alternative(name="fused-chunk-split-heads",
                description="one matmul, chunk(3) on the last axis, then split_heads on each",
                cells={"fused_qkv": '''def fused_qkv(x, W_qkv, n_heads):
    q, k, v = (x @ W_qkv).chunk(3, dim=-1)
    return tuple(split_heads(t, n_heads) for t in (q, k, v))
'''}),
    Alternative(name="fused-einsum",
                description="the weight unflattened to (d, 3, H, d_head) and one einsum straight into heads",
                cells={"fused_qkv": '''def fused_qkv(x, W_qkv, n_heads):
    d = x.shape[-1]
    W = W_qkv.reshape(d, 3, n_heads, d // n_heads)
    return torch.einsum("btd,dshc->sbhtc", x, W).unbind(0)
'''}),
    Alternative(name="fused-three-slices",
                description="three matmuls on column slices of W_qkv, heads by reshape and permute",
                cells={"fused_qkv": '''def fused_qkv(x, W_qkv, n_heads):
    B, T, d = x.shape
    outs = []
    for role in range(3):
        y = x @ W_qkv[:, role * d:(role + 1) * d]
        outs.append(y.reshape(B, T, n_heads, -1).permute(0, 2, 1, 3))
    return outs[0], outs[1], outs[2]
'''}),
    Alternative(name="block-reads-attention-settings",
                description="the block reads its attention's n_heads to give the mask every axis, (B, H, T, T)",
                cells={"TransformerBlock": patch(
                    "        r = 1.0 if self.residual else 0.0  # multiplies the skip paths\n",
                    "        r = 1.0 if self.residual else 0.0  # multiplies the skip paths\n"
                    "        if mask is not None:\n"
                    "            B, T = x.shape[:2]\n"
                    "            mask = mask.expand(B, self.attn.n_heads, T, T)  # (B, H, T, T)\n")}),
]
