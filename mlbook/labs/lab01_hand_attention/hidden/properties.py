"""Hidden checks of lab 1, section 6: the student's property checks, judged on rows the grader builds."""

from __future__ import annotations

import numpy as np

from ...kit import boolean, call_student, data_array, fail, fresh_rng, quiet, softmax

# --- 6: property checks ---------------------------------------------------------------------


def check_property_checks(rows_are_distributions, outputs_in_value_range) -> None:
    rng = fresh_rng()
    T_q, T_k, d_v = 5, 7, 3
    good = softmax(rng.normal(size=(T_q, T_k)) * 2)  # (T_q, T_k)
    negative = good.copy()
    negative[0] = 0.0
    negative[0, :2] = (1.2, -0.2)  # row 0 sums to 1 but has a negative weight
    offsetting = good.copy()
    offsetting[1] *= 1.01
    offsetting[3] *= 0.99  # rows 1 and 3 sum to 1.01 and 0.99: the total and the mean row sum are still right
    nan_row = good.copy()
    nan_row[int(rng.integers(T_q))] = np.nan  # one row of NaN, as an overflowed softmax gives
    causal = np.tril(np.ones((T_q, T_k), dtype=bool))  # (T_q, T_k): True where key j <= query i
    masked = softmax(np.where(causal, rng.normal(size=(T_q, T_k)), -np.inf))  # (T_q, T_k): exact zeros, row 0 one-hot
    loose = good * (1 + 1e-4)  # (T_q, T_k): every row sums to 1.0001
    _expect_verdicts(rows_are_distributions, "rows_are_distributions", {
        "valid random weights": ((good,), True),
        "one row summing to 1.01": ((good + np.eye(T_q, T_k) * 0.01,), False),
        "a negative weight with rows still summing to 1": ((negative,), False,
            "A weight is negative although its row sums to 1: a distribution also needs every weight >= -atol."),
        "one row summing to 1.01 and another to 0.99 (the total and the mean row sum are right)": ((offsetting,), False,
            "Each row must sum to 1 on its own: checking the total or the mean of the row sums lets one row's excess "
            "cancel another's shortfall."),
        "causal weights (exact zeros on the masked keys, a one-hot first row)": ((masked,), True,
            "A weight of exactly 0 (a masked key) is allowed: non-negative means >= -atol, not > 0 or >= atol."),
        "rows summing to 1.0001, with atol=1e-3": ((loose, 1e-3), True,
            "Use the atol you are given: rows within atol of 1 sum to 1."),
        "rows summing to 1.0001, with atol=1e-5": ((loose, 1e-5), False,
            "Use the atol you are given: a row 1e-4 off is not within 1e-5 of 1."),
        "one row of NaN": ((nan_row,), False,
            "A NaN row is no distribution: every comparison with NaN is False, so a test that looks only for "
            "violations (any(w < -atol), any(|sum - 1| > atol)) lets it pass; test that the property holds."),
        "columns (not rows) summing to 1": ((softmax(rng.normal(size=(T_q, T_k)), axis=0),), False),
    }, "Check non-negativity and that each row (last axis) sums to 1 within atol.")
    # Columns of V on different scales (column c spread 2 ** c): a range taken over the whole of V
    # instead of per column then contains coordinates that lie outside their own column's range.
    V = rng.normal(size=(T_k, d_v)) * 2.0 ** np.arange(d_v)  # (T_k, d_v)
    inside = good @ V  # (T_q, d_v)
    low_top, high_bottom = int(V.max(axis=0).argmin()), int(V.min(axis=0).argmax())  # columns inside V's overall range
    just_above = inside.copy()
    just_above[2, low_top] = V[:, low_top].max() + 1e-3  # one coordinate slightly above its own column
    just_below = inside.copy()
    just_below[1, high_bottom] = V[:, high_bottom].min() - 1e-3  # one coordinate slightly below its own column
    at_the_edge = inside.copy()
    at_the_edge[0] = V.max(axis=0) + 1e-9  # (d_v,): every coordinate on its column's largest value, plus rounding
    _expect_verdicts(outputs_in_value_range, "outputs_in_value_range", {
        "real attention outputs": ((inside, V), True),
        "an output on the largest value of every column, 1e-9 above it by rounding": ((at_the_edge, V), True,
            "An output may equal a value (a one-hot row of weights) and rounding may push it 1e-9 past it: "
            "compare with <= and >= and allow atol."),
        "one coordinate 1e-3 above the largest value of its column": ((just_above, V), False),
        "one coordinate 1e-3 below the smallest value of its column": ((just_below, V), False),
        "outputs below every value": ((inside - 10.0 * 2.0 ** d_v, V), False),
    }, "Compare each output column with the min and max of the same column of V (over the keys axis), not with "
       "the range of the whole of V.")


def _expect_verdicts(check, name: str, cases: dict[str, tuple], hint: str) -> None:
    """Call the student's property check ``name`` on each case.

    Args:
        cases: label -> (its array arguments, the verdict due), or (arguments, verdict, the advice for that case).
        hint: the advice for a case without its own.
    """
    for label, (args, expected, *advice) in cases.items():
        what = f"{name} on {label}"
        got = _verdict(check, args, what)
        if got != expected:
            fail(what, f"returned {got}", advice[0] if advice else hint)


def _verdict(check, args: tuple, what: str) -> bool:
    """The student's verdict on copies of ``args``: a truth value, NumPy's np.True_ (what np.all returns)
    included, which crosses from the kernel as a one-entry boolean array; never a number."""
    with quiet():
        res = call_student(check, *(a.copy() if isinstance(a, np.ndarray) else a for a in args), what=what)
    arr = None if isinstance(res, (bool, list, tuple)) else data_array(res)
    if arr is not None and arr.dtype.kind == "b" and arr.size == 1:
        res = arr.reshape(())
    return boolean(res, what, "A property check returns True (the property holds) or False (it is violated).")
