"""Probe inputs for ``mlbook mutate``: inputs on which a mutant of a reference answer may differ.

Interface (every lab's ``probes.py``; every name optional):
- ``PROBES[name](seed)`` -> a list of ``(args, kwargs)`` to call the answer function ``name`` with;
  the analysis calls the reference and the mutant on deep copies of each, from the same torch
  seed, and compares their outputs (and the arguments after the call).
- ``DRIVERS[name]`` -> functions ``driver(impl, seed)`` for answers that are not simply called (a
  class, a cell of values): each returns an output computed with ``impl``, compared the same way.
- ``FLOAT32_ACCEPTED`` -> the answers the lab's text lets compute in float32: their outputs are
  compared at float32's precision, a float32 result matching a float64 one.
The checks' own calls (on fresh seeds, and again in the other float precision) are replayed as
well; probes add the edge cases the draws may not reach: one token, a single key, ties, float32.
"""

import numpy as np


def _softmax_rows(seed):
    rng = np.random.default_rng(seed)
    return [((rng.normal(size=(1, 1)),), {}), ((rng.normal(size=(3, 5)) * 30,), {}),
            ((np.zeros((2, 4)),), {}), ((rng.normal(size=(4, 3)).astype(np.float32),), {})]


def _attention(seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(1, 4)), rng.normal(size=(1, 4)), rng.normal(size=(1, 3))
    Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    mask = rng.random((3, 5)) > 0.4
    mask[:, 0] = True
    return [((q, k, v), {}), ((Q, K, V), {}), ((Q, K, V), {"mask": mask})]


def _spearman(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=7)
    return [((a, 2 * a + 1), {}), ((a, -a), {}), ((a, rng.normal(size=7)), {}),
            ((np.array([1.0, 2.0, 2.0, 3.0]), np.array([4.0, 1.0, 1.0, 0.0])), {})]


def _rows_are_distributions(seed):
    rng = np.random.default_rng(seed)
    w = rng.random((3, 4))
    w /= w.sum(axis=-1, keepdims=True)  # (3, 4): valid rows
    off = w.copy()
    off[0] *= 1.01
    off[1] *= 0.99  # (3, 4): the total and the mean row sum still right
    nan = w.copy()
    nan[2] = np.nan
    return [((w,), {}), ((off,), {}), ((nan,), {}), ((w[:1],), {})]


def _spearman_constant(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=6)
    return [((a, np.full(6, 2.0)), {}), ((np.zeros(5), rng.normal(size=5)), {})]


def _spearman_all(seed):
    return _spearman(seed) + _spearman_constant(seed)


# Section "Precision" of the lab: float32 answers are correct too (the hidden checks' tolerance follows the dtype).
FLOAT32_ACCEPTED = {"softmax_rows", "project_qkv", "attention", "row_attention"}

PROBES = {"softmax_rows": _softmax_rows, "attention": _attention, "spearman": _spearman_all,
          "rows_are_distributions": _rows_are_distributions}
DRIVERS: dict = {}
