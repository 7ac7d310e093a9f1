"""A learned temperature: ``learn_temperature`` step by step against the grader's own descent."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...kit import ask_number, diagnose, fail, fresh_rng, softmax
from ._common import ONE_NUMBER

# The relative tolerance on tau after a few exact steps, as the lab text states it: a learner in float32
# (torch's default dtype, the catalogue's SGD alternative) lands within a few float32 units in the last
# place (1.2e-7 each) of the float64 descent, far inside 1e-5, while the known mistakes (a step fewer or
# more, steps on tau) move tau by far more. probes.py gives mlbook mutate the same tolerance, so an
# answer this check accepts counts as the reference there too.
TAU_RTOL = 1e-5


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
                     hint=ONE_NUMBER)
    want = _learned_tau(Q, K, V, Y, steps, lr)
    if not abs(got - want) <= TAU_RTOL * abs(want):
        message = diagnose(got, {
            "the steps were taken on tau itself: step on u = log tau and return exp(u)":
                lambda: _learned_tau(Q, K, V, Y, steps, lr, on_log=False),
            "the steps went uphill: u <- u - lr * dL/du": lambda: _learned_tau(Q, K, V, Y, steps, lr, downhill=False),
            "sqrt(d_k) was left out of the scores: divide Q K^T by tau * sqrt(d_k)":
                lambda: _learned_tau(Q, K, V, Y, steps, lr, sqrt_dk=False),
            "tau multiplied the scores instead of dividing them": lambda: _learned_tau(Q, K, V, Y, steps, lr, divide=False),
            "that is one step fewer or one more than asked": lambda: _learned_tau(Q, K, V, Y, steps - 1, lr),
        }, atol=0, rtol=TAU_RTOL)
        if message is None and abs(got - _learned_tau(Q, K, V, Y, steps + 1, lr)) <= TAU_RTOL * abs(want):
            message = "that is one step fewer or one more than asked"
        fail(what, f"got tau = {got:.6g} after {steps} steps from tau = 1", message or
             "Start from u = 0; each step u <- u - lr * dL/du with L the MEAN squared error of "
             "softmax(Q K^T / (tau sqrt(d_k))) V against Y; return exp(u).")
    what = f"learn_temperature(Q {Q.shape}, K {K.shape}, V, Y, steps=300, lr=3.0)"
    got = ask_number(learn_temperature, Q.copy(), K.copy(), V.copy(), Y.copy(), steps=300, lr=3.0, what=what,
                     hint=ONE_NUMBER)
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
