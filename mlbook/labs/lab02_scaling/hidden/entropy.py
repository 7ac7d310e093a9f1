"""Entropy of attention rows: ``row_entropy`` in any base and ``effective_keys``."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...kit import ask_array, close, compare, entropy, first_bad, fresh_rng, given
from .graders import graders_row_entropy


def _test_weights(rng: np.random.Generator) -> np.ndarray:
    """(2, 4, T_k) weight rows with T_k != 8, including a one-hot row, a uniform row and zeros."""
    t_k = int(rng.choice([5, 6, 7, 9, 10, 11]))
    w = rng.dirichlet(np.full(t_k, 0.7), size=(2, 4))  # (2, 4, T_k)
    w[0, 1] = np.eye(t_k)[rng.integers(t_k)]  # one key takes everything: entropy 0
    w[1, 2] = 1.0 / t_k  # uniform: entropy log T_k
    w[0, 3, : t_k // 2] = 0.0  # masked keys: exact zeros
    w[0, 3] /= w[0, 3].sum()
    return w


def check_row_entropy(row_entropy: Callable) -> None:
    """Entropy of each row of a (2, 4, T_k) batch with zeros, one-hot and uniform rows, in bits and nats."""
    rng = fresh_rng()
    w = _test_weights(rng)  # (2, 4, T_k)
    nats = entropy(w)  # (2, 4)
    bits = entropy(w, base=2.0)  # (2, 4)
    # compare's 1e-6 admits an epsilon inside the log, log(a + eps): each weight moves its term by at most
    # a log(1 + eps / a) <= eps, so a row of T_k <= 11 keys moves by under 11 eps / ln 2 = 1.6e-7 bits at eps = 1e-8.
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


def check_effective_keys(effective_keys: Callable) -> None:
    """2 ** (entropy in bits) of each row, on rows with zeros, a one-hot row and a uniform row."""
    # effective_keys alone: the row_entropy it calls is the grader's (a wrong row_entropy costs its own cells)
    effective_keys = given(effective_keys, row_entropy=graders_row_entropy)
    rng = fresh_rng()
    w = _test_weights(rng)  # (2, 4, T_k)
    bits, nats = entropy(w, base=2.0), entropy(w)  # (2, 4) each
    want = 2.0**bits  # (2, 4)
    what = f"effective_keys(weights of shape {w.shape})"
    got = ask_array(effective_keys, w.copy(), what=what)
    t_k = w.shape[-1]
    # The uniform row (1, 2) and the one-hot row (0, 1) are right for several measures of spread: say so, so
    # that a student whose ends are right looks for the measure, not the ends.
    ends_right = got.shape == want.shape and close(got[1, 2], t_k, atol=1e-6) and close(got[0, 1], 1.0, atol=1e-6)
    hint = ("Your uniform and one-hot rows are right but the others are not: effective keys are 2 ** (the row's "
            "entropy in bits), not another count of the keys in use." if ends_right else
            "A uniform row over T keys has T effective keys and a one-hot row has 1.")
    compare(got, want, what, hint,
            shape_hint="One number per row: the rows run over the last axis.",
            observed=lambda got: f"{first_bad(got, want, atol=1e-6, rtol=1e-6)} (a uniform row over {t_k} keys "
                                 f"gave {float(got[1, 2]):.4g}, a one-hot row {float(got[0, 1]):.4g})", mistakes={
        "exp of an entropy in bits: use 2 ** H_bits (or exp of H in nats)": np.exp(bits),
        "2 to the power of an entropy in nats: use 2 ** H_bits (or exp of H in nats)": 2.0**nats,
        "returned the entropy in bits itself: effective keys are 2 ** H_bits": bits,
        "returned the entropy in nats itself: effective keys are exp(H_nats) = 2 ** H_bits": nats,
        "that is 1 / sum_j a_j^2 (the inverse participation ratio), another measure of spread: effective keys here "
        "are 2 ** H_bits, from the entropy": 1.0 / (w**2).sum(axis=-1),
        "that counts the keys with a non-zero weight: effective keys are 2 ** H_bits, which weighs each key by "
        "its weight": (w > 0).sum(axis=-1).astype(float),
    })
