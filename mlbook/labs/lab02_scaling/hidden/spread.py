"""The spread of q . k: ``dot_product_std`` against the law SD = sqrt(d_k), and its generator."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...kit import ask_number, fail, fresh_rng, reproducible, seed
from ._common import Z_SIGMA, ONE_NUMBER


def _diagnose_spread(got: float, d_k: int, n_pairs: int, what: str, z: float, repeated: np.ndarray) -> None:
    """Fail naming the mistake ``got`` shows: a value a known mistake gives, or seeds that scatter (``repeated``:
    the d_k = 4 answers over sqrt(4)), else how far it is from the law."""
    ratio = got / math.sqrt(d_k)
    if got > 3 * math.sqrt(d_k) and abs(got / math.sqrt(n_pairs) - 1) < 0.5:
        fail(what, f"got {got:.4g}, which grows with n_pairs rather than with d_k",
             "The standard deviation was taken over the wrong axis: sum the products over the d_k "
             "components of each pair (axis=-1), then take the spread across the n_pairs sums.")
    # Six seeds of a right answer scatter by the sampling error (relative SE 2.1%); a variance scatters by twice
    # that, reused vectors by a third: 5 relative SEs tell the last apart.
    if repeated.mean() > 0 and repeated.std(ddof=1) / repeated.mean() > 5 * _relative_se(4, 2000):
        fail(what, f"got {got:.4g}; at d_k = 4 six seeds gave {np.round(repeated * 2, 3).tolist()}, which scatter "
             "far more than 2000 pairs allow",
             "The pairs are not independent: draw a new q for every k, as two (n_pairs, d_k) standard normal "
             "arrays (one q drawn once and reused measures |q|, not the spread of q . k).")
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


def _relative_se(d_k: int, n_pairs: int) -> float:
    """Standard error of a sample SD of n_pairs dot products, relative to sqrt(d_k).

    X = q . k is a sum of d_k i.i.d. products q_c k_c with variance 1 and E[(q_c k_c)^4] =
    E[q^4] E[k^4] = 9, i.e. excess kurtosis 6; a sum of d_k of them has variance d_k and kurtosis
    kappa = 3 + 6 / d_k. The delta method gives the standard error of a sample SD of n draws:
    SE(s) = sigma * sqrt((kappa - 1) / (4 n)), so SE(s / sqrt(d_k)) = sqrt((2 + 6 / d_k) / (4 n)):
    0.65% to 1.4% for n = 6000, 2.1% for d_k = 4 and n = 2000.
    """
    return math.sqrt((2.0 + 6.0 / d_k) / (4.0 * n_pairs))


def check_dot_product_std(dot_product_std: Callable) -> None:
    """Spread of q . k on fresh d_k, against the law SD = sqrt(d_k), plus reproducibility."""
    rng = fresh_rng()
    # Largest d_k first: a wrong-axis sum has only d_k samples, so it is recognised best there. Then six
    # seeds at d_k = 4: pairs that are not independent (one q drawn once and reused for every k) give
    # |q| instead of sqrt(d_k), which scatters by a third between seeds at d_k = 4, far beyond the
    # sampling error: six seeds all within it happen about once in 8,000 such answers.
    cases = [(int(rng.integers(150, 400)), 6000), (int(rng.integers(30, 100)), 6000), (int(rng.integers(3, 12)), 6000),
             *[(4, 2000)] * 6]
    results = []  # (what, d_k, n_pairs, the student's number)
    for d_k, n_pairs in cases:
        what = f"dot_product_std(d_k={d_k}, n_pairs={n_pairs}, rng)"
        got = ask_number(dot_product_std, d_k, n_pairs, np.random.default_rng(seed(rng)), what=what, hint=ONE_NUMBER)
        results.append((what, d_k, n_pairs, got))
    repeated = np.array([got for _, d_k, _, got in results[3:]]) / 2.0  # (6,): the d_k = 4 seeds, over sqrt(4)
    for what, d_k, n_pairs, got in results:
        rel_se = _relative_se(d_k, n_pairs)
        z = abs(got / math.sqrt(d_k) - 1.0) / rel_se
        if z <= Z_SIGMA:
            continue
        _diagnose_spread(got, d_k, n_pairs, what, z, repeated)
    what = "dot_product_std(d_k=7, n_pairs=500, rng)"
    reproducible(lambda g: ask_number(dot_product_std, 7, 500, g, what=what, hint=ONE_NUMBER), what, rng)
