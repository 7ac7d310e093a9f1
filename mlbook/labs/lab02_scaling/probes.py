"""Probe inputs for ``mlbook mutate``: inputs on which a mutant of a reference answer may differ.

Interface (every lab's ``probes.py``; every name optional):
- ``PROBES[name](seed)`` -> a list of ``(args, kwargs)`` to call the answer function ``name`` with;
  the analysis calls the reference and the mutant on deep copies of each, from the same torch
  seed, and compares their outputs (and the arguments after the call).
- ``DRIVERS[name]`` -> functions ``driver(impl, seed)`` for answers that are not simply called.
- ``TOLERANCES[name]`` -> the relative tolerance the lab states for answer ``name``'s outputs: the
  differential test treats outputs within it as the same (the constant is the check's own).
The checks' own calls (on fresh seeds, and again in the other float precision) are replayed as
well; probes add the edge cases the draws may not reach, each within the answer's documented
contract: a single query or key, T_q != T_k, unbatched and 4-d batches, one-hot and single-key
rows, base 10, zero steps, an empty linear-attention state.
Shapes follow the lab: Q (..., T_q, d_k), K (..., T_k, d_k), weights (..., T_k).
"""

import numpy as np

from .hidden.temperature import TAU_RTOL


def _dot_product_std(seed):
    rng = np.random.default_rng(seed)
    return [((1, 50, np.random.default_rng(rng.integers(2**32))), {}),  # d_k = 1: one product per pair
            ((7, 2, np.random.default_rng(rng.integers(2**32))), {})]  # two pairs: the smallest sample with a spread


def _scores(seed):
    rng = np.random.default_rng(seed)
    return [((rng.normal(size=(1, 3)), rng.normal(size=(5, 3))), {}),  # one query, five keys: (1, 5)
            ((rng.normal(size=(4, 1)), rng.normal(size=(2, 1))), {"scaled": False}),  # d_k = 1
            ((rng.normal(size=(2, 3, 4, 6)), rng.normal(size=(2, 3, 7, 6))), {}),  # 4-d batch, T_q != T_k
            ((rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(2, 5)).astype(np.float32)), {})]


def _weights(rng):
    """(3, 6) rows: a Dirichlet row, a one-hot row and a row with two zero weights."""
    w = rng.dirichlet(np.ones(6), size=3)  # (3, 6)
    w[1] = np.eye(6)[rng.integers(6)]
    w[2, :2] = 0.0
    w[2] /= w[2].sum()
    return w


def _row_entropy(seed):
    rng = np.random.default_rng(seed)
    w = _weights(rng)  # (3, 6)
    return [((w, 10), {}), ((w[0], 2), {}),  # base 10; one 1-d row
            ((np.ones((2, 1)), np.e), {}),  # a single key: entropy 0
            ((w.astype(np.float32), 2), {})]


def _effective_keys(seed):
    rng = np.random.default_rng(seed)
    w = _weights(rng)  # (3, 6)
    return [((w,), {}), ((w[2],), {}), ((np.ones((2, 1)),), {}), ((rng.dirichlet(np.ones(4), size=(2, 3, 5)),), {})]


def _mean_effective_keys(seed):
    rng = np.random.default_rng(seed)
    gen = lambda: np.random.default_rng(rng.integers(2**32))  # noqa: E731 - a fresh generator per probe
    return [((6, gen()), {"n_draws": 5, "n_tokens": 3, "n_keys": 10}),  # fewer queries than keys
            ((6, gen()), {"scaled": False, "n_draws": 5, "n_tokens": 10, "n_keys": 2}),  # more queries than keys
            ((4, gen()), {"n_draws": 1, "n_tokens": 1}),  # one draw of one token: 1 effective key
            ((4, gen()), {"n_draws": 3, "n_tokens": 5, "n_keys": None})]


def _softmax_jacobian(seed):
    rng = np.random.default_rng(seed)
    return [((np.ones(1),), {}),  # one entry: the Jacobian is 0
            ((np.eye(4)[rng.integers(4)],), {}),  # one-hot: saturated, the Jacobian is 0
            ((rng.dirichlet(np.ones(5), size=(2, 3)),), {})]


def _learn_temperature(seed):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))  # unbatched, T_q != T_k
    Y = rng.normal(size=(3, 2))  # (T_q, d_v): targets no temperature makes exactly
    return [((Q, K, V, Y), {"steps": 0}),  # no step: tau = 1
            ((Q, K, V, Y), {"steps": 3, "lr": 0.7}),
            ((Q[None], K[None], V[None], Y[None]), {"steps": 2, "lr": 2.0})]


def _qk_norm_scores(seed):
    rng = np.random.default_rng(seed)
    return [((rng.normal(size=(1, 3)), rng.normal(size=(4, 3)), 2.5), {}),
            ((rng.normal(size=(2, 3, 5)) * 100, rng.normal(size=(2, 6, 5)) * 0.01, 1.0), {}),  # norms far from 1
            ((rng.normal(size=(2, 1)), rng.normal(size=(3, 1)), -1.0), {})]  # d_k = 1: cosines +-1; a negative gain


def _nadaraya_watson(seed):
    rng = np.random.default_rng(seed)
    return [((rng.normal(size=(4, 2)), rng.normal(size=(1, 2)), rng.normal(size=(1, 3)), 0.5), {}),  # one example
            ((rng.normal(size=(1, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2)), 3.0), {}),  # one query
            ((rng.normal(size=(3, 1)), rng.normal(size=(5, 1)), rng.normal(size=(5, 1)), 0.05), {})]  # sharp kernel


def _linear_attention_step(seed):
    rng = np.random.default_rng(seed)
    d_k, d_v = 3, 2
    empty = (np.zeros((d_k, d_v)), np.zeros(d_k))  # S, z before the first token
    full = (rng.normal(size=(d_k, d_v)), rng.uniform(1.0, 3.0, size=d_k))  # after some tokens: z > 0
    q, k, v = rng.normal(size=d_k), rng.normal(size=d_k), rng.normal(size=d_v)
    return [((empty, q, k, v), {}), ((full, q, k, v), {}), ((full, -5 * q, 5 * k, v), {})]


PROBES = {"dot_product_std": _dot_product_std, "attention_scores": _scores, "row_entropy": _row_entropy,
          "effective_keys": _effective_keys, "mean_effective_keys": _mean_effective_keys,
          "softmax_jacobian": _softmax_jacobian, "learn_temperature": _learn_temperature,
          "qk_norm_scores": _qk_norm_scores, "nadaraya_watson": _nadaraya_watson,
          "linear_attention_step": _linear_attention_step}
DRIVERS: dict = {}
TOLERANCES = {"learn_temperature": TAU_RTOL}  # tau in float32 is accepted: hidden/temperature.py says why
