"""Lab 2's misconception mutants and alternative correct solutions (see mlbook.catalogue)."""

from ..kit import Alternative, mutants_of, patch

# The given signature and docstring of each answer cell, for alternatives that write the body
# another way (mutants are patches of the reference answers of source/lab02_scaling/lab02_scaling.ipynb).
_SPREAD_DOC = '''def dot_product_std(d_k, n_pairs, rng):
    """Standard deviation of n_pairs dot products of unit-variance d_k-vectors drawn from rng."""
'''
_SCORES_DOC = '''def attention_scores(Q, K, scaled=True):
    """(..., T_q, d_k) x (..., T_k, d_k) -> (..., T_q, T_k) scores, divided by sqrt(d_k) when scaled."""
'''
_ENTROPY_DOC = '''def row_entropy(weights, base):
    """(..., T_k) weights -> (...) entropy of each row in the given log base, 0 log 0 = 0."""
'''
_MEAN_KEYS_DOC = '''def mean_effective_keys(d_k, rng, scaled=True, n_draws=40, n_tokens=8, n_keys=None):
    """Effective keys averaged over every row of n_draws random (n_tokens, d_k) Q and (n_keys, d_k) K."""
'''
_JACOBIAN_DOC = '''def softmax_jacobian(a):
    """(..., T) softmax rows -> (..., T, T) Jacobians diag(a) - a a^T."""
'''

# Rows are (name, misconception, edit, what the failure messages must match); mutants_of makes
# each row a mutant that the cell's visible test and its hidden partner must both catch.
_NO_CHANGE_OF_BASE = patch(" / math.log(base)", "")  # the entropy's change of base, which both unit mistakes leave out

# Entropy (listed first: the demo class takes the first demo mutants, in this order).
MUTANTS = mutants_of("row_entropy", "test_row_entropy", [
    ("entropy-in-nats", "entropy in nats reported where bits are asked: the base argument is ignored",
     _NO_CHANGE_OF_BASE, r"in nats where bits were asked"),
    ("entropy-in-bits", "entropy in bits reported where nats are asked: log2 whatever the base",
     (patch("np.log(np.where", "np.log2(np.where"), _NO_CHANGE_OF_BASE), r"in bits where nats were asked"),
], demo={"entropy-in-nats"})
# The scores. The collapse experiment calls them, but its hidden check lends it the grader's (one mistake, one loss).
MUTANTS += mutants_of("attention_scores", "test_attention_scores", [
    ("scale-by-dk", "scores divided by d_k instead of sqrt(d_k)", patch("scores / math.sqrt(d_k)", "scores / d_k"),
     r"divided by d_k instead of sqrt\(d_k\)"),
], demo={"scale-by-dk"})

# The spread of q . k.
MUTANTS += mutants_of("dot_product_std", "test_dot_product_std", [
    ("std-wrong-axis", "dot products summed over the pairs axis, so the spread is taken over the wrong axis",
     patch("dots = (q * k).sum(axis=-1)  # (n_pairs,)", "dots = (q * k).sum(axis=0)  # (d_k,)"), r"wrong axis"),
    ("std-of-products", "the spread of single products q_c k_c measured instead of the spread of their sum",
     patch("float(dots.std())", "float((q * k).std())"), r"single product"),  # the sums computed, not used
    ("global-random-state", "random numbers drawn from np.random's global state, ignoring the rng argument",
     patch("rng.standard_normal(", "np.random.standard_normal(", count=2), r"rng argument"),
], demo={"std-wrong-axis"})
# One query drawn once and reused for every key measures |q|, near sqrt(d_k) for a large d_k: the visible
# d_k = 16 and 64 can pass it, the hidden check's repeated seeds at d_k = 4 show the scatter.
MUTANTS += mutants_of("dot_product_std", ("test_dot_product_std_hidden",), [
    ("std-one-query-reused", "one query drawn once and reused for every key, so the pairs are not independent",
     patch("q = rng.standard_normal((n_pairs, d_k))", "q = rng.standard_normal((1, d_k))"),
     r"not independent|standard errors away"),
])

# Effective keys.
MUTANTS += mutants_of("effective_keys", "test_effective_keys", [
    ("effective-keys-exp-bits", "effective keys computed as exp of an entropy in bits",
     patch("2.0 ** row_entropy(weights, 2)", "np.exp(row_entropy(weights, 2))"), r"exp of an entropy in bits"),
], demo={"effective-keys-exp-bits"})
MUTANTS += mutants_of("mean_effective_keys", "test_mean_effective_keys", [
    ("scaled-flag-ignored", "mean_effective_keys always uses scaled scores, whatever `scaled` says",
     patch("attention_scores(Q, K, scaled=scaled)", "attention_scores(Q, K)"),
     r"scaled=False was ignored|value matches scaled="),
])
# The softmax over the queries: at a large unscaled d_k it agrees with the right answer (rows are one-hot
# either way), so only the diagnosis over every case names it (the visible d_k = 16 cannot tell).
MUTANTS += mutants_of("mean_effective_keys", ("test_mean_effective_keys_hidden",), [
    ("mek-softmax-over-queries", "the collapse experiment's softmax taken over the queries (axis 1), not the keys",
     patch("scaled=scaled)), axis=-1)", "scaled=scaled)), axis=1)"), r"over the queries"),
])
# Q and K swapped in the scores: with as many keys as queries K Q^T has the law of Q K^T (the visible
# test cannot tell), so the hidden check draws n_keys = n_tokens / 2 or 2 n_tokens, where the rows of
# K Q^T run over the wrong count. Ignoring n_keys is caught there too.
MUTANTS += mutants_of("mean_effective_keys", ("test_mean_effective_keys_hidden",), [
    ("mek-scores-swapped", "the collapse experiment's scores computed as attention_scores(K, Q): rows over queries",
     patch("attention_scores(Q, K, scaled=scaled)", "attention_scores(K, Q, scaled=scaled)"), r"attention_scores\(K, Q\)"),
    ("mek-n-keys-ignored", "the collapse experiment draws as many keys as queries, ignoring n_keys",
     patch("(n_draws, n_tokens if n_keys is None else n_keys, d_k)", "(n_draws, n_tokens, d_k)"), r"with n_tokens rows"),
])
# Another measure of spread, right at both ends (uniform and one-hot rows), which the visible test checks.
MUTANTS += mutants_of("effective_keys", ("test_effective_keys_hidden",), [
    ("effective-keys-inverse-participation", "effective keys computed as 1 / sum a^2 instead of 2 ** H_bits",
     patch("return 2.0 ** row_entropy(weights, 2)", "return 1.0 / (np.asarray(weights) ** 2).sum(axis=-1)"),
     r"inverse participation"),
])

# The softmax Jacobian.
MUTANTS += mutants_of("softmax_jacobian", "test_softmax_jacobian", [
    ("jacobian-elementwise-square", "a a^T written as a * a, so each row of the Jacobian subtracts a_j^2",
     patch("outer = a[..., :, None] * a[..., None, :]  # (..., T, T): a_i a_j",
           "outer = a[..., None, :] * a[..., None, :]  # (..., 1, T): a_j a_j"), r"a \* a is elementwise"),
])

# A learned temperature.
MUTANTS += mutants_of("learn_temperature", "test_learn_temperature", [
    ("temperature-steps-on-tau", "gradient steps taken on tau itself instead of on u = log tau", (
        patch("u = torch.zeros((), dtype=torch.float64, requires_grad=True)",
              "u = torch.ones((), dtype=torch.float64, requires_grad=True)"),
        patch("s0 / torch.exp(u)", "s0 / u"),
        patch("float(torch.exp(u.detach()))", "float(u.detach())"),
    ), r"on tau itself"),
    ("temperature-without-sqrt-dk", "the learned temperature replaces sqrt(d_k) instead of multiplying it",
     patch("s0 = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])", "s0 = q @ k.transpose(-2, -1)"),
     r"sqrt\(d_k\) was left out"),
    ("temperature-uphill", "the gradient step on log tau taken uphill (u + lr * gradient)",
     patch("u -= lr * grad", "u += lr * grad"), r"uphill"),
])

# QK-norm.
MUTANTS += mutants_of("qk_norm_scores", "test_qk_norm_scores", [
    ("qknorm-across-tokens", "QK-norm normalising each component across the tokens instead of each vector",
     patch("axis=-1, keepdims=True", "axis=-2, keepdims=True", count=2), r"across the tokens"),
    ("qknorm-keeps-sqrt-dk", "QK-norm cosines divided by sqrt(d_k) as well as multiplied by the gain",
     patch("return gain * (Q_unit @ K_unit.swapaxes(-2, -1))",
           "return gain * (Q_unit @ K_unit.swapaxes(-2, -1)) / np.sqrt(Q.shape[-1])"), r"divided by sqrt\(d_k\)"),
    ("qknorm-raw-keys", "QK-norm normalising the queries only, so scores still grow with |k|",
     patch("K_unit = K / np.linalg.norm(K, axis=-1, keepdims=True)", "K_unit = K"), r"normalise both Q and K|keys too"),
])

# Extension: Nadaraya-Watson.
MUTANTS += mutants_of("nadaraya_watson", "test_nadaraya_watson", [
    ("nw-bandwidth-unsquared", "Gaussian kernel exp(-d^2 / (2h)): the bandwidth not squared",
     patch("(2 * bandwidth**2)", "(2 * bandwidth)"), r"bandwidth was not\s+squared"),
    ("nw-weighted-sum", "kernel weights not normalised: a weighted sum instead of an average",
     patch("weights = softmax(-sq_dist / (2 * bandwidth**2), axis=-1)", "weights = np.exp(-sq_dist / (2 * bandwidth**2))"),
     r"not normalised"),
    ("nw-over-queries", "kernel weights normalised over the query points instead of the examples",
     patch("(2 * bandwidth**2), axis=-1)", "(2 * bandwidth**2), axis=0)"), r"query points"),
])
MUTANTS += mutants_of("linear_attention_step", "test_linear_attention_step", [
    ("linear-state-replaced", "the linear-attention state replaced by the new token's product instead of accumulated",
     patch("S = S + np.outer(phi_k, v)", "S = np.outer(phi_k, v)"), r"do not replace"),
    ("linear-no-normaliser", "linear attention without the normaliser phi(q) . z",
     patch("out = phi_q @ S / (phi_q @ z)", "out = phi_q @ S"), r"divided by"),
    ("linear-read-before-update", "the output read from the state before the new token joined it (no self-attention)",
     patch("""    S = S + np.outer(phi_k, v)  # (d_k, d_v): this token's key-value product joins the sum
    z = z + phi_k  # (d_k,)
    phi_q = elu_feature(q)  # (d_k,)
    out = phi_q @ S / (phi_q @ z)  # (d_v,)
""", """    phi_q = elu_feature(q)  # (d_k,)
    out = phi_q @ S / (phi_q @ z)  # (d_v,)
    S = S + np.outer(phi_k, v)  # (d_k, d_v)
    z = z + phi_k  # (d_k,)
"""), r"before the state was updated"),
    ("linear-query-raw", "the feature map applied to the key only, not to the query",
     patch("phi_q = elu_feature(q)", "phi_q = q"), r"to the query"),
    ("linear-relu-feature", "linear attention's key features taken as relu(k) + 1 instead of elu(k) + 1",
     patch("phi_k = elu_feature(k)", "phi_k = np.maximum(k, 0.0) + 1.0"), r"elu_feature"),
])


ALTERNATIVES = [
    Alternative(name="float32-and-epsilons",
                description="float32 torch for the scores, the kernel regression and the linear-attention step; "
                            "an epsilon added to the norms (QK-norm) and to the normaliser phi(q) . z",
                cells={
        "attention_scores": '''import torch

def attention_scores(Q, K, scaled=True):
    q = torch.as_tensor(np.asarray(Q), dtype=torch.float32)
    k = torch.as_tensor(np.asarray(K), dtype=torch.float32)
    s = torch.matmul(q, k.mT)
    return s * q.size(-1) ** -0.5 if scaled else s
''',
        "qk_norm_scores": (patch("np.linalg.norm(Q, axis=-1, keepdims=True)", "(np.linalg.norm(Q, axis=-1, keepdims=True) + 1e-6)"),
                           patch("np.linalg.norm(K, axis=-1, keepdims=True)", "(np.linalg.norm(K, axis=-1, keepdims=True) + 1e-6)")),
        "nadaraya_watson": '''def nadaraya_watson(x_query, x_train, y_train, bandwidth):
    xq, xk = np.asarray(x_query, np.float32), np.asarray(x_train, np.float32)
    s = (xq @ xk.T - 0.5 * (xk ** 2).sum(-1)[None, :]) / bandwidth ** 2  # the square expanded; |x|^2 cancels
    return softmax(s, axis=-1) @ np.asarray(y_train, np.float32)
''',
        "linear_attention_step": '''import torch
import torch.nn.functional as F

def linear_attention_step(state, q, k, v):
    S, z = (torch.as_tensor(np.asarray(a), dtype=torch.float32) for a in state)
    q, k, v = (torch.as_tensor(np.asarray(a), dtype=torch.float32) for a in (q, k, v))
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = S + fk[:, None] * v[None, :]
    z = z + fk
    return (fq @ S) / (fq @ z + 1e-6), (S, z)
''',
    }),
    Alternative(name="scipy-stats-entropy",
                description="row_entropy with scipy.stats.entropy (SciPy has no scipy.special.entropy)",
                cells={"row_entropy": _ENTROPY_DOC + '''    from scipy.stats import entropy

    return entropy(weights, base=base, axis=-1)
'''}),
    Alternative(name="log-epsilon", description="row_entropy with an epsilon of 1e-8 inside the log, and "
                "learn_temperature in float32 (torch's default dtype)", cells={
        "row_entropy": _ENTROPY_DOC + '''    return -np.sum(weights * np.log(weights + 1e-8), axis=-1) / np.log(base)
''',
        "learn_temperature": patch("dtype=torch.float64", "dtype=torch.float32", count=2),
    }),
    Alternative(name="scipy-special-entr", description="row_entropy with scipy.special.entr, which defines 0 log 0 = 0",
                cells={"row_entropy": _ENTROPY_DOC + '''    from scipy.special import entr

    return entr(weights).sum(axis=-1) / np.log(base)
'''}),
    Alternative(name="torch",
                description="torch instead of numpy for the spread, the scores, the entropy, the Jacobian and "
                            "the linear-attention step, returning tensors",
                cells={
        "dot_product_std": '''import torch

def dot_product_std(d_k, n_pairs, rng):
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    q = torch.randn(n_pairs, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(n_pairs, d_k, generator=gen, dtype=torch.float64)
    return (q * k).sum(dim=-1).std()  # a 0-d tensor: one number, as the wire must keep it
''',
        "attention_scores": '''import torch

def attention_scores(Q, K, scaled=True):
    q, k = torch.as_tensor(Q), torch.as_tensor(K)
    scores = q @ k.transpose(-2, -1)
    return scores / q.shape[-1] ** 0.5 if scaled else scores
''',
        "row_entropy": '''import math
import torch

def row_entropy(weights, base):
    w = torch.as_tensor(weights, dtype=torch.float64)
    return -torch.special.xlogy(w, w).sum(dim=-1) / math.log(base)
''',
        "softmax_jacobian": '''import torch

def softmax_jacobian(a):
    a = torch.as_tensor(a, dtype=torch.float64)
    return torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)
''',
    }),
    Alternative(name="exp-of-nats", description="effective keys as exp of the entropy in nats",
                cells={"effective_keys": patch("2.0 ** row_entropy(weights, 2)",
                                               "np.exp(row_entropy(weights, np.e))")}),
    Alternative(name="loops",
                description="a loop over draws for the collapse experiment and over pairs for the spread",
                cells={
        "dot_product_std": _SPREAD_DOC + '''    dots = []
    for _ in range(n_pairs):
        q = rng.normal(0.0, 1.0, size=d_k)
        k = rng.normal(0.0, 1.0, size=d_k)
        dots.append(float(np.dot(q, k)))
    return float(np.std(dots, ddof=1))
''',
        "mean_effective_keys": _MEAN_KEYS_DOC + '''    per_draw = []
    for _ in range(n_draws):
        Q = rng.standard_normal((n_tokens, d_k))
        K = rng.standard_normal((n_keys or n_tokens, d_k))
        weights = softmax(np.asarray(attention_scores(Q, K, scaled=scaled)), axis=-1)
        per_draw.append(np.asarray(effective_keys(weights)).mean())
    return float(np.mean(per_draw))
''',
    }),
    Alternative(name="einsum-and-log-where",
                description="einsum for the scores, a masked log for the entropy, np.diag-free batched Jacobian "
                            "via einsum",
                cells={
        "attention_scores": _SCORES_DOC + '''    scores = np.einsum("...qd,...kd->...qk", Q, K)
    return scores / np.sqrt(Q.shape[-1]) if scaled else scores
''',
        "row_entropy": _ENTROPY_DOC + '''    w = np.asarray(weights, dtype=float)
    logs = np.log(w, out=np.zeros_like(w), where=w > 0) / np.log(base)
    return -np.sum(w * logs, axis=-1)
''',
        "softmax_jacobian": _JACOBIAN_DOC + '''    eye = np.eye(a.shape[-1])
    return np.einsum("...i,ij->...ij", a, eye) - np.einsum("...i,...j->...ij", a, a)
''',
    }),
    Alternative(name="sgd-normalize-logsumexp",
                description="learn_temperature with torch.optim.SGD on a float32 parameter; QK-norm with "
                            "torch.nn.functional.normalize; the kernel weights through scipy's logsumexp",
                cells={
        "learn_temperature": """def learn_temperature(Q, K, V, Y, steps=200, lr=1.0):
    q, k, v, y = (torch.tensor(np.asarray(a), dtype=torch.float32) for a in (Q, K, V, Y))
    log_tau = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([log_tau], lr=lr)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(torch.softmax(scores * torch.exp(-log_tau), dim=-1) @ v, y)
        loss.backward()
        opt.step()
    return log_tau.exp().item()
""",
        "qk_norm_scores": """import torch.nn.functional as F

def qk_norm_scores(Q, K, gain):
    q = F.normalize(torch.as_tensor(np.asarray(Q)), dim=-1)
    k = F.normalize(torch.as_tensor(np.asarray(K)), dim=-1)
    return gain * q @ k.transpose(-2, -1)
""",
        "nadaraya_watson": """from scipy.special import logsumexp

def nadaraya_watson(x_query, x_train, y_train, bandwidth):
    logk = -np.sum((x_query[:, None] - x_train[None]) ** 2, axis=2) / (2 * bandwidth * bandwidth)
    return np.exp(logk - logsumexp(logk, axis=1, keepdims=True)) @ y_train
""",
        "linear_attention_step": """import torch
import torch.nn.functional as F

def linear_attention_step(state, q, k, v):
    S, z = (torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in state)
    q, k, v = (torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in (q, k, v))
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = S + torch.outer(fk, v)
    z = z + fk
    return (fq @ S) / torch.dot(fq, z), (S, z)
""",
    }),
    Alternative(name="numpy-gradient-and-loops",
                description="learn_temperature with the gradient written out in NumPy; cosines as the dot product "
                            "over the product of the norms; Nadaraya-Watson one query at a time with cdist; the "
                            "linear-attention step in loops, elu + 1 as exp(min(x, 0)) + max(x, 0), the state a list",
                cells={
        "learn_temperature": """def learn_temperature(Q, K, V, Y, steps=200, lr=1.0):
    s0 = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    u = 0.0
    for _ in range(steps):
        s = s0 * np.exp(-u)
        a = softmax(s, axis=-1)
        d_out = 2 * (a @ V - Y) / Y.size
        d_a = d_out @ np.swapaxes(V, -1, -2)
        d_s = a * (d_a - np.sum(d_a * a, axis=-1, keepdims=True))
        u -= lr * np.sum(d_s * -s)
    return float(np.exp(u))
""",
        "qk_norm_scores": """def qk_norm_scores(Q, K, gain):
    dots = np.einsum("...qd,...kd->...qk", Q, K)
    norms = np.sqrt(np.einsum("...qd,...qd->...q", Q, Q))[..., :, None] * np.sqrt(np.einsum("...kd,...kd->...k", K, K))[..., None, :]
    return gain * dots / norms
""",
        "nadaraya_watson": """from scipy.spatial.distance import cdist

def nadaraya_watson(x_query, x_train, y_train, bandwidth):
    out = []
    for row in cdist(x_query, x_train, "sqeuclidean"):
        s = -row / (2 * bandwidth ** 2)
        w = np.exp(s - s.max())
        out.append(w @ y_train / w.sum())
    return np.array(out)
""",
        "linear_attention_step": """def linear_attention_step(state, q, k, v):
    S = np.array(state[0], dtype=float)
    z = np.array(state[1], dtype=float)
    fk = np.exp(np.minimum(k, 0)) + np.maximum(k, 0)
    fq = np.exp(np.minimum(q, 0)) + np.maximum(q, 0)
    for a in range(len(fk)):
        z[a] += fk[a]
        for b in range(len(v)):
            S[a, b] += fk[a] * v[b]
    num = np.einsum("a,ab->b", fq, S)
    return num / np.einsum("a,a->", fq, z), [S, z]
""",
    }),
]
