"""Attention as kernel regression: ``nadaraya_watson``."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...kit import array, call_student, compare, float_tolerance, fresh_rng, quiet, softmax


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
        with quiet():
            result = call_student(nadaraya_watson, xq.copy(), xk.copy(), y.copy(), h, what=what)
        got = array(result, what, finite=False)  # nan: diagnosed below
        # A float32 answer is correct too: its tolerance follows the dtype it was computed in.
        tol = 1e-7 if str(getattr(result, "dtype", "float64")).endswith("float64") else float_tolerance("float32")["atol"]
        kernel_sum = lambda s: np.exp(s - s.max(axis=-1, keepdims=True))  # noqa: E731
        compare(got, want, what, "Weights softmax(-|x - x_j|^2 / (2 h^2)) over the examples j, then the weighted "
                "average of y_train.", atol=tol, rtol=tol,
                shape_hint="One prediction per query point, with the width of y_train: weights (T_q, T_k) @ y_train "
                           "(T_k, d_v).",
                nonfinite=("returned nan or inf", "exp(-|x - x_j|^2 / (2 h^2)) underflows to 0 for every example "
                           "when h is small, and 0 / 0 is nan: take a softmax of the scores (subtract each row's max) "
                           "instead."), mistakes={
            "the bandwidth was not squared: the Gaussian kernel is exp(-|x - x_j|^2 / (2 h^2))":
                lambda: softmax(-sq / (2 * h)) @ y,
            "the factor 2 is missing: the Gaussian kernel is exp(-|x - x_j|^2 / (2 h^2))":
                lambda: softmax(-sq / (h * h)) @ y,
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
