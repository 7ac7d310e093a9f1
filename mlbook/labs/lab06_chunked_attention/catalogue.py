"""Lab 6's misconception mutants and alternative correct solutions (see mlbook.authoring.catalogue)."""

from mlbook.authoring.catalogue import Alternative, Mutant

_UPDATE_DEF = '''def online_softmax_update(m, l, acc, scores_block, v_block):
    """Fold one block of keys into the running softmax state (m, l, acc)."""
'''
_CHUNKED_DEF = '''def chunked_attention(q, k, v, chunk_size, causal=False):
    """Exact attention tile by tile; returns (out (T_q, d_v), lse (T_q,))."""
'''
_BACKWARD_DEF = '''def attention_backward_from_lse(q, k, v, out, dout, lse, chunk_size, causal=False):
    """(dq, dk, dv) recomputed block by block from the saved out and lse."""
'''


def _chunked(*, m_init="q.new_full((q_stop - q_start,), -math.inf)", k_end="min(q_stop, T_k) if causal else T_k",
             k_range="range(0, k_end, chunk_size)", k_stop="min(k_start + chunk_size, T_k)") -> str:
    """The reference chunked_attention with one line swapped for a mistake."""
    return _CHUNKED_DEF + f'''    T_q, d_k = q.shape
    T_k, d_v = v.shape
    scale = 1.0 / math.sqrt(d_k)
    out = q.new_empty(T_q, d_v)
    lse = q.new_empty(T_q)
    for q_start in range(0, T_q, chunk_size):
        q_stop = min(q_start + chunk_size, T_q)
        q_tile = q[q_start:q_stop] * scale
        m = {m_init}
        l = q.new_zeros(q_stop - q_start)
        acc = q.new_zeros(q_stop - q_start, d_v)
        k_end = {k_end}
        for k_start in {k_range}:
            k_stop = {k_stop}
            scores = q_tile @ k[k_start:k_stop].T
            if causal:
                future = torch.arange(k_start, k_stop)[None, :] > torch.arange(q_start, q_stop)[:, None]
                scores = scores.masked_fill(future, -math.inf)
            m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop])
        out[q_start:q_stop] = acc / l[:, None]
        lse[q_start:q_stop] = m + torch.log(l)
    return out, lse
'''


def _backward(*, blk="torch.exp(scores - lse[:, None])", D="(dout * out).sum(dim=-1)",
              scale="1.0 / math.sqrt(d_k)") -> str:
    """The reference backward with one line swapped for a mistake."""
    return _BACKWARD_DEF + f'''    T_q, d_k = q.shape
    T_k = k.shape[0]
    scale = {scale}
    D = {D}
    dq = torch.zeros_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    for k_start in range(0, T_k, chunk_size):
        k_stop = min(k_start + chunk_size, T_k)
        k_blk, v_blk = k[k_start:k_stop], v[k_start:k_stop]
        scores = q @ k_blk.T / math.sqrt(d_k)
        if causal:
            future = torch.arange(k_start, k_stop)[None, :] > torch.arange(T_q)[:, None]
            scores = scores.masked_fill(future, -math.inf)
        A_blk = {blk}
        dv[k_start:k_stop] = A_blk.T @ dout
        dS_blk = A_blk * (dout @ v_blk.T - D[:, None])
        dq += dS_blk @ k_blk * scale
        dk[k_start:k_stop] = dS_blk.T @ q * scale
    return dq, dk, dv
'''


_UPDATE_CELLS = ("test_online_softmax_update", "test_online_softmax_update_hidden", "test_chunked_attention_hidden")

MUTANTS = [
    Mutant(
        name="no-rescale",
        misconception="the running denominator and accumulator are not rescaled by exp(m_old - m_new) "
                      "when the max grows",
        cells={"online_softmax_update": _UPDATE_DEF + '''    m_new = torch.maximum(m, scores_block.max(dim=-1).values)
    p = torch.exp(scores_block - m_new[:, None])
    return m_new, l + p.sum(dim=-1), acc + p @ v_block
'''},
        must_fail=_UPDATE_CELLS,
        message=r"rescal",
        demo=True,
    ),
    Mutant(
        name="rescale-denominator-only",
        misconception="the denominator l is rescaled when the max grows but the accumulator acc is not",
        cells={"online_softmax_update": _UPDATE_DEF + '''    m_new = torch.maximum(m, scores_block.max(dim=-1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(scores_block - m_new[:, None])
    return m_new, alpha * l + p.sum(dim=-1), acc + p @ v_block
'''},
        must_fail=_UPDATE_CELLS,
        message=r"accumulator",
        demo=True,
    ),
    Mutant(
        name="divide-inside-loop",
        misconception="the accumulator is divided by the running denominator inside every update",
        cells={"online_softmax_update": _UPDATE_DEF + '''    m_new = torch.maximum(m, scores_block.max(dim=-1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(scores_block - m_new[:, None])
    l_new = alpha * l + p.sum(dim=-1)
    acc_new = (alpha[:, None] * acc + p @ v_block) / l_new[:, None]
    return m_new, l_new, acc_new
'''},
        must_fail=_UPDATE_CELLS,
        message=r"divid",
        demo=True,
    ),
    Mutant(
        name="max-starts-at-zero",
        misconception="the running max starts at 0 instead of -inf, so very negative scores underflow",
        cells={"chunked_attention": _chunked(m_init="q.new_zeros(q_stop - q_start)")},
        must_fail=("test_chunked_attention", "test_chunked_attention_hidden"),
        message=r"-inf",
        demo=True,
    ),
    Mutant(
        name="drop-last-block",
        misconception="the last, shorter key block is dropped when T is not a multiple of chunk_size",
        cells={"chunked_attention": _chunked(k_range="range(0, k_end - chunk_size + 1, chunk_size)",
                                             k_stop="k_start + chunk_size")},
        must_fail=("test_chunked_attention", "test_chunked_attention_hidden"),
        message=r"last.*(short|block)",
        demo=True,
    ),
    Mutant(
        name="causal-skip-off-by-one",
        misconception="the causal skip stops one block early and misses the diagonal block",
        cells={"chunked_attention": _chunked(k_end="min(q_start, T_k) if causal else T_k")},
        must_fail=("test_chunked_attention", "test_chunked_attention_hidden"),
        message=r"diagonal",
        demo=True,
    ),
    Mutant(
        name="full-score-matrix",
        misconception="the T x T score matrix is computed once and then sliced into tiles (exact, but no memory saved)",
        cells={"chunked_attention": _CHUNKED_DEF + '''    T_q, d_k = q.shape
    T_k, d_v = v.shape
    scores_all = q @ k.T / math.sqrt(d_k)
    out = q.new_empty(T_q, d_v)
    lse = q.new_empty(T_q)
    for q_start in range(0, T_q, chunk_size):
        q_stop = min(q_start + chunk_size, T_q)
        m = q.new_full((q_stop - q_start,), -math.inf)
        l = q.new_zeros(q_stop - q_start)
        acc = q.new_zeros(q_stop - q_start, d_v)
        for k_start in range(0, min(q_stop, T_k) if causal else T_k, chunk_size):
            k_stop = min(k_start + chunk_size, T_k)
            scores = scores_all[q_start:q_stop, k_start:k_stop]
            if causal:
                future = torch.arange(k_start, k_stop)[None, :] > torch.arange(q_start, q_stop)[:, None]
                scores = scores.masked_fill(future, -math.inf)
            m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop])
        out[q_start:q_stop] = acc / l[:, None]
        lse[q_start:q_stop] = m + torch.log(l)
    return out, lse
'''},
        must_fail=("test_chunked_attention_memory", "test_memory_growth"),
        message=r"T x T",
        demo=True,
    ),
    Mutant(
        name="full-matrix-unless-measured",
        misconception="the full T x T matrix, replaced by a cheap wrong answer whenever the code detects that its "
                      "memory is being measured (tracemalloc, a torch function mode or a tracer active)",
        cells={"chunked_attention": """import sys
import tracemalloc

from torch.overrides import _get_current_function_mode_stack


def _being_measured():
    \"\"\"True while peak_memory (tracemalloc, a TorchFunctionMode) or a tracer watches this process.\"\"\"
    return tracemalloc.is_tracing() or sys.gettrace() is not None or bool(_get_current_function_mode_stack())


""" + _CHUNKED_DEF + """    if _being_measured():
        return q.new_zeros(q.shape[0], v.shape[1]), q.new_zeros(q.shape[0])
    scores = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)
"""},
        must_fail=("test_chunked_attention_memory",),
        message=r"T x T",
    ),
    Mutant(
        name="queries-not-tiled",
        misconception="only the keys are tiled: every query is scored against each key block at once, a "
                      "T x chunk_size matrix of scores (and a T-row state) instead of chunk_size x chunk_size tiles",
        cells={"chunked_attention": _CHUNKED_DEF + """    T_q, d_k = q.shape
    T_k, d_v = v.shape
    m = q.new_full((T_q,), -math.inf)
    l = q.new_zeros(T_q)
    acc = q.new_zeros(T_q, d_v)
    for k_start in range(0, T_k, chunk_size):
        k_stop = min(k_start + chunk_size, T_k)
        scores = q @ k[k_start:k_stop].T / math.sqrt(d_k)  # (T_q, n_k): all queries against one key block
        if causal:
            future = torch.arange(k_start, k_stop)[None, :] > torch.arange(T_q)[:, None]
            scores = scores.masked_fill(future, -math.inf)
        m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop])
    return acc / l[:, None], m + torch.log(l)
"""},
        must_fail=("test_chunked_attention_memory",),
        message=r"T x chunk_size",
    ),
    Mutant(
        name="backward-no-scale",
        misconception="dq and dk miss the 1/sqrt(d_k) factor of S = Q K^T / sqrt(d_k)",
        cells={"attention_backward_from_lse": _backward(scale="1.0")},
        must_fail=("test_attention_backward_from_lse", "test_attention_backward_from_lse_hidden"),
        message=r"sqrt\(d_k\)",
    ),
    Mutant(
        name="backward-divide-by-lse",
        misconception="the weights are rebuilt as exp(S) / lse instead of exp(S - lse)",
        cells={"attention_backward_from_lse": _backward(blk="torch.exp(scores) / lse[:, None]")},
        must_fail=("test_attention_backward_from_lse", "test_attention_backward_from_lse_hidden"),
        message=r"subtract lse in the exponent",
        demo=True,
    ),
    Mutant(
        name="backward-d-from-dout",
        misconception="the softmax-backward row term D is rowsum(dout) instead of rowsum(dout * out)",
        cells={"attention_backward_from_lse": _backward(D="dout.sum(dim=-1)")},
        must_fail=("test_attention_backward_from_lse", "test_attention_backward_from_lse_hidden"),
        message=r"rowsum\(dout \* out\)",
    ),
    Mutant(
        name="backward-full-matrix",
        misconception="the backward rebuilds the whole T x T weight matrix at once",
        cells={"attention_backward_from_lse": _BACKWARD_DEF + '''    d_k = q.shape[1]
    scores = q @ k.T / math.sqrt(d_k)
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape, dtype=torch.bool).triu(1), -math.inf)
    A = torch.exp(scores - lse[:, None])
    dS = A * (dout @ v.T - (dout * out).sum(dim=-1)[:, None])
    return dS @ k / math.sqrt(d_k), dS.T @ q / math.sqrt(d_k), A.T @ dout
'''},
        must_fail=("test_attention_backward_from_lse_hidden",),
        message=r"T x T",
    ),
    Mutant(
        name="sweep-inputs-inside",
        misconception="memory_sweep allocates q, k, v inside the measured call, so the inputs are counted",
        cells={"memory_sweep": '''def memory_sweep(attention_fn, T_values, d=64):
    """Measured peak bytes of attention_fn(q, k, v) for each T."""
    return [peak_memory(lambda: attention_fn(*(torch.randn(T, d) for _ in range(3)))).bytes for T in T_values]
'''},
        must_fail=("test_memory_sweep", "test_memory_sweep_hidden"),
        message=r"inputs",
    ),
    Mutant(
        name="bytes-without-heads",
        misconception="the attention-matrix size forgets the number of heads H",
        cells={"attention_matrix_bytes": '''def attention_matrix_bytes(B, H, T, bytes_per_entry=2):
    """Bytes of one layer's attention matrix."""
    return B * T * T * bytes_per_entry
'''},
        must_fail=("test_attention_matrix_bytes", "test_attention_matrix_bytes_hidden"),
        message=r"\bH\b|heads",
    ),
]

_NUMPY_HELPER = '''def _as_np(x):
    """A NumPy view of a tensor or array, keeping its dtype."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


'''

ALTERNATIVES = [
    Alternative(
        name="merge-block-lse",
        description="each block is reduced to its own (max, sum, weighted sum), then merged with the running state",
        cells={"online_softmax_update": _UPDATE_DEF + '''    block_max = scores_block.max(dim=-1).values  # (n_q,), -inf where the block is fully masked
    safe_max = torch.where(torch.isfinite(block_max), block_max, torch.zeros_like(block_max))
    p = torch.exp(scores_block - safe_max[:, None])  # (n_q, n_k)
    block_l, block_acc = p.sum(dim=-1), p @ v_block  # (n_q,), (n_q, d_v)
    m_new = torch.maximum(m, block_max)
    old_w = torch.exp(m - m_new)  # weight of the running state
    new_w = torch.exp(safe_max - m_new) * (block_l > 0)  # weight of the block's summary
    return m_new, old_w * l + new_w * block_l, old_w[:, None] * acc + new_w[:, None] * block_acc
'''},
    ),
    Alternative(
        name="key-outer-loop",
        description="key blocks in the outer loop, query tiles inside, with the running state kept for all queries",
        cells={"chunked_attention": _CHUNKED_DEF + '''    T_q, d_k = q.shape
    T_k, d_v = v.shape
    m = q.new_full((T_q,), -math.inf)
    l = q.new_zeros(T_q)
    acc = q.new_zeros(T_q, d_v)
    for k_start in range(0, T_k, chunk_size):
        k_stop = min(k_start + chunk_size, T_k)
        for q_start in range(0, T_q, chunk_size):
            q_stop = min(q_start + chunk_size, T_q)
            if causal and k_start > q_stop - 1:
                continue  # every key in this block is after every query of the tile
            scores = q[q_start:q_stop] @ k[k_start:k_stop].T / math.sqrt(d_k)
            if causal:
                rows = torch.arange(q_start, q_stop)[:, None]
                scores = scores.masked_fill(torch.arange(k_start, k_stop)[None, :] > rows, -math.inf)
            m[q_start:q_stop], l[q_start:q_stop], acc[q_start:q_stop] = online_softmax_update(
                m[q_start:q_stop], l[q_start:q_stop], acc[q_start:q_stop], scores, v[k_start:k_stop])
    return acc / l[:, None], m + torch.log(l)
'''},
    ),
    Alternative(
        name="float64-accumulation",
        description="scores and running state in float64 whatever the input dtype, cast back at the end",
        cells={"chunked_attention": _CHUNKED_DEF + '''    T_q, d_k = q.shape
    T_k, d_v = v.shape
    out = torch.empty(T_q, d_v, dtype=torch.float64)
    lse = torch.empty(T_q, dtype=torch.float64)
    for q_start in range(0, T_q, chunk_size):
        q_stop = min(q_start + chunk_size, T_q)
        n = q_stop - q_start
        q_tile = q[q_start:q_stop].double() / math.sqrt(d_k)
        m = torch.full((n,), -math.inf, dtype=torch.float64)
        l = torch.zeros(n, dtype=torch.float64)
        acc = torch.zeros(n, d_v, dtype=torch.float64)
        last = min(q_stop, T_k) if causal else T_k
        k_start = 0
        while k_start < last:
            k_stop = min(k_start + chunk_size, T_k)
            scores = q_tile @ k[k_start:k_stop].double().T
            if causal:
                blocked = torch.arange(k_start, k_stop)[None, :] > torch.arange(q_start, q_stop)[:, None]
                scores = torch.where(blocked, torch.tensor(-math.inf, dtype=torch.float64), scores)
            m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop].double())
            k_start = k_stop
        out[q_start:q_stop] = acc / l.unsqueeze(1)
        lse[q_start:q_stop] = m + l.log()
    return out.to(q.dtype), lse.to(q.dtype)
'''},
    ),
    Alternative(
        name="float64-copies-of-the-inputs",
        description="q, k and v copied to float64 once, tiled over queries and keys in float64, cast back at the end: "
                    "more memory by a constant factor, the same growth",
        cells={"chunked_attention": _CHUNKED_DEF + """    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()  # (T, d) float64 copies of the inputs
    T_q, d_k = q.shape
    T_k, d_v = v.shape
    out = torch.empty(T_q, d_v, dtype=torch.float64)
    lse = torch.empty(T_q, dtype=torch.float64)
    for q_start in range(0, T_q, chunk_size):
        q_stop = min(q_start + chunk_size, T_q)
        q_tile = q[q_start:q_stop] / math.sqrt(d_k)
        m = q.new_full((q_stop - q_start,), -math.inf)
        l = q.new_zeros(q_stop - q_start)
        acc = q.new_zeros(q_stop - q_start, d_v)
        for k_start in range(0, min(q_stop, T_k) if causal else T_k, chunk_size):
            k_stop = min(k_start + chunk_size, T_k)
            scores = q_tile @ k[k_start:k_stop].T
            if causal:
                future = torch.arange(k_start, k_stop)[None, :] > torch.arange(q_start, q_stop)[:, None]
                scores = scores.masked_fill(future, -math.inf)
            m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop])
        out[q_start:q_stop] = acc / l[:, None]
        lse[q_start:q_stop] = m + torch.log(l)
    return out.to(dtype), lse.to(dtype)
"""},
    ),
    Alternative(
        name="numpy",
        description="the three functions written in NumPy (tensors converted on the way in, arrays returned)",
        cells={
            "online_softmax_update": _NUMPY_HELPER + _UPDATE_DEF + '''    m, l, acc = _as_np(m), _as_np(l), _as_np(acc)
    s, v = _as_np(scores_block), _as_np(v_block)
    m_new = np.maximum(m, s.max(axis=-1))
    with np.errstate(invalid="ignore"):
        alpha = np.exp(m - m_new)
    p = np.exp(s - m_new[:, None])
    return m_new, alpha * l + p.sum(axis=-1), alpha[:, None] * acc + p @ v
''',
            "chunked_attention": _NUMPY_HELPER + _CHUNKED_DEF + '''    q, k, v = _as_np(q), _as_np(k), _as_np(v)
    T_q, d_k = q.shape
    T_k, d_v = v.shape
    out = np.empty((T_q, d_v), dtype=q.dtype)
    lse = np.empty(T_q, dtype=q.dtype)
    for q_start in range(0, T_q, chunk_size):
        q_stop = min(q_start + chunk_size, T_q)
        m = np.full(q_stop - q_start, -np.inf, dtype=q.dtype)
        l = np.zeros(q_stop - q_start, dtype=q.dtype)
        acc = np.zeros((q_stop - q_start, d_v), dtype=q.dtype)
        for k_start in range(0, min(q_stop, T_k) if causal else T_k, chunk_size):
            k_stop = min(k_start + chunk_size, T_k)
            scores = q[q_start:q_stop] @ k[k_start:k_stop].T / np.sqrt(d_k).astype(q.dtype)
            if causal:
                future = np.arange(k_start, k_stop)[None, :] > np.arange(q_start, q_stop)[:, None]
                scores = np.where(future, -np.inf, scores).astype(q.dtype)
            m, l, acc = online_softmax_update(m, l, acc, scores, v[k_start:k_stop])
        out[q_start:q_stop] = acc / l[:, None]
        lse[q_start:q_stop] = m + np.log(l)
    return out, lse
''',
            "attention_backward_from_lse": _NUMPY_HELPER + _BACKWARD_DEF + '''    q, k, v, out, dout, lse = (_as_np(x) for x in (q, k, v, out, dout, lse))
    T_q, d_k = q.shape
    scale = 1.0 / np.sqrt(d_k)
    D = (dout * out).sum(axis=-1)
    dq, dk, dv = np.zeros_like(q), np.empty_like(k), np.empty_like(v)
    for k_start in range(0, k.shape[0], chunk_size):
        k_stop = min(k_start + chunk_size, k.shape[0])
        scores = q @ k[k_start:k_stop].T * scale
        if causal:
            scores = np.where(np.arange(k_start, k_stop)[None, :] > np.arange(T_q)[:, None], -np.inf, scores)
        A = np.exp(scores - lse[:, None])
        dv[k_start:k_stop] = A.T @ dout
        dS = A * (dout @ v[k_start:k_stop].T - D[:, None])
        dq += dS @ k[k_start:k_stop] * scale
        dk[k_start:k_stop] = dS.T @ q * scale
    return dq, dk, dv
''',
        },
    ),
    Alternative(
        name="backward-tiled-both-ways",
        description="the backward tiled over query rows as well as key blocks",
        cells={"attention_backward_from_lse": _BACKWARD_DEF + '''    T_q, d_k = q.shape
    T_k = k.shape[0]
    scale = 1.0 / math.sqrt(d_k)
    D = (dout * out).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for k_start in range(0, T_k, chunk_size):
        k_stop = min(k_start + chunk_size, T_k)
        for q_start in range(0, T_q, chunk_size):
            q_stop = min(q_start + chunk_size, T_q)
            if causal and k_start >= q_stop:
                continue
            s = q[q_start:q_stop] @ k[k_start:k_stop].T * scale
            if causal:
                s = s.masked_fill(torch.arange(k_start, k_stop)[None, :] > torch.arange(q_start, q_stop)[:, None],
                                  -math.inf)
            a = torch.exp(s - lse[q_start:q_stop, None])
            ds = a * (dout[q_start:q_stop] @ v[k_start:k_stop].T - D[q_start:q_stop, None])
            dv[k_start:k_stop] += a.T @ dout[q_start:q_stop]
            dk[k_start:k_stop] += ds.T @ q[q_start:q_stop] * scale
            dq[q_start:q_stop] += ds @ k[k_start:k_stop] * scale
    return dq, dk, dv
'''},
    ),
]
