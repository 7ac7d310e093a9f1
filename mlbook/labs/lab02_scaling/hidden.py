"""Hidden checks for lab 2, the sqrt(d_k) variance experiment (grader only).

Conventions of this module:
- ``Q`` is (..., T_q, d_k) and ``K`` is (..., T_k, d_k); a row of weights runs over the last
  axis (the keys) and sums to 1. Random query and key components are independent standard
  normals, the situation at initialisation.
- Deterministic answers (scores, entropies, Jacobians) are compared with the grader's own
  reference to 1e-6.
- Random answers are called with generators the grader seeds itself, on other d_k and other
  sizes than the notebook uses, and compared with the grader's own Monte Carlo reference.
  Every statistical comparison allows ``Z_SIGMA`` standard errors, each derived from the
  sample size where it is computed. A correct answer fails one comparison with probability
  2 * (1 - Phi(5)) = 5.7e-7, so the six statistical comparisons of one notebook raise a false
  alarm in fewer than 1 run in 100,000.
- Messages quote the student's own values and the call that produced them, never a reference.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..kit import (ask_array, ask_number, compare, diagnose, entropy, fail, first_bad, fresh_rng, reproducible,
                   seed, softmax)

__all__ = [
    "check_dot_product_std",
    "check_attention_scores",
    "check_row_entropy",
    "check_effective_keys",
    "check_mean_effective_keys",
    "check_softmax_jacobian",
    "check_learn_temperature",
    "check_qk_norm_scores",
    "check_nadaraya_watson",
]

Z_SIGMA = 5.0


# ----------------------------------------------------------------------------- shared pieces


# The advice when a student's single number is not one finite real number.
_ONE_NUMBER = ("Return one float: reduce over every sample at once (float(...) or .item() turns a one-entry array "
               "into a number); look for a log of 0 or a division by 0.")


def _test_weights(rng: np.random.Generator) -> np.ndarray:
    """(2, 4, T_k) weight rows with T_k != 8, including a one-hot row, a uniform row and zeros."""
    t_k = int(rng.choice([5, 6, 7, 9, 10, 11]))
    w = rng.dirichlet(np.full(t_k, 0.7), size=(2, 4))  # (2, 4, T_k)
    w[0, 1] = np.eye(t_k)[rng.integers(t_k)]  # one key takes everything: entropy 0
    w[1, 2] = 1.0 / t_k  # uniform: entropy log T_k
    w[0, 3, : t_k // 2] = 0.0  # masked keys: exact zeros
    w[0, 3] /= w[0, 3].sum()
    return w


# ----------------------------------------------------------------------------- dot_product_std


def _diagnose_spread(got: float, d_k: int, n_pairs: int, what: str, z: float) -> None:
    ratio = got / math.sqrt(d_k)
    if got > 3 * math.sqrt(d_k) and abs(got / math.sqrt(n_pairs) - 1) < 0.5:
        fail(what, f"got {got:.4g}, which grows with n_pairs rather than with d_k",
             "The standard deviation was taken over the wrong axis: sum the products over the d_k "
             "components of each pair (axis=-1), then take the spread across the n_pairs sums.")
    if abs(got - 1) < 0.15:
        fail(what, f"got {got:.4g}, about 1 although d_k = {d_k}",
             "That is the spread of a single product q_c k_c (or of a dot product already divided "
             "by sqrt(d_k)); measure the raw dot product, the sum over all d_k components.")
    if abs(got / d_k - 1) < 0.15:
        fail(what, f"got {got:.4g}, about d_k itself",
             "That is the variance, not the standard deviation: take np.std, or the square root.")
    if abs(ratio - math.sqrt(7 / 144)) < 0.05:
        fail(what, f"got {got:.4g}, well below the spread the lesson derives",
             "The components look uniform on [0, 1): draw them standard normal (mean 0, variance 1) "
             "with rng.standard_normal.")
    fail(what, f"got {got:.4g}, {z:.1f} standard errors away from the law derived in the lesson",
         "Draw q and k as (n_pairs, d_k) standard normal arrays, take the n_pairs row sums of q * k "
         "and return their standard deviation.")


def check_dot_product_std(dot_product_std: Callable) -> None:
    """Spread of q . k on fresh d_k, against the law SD = sqrt(d_k), plus reproducibility."""
    rng = fresh_rng()
    n_pairs = 6000
    # Largest d_k first: a wrong-axis sum has only d_k samples, so it is recognised best there.
    d_ks = [int(rng.integers(150, 400)), int(rng.integers(30, 100)), int(rng.integers(3, 12))]
    for d_k in d_ks:
        what = f"dot_product_std(d_k={d_k}, n_pairs={n_pairs}, rng)"
        got = ask_number(dot_product_std, d_k, n_pairs, np.random.default_rng(seed(rng)), what=what, hint=_ONE_NUMBER)
        # Tolerance. X = q . k is a sum of d_k i.i.d. products q_c k_c with variance 1 and
        # E[(q_c k_c)^4] = E[q^4] E[k^4] = 9, i.e. excess kurtosis 6; a sum of d_k of them has
        # variance d_k and kurtosis kappa = 3 + 6 / d_k. The delta method gives the standard
        # error of a sample SD of n draws: SE(s) = sigma * sqrt((kappa - 1) / (4 n)), so
        # SE(s / sqrt(d_k)) = sqrt((2 + 6 / d_k) / (4 n)): 0.65% to 1.4% here for n = 6000.
        rel_se = math.sqrt((2.0 + 6.0 / d_k) / (4.0 * n_pairs))
        z = abs(got / math.sqrt(d_k) - 1.0) / rel_se
        if not z <= Z_SIGMA:
            _diagnose_spread(got, d_k, n_pairs, what, z)
    what = "dot_product_std(d_k=7, n_pairs=500, rng)"
    reproducible(lambda g: ask_number(dot_product_std, 7, 500, g, what=what, hint=_ONE_NUMBER), what, rng)


# ----------------------------------------------------------------------------- attention_scores


def _scores_shape_hint(want: tuple[int, ...]) -> Callable[[tuple[int, ...]], str]:
    """The advice for scores of another shape than ``want``, (..., T_q, T_k): transposed, or the batch axes moved."""
    def hint(got: tuple[int, ...]) -> str:
        if got == want[:-2] + want[-2:][::-1]:
            return "Queries are the rows: compute Q K^T (shape (..., T_q, T_k)), not K Q^T."
        return ("Swap only the last two axes of K (K.swapaxes(-2, -1) or K.transpose(-2, -1) in torch); K.T also "
                "reverses the batch axes.")

    return hint


def check_attention_scores(attention_scores: Callable) -> None:
    """Batched, rectangular scores on a fresh d_k, scaled and unscaled, float64 and float32."""
    rng = fresh_rng()
    d_k = int(rng.choice([11, 13, 17, 24, 48]))  # never the lesson's 2, never equal to T_q or T_k
    t_q, t_k = int(rng.integers(3, 6)), int(rng.integers(6, 10))
    cases = [
        (rng.standard_normal((2, t_q, d_k)), rng.standard_normal((2, t_k, d_k))),  # batched
        (rng.standard_normal((t_q, d_k)).astype(np.float32),
         rng.standard_normal((t_k, d_k)).astype(np.float32)),  # one sequence, float32
    ]
    for Q, K in cases:
        raw = np.einsum("...qd,...kd->...qk", Q.astype(np.float64), K.astype(np.float64))  # (..., T_q, T_k)
        tol = 1e-6 if Q.dtype == np.float64 else 1e-4
        for scaled in (True, False):
            what = f"attention_scores(Q of shape {Q.shape} {Q.dtype}, K of shape {K.shape}, scaled={scaled})"
            got = ask_array(attention_scores, Q.copy(), K.copy(), scaled=scaled, what=what)
            want = raw / math.sqrt(d_k) if scaled else raw
            compare(got, want, what, "Each entry is q_i . k_j over the d_k components, divided by sqrt(d_k) when "
                    "scaled=True.", atol=tol, rtol=tol, shape_hint=_scores_shape_hint(want.shape), mistakes={
                "scores were divided by d_k instead of sqrt(d_k)": raw / d_k,
                "scaled=True returned the raw dot products: divide by sqrt(d_k)": raw,
                "scaled=False must return the raw dot products q . k, without dividing": raw / math.sqrt(d_k),
                "divided by the square root of the number of keys: d_k is the last axis of Q and K": raw / math.sqrt(t_k),
                "divided by the square root of the number of queries: d_k is the last axis of Q and K": raw / math.sqrt(t_q),
                "multiplied by sqrt(d_k) instead of dividing": raw * math.sqrt(d_k),
            } if scaled else {
                "scaled=False must return the raw dot products q . k, without dividing": raw / math.sqrt(d_k),
                "scaled=False divided the scores by d_k; it must return the raw dot products": raw / d_k,
            })


# ----------------------------------------------------------------------------- row_entropy


def check_row_entropy(row_entropy: Callable) -> None:
    """Entropy of each row of a (2, 4, T_k) batch with zeros, one-hot and uniform rows, in bits and nats."""
    rng = fresh_rng()
    w = _test_weights(rng)  # (2, 4, T_k)
    nats = entropy(w)  # (2, 4)
    bits = entropy(w, base=2.0)  # (2, 4)
    for base, name, want in ((2, "2", bits), (math.e, "e", nats)):
        what = f"row_entropy(weights of shape {w.shape}, base={name})"
        got = ask_array(row_entropy, w.copy(), base=base, what=what, finite=False)  # a nan (0 log 0) is diagnosed
        other_unit = ({"an entropy in nats where bits were asked: divide the natural log by log(base)": nats}
                      if base == 2 else
                      {"an entropy in bits where nats were asked: with base=e take the natural log": bits})
        compare(got, want, what, "H = -sum_j a_j log(a_j) / log(base) over each row, with 0 log 0 = 0.",
                shape_hint="One entropy per row: sum over the last axis (the keys) only.", nonfinite=_entropy_nan,
                mistakes={
            **other_unit,
            "the entropy has the wrong sign: H = -sum a log a": -want,
            "multiplied by log(base) instead of dividing: log_b(x) = ln(x) / ln(b)": nats * math.log(base),
            "an entropy in log base 10: use the base argument": entropy(w, base=10.0),
        })


def _entropy_nan(got: np.ndarray) -> tuple[str, str]:
    """What to say of (2, 4) entropies with a nan or inf: the rows of ``_test_weights`` that hold exact zeros."""
    rows = sorted({int(i) for i in np.argwhere(~np.isfinite(got))[:, 1]})
    return (f"nan or inf in rows {rows} of the 4 rows of each batch entry, which contain weights equal to 0",
            "0 * log 0 counts as 0: mask the zero weights (np.where) or use scipy.special.entr.")


# ----------------------------------------------------------------------------- effective_keys


def check_effective_keys(effective_keys: Callable) -> None:
    """2 ** (entropy in bits) of each row, on rows with zeros, a one-hot row and a uniform row."""
    rng = fresh_rng()
    w = _test_weights(rng)  # (2, 4, T_k)
    bits, nats = entropy(w, base=2.0), entropy(w)  # (2, 4) each
    want = 2.0**bits  # (2, 4)
    what = f"effective_keys(weights of shape {w.shape})"
    got = ask_array(effective_keys, w.copy(), what=what)
    t_k = w.shape[-1]
    compare(got, want, what, "A uniform row over T keys has T effective keys and a one-hot row has 1.",
            shape_hint="One number per row: the rows run over the last axis.",
            observed=lambda got: f"{first_bad(got, want, atol=1e-6, rtol=1e-6)} (a uniform row over {t_k} keys "
                                 f"gave {float(got[1, 2]):.4g}, a one-hot row {float(got[0, 1]):.4g})", mistakes={
        "exp of an entropy in bits: use 2 ** H_bits (or exp of H in nats)": np.exp(bits),
        "2 to the power of an entropy in nats: use 2 ** H_bits (or exp of H in nats)": 2.0**nats,
        "returned the entropy in bits itself: effective keys are 2 ** H_bits": bits,
        "returned the entropy in nats itself: effective keys are exp(H_nats) = 2 ** H_bits": nats,
    })


# ----------------------------------------------------------------------------- mean_effective_keys


# How a draw's rows of entropies in bits become that draw's mean effective keys: the right way
# first, then the known wrong ones the diagnosis tries.
_KEYS_OF_BITS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "right": lambda bits: (2.0**bits).mean(axis=-1),
    "power-of-mean": lambda bits: 2.0 ** bits.mean(axis=-1),
    "exp-of-bits": lambda bits: np.exp(bits).mean(axis=-1),
    "two-to-nats": lambda bits: (2.0 ** (bits * math.log(2.0))).mean(axis=-1),
}


def _mek_per_draw(rng: np.random.Generator, d_k: int, n_tokens: int, n_draws: int, divisor: float,
                  keys_of_bits: str = "right") -> np.ndarray:
    """The grader's Monte Carlo: mean effective keys of each draw, scores divided by ``divisor``."""
    Q = rng.standard_normal((n_draws, n_tokens, d_k))  # (n_draws, T, d_k)
    K = rng.standard_normal((n_draws, n_tokens, d_k))  # (n_draws, T, d_k)
    weights = softmax(Q @ K.swapaxes(-2, -1) / divisor)  # (n_draws, T, T)
    bits = entropy(weights, base=2.0)  # (n_draws, T)
    return _KEYS_OF_BITS[keys_of_bits](bits)  # (n_draws,)


def check_mean_effective_keys(mean_effective_keys: Callable) -> None:
    """Mean effective keys on fresh d_k and n_tokens != 8, scaled and unscaled, against a Monte Carlo reference."""
    rng = fresh_rng()
    n_draws, n_ref = 250, 1000
    n_tokens = int(rng.choice([5, 6, 7, 9, 10, 12]))
    small, large = int(rng.integers(3, 9)), int(rng.integers(120, 400))
    for d_k, scaled in ((large, False), (large, True), (small, True)):
        what = f"mean_effective_keys(d_k={d_k}, rng, scaled={scaled}, n_draws={n_draws}, n_tokens={n_tokens})"
        got = ask_number(mean_effective_keys, d_k, np.random.default_rng(seed(rng)), scaled=scaled, n_draws=n_draws,
                         n_tokens=n_tokens, what=what, hint=_ONE_NUMBER)

        def near(divisor: float, tokens: int = n_tokens, keys_of_bits: str = "right") -> bool:
            # Draws are independent, so a mean over n draws has standard error s / sqrt(n), with s
            # the SD of one draw's mean (estimated from the grader's n_ref draws). The difference
            # between the student's mean and the grader's has SE s * sqrt(1/n_draws + 1/n_ref).
            per_draw = _mek_per_draw(rng, d_k, tokens, n_ref, divisor, keys_of_bits)  # (n_ref,)
            se = per_draw.std(ddof=1) * math.sqrt(1.0 / n_draws + 1.0 / n_ref)
            return abs(got - per_draw.mean()) <= Z_SIGMA * se + 1e-9

        right = math.sqrt(d_k) if scaled else 1.0
        if near(right):
            continue
        if scaled and near(d_k):
            hint = "the scores were divided by d_k instead of sqrt(d_k), so every row is pushed toward uniform."
        elif near(1.0 if scaled else math.sqrt(d_k)):
            hint = f"the value matches scaled={not scaled}: pass `scaled` on to attention_scores."
        elif near(right, tokens=8):
            hint = "the value matches 8 tokens: use the n_tokens argument for both Q and K."
        elif near(right, keys_of_bits="power-of-mean"):
            hint = "that is 2 to the power of the mean entropy: average effective_keys over all rows instead."
        elif near(right, keys_of_bits="exp-of-bits"):
            hint = "the value matches exp of an entropy in bits per row: check effective_keys."
        elif near(right, keys_of_bits="two-to-nats"):
            hint = "the value matches 2 to the power of an entropy in nats per row: check row_entropy's base."
        else:
            hint = ("Draw Q and K as (n_draws, n_tokens, d_k) standard normals from rng, take the softmax of "
                    "attention_scores(Q, K, scaled) over the keys and average effective_keys over every row.")
        fail(what, f"got {got:.4g}, outside the range the sample size allows", hint)
    what = "mean_effective_keys(d_k=5, rng, scaled=True, n_draws=20, n_tokens=6)"
    reproducible(lambda g: ask_number(mean_effective_keys, 5, g, scaled=True, n_draws=20, n_tokens=6, what=what,
                                      hint=_ONE_NUMBER), what, rng)


# ----------------------------------------------------------------------------- softmax_jacobian


def check_softmax_jacobian(softmax_jacobian: Callable) -> None:
    """diag(a) - a a^T for one fresh row and for a (2, 3, T) batch of rows."""
    rng = fresh_rng()
    t = int(rng.choice([4, 5, 6, 7, 9]))
    for a in (rng.dirichlet(np.ones(t)), rng.dirichlet(np.ones(t), size=(2, 3))):
        what = f"softmax_jacobian(a of shape {a.shape})"
        outer = a[..., :, None] * a[..., None, :]  # (..., T, T)
        diag = a[..., :, None] * np.eye(t)  # (..., T, T)
        want = diag - outer  # (..., T, T)
        got = ask_array(softmax_jacobian, a.copy(), what=what)
        compare(got, want, what, "Entry (i, j) is a_i (1[i = j] - a_j); every row sums to 0.",
                shape_hint="One (T, T) matrix per row: np.diag and np.outer handle a single vector only; for a "
                           "batch, build the diagonal and the outer product by broadcasting over a new axis.",
                observed=_row_sums, mistakes={
            "the diagonal term diag(a) is missing": -outer,
            "only the diagonal a_i (1 - a_i) is there: the off-diagonal entries are -a_i a_j": diag - a[..., :, None] ** 2 * np.eye(t),
            "the sign is flipped: J = diag(a) - a a^T": -want,
            "the product a * a is elementwise, so each row subtracts a_j^2: a a^T is the outer product, with entries a_i a_j": diag - (a**2)[..., None, :],
            "a^T a is an inner product (one number): the Jacobian subtracts the outer product a a^T": diag - (a**2).sum(-1)[..., None, None],
        })


def _row_sums(got: np.ndarray) -> str:
    sums = (np.round(got.sum(axis=-1).ravel()[:3], 4) + 0.0).tolist()  # the first rows' sums, no negative zeros
    return f"rows of your Jacobian sum to {sums}"


# ----------------------------------------------------------------------------- learn_temperature


def _learned_tau(Q: np.ndarray, K: np.ndarray, V: np.ndarray, Y: np.ndarray, steps: int, lr: float, *,
                 on_log: bool = True, downhill: bool = True, sqrt_dk: bool = True, divide: bool = True) -> float:
    """The grader's gradient descent on the temperature, with the gradient written out in NumPy.

    L = mean((softmax(S) V - Y)^2) with S = S0 / tau (S0 = Q K^T / sqrt(d_k)); the options are
    the known mistakes: steps on tau itself, uphill steps, no sqrt(d_k), tau multiplying S0.
    """
    S0 = Q @ np.swapaxes(K, -1, -2) / (math.sqrt(Q.shape[-1]) if sqrt_dk else 1.0)  # (..., T_q, T_k)
    u = 0.0 if on_log else 1.0  # log tau, or tau itself
    for _ in range(steps):
        tau = math.exp(u) if on_log else u
        S = S0 / tau if divide else S0 * tau  # (..., T_q, T_k)
        A = softmax(S)  # (..., T_q, T_k)
        dA = (2.0 / Y.size) * (A @ V - Y) @ np.swapaxes(V, -1, -2)  # (..., T_q, T_k)
        dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))  # (..., T_q, T_k)
        d_tau = float((dS * (-S0 / tau**2 if divide else S0)).sum())
        grad = d_tau * tau if on_log else d_tau  # d/du = tau d/dtau
        u += -lr * grad if downhill else lr * grad
        if not math.isfinite(u) or (not on_log and u <= 0):
            return math.nan  # a mistake that leaves the valid range matches nothing
    return math.exp(u) if on_log else u


def check_learn_temperature(learn_temperature: Callable) -> None:
    """A few exact steps on a fresh batch (the algorithm), then many (tau recovers the one that made Y)."""
    rng = fresh_rng()
    d_k, t_q, t_k, d_v = int(rng.choice([6, 9, 12, 20])), int(rng.integers(3, 6)), int(rng.integers(6, 10)), 3
    Q = rng.standard_normal((4, t_q, d_k))  # (B, T_q, d_k)
    K = rng.standard_normal((4, t_k, d_k))  # (B, T_k, d_k)
    V = rng.standard_normal((4, t_k, d_v))  # (B, T_k, d_v)
    # tau far from 1 on either side: near tau = 1 the first steps on tau and on log tau nearly coincide
    tau_star = float(rng.choice([rng.uniform(0.3, 0.55), rng.uniform(1.8, 3.0)]))
    Y = softmax(Q @ K.swapaxes(-1, -2) / (math.sqrt(d_k) * tau_star)) @ V  # (B, T_q, d_v)
    steps, lr = int(rng.integers(2, 5)), float(rng.uniform(0.5, 1.5))
    what = f"learn_temperature(Q {Q.shape}, K {K.shape}, V, Y, steps={steps}, lr={lr:.3f})"
    got = ask_number(learn_temperature, Q.copy(), K.copy(), V.copy(), Y.copy(), steps=steps, lr=lr, what=what,
                     hint=_ONE_NUMBER)
    want = _learned_tau(Q, K, V, Y, steps, lr)
    if not abs(got - want) <= 1e-5 * abs(want):
        message = diagnose(got, {
            "the steps were taken on tau itself: step on u = log tau and return exp(u)":
                lambda: _learned_tau(Q, K, V, Y, steps, lr, on_log=False),
            "the steps went uphill: u <- u - lr * dL/du": lambda: _learned_tau(Q, K, V, Y, steps, lr, downhill=False),
            "sqrt(d_k) was left out of the scores: divide Q K^T by tau * sqrt(d_k)":
                lambda: _learned_tau(Q, K, V, Y, steps, lr, sqrt_dk=False),
            "tau multiplied the scores instead of dividing them": lambda: _learned_tau(Q, K, V, Y, steps, lr, divide=False),
            "that is one step fewer or one more than asked": lambda: _learned_tau(Q, K, V, Y, steps - 1, lr),
        }, atol=0, rtol=1e-5)
        if message is None and abs(got - _learned_tau(Q, K, V, Y, steps + 1, lr)) <= 1e-5 * abs(want):
            message = "that is one step fewer or one more than asked"
        fail(what, f"got tau = {got:.6g} after {steps} steps from tau = 1", message or
             "Start from u = 0; each step u <- u - lr * dL/du with L the MEAN squared error of "
             "softmax(Q K^T / (tau sqrt(d_k))) V against Y; return exp(u).")
    what = f"learn_temperature(Q {Q.shape}, K {K.shape}, V, Y, steps=300, lr=3.0)"
    got = ask_number(learn_temperature, Q.copy(), K.copy(), V.copy(), Y.copy(), steps=300, lr=3.0, what=what,
                     hint=_ONE_NUMBER)
    # 300 steps usually reach tau_star, but on some draws the loss is flat near it and a correct learner
    # is still on its way: the grader's own 300 steps are the answer a correct learner gives.
    reference = _learned_tau(Q, K, V, Y, 300, 3.0)
    if not (abs(got - tau_star) <= 2e-3 * tau_star or abs(got - reference) <= 1e-3 * abs(reference)):
        message = diagnose(got, {
            "tau absorbed sqrt(d_k): the scores are Q K^T / (tau sqrt(d_k))": tau_star * math.sqrt(d_k),
            "that is the inverse of the temperature that made Y: divide the scores by tau": 1.0 / tau_star,
        }, atol=0, rtol=5e-3)
        fail(what, f"got tau = {got:.4g} for outputs of a head with one fixed temperature", message or
             "With enough steps, gradient descent on log tau should find the temperature the targets were made with.")


# ----------------------------------------------------------------------------- qk_norm_scores


def check_qk_norm_scores(qk_norm_scores: Callable) -> None:
    """Cosine scores times a gain, batched and single, rows of very different lengths, float32 too."""
    rng = fresh_rng()
    d_k = int(rng.choice([5, 7, 10, 24]))
    t_q, t_k = int(rng.integers(3, 6)), int(rng.integers(6, 10))
    lengths_q = np.exp(rng.uniform(-3, 3, size=(2, t_q, 1)))  # (2, T_q, 1): lengths from 0.05 to 20
    lengths_k = np.exp(rng.uniform(-3, 3, size=(2, t_k, 1)))  # (2, T_k, 1)
    cases = [
        (rng.standard_normal((2, t_q, d_k)) * lengths_q, rng.standard_normal((2, t_k, d_k)) * lengths_k,
         float(rng.uniform(1.5, 12.0))),
        (rng.standard_normal((t_q, d_k)).astype(np.float32), rng.standard_normal((t_k, d_k)).astype(np.float32),
         float(rng.uniform(1.5, 12.0))),
    ]
    for Q, K, gain in cases:
        q, k = Q.astype(np.float64), K.astype(np.float64)
        unit_q = q / np.linalg.norm(q, axis=-1, keepdims=True)  # (..., T_q, d_k)
        unit_k = k / np.linalg.norm(k, axis=-1, keepdims=True)  # (..., T_k, d_k)
        want = gain * unit_q @ np.swapaxes(unit_k, -1, -2)  # (..., T_q, T_k)
        what = f"qk_norm_scores(Q of shape {Q.shape} {Q.dtype}, K of shape {K.shape}, gain={gain:.3f})"
        got = ask_array(qk_norm_scores, Q.copy(), K.copy(), gain, what=what)
        tol = 1e-9 if Q.dtype == np.float64 else 1e-5
        across = lambda x: x / np.linalg.norm(x, axis=-2, keepdims=True)  # noqa: E731 - the wrong axis
        compare(got, want, what, "Each score is gain * cos(q_i, k_j): every |score| is at most the gain.",
                atol=tol * gain, rtol=tol,
                shape_hint="Queries are the rows: (..., T_q, d_k) against (..., T_k, d_k) gives (..., T_q, T_k); "
                           "swap only the last two axes of the keys.",
                observed=lambda got: first_bad(got, want, atol=tol * gain, rtol=tol)
                + f" (largest |score| {float(np.abs(got).max()):.4g})", mistakes={
            "each component was normalised across the tokens (axis -2): normalise each vector over its d_k "
            "components (axis=-1)": gain * across(q) @ np.swapaxes(across(k), -1, -2),
            "the cosines were also divided by sqrt(d_k): with QK-norm the gain replaces the scale":
                want / math.sqrt(d_k),
            "only the queries were normalised: normalise the keys too, or the scores still grow with |k|":
                gain * unit_q @ np.swapaxes(k, -1, -2),
            "only the keys were normalised: normalise the queries too, or the scores still grow with |q|":
                gain * q @ np.swapaxes(unit_k, -1, -2),
            "the gain was left out": want / gain,
            "divided by the squared length: a unit vector is x / |x|, not x / |x|^2":
                gain * (q / (q**2).sum(-1, keepdims=True)) @ np.swapaxes(k / (k**2).sum(-1, keepdims=True), -1, -2),
        })


# ----------------------------------------------------------------------------- nadaraya_watson


def check_nadaraya_watson(nadaraya_watson: Callable) -> None:
    """Gaussian-kernel regression on fresh points in d = 1 and d = 3, several bandwidths, a tiny one."""
    rng = fresh_rng()
    t_q, t_k = int(rng.integers(3, 7)), int(rng.integers(8, 15))
    for d, d_v, h in ((1, 1, float(rng.uniform(0.1, 0.4))), (3, 2, float(rng.uniform(0.8, 2.0))), (2, 2, 1e-3)):
        xq = rng.uniform(-1, 1, size=(t_q, d))  # (T_q, d)
        xk = rng.uniform(-1, 1, size=(t_k, d))  # (T_k, d)
        y = rng.standard_normal((t_k, d_v))  # (T_k, d_v)
        sq = ((xq[:, None, :] - xk[None, :, :]) ** 2).sum(-1)  # (T_q, T_k)
        want = softmax(-sq / (2 * h * h)) @ y  # (T_q, d_v)
        what = f"nadaraya_watson(x_query {xq.shape}, x_train {xk.shape}, y_train {y.shape}, bandwidth={h:.3g})"
        got = ask_array(nadaraya_watson, xq.copy(), xk.copy(), y.copy(), h, what=what, finite=False)  # nan: below
        kernel_sum = lambda s: np.exp(s - s.max(axis=-1, keepdims=True))  # noqa: E731
        compare(got, want, what, "Weights softmax(-|x - x_j|^2 / (2 h^2)) over the examples j, then the weighted "
                "average of y_train.", atol=1e-7, rtol=1e-7,
                shape_hint="One prediction per query point, with the width of y_train: weights (T_q, T_k) @ y_train "
                           "(T_k, d_v).",
                nonfinite=("returned nan or inf", "exp(-|x - x_j|^2 / (2 h^2)) underflows to 0 for every example "
                           "when h is small, and 0 / 0 is nan: take a softmax of the scores (subtract each row's max) "
                           "instead."), mistakes={
            "the bandwidth was not squared: the Gaussian kernel is exp(-|x - x_j|^2 / (2 h^2))":
                lambda: softmax(-sq / (2 * h)) @ y,
            "the distance was not squared: the Gaussian kernel is exp(-|x - x_j|^2 / (2 h^2))":
                lambda: softmax(-np.sqrt(sq) / (2 * h * h)) @ y,
            "the weights were normalised over the query points (axis 0): average over the examples, the last axis":
                lambda: softmax(-sq / (2 * h * h), axis=0) @ y,
            "the weights were not normalised: a kernel regression is a weighted average, not a weighted sum":
                lambda: np.exp(-sq / (2 * h * h)) @ y,
            "the weights were not normalised: a kernel regression is a weighted average, not a weighted sum ":
                lambda: kernel_sum(-sq / (2 * h * h)) @ y,
            "the kernel is exp(-d^2 / (2 h^2)): its sign was dropped, so far examples weigh most":
                lambda: softmax(sq / (2 * h * h)) @ y,
        })
