"""The softmax Jacobian: ``softmax_jacobian`` on one row and on a batch."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...kit import ask_array, compare, fresh_rng


def check_softmax_jacobian(softmax_jacobian: Callable) -> None:
    """diag(a) - a a^T for one fresh row and for a (2, 3, T) batch of rows."""
    rng = fresh_rng()
    t = int(rng.choice([4, 5, 6, 7, 9]))
    for a in (rng.dirichlet(np.ones(t)), rng.dirichlet(np.ones(t), size=(2, 3))):
        what = f"softmax_jacobian(a of shape {a.shape})"
        outer = a[..., :, None] * a[..., None, :]  # (..., T, T)
        diag = a[..., :, None] * np.eye(t)  # (..., T, T)
        want = diag - outer  # (..., T, T)
        got = ask_array(softmax_jacobian, a.copy(), what=what, named=_batch_error(a))
        compare(got, want, what, "Entry (i, j) is a_i (1[i = j] - a_j); every row sums to 0.",
                shape_hint=_ONE_PER_ROW,
                observed=_row_sums, mistakes={
            "the diagonal term diag(a) is missing": -outer,
            "only the diagonal a_i (1 - a_i) is there: the off-diagonal entries are -a_i a_j": diag - a[..., :, None] ** 2 * np.eye(t),
            "the sign is flipped: J = diag(a) - a a^T": -want,
            "the product a * a is elementwise, so each row subtracts a_j^2: a a^T is the outer product, with entries a_i a_j": diag - (a**2)[..., None, :],
            "a^T a is an inner product (one number): the Jacobian subtracts the outer product a a^T": diag - (a**2).sum(-1)[..., None, None],
        })


_ONE_PER_ROW = ("One (T, T) matrix per row: np.diag and np.outer handle a single vector only; for a batch, build the "
                "diagonal and the outer product by broadcasting over a new axis (a[..., :, None] * a[..., None, :]).")


def _batch_error(a: np.ndarray) -> Callable[[str, str], tuple[str, str] | None]:
    """A ``named=`` hook: an error on a batch of rows, which np.diag and np.outer (one vector only) give."""
    def named(kind: str, text: str) -> tuple[str, str] | None:
        if a.ndim > 1 and kind in ("ValueError", "RuntimeError"):
            return f"raised {kind} on a batch of rows: {text[:160]}", _ONE_PER_ROW
        return None

    return named


def _row_sums(got: np.ndarray) -> str:
    sums = (np.round(got.sum(axis=-1).ravel()[:3], 4) + 0.0).tolist()  # the first rows' sums, no negative zeros
    return f"rows of your Jacobian sum to {sums}"
