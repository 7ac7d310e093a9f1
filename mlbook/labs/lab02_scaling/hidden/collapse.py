"""The collapse experiment: ``mean_effective_keys`` against the grader's own Monte Carlo."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...kit import ask_number, entropy, fail, fresh_rng, given, reproducible, seed, softmax
from .graders import graders_attention_scores, graders_effective_keys
from ._common import Z_SIGMA, ONE_NUMBER


# How a draw's rows of entropies in bits become that draw's mean effective keys: the right way
# first, then the known wrong ones the diagnosis tries.
_KEYS_OF_BITS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "right": lambda bits: (2.0**bits).mean(axis=-1),
    "power-of-mean": lambda bits: 2.0 ** bits.mean(axis=-1),
    "exp-of-bits": lambda bits: np.exp(bits).mean(axis=-1),
    "two-to-nats": lambda bits: (2.0 ** (bits * math.log(2.0))).mean(axis=-1),
}


@dataclass(frozen=True)
class _Way:
    """One way of computing the experiment: how a case (d_k, scaled) is computed, right or by a known mistake.

    divisor: (d_k, scaled) -> what the scores are divided by; tokens: the number of queries and of keys
    used (None: the ones asked for); keys_as_queries: n_keys ignored (as many keys as queries); axis:
    the softmax axis; keys_of_bits: a key of ``_KEYS_OF_BITS``.
    """

    divisor: Callable[[int, bool], float]
    tokens: int | None = None
    keys_as_queries: bool = False
    axis: int = -1
    keys_of_bits: str = "right"


_RIGHT = _Way(lambda d_k, scaled: math.sqrt(d_k) if scaled else 1.0)
# Message -> the mistake. A mistake is named only when it explains every case of the check, so that
# a mistake that happens to agree with one case (the number of tokens barely matters to an unscaled
# large d_k, whose rows are one-hot) is never named for an answer it does not explain.
_MISTAKES: dict[str, _Way] = {
    "the scores were divided by d_k instead of sqrt(d_k), so every row is pushed toward uniform":
        _Way(lambda d_k, scaled: float(d_k) if scaled else 1.0),
    "the value matches scaled=True whatever `scaled` says: pass `scaled` on to attention_scores":
        _Way(lambda d_k, scaled: math.sqrt(d_k)),
    "the value matches scaled=False whatever `scaled` says: pass `scaled` on to attention_scores":
        _Way(lambda d_k, scaled: 1.0),
    "the values match the opposite of `scaled`: scaled=True divides the scores by sqrt(d_k), scaled=False not":
        _Way(lambda d_k, scaled: 1.0 if scaled else math.sqrt(d_k)),
    "the value matches 8 tokens: use the n_tokens argument for Q and n_keys for K": _Way(_RIGHT.divisor, tokens=8),
    # attention_scores(K, Q) has n_keys rows over n_tokens queries: each row has the law of a row of n_keys =
    # n_tokens, so the two mistakes give the same mean and one message names both.
    "the rows ran over n_tokens entries, not n_keys: either K was drawn with n_tokens rows (draw it with n_keys) "
    "or the scores were attention_scores(K, Q) (they are Q K^T: one row per query, one column per key)":
        _Way(_RIGHT.divisor, keys_as_queries=True),
    "the softmax ran over the queries (axis 1): each row of weights must sum to 1 over the keys, axis=-1":
        _Way(_RIGHT.divisor, axis=-2),
    "that is 2 to the power of the mean entropy: average effective_keys over all rows instead":
        _Way(_RIGHT.divisor, keys_of_bits="power-of-mean"),
    "the value matches exp of an entropy in bits per row: check effective_keys":
        _Way(_RIGHT.divisor, keys_of_bits="exp-of-bits"),
    "the value matches 2 to the power of an entropy in nats per row: check row_entropy's base":
        _Way(_RIGHT.divisor, keys_of_bits="two-to-nats"),
}


class _MonteCarlo:
    """The grader's Monte Carlo reference of one case: mean effective keys per draw, for every way.

    Queries and keys are drawn once per numbers of queries and keys and shared by every way, so naming a
    mistake costs softmaxes, not new draws.
    """

    def __init__(self, rng: np.random.Generator, d_k: int, scaled: bool, n_tokens: int, n_keys: int, n_ref: int):
        self.d_k, self.scaled, self.n_tokens, self.n_keys, self.n_ref = d_k, scaled, n_tokens, n_keys, n_ref
        self.rng = rng
        self._raw: dict[tuple[int, int], np.ndarray] = {}

    def raw(self, t_q: int, t_k: int) -> np.ndarray:
        """(n_ref, t_q, t_k) raw scores of fresh standard normal queries and keys."""
        if (t_q, t_k) not in self._raw:
            Q = self.rng.standard_normal((self.n_ref, t_q, self.d_k))  # (n_ref, T_q, d_k)
            K = self.rng.standard_normal((self.n_ref, t_k, self.d_k))  # (n_ref, T_k, d_k)
            self._raw[(t_q, t_k)] = Q @ K.swapaxes(-2, -1)  # (n_ref, T_q, T_k)
        return self._raw[(t_q, t_k)]

    def per_draw(self, way: _Way) -> np.ndarray:
        """(n_ref,) mean effective keys of each draw, computed ``way``."""
        t_q = way.tokens or self.n_tokens
        t_k = way.tokens or (self.n_tokens if way.keys_as_queries else self.n_keys)
        raw = self.raw(t_q, t_k)  # (n_ref, T_q, T_k)
        with np.errstate(divide="ignore", invalid="ignore"):
            weights = softmax(raw / way.divisor(self.d_k, self.scaled), axis=way.axis)  # (n_ref, T, T)
            bits = entropy(weights, base=2.0)  # (n_ref, T)
        return _KEYS_OF_BITS[way.keys_of_bits](bits)


def _near(got: float, per_draw: np.ndarray, n_draws: int) -> bool:
    """Whether the student's mean over ``n_draws`` draws agrees with the grader's draws of the same experiment.

    Draws are independent, so a mean over n draws has standard error s / sqrt(n), with s the SD of
    one draw's mean (estimated from the grader's n_ref draws). The difference between the student's
    mean and the grader's has SE s * sqrt(1/n_draws + 1/n_ref).
    """
    se = per_draw.std(ddof=1) * math.sqrt(1.0 / n_draws + 1.0 / len(per_draw))
    return bool(abs(got - per_draw.mean()) <= Z_SIGMA * se + 1e-9)


def check_mean_effective_keys(mean_effective_keys: Callable) -> None:
    """Mean effective keys on fresh d_k, n_tokens != 8, n_keys != n_tokens, scaled and not, against a Monte Carlo."""
    # the experiment alone: the attention_scores and effective_keys it calls are the grader's
    mean_effective_keys = given(mean_effective_keys, attention_scores=graders_attention_scores,
                                effective_keys=graders_effective_keys)
    rng = fresh_rng()
    n_draws, n_ref = 250, 1000
    # 12 to 16 queries, never the lesson's 8: with fewer, a softmax over the queries (axis 1) gives nearly the
    # same mean (under 3 standard errors apart at 7 tokens), with 12 or more it is 10 to 15 apart at a large d_k.
    # Keys: half or twice as many as queries. With T_q = T_k and Q, K both standard normal, attention_scores(K, Q)
    # has the law of Q K^T, so no sample could tell it; with T_k = T_q / 2 or 2 T_q its rows run over T_q
    # entries instead of T_k and the scaled small-d_k mean moves by far more than 5 standard errors.
    n_tokens = int(rng.choice([12, 14, 16]))
    n_keys = int(rng.choice([n_tokens // 2, 2 * n_tokens]))
    small, large = int(rng.integers(3, 9)), int(rng.integers(120, 400))
    cases = []  # (what, the student's number, the grader's Monte Carlo of that case)
    for d_k, scaled in ((large, False), (large, True), (small, True)):
        what = (f"mean_effective_keys(d_k={d_k}, rng, scaled={scaled}, n_draws={n_draws}, n_tokens={n_tokens}, "
                f"n_keys={n_keys})")
        got = ask_number(mean_effective_keys, d_k, np.random.default_rng(seed(rng)), scaled=scaled, n_draws=n_draws,
                         n_tokens=n_tokens, n_keys=n_keys, what=what, hint=ONE_NUMBER)
        cases.append((what, got, _MonteCarlo(rng, d_k, scaled, n_tokens, n_keys, n_ref)))
    for what, got, mc in cases:
        if _near(got, mc.per_draw(_RIGHT), n_draws):
            continue
        hint = next((message for message, way in _MISTAKES.items()
                     if all(_near(g, m.per_draw(way), n_draws) for _, g, m in cases)), None)
        fail(what, f"got {got:.4g}, outside the range the sample size allows", hint or
             "Draw Q as (n_draws, n_tokens, d_k) and K as (n_draws, n_keys, d_k) standard normals from rng, take "
             "the softmax of attention_scores(Q, K, scaled) over the keys and average effective_keys over every row.")
    what = "mean_effective_keys(d_k=5, rng, scaled=True, n_draws=20, n_tokens=6)"
    reproducible(lambda g: ask_number(mean_effective_keys, 5, g, scaled=True, n_draws=20, n_tokens=6, what=what,
                                      hint=ONE_NUMBER), what, rng)
