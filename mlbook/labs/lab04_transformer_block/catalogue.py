"""Lab 4's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue)."""

from mlbook.authoring.catalogue import Alternative, Mutant

# ---------------------------------------------------------------------------------------------
# reference cells, as text, so that each mutant changes one line of an otherwise correct answer
# ---------------------------------------------------------------------------------------------

_MHA = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x_q, x_kv, mask=None):
        q = split_heads(self.W_q(x_q), self.n_heads)
        k = split_heads(self.W_k(x_kv), self.n_heads)
        v = split_heads(self.W_v(x_kv), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        return self.W_o(merge_heads(attn @ v)), attn
'''

_LOAD = '''def load_from_torch(mha, torch_mha):
    d = torch_mha.embed_dim
    with torch.no_grad():
        for i, lin in enumerate((mha.W_q, mha.W_k, mha.W_v)):
            lin.weight.copy_(torch_mha.in_proj_weight[i * d:(i + 1) * d])
            if lin.bias is not None:
                lin.bias.copy_(torch_mha.in_proj_bias[i * d:(i + 1) * d])
        mha.W_o.weight.copy_(torch_mha.out_proj.weight)
        if mha.W_o.bias is not None:
            mha.W_o.bias.copy_(torch_mha.out_proj.bias)
    return mha
'''

_BLOCK = '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, pre_ln=False, residual=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln2 = nn.LayerNorm(d_model)
        self.pre_ln, self.residual = pre_ln, residual

    def forward(self, x, mask=None):
        r = 1.0 if self.residual else 0.0
        if self.pre_ln:
            z = self.ln1(x)
            a, attn = self.attn(z, z, mask)
            h = r * x + a
            return r * h + self.ff(self.ln2(h)), attn
        a, attn = self.attn(x, x, mask)
        h = self.ln1(r * x + a)
        return self.ln2(r * h + self.ff(h)), attn
'''

_POSITIONS = '''def sinusoidal_positions(T, d_model):
    pos = np.arange(T)[:, None]
    pair = np.arange(d_model // 2)[None, :]
    angle = pos / 10000 ** (2 * pair / d_model)
    pe = np.zeros((T, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe
'''

_FORWARD = '''def attention_forward(Q, K, V, mask=None, bias=None):
    S = Q @ K.T / np.sqrt(Q.shape[-1])
    if bias is not None:
        S = S + bias
    if mask is not None:
        S = np.where(mask, S, -np.inf)
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    A = E / E.sum(axis=-1, keepdims=True)
    return A @ V, {"Q": Q, "K": K, "V": V, "A": A}
'''

_BACKWARD = '''def attention_backward(dY, cache):
    Q, K, V, A = cache["Q"], cache["K"], cache["V"], cache["A"]
    scale = np.sqrt(Q.shape[-1])
    dV = A.T @ dY
    dA = dY @ V.T
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    dQ = dS @ K / scale
    dK = dS.T @ Q / scale
    return dQ, dK, dV
'''

_BIAS_GRAD = '''def score_bias_grad(dY, cache):
    A, V = cache["A"], cache["V"]
    dA = dY @ V.T
    return A * (dA - (dA * A).sum(axis=-1, keepdims=True))
'''

_FLOPS = '''def attention_flops(B, T, d_model):
    projections = 4 * 2 * B * T * d_model * d_model
    qk_t = 2 * B * T * T * d_model
    av = 2 * B * T * T * d_model
    return {"projections": projections, "qk_t": qk_t, "av": av, "total": projections + qk_t + av}
'''

_SHARE = '''def attention_share(T, d_model):
    per_token = 8 * T * d_model**2 + 16 * T * d_model**2
    n_by_n = 4 * T**2 * d_model
    return n_by_n / (per_token + n_by_n)
'''


def _swap(text: str, old: str, new: str) -> str:
    """The reference text with exactly one occurrence of ``old`` replaced."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


MUTANTS = [
    Mutant(
        name="direct-view-split",
        misconception="heads split with one view(B, H, T, d_head): head 0 gets whole tokens instead of channels",
        cells={"split_heads": '''def split_heads(x, n_heads):
    B, T, d_model = x.shape
    return x.view(B, n_heads, T, d_model // n_heads)
'''},
        must_fail=("test_split_heads", "test_heads_hidden", "test_mha_hidden"),
        message=r"direct view",
        demo=True,
    ),
    Mutant(
        name="merge-without-transpose",
        misconception="heads merged by flattening (B, H, T, d_head) straight to (B, T, d_model), without the transpose",
        cells={"merge_heads": '''def merge_heads(x):
    B, H, T, d_head = x.shape
    return x.contiguous().view(B, T, H * d_head)
'''},
        must_fail=("test_merge_heads", "test_heads_hidden", "test_mha_hidden"),
        message=r"without the transpose",
        demo=True,
    ),
    Mutant(
        name="scale-by-sqrt-dmodel",
        misconception="each head's scores divided by sqrt(d_model) instead of sqrt(d_head)",
        cells={"MultiHeadAttention": _swap(_MHA, "/ math.sqrt(self.d_head)", "/ math.sqrt(self.n_heads * self.d_head)")},
        must_fail=("test_mha_matches_torch", "test_mha_hidden"),
        message=r"sqrt\(d_model\)",
        demo=True,
    ),
    Mutant(
        name="mask-torch-convention",
        misconception="the mask read with torch's convention (True = blocked) instead of the lab's (True = allowed)",
        cells={"MultiHeadAttention": _swap(_MHA, "masked_fill(~mask,", "masked_fill(mask,")},
        must_fail=("test_mha_matches_torch", "test_mha_hidden"),
        message=r"allowed",
    ),
    Mutant(
        name="load-transposed",
        misconception="in_proj_weight blocks transposed when copied into nn.Linear (both are (out, in))",
        cells={"load_from_torch": _swap(_swap(_LOAD, "in_proj_weight[i * d:(i + 1) * d])",
                                              "in_proj_weight[i * d:(i + 1) * d].T)"),
                                        "copy_(torch_mha.out_proj.weight)", "copy_(torch_mha.out_proj.weight.T)")},
        must_fail=("test_mha_matches_torch", "test_mha_hidden"),
        message=r"transpos",
    ),
    Mutant(
        name="sin-cos-swapped",
        misconception="cos on the even dimensions and sin on the odd ones",
        cells={"sinusoidal_positions": _swap(_swap(_POSITIONS, "pe[:, 0::2] = np.sin(angle)", "pe[:, 0::2] = np.cos(angle)"),
                                             "pe[:, 1::2] = np.cos(angle)", "pe[:, 1::2] = np.sin(angle)")},
        must_fail=("test_sinusoidal", "test_sinusoidal_hidden"),
        message=r"sin and cos (are )?swapped",
        demo=True,
    ),
    Mutant(
        name="layernorm-before-residual",
        misconception="post-LN asked, but LayerNorm applied to the sublayer output before the residual add",
        cells={"TransformerBlock": _swap(_swap(_BLOCK, "h = self.ln1(r * x + a)", "h = r * x + self.ln1(a)"),
                                         "return self.ln2(r * h + self.ff(h)), attn",
                                         "return r * h + self.ln2(self.ff(h)), attn")},
        must_fail=("test_block_shape_norm", "test_block_hidden"),
        message=r"(after|before) the residual add",
        demo=True,
    ),
    Mutant(
        name="mask-after-softmax",
        misconception="NumPy forward: the mask zeroes weights after the softmax, so rows no longer sum to 1",
        cells={"attention_forward": '''def attention_forward(Q, K, V, mask=None, bias=None):
    S = Q @ K.T / np.sqrt(Q.shape[-1])
    if bias is not None:
        S = S + bias
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    A = E / E.sum(axis=-1, keepdims=True)
    if mask is not None:
        A = np.where(mask, A, 0.0)
    return A @ V, {"Q": Q, "K": K, "V": V, "A": A}
'''},
        must_fail=("test_attention_forward", "test_attention_forward_hidden"),
        message=r"(before|after) the softmax",
    ),
    Mutant(
        name="dk-without-transpose",
        misconception="dK computed as dS Q instead of dS^T Q",
        cells={"attention_backward": _swap(_BACKWARD, "dK = dS.T @ Q / scale", "dK = dS @ Q / scale")},
        must_fail=("test_attention_backward", "test_attention_backward_hidden"),
        message=r"transpos",
        demo=True,
    ),
    Mutant(
        name="softmax-backward-wrong-axis",
        misconception="the softmax backward's row sum taken over the query axis (axis 0)",
        cells={"attention_backward": _swap(_BACKWARD, "(dA * A).sum(axis=-1, keepdims=True)", "(dA * A).sum(axis=0, keepdims=True)")},
        must_fail=("test_attention_backward", "test_attention_backward_hidden"),
        message=r"axis",
        demo=True,
    ),
    Mutant(
        name="bias-grad-scaled",
        misconception="the score-bias gradient divided by sqrt(d_k), as if the bias were added before the scale",
        cells={"score_bias_grad": '''def score_bias_grad(dY, cache):
    A, V, Q = cache["A"], cache["V"], cache["Q"]
    dA = dY @ V.T
    return A * (dA - (dA * A).sum(axis=-1, keepdims=True)) / np.sqrt(Q.shape[-1])
'''},
        must_fail=("test_score_bias_grad", "test_score_bias_grad_hidden"),
        message=r"added after the scale",
    ),
    Mutant(
        name="flops-as-macs",
        misconception="multiply-adds counted once: a (m, k) @ (k, n) matmul taken as m k n FLOPs",
        cells={"attention_flops": '''def attention_flops(B, T, d_model):
    projections = 4 * B * T * d_model * d_model
    qk_t = B * T * T * d_model
    av = B * T * T * d_model
    return {"projections": projections, "qk_t": qk_t, "av": av, "total": projections + qk_t + av}
'''},
        must_fail=("test_attention_flops", "test_attention_flops_hidden"),
        message=r"2 m k n",
    ),
    Mutant(
        name="share-without-ffn",
        misconception="the n x n share computed for the attention sublayer alone, forgetting the 4x FFN",
        cells={"attention_share": '''def attention_share(T, d_model):
    n_by_n = 4 * T**2 * d_model
    return n_by_n / (8 * T * d_model**2 + n_by_n)
'''},
        must_fail=("test_attention_share", "test_attention_share_hidden"),
        message=r"FFN",
    ),
]

ALTERNATIVES = [
    Alternative(
        name="einsum-heads",
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
'''},
    ),
    Alternative(
        name="fused-qkv",
        description="one fused (d, 3d) projection, split into q, k, v afterwards; load_from_torch copies it whole",
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
        },
    ),
    Alternative(
        name="reshape-permute",
        description="split and merge with reshape and permute instead of view, transpose and contiguous",
        cells={
            "split_heads": '''def split_heads(x, n_heads):
    B, T, d = x.shape
    return x.reshape(B, T, n_heads, -1).permute(0, 2, 1, 3)
''',
            "merge_heads": '''def merge_heads(x):
    B, H, T, d_head = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, T, H * d_head)
''',
        },
    ),
    Alternative(
        name="loop-over-heads",
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
                s = s.masked_fill(~mask[:, h if mask.shape[1] > 1 else 0], float("-inf"))
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
        },
    ),
    Alternative(
        name="explicit-jacobian",
        description="softmax backward through each row's full Jacobian diag(a) - a a^T, in loops",
        cells={
            "attention_backward": '''def attention_backward(dY, cache):
    Q, K, V, A = cache["Q"], cache["K"], cache["V"], cache["A"]
    dA = dY @ V.T
    dS = np.zeros_like(A)
    for i, a in enumerate(A):
        dS[i] = (np.diag(a) - np.outer(a, a)) @ dA[i]
    dS = dS / np.sqrt(Q.shape[1])
    return dS @ K, dS.T @ Q, A.T @ dY
''',
            "score_bias_grad": '''def score_bias_grad(dY, cache):
    A, V = cache["A"], cache["V"]
    dA = dY @ V.T
    return np.stack([(np.diag(a) - np.outer(a, a)) @ g for a, g in zip(A, dA)])
''',
        },
    ),
    Alternative(
        name="torch-style-positions-and-branches",
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
        },
    ),
    Alternative(
        name="cost-from-flops",
        description="attention_share and crossover_length derived from attention_flops by search and ratio",
        cells={
            "attention_share": '''def attention_share(T, d_model):
    f = attention_flops(1, T, d_model)
    ffn = 2 * (2 * T * d_model * 4 * d_model)
    return (f["qk_t"] + f["av"]) / (f["total"] + ffn)
''',
            "crossover_length": '''def crossover_length(d_model, full_layer=False):
    f = attention_flops(1, 1, d_model)
    per_token = f["projections"] + (16 * d_model**2 if full_layer else 0)
    n_by_n_per_t = f["qk_t"] + f["av"]
    return per_token / n_by_n_per_t
''',
        },
    ),
]
