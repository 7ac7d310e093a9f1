"""Lab 1's misconception mutants and alternative correct solutions (see mlbook.catalogue)."""

from ..kit import Alternative, mutants_of, patch

# Every mutant is an edit of a reference answer of source/lab01_hand_attention/lab01_hand_attention.ipynb:
# each patch is the line a student with that misconception writes differently. Rows are
# (name, misconception, edit, what the failure messages must match); mutants_of makes each row a
# mutant that the cell's visible test and its hidden partner must both catch.
# 2: softmax_rows.
MUTANTS = mutants_of("softmax_rows", "test_softmax_rows", [
    ("softmax-over-queries", "softmax taken over the query axis (axis 0) instead of over the keys",
     patch("axis=-1", "axis=0", count=2), r"axis|columns"),  # the max and the sum, both over columns
    ("no-max-subtraction", "softmax without subtracting the row max: exp overflows to nan for large scores",
     patch("np.exp(shifted)", "np.exp(S)"), r"overflow|subtract.*max"),  # the shifted scores computed, not used
], demo={"softmax-over-queries", "no-max-subtraction"})

# 4: attention, its scale and its mask.
MUTANTS += mutants_of("attention", "test_attention", [
    ("divide-by-dk", "scores divided by d_k instead of sqrt(d_k)",
     patch("Q @ K.T / np.sqrt(d_k)", "Q @ K.T / d_k"), r"d_k instead of sqrt|not by d_k"),
    ("mask-after-softmax", "mask applied to the weights after the softmax, so rows no longer sum to 1", (
        patch("    if mask is not None:\n"
              "        scores = np.where(mask, scores, -np.inf)  # (T_q, T_k): forbidden keys drop out of the softmax\n", ""),
        patch("    out = weights @ V",
              "    if mask is not None:\n"
              "        weights = weights * mask  # (T_q, T_k): forbidden keys get weight 0\n"
              "    out = weights @ V"),
    ), r"after the softmax"),
    ("inverted-mask", "mask polarity inverted: True treated as 'blocked'",
     patch("np.where(mask, scores, -np.inf)", "np.where(mask, -np.inf, scores)"), r"polarity|True where attention is ALLOWED"),
], demo={"divide-by-dk", "mask-after-softmax"})

# 1a: numbers typed by hand, every step after the raw scores computed without the scale; the scaled
# scores divided by their sum, a normalisation that is not a softmax.
MUTANTS += mutants_of("hand_token0", ("test_hand_token0_hidden",), [
    ("hand-unscaled", "hand-worked weights computed from unscaled scores",
     (patch("[0.7071, 0.7071, 0.0]", "[1.0, 1.0, 0.0]"), patch("[0.4011, 0.4011, 0.1978]", "[0.4223, 0.4223, 0.1554]")),
     r"sqrt"),
    ("hand-weights-sum-normalised", "hand-worked weights taken as the scaled scores divided by their sum, not a softmax",
     patch("[0.4011, 0.4011, 0.1978]", "[0.5, 0.5, 0.0]"), r"divided by their sum.*softmax"),
])

# The pair returned in the other order: the visible test sees outputs whose rows do not sum to 1; the hidden
# check, whose T_k differs from d_v, names the swap.
MUTANTS += mutants_of("attention", ("test_attention_hidden",), [
    ("attention-weights-first", "attention returns (weights, out) instead of (out, weights)",
     patch("return out, weights", "return weights, out"), r"swapped.*\(out, weights\)"),
])

# 5: row_attention, the one-query attention behind the worked examples.
MUTANTS += mutants_of("row_attention", "test_worked_examples", [
    ("row-divide-by-dk", "one query's scores divided by d_k instead of sqrt(d_k)",
     patch("scores / np.sqrt(q.shape[-1])", "scores / q.shape[-1]"), r"by 1/sqrt\(4\)|d_k instead of sqrt"),
    ("row-scale-always", "the scale applied even when scaled=False",
     patch("    if scaled:\n        scores = scores / np.sqrt(q.shape[-1])", "    scores = scores / np.sqrt(q.shape[-1])"),
     r"[Ww]ithout the scale|scaled=False"),
    ("row-scale-inverted", "the flag read backwards: raw scores when scaled=True",
     patch("if scaled:", "if not scaled:"), r"scaled by 1/sqrt|left raw"),
    ("row-mix-scores", "the output mixes the values with the scores instead of the softmax weights",
     patch("return weights @ V, weights", "return scores @ V, weights"), r"with those weights|softmax weights"),
    ("row-scale-by-keys", "the scale taken from the number of keys T_k instead of the width d_k",
     patch("np.sqrt(q.shape[-1])", "np.sqrt(K.shape[0])"), r"sqrt\(4\)|number of keys"),
])

# 6: the value range taken over the whole of V, not per column: only outputs that leave their own column's
# range while staying inside V's overall range tell it apart, which the hidden check builds.
MUTANTS += mutants_of("property_checks", ("test_property_checks_hidden",), [
    ("range-of-whole-values", "outputs compared with the min and max of the whole of V instead of each column's",
     patch("lo, hi = V.min(axis=0), V.max(axis=0)  # (d_v,), (d_v,)", "lo, hi = V.min(), V.max()  # (), ()"),
     r"same column|whole of V"),
])

# 6: rows_are_distributions, the four ways a property check passes rows that are no distributions: the total
# or the mean of the row sums checked (one row's excess cancels another's shortfall, which the hidden check
# builds), non-negativity not checked, and violations looked for rather than the property (NaN compares False).
MUTANTS += mutants_of("property_checks", ("test_property_checks_hidden",), [
    ("rows-total-only", "only the total of the weights checked (T_q), not each row's sum",
     patch("np.allclose(weights.sum(axis=-1), 1.0, atol=atol)", "np.isclose(weights.sum(), len(weights), atol=atol)"),
     r"on its own|total or the mean"),
    ("rows-mean-only", "only the mean of the row sums checked, not each row's sum",
     patch("np.allclose(weights.sum(axis=-1), 1.0, atol=atol)", "np.isclose(weights.sum(axis=-1).mean(), 1.0, atol=atol)"),
     r"on its own|total or the mean"),
    ("rows-no-negativity", "only the row sums checked: a negative weight in a row summing to 1 passes",
     patch("np.all(weights >= -atol) and ", ""), r"negative"),
    ("rows-nan-accepted", "violations looked for (any below -atol, any sum off by more than atol): NaN rows pass",
     patch("return bool(np.all(weights >= -atol) and np.allclose(weights.sum(axis=-1), 1.0, atol=atol))",
           "return bool(not np.any(weights < -atol) and not np.any(np.abs(weights.sum(axis=-1) - 1.0) > atol))"),
     r"NaN"),
])

# 7: token importance, read off the attention weights instead of measured by masking (the
# early return leaves the masking loop unused).
MUTANTS += mutants_of("token_importance", "test_token_importance", [
    ("importance-is-attention", "token importance read off the attention weights instead of measured by masking",
     patch("    p_full, _ = classifier.predict(words)\n",
           "    _, weights = classifier.predict(words)\n    return np.asarray(weights)  # (T,): the attention weights\n"),
     r"attention weights|not the attention"),
])

# 7b: gradient x input.
MUTANTS += mutants_of("gradient_x_input", "test_gradient_x_input", [
    ("gxi-of-probability", "gradient x input taken of the probability (after the sigmoid) instead of the logit",
     patch("logit = refund_logit(classifier, x)  # (): before the sigmoid",
           "logit = torch.sigmoid(refund_logit(classifier, x))  # (): the probability"), r"gradient of the probability"),
    ("gxi-gradient-only", "the gradient alone (a saliency), not multiplied by the input",
     patch("(grad * x).sum(dim=-1)", "grad.sum(dim=-1)"), r"multiply it by the input|x_i \. grad_i"),
    ("gxi-norm", "the norm of x_i * grad_i, which loses the sign of the attribution",
     patch("(grad * x).sum(dim=-1)", "(grad * x).norm(dim=-1)"), r"norm"),
])

# 7c: Spearman's rank correlation: the three classic ways of getting ranks wrong.
MUTANTS += mutants_of("spearman", "test_spearman", [
    ("spearman-of-values", "Pearson correlation of the values instead of their ranks",
     patch("ranks(a) - (len(a) + 1) / 2, ranks(b) - (len(b) + 1) / 2",
           "np.asarray(a, dtype=float) - np.mean(a), np.asarray(b, dtype=float) - np.mean(b)"),
     r"Pearson correlation of the values"),
    ("spearman-ties-ordinal", "tied values ranked by position instead of sharing their average rank",
     patch("            r[tied] = r[tied].mean()  # tied values share their average rank\n", ""),
     r"tied values got different ranks"),
    ("spearman-argsort-once", "np.argsort's output (the order) taken as the ranks",
     patch('r[np.argsort(x, kind="stable")] = np.arange(1, len(x) + 1)', 'r[:] = np.argsort(x, kind="stable") + 1'),
     r"not the ranks"),
])

# 7c: a constant array, whose rho is undefined (the lab asks for nan): 0 returned instead ("no relation").
MUTANTS += mutants_of("spearman", ("test_spearman_hidden",), [
    ("spearman-constant-wrong", "rho of a constant array taken as 0 instead of nan (undefined)",
     patch('else float("nan")', "else 0.0"), r"constant array.*nan"),
])

ALTERNATIVES = [
    Alternative(name="numpy-verdicts-float32-projections",
                description="property checks returning NumPy booleans (np.all, &) rather than Python bools; the "
                            "projections computed in float32",
                cells={
        "project_qkv": '''def project_qkv(X, W_q, W_k, W_v):
    X = np.asarray(X, dtype=np.float32)
    return tuple(X @ np.asarray(W, dtype=np.float32) for W in (W_q, W_k, W_v))
''',
        "property_checks": '''def rows_are_distributions(weights, atol=1e-6):
    w = np.asarray(weights, dtype=float)
    return np.all(w >= -atol) & np.all(np.abs(w.sum(axis=-1) - 1) <= atol)


def outputs_in_value_range(out, V, atol=1e-6):
    out, V = np.asarray(out, dtype=float), np.asarray(V, dtype=float)
    return np.all(out >= V.min(axis=0) - atol) and np.all(out <= V.max(axis=0) + atol)
''',
    }),
    Alternative(name="einsum", description="einsum for every product", cells={
        "project_qkv": '''def project_qkv(X, W_q, W_k, W_v):
    return (np.einsum("td,dk->tk", X, W_q), np.einsum("td,dk->tk", X, W_k), np.einsum("td,dv->tv", X, W_v))
''',
        "attention": '''def attention(Q, K, V, mask=None):
    scores = np.einsum("qd,kd->qk", Q, K) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax_rows(scores)
    return np.einsum("qk,kv->qv", weights, V), weights
''',
        "row_attention": '''def row_attention(q, K, V, scaled=True):
    scores = np.einsum("kd,d->k", np.asarray(K, dtype=float), np.asarray(q, dtype=float))
    if scaled:
        scores = scores / np.sqrt(len(q))
    weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    return np.einsum("k,kv->v", weights, np.asarray(V, dtype=float)), weights
''',
    }),
    Alternative(name="torch", description="torch for the softmax and attention, returning tensors", cells={
        "softmax_rows": '''import torch

def softmax_rows(S):
    return torch.softmax(torch.as_tensor(S, dtype=torch.float64), dim=-1).numpy()
''',
        "attention": '''import torch
import torch.nn.functional as F

def attention(Q, K, V, mask=None):
    q, k, v = (torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in (Q, K, V))
    scores = q @ k.T / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~torch.as_tensor(mask), float("-inf"))
    weights = F.softmax(scores, dim=-1)
    return weights @ v, weights
''',
        "row_attention": '''import torch

def row_attention(q, K, V, scaled=True):
    q = torch.as_tensor(np.asarray(q), dtype=torch.float64)[None, :]
    if not scaled:
        q = q * q.shape[-1] ** 0.5  # cancels the division inside attention
    out, weights = attention(q, K, V)
    return out[0], weights[0]
''',
    }),
    Alternative(name="loops-float32", description="plain loops over rows and keys, in float32", cells={
        "softmax_rows": '''import math

def softmax_rows(S):
    S = np.asarray(S, dtype=np.float32)
    out = np.zeros_like(S)
    for i, row in enumerate(S):
        m = max(row)
        e = [math.exp(float(s - m)) for s in row]
        total = sum(e)
        out[i] = [x / total for x in e]
    return out
''',
        "attention": '''def attention(Q, K, V, mask=None):
    Q, K, V = (np.asarray(a, dtype=np.float32) for a in (Q, K, V))
    T_q, T_k = Q.shape[0], K.shape[0]
    scores = np.zeros((T_q, T_k), dtype=np.float32)
    for i in range(T_q):
        for j in range(T_k):
            allowed = True if mask is None else bool(mask[i][j])
            scores[i, j] = float(Q[i] @ K[j]) / np.sqrt(Q.shape[1]) if allowed else -np.inf
    weights = softmax_rows(scores)
    out = np.zeros((T_q, V.shape[1]), dtype=np.float32)
    for i in range(T_q):
        for j in range(T_k):
            out[i] += weights[i, j] * V[j]
    return out, weights
''',
        "row_attention": '''import math

def row_attention(q, K, V, scaled=True):
    q = [float(x) for x in q]
    scores = [sum(a * float(b) for a, b in zip(q, k)) for k in K]
    if scaled:
        scores = [s / math.sqrt(len(q)) for s in scores]
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    weights = np.array([x / sum(e) for x in e], dtype=np.float32)
    return weights @ np.asarray(V, dtype=np.float32), weights
''',
    }),
    Alternative(name="scipy-and-finfo",
                description="scipy.special.softmax, and the most negative finite float instead of -inf for the mask",
                cells={
        "softmax_rows": '''from scipy.special import softmax

def softmax_rows(S):
    return softmax(np.asarray(S, dtype=float), axis=-1)
''',
        "attention": '''def attention(Q, K, V, mask=None):
    scores = (Q @ K.T) / Q.shape[-1] ** 0.5
    if mask is not None:
        scores = np.where(mask, scores, np.finfo(scores.dtype).min)
    weights = softmax_rows(scores)
    return weights @ V, weights
''',
        "token_importance": '''def token_importance_by_masking(classifier, words):
    p_full = classifier.predict(words)[0]
    masks = ~np.eye(len(words), dtype=bool)
    return np.array([p_full - classifier.predict(words, keep=list(m))[0] for m in masks])
''',
    }),
    Alternative(name="backward-and-finite-differences",
                description="gradient x input as a central difference of the logit along each word's own vector; Spearman's ranks by "
                            "counting smaller and equal values",
                cells={
        "gradient_x_input": """import torch

from mlbook_helpers.attribution import refund_logit, word_vectors


def gradient_x_input(classifier, words):
    # x_i . grad_i is the derivative of the logit when word i's vector is scaled by (1 + t), at t = 0
    x = word_vectors(classifier, words)
    eps = 1e-5
    out = []
    with torch.no_grad():
        for i in range(x.shape[0]):
            up, down = x.clone(), x.clone()
            up[i] *= 1 + eps
            down[i] *= 1 - eps
            out.append(float(refund_logit(classifier, up) - refund_logit(classifier, down)) / (2 * eps))
    return np.array(out)
""",
        "spearman": """def spearman(a, b):
    def ranks(x):
        x = np.asarray(x, dtype=float)
        smaller = (x[None, :] < x[:, None]).sum(axis=1)
        equal = (x[None, :] == x[:, None]).sum(axis=1)
        return smaller + (equal + 1) / 2
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])
""",
    }),
    Alternative(name="row-loops-unguarded-spearman-input-precision",
                description="rows_are_distributions row by row with math.isfinite and math.isclose; Spearman's ranks "
                            "from np.unique's counts, np.corrcoef giving nan on a constant array (0 / 0, unguarded); "
                            "softmax_rows and row_attention in the input's own precision",
                cells={
        "property_checks": '''import math


def rows_are_distributions(weights, atol=1e-6):
    for row in np.asarray(weights, dtype=float):
        if not all(math.isfinite(w) and w >= -atol for w in row):
            return False
        if not math.isclose(float(sum(row)), 1.0, rel_tol=0.0, abs_tol=atol):
            return False
    return True


def outputs_in_value_range(out, V, atol=1e-6):
    out, V = np.asarray(out, dtype=float), np.asarray(V, dtype=float)
    return bool(((out >= V.min(axis=0) - atol) & (out <= V.max(axis=0) + atol)).all())
''',
        "spearman": '''def spearman(a, b):
    def ranks(x):
        _, inverse, counts = np.unique(np.asarray(x, dtype=float), return_inverse=True, return_counts=True)
        below = np.cumsum(counts) - counts  # values smaller than each distinct value
        return (below + (counts + 1) / 2)[inverse]
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.corrcoef(ranks(a), ranks(b))[0, 1])
''',
        # the input's own precision kept (float32 in, float32 out), as the lab's "Precision" paragraph allows
        "softmax_rows": '''def softmax_rows(S):
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
''',
        "row_attention": '''def row_attention(q, K, V, scaled=True):
    scores = K @ q
    if scaled:
        scores = scores / np.sqrt(q.shape[-1])
    weights = softmax_rows(scores[None, :])[0]
    return weights @ V, weights
''',
    }),
    Alternative(name="torch-backward-and-loops",
                description="gradient x input with logit.backward() and x.grad; Spearman in plain Python loops",
                cells={
        "gradient_x_input": """import torch

from mlbook_helpers.attribution import refund_logit, word_vectors


def gradient_x_input(classifier, words):
    x = word_vectors(classifier, words)
    x.requires_grad = True
    refund_logit(classifier, x).backward()
    return torch.einsum("td,td->t", x.grad, x).detach().numpy()
""",
        "spearman": """import math

def spearman(a, b):
    def ranks(x):
        x = [float(v) for v in x]
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    spread = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / spread if spread else math.nan
""",
    }),
]
