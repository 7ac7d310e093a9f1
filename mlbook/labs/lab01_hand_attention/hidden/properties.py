"""Hidden checks of lab 1, section 6: the student's property checks, judged on rows the grader builds."""

from __future__ import annotations

import numpy as np

from ...kit import ask_boolean, fail, fresh_rng, softmax

# --- 6: property checks ---------------------------------------------------------------------


def check_property_checks(rows_are_distributions, outputs_in_value_range) -> None:
    rng = fresh_rng()
    T_q, T_k, d_v = 5, 7, 3
    good = softmax(rng.normal(size=(T_q, T_k)) * 2)  # (T_q, T_k)
    negative = good.copy()
    negative[0] = 0.0
    negative[0, :2] = (1.2, -0.2)  # row 0 sums to 1 but has a negative weight
    _expect_verdicts(rows_are_distributions, "rows_are_distributions", {
        "valid random weights": ((good,), True),
        "one row summing to 1.01": ((good + np.eye(T_q, T_k) * 0.01,), False),
        "a negative weight with rows still summing to 1": ((negative,), False),
        "columns (not rows) summing to 1": ((softmax(rng.normal(size=(T_q, T_k)), axis=0),), False),
    }, "Check non-negativity and that each row (last axis) sums to 1 within atol.")
    V = rng.normal(size=(T_k, d_v))  # (T_k, d_v)
    inside = good @ V  # (T_q, d_v)
    just_above = inside.copy()
    just_above[2, 1] = V[:, 1].max() + 1e-3  # one coordinate slightly outside
    _expect_verdicts(outputs_in_value_range, "outputs_in_value_range", {
        "real attention outputs": ((inside, V), True),
        "one coordinate 1e-3 above every value": ((just_above, V), False),
        "outputs below every value": ((inside - 10.0, V), False),
    }, "Compare each output column with the min and max of the same column of V (over the keys axis).")


def _expect_verdicts(check, name: str, cases: dict[str, tuple[tuple, bool]], hint: str) -> None:
    """Call the student's property check ``name`` on each case: label -> (its array arguments, the verdict due)."""
    for label, (args, expected) in cases.items():
        what = f"{name} on {label}"
        got = ask_boolean(check, *(a.copy() for a in args), what=what)
        if got != expected:
            fail(what, f"returned {got}", hint)
