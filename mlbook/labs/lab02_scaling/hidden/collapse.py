"""The collapse experiment: ``mean_effective_keys`` against the grader's own Monte Carlo."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...kit import ask_number, entropy, fail, fresh_rng, reproducible, seed, softmax
from ._common import Z_SIGMA, ONE_NUMBER


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
                         n_tokens=n_tokens, what=what, hint=ONE_NUMBER)

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
                                      hint=ONE_NUMBER), what, rng)
