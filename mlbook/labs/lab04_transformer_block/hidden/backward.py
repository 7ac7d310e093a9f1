"""The NumPy attention: forward, backward and the score-bias gradient (torch autograd in float64
is the reference, through the kit's ``attention_grads``)."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...kit import (Misconception, array, ask_items, attention, attention_grads, call_student, close, compare, diagnose,
                    fail, first_bad, fresh_rng, items, sentence, softmax)
from ._common import GRAD_TOL, view_error

__all__ = ["check_attention_forward", "check_attention_backward", "check_score_bias_grad"]

# The lab's gradient names and the kit's.
_KIT_NAMES = {"dQ": "dq", "dK": "dk", "dV": "dv", "dB": "dbias"}


def _np_forward(Q, K, V, allowed=None, bias=None, variant=None) -> np.ndarray:
    """What a known forward mistake returns for Y (T_q, d_v)."""
    if variant == "mask_after":
        A = attention(Q, K, V, bias=bias)[1]  # (T_q, T_k)
        return (A if allowed is None else np.where(allowed, A, 0.0)) @ V
    if variant == "fill_zero":  # masked scores set to 0 (or the scores multiplied by the mask)
        S = Q @ K.T / math.sqrt(Q.shape[-1]) + (0.0 if bias is None else bias)  # (T_q, T_k)
        return softmax(S if allowed is None else np.where(allowed, S, 0.0)) @ V
    if variant == "bias_scaled":  # the bias added before the scale, so divided by sqrt(d_k) with the dot products
        return attention(Q, K, V, allowed, None if bias is None else bias / math.sqrt(Q.shape[-1]))[0]
    scale = {"no_scale": 1.0, "scale_dk": Q.shape[-1], "scale_dv": math.sqrt(V.shape[-1])}.get(variant)
    return attention(Q, K, V, allowed, None if variant == "bias_ignored" else bias, scale=scale,
                     axis=0 if variant == "axis0" else -1)[0]


FORWARD_VARIANTS = {
    "no_scale": "scores were not divided by sqrt(d_k)",
    "scale_dk": "scores were divided by d_k instead of sqrt(d_k)",
    "scale_dv": "scores were divided by sqrt(d_v), the value width; the scale uses d_k, the query/key width",
    "axis0": "the softmax was taken over the query axis (axis 0) instead of over the keys (axis -1)",
    "mask_after": "the mask was applied after the softmax: masked scores must be filled before it, so each row still sums to 1",
    "bias_ignored": "the score bias was ignored: add it to the scaled scores before masking and the softmax",
    "bias_scaled": "the bias was added before the scale, so it was divided by sqrt(d_k) too: add it after, "
                   "S = Q K^T / sqrt(d_k) + bias",
    "fill_zero": "masked scores were set to 0 (or the scores multiplied by the mask), and exp(0) still gives those "
                 "keys weight: fill them with -inf before the softmax",
}


def _np_backward_variants(A: np.ndarray, Q, K, V, dY) -> dict[str, dict]:
    """What each known backward mistake returns for dQ, dK, dV and dB (computed lazily: some
    mistakes only have a shape when T_q = T_k)."""
    d_k = Q.shape[-1]
    r = math.sqrt(d_k)
    dA = dY @ V.T  # (T_q, T_k)
    dS = A * (dA - (dA * A).sum(-1, keepdims=True))  # (T_q, T_k)
    dS0 = A * (dA - (dA * A).sum(0, keepdims=True))  # summed over the wrong axis
    dS_nojac = A * dA  # missing the -a a^T term

    def dS_flat():
        """The row sum without keepdims, broadcast along the keys: a shape only when T_q = T_k."""
        return A * (dA - (dA * A).sum(-1)[None, :])

    return {
        "dK without transposing dS (dK = dS Q); the key gradient is dS^T Q / sqrt(d_k)":
            dict(dK=lambda: dS @ Q / r),
        "the softmax backward summed over the wrong axis: the row-wise sum (dA * A).sum runs over the keys (axis=-1)":
            dict(dQ=lambda: dS0 @ K / r, dK=lambda: dS0.T @ Q / r, dB=lambda: dS0),
        "the softmax Jacobian's off-diagonal term is missing: dS = A * (dA - rowsum(dA * A)), not A * dA":
            dict(dQ=lambda: dS_nojac @ K / r, dK=lambda: dS_nojac.T @ Q / r, dB=lambda: dS_nojac),
        "the row sum (dA * A).sum(axis=-1) lost its axis (keepdims=True is missing), so it was broadcast along the "
        "keys instead of the queries; with T_q != T_k it would not even have a shape":
            dict(dQ=lambda: dS_flat() @ K / r, dK=lambda: dS_flat().T @ Q / r, dB=dS_flat),
        "the 1/sqrt(d_k) factor of the score was dropped in dQ and dK":
            dict(dQ=lambda: dS @ K, dK=lambda: dS.T @ Q),
        "dQ and dK were divided by d_k instead of sqrt(d_k)":
            dict(dQ=lambda: dS @ K / d_k, dK=lambda: dS.T @ Q / d_k),
        "dV = A dY without transposing A; the value gradient is A^T dY":
            dict(dV=lambda: A @ dY),
        "dB was divided by sqrt(d_k): the bias is added after the scale, so dB = dS exactly":
            dict(dB=lambda: dS / r),
        "dB is dA, the gradient with respect to the weights; it must go back through the softmax: dB = dS":
            dict(dB=lambda: dA),
    }


def _backward_cases(rng: np.random.Generator) -> list[dict]:
    T = int(rng.integers(4, 8))
    d_k, d_v = int(rng.integers(3, 7)), int(rng.integers(2, 6))
    T_q, T_k = int(rng.integers(3, 7)), int(rng.integers(4, 9))
    T_k += T_k == T_q
    allowed = rng.random((T_q, T_k)) < 0.7
    allowed[np.arange(T_q), rng.integers(0, T_k, T_q)] = True  # every row keeps a key
    return [
        dict(name=f"T_q = T_k = {T}, no mask", T_q=T, T_k=T, d_k=d_k, d_v=d_v, allowed=None, bias=False),
        dict(name=f"T_q = T_k = {T}, causal mask", T_q=T, T_k=T, d_k=d_k, d_v=d_v,
             allowed=np.tril(np.ones((T, T), bool)), bias=False),
        dict(name=f"T_q = {T_q}, T_k = {T_k}, random mask and a score bias", T_q=T_q, T_k=T_k, d_k=d_k,
             d_v=d_v, allowed=allowed, bias=True),
    ]


def _draw(case: dict, rng: np.random.Generator):
    Q = rng.normal(size=(case["T_q"], case["d_k"]))  # (T_q, d_k)
    K = rng.normal(size=(case["T_k"], case["d_k"]))  # (T_k, d_k)
    V = rng.normal(size=(case["T_k"], case["d_v"]))  # (T_k, d_v)
    dY = rng.normal(size=(case["T_q"], case["d_v"]))  # (T_q, d_v)
    bias = rng.normal(size=(case["T_q"], case["T_k"])) if case["bias"] else None  # (T_q, T_k)
    return Q, K, V, dY, bias


def _reference(Q, K, V, dY, allowed, bias) -> dict[str, np.ndarray]:
    """Y and the gradients by autograd, under the lab's names (dB, the gradient of a bias, also
    where the student's forward gets none: the scores plus zeros)."""
    grads = attention_grads(Q, K, V, dY, allowed, np.zeros((len(Q), len(K))) if bias is None else bias)
    return {"Y": grads["out"], **{lab: grads[kit] for lab, kit in _KIT_NAMES.items()}}


def _run_forward(attention_forward: Callable, Q, K, V, allowed, bias, what: str):
    kwargs = {} if bias is None else {"bias": bias}
    res = ask_items(attention_forward, Q, K, V, allowed, n=2, what=what, names="the pair (Y, cache)", named=view_error,
                    **kwargs)
    return array(res[0], f"{what}: Y"), res[1]


def _forward_problem(attention_forward: Callable, case: dict, Q, K, V, bias, ref_Y) -> str | None:
    what = f"attention_forward, {case['name']}"
    Y, _ = _run_forward(attention_forward, Q, K, V, case["allowed"], bias, what)
    if Y.shape != ref_Y.shape:
        return f"{what}: Y has shape {Y.shape}; expected (T_q, d_v)."
    if close(Y, ref_Y, atol=1e-12, rtol=1e-10):
        return None
    found = diagnose(Y, {msg: (lambda v=v: _np_forward(Q, K, V, case["allowed"], bias, v))
                         for v, msg in FORWARD_VARIANTS.items()}, atol=1e-10, rtol=1e-8)
    observed = found or ("Y differs from softmax(Q K^T / sqrt(d_k) + bias, masked) V "
                         f"({first_bad(Y, ref_Y, 1e-12, 1e-10)})")
    return f"{what}: {observed}."


# Large scores, as a long-range score bias gives them (ALiBi's penalty grows with the distance): a constant
# added to a whole row of scores changes none of its weights, so offsets of about +-ROW_OFFSET on the bias's
# rows leave Y as it is; but exp then overflows (inf / inf = nan) or, after a shift by the max over the whole
# matrix, underflows in the rows far below it (0 / 0), unless each row's own max is subtracted (lab 1).
ROW_OFFSET = 1000.0
UNSTABLE = ("with scores of about +-1000 (a constant added to a row changes none of its weights) exp overflows or "
            "underflows: subtract each row's own max, S.max(axis=-1, keepdims=True), before np.exp, as lab 1's "
            "softmax does (a max over the whole matrix leaves rows far below it at exp = 0, so 0 / 0)")


def _large_scores_problem(attention_forward: Callable, rng: np.random.Generator) -> str | None:
    """The forward on a bias whose rows are offset by about +-ROW_OFFSET (both signs in every draw)."""
    T_q, T_k = int(rng.integers(3, 7)), int(rng.integers(3, 8))
    d_k, d_v = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    Q, K, V = rng.normal(size=(T_q, d_k)), rng.normal(size=(T_k, d_k)), rng.normal(size=(T_k, d_v))
    signs = rng.permutation(np.resize([1.0, -1.0], T_q))  # (T_q,): at least one row up, one down
    offsets = signs * rng.uniform(0.8, 1.2, T_q) * ROW_OFFSET  # (T_q,)
    small = rng.normal(size=(T_q, T_k))  # (T_q, T_k)
    allowed = rng.random((T_q, T_k)) < 0.7
    allowed[np.arange(T_q), rng.integers(0, T_k, T_q)] = True  # every row keeps a key
    ref_Y = attention(Q, K, V, allowed, small)[0]  # (T_q, d_v): the offsets change nothing
    what = (f"attention_forward, T_q = {T_q}, T_k = {T_k}, a random mask and a score bias whose rows are offset "
            f"by about +-{ROW_OFFSET:g}")
    res = ask_items(attention_forward, Q, K, V, allowed, n=2, what=what, names="the pair (Y, cache)",
                    named=view_error, bias=small + offsets[:, None])
    Y = array(res[0], f"{what}: Y", finite=False)
    if Y.shape != ref_Y.shape:
        return f"{what}: Y has shape {Y.shape}; expected (T_q, d_v)."
    if not np.all(np.isfinite(Y)):
        return f"{what}: Y contains nan or inf. {sentence(UNSTABLE)}"
    if close(Y, ref_Y, atol=1e-12, rtol=1e-10):
        return None
    return (f"{what}: Y differs from the same forward without the offsets ({first_bad(Y, ref_Y, 1e-12, 1e-10)}). "
            f"{sentence(UNSTABLE)}")


def check_attention_forward(attention_forward: Callable) -> None:
    """NumPy forward on fresh shapes (T_q != T_k, d_v != d_k), masks and a score bias, to 1e-12, and on
    scores of about +-1000 (row offsets of the bias, which change no weight)."""
    rng = fresh_rng()
    for case in _backward_cases(rng):
        Q, K, V, dY, bias = _draw(case, rng)
        problem = _forward_problem(attention_forward, case, Q, K, V, bias,
                                   _reference(Q, K, V, dY, case["allowed"], bias)["Y"])
        if problem:
            raise Misconception(problem)
    problem = _large_scores_problem(attention_forward, rng)
    if problem:
        raise Misconception(problem)


def _check_grads(attention_forward: Callable, backward: Callable, names: tuple[str, ...], fn_name: str) -> None:
    rng = fresh_rng()
    for case in _backward_cases(rng):
        Q, K, V, dY, bias = _draw(case, rng)
        ref = _reference(Q, K, V, dY, case["allowed"], bias)
        problem = _forward_problem(attention_forward, case, Q, K, V, bias, ref["Y"])
        if problem:
            fail(fn_name, "cannot be checked while attention_forward is wrong", problem)
        what = f"{fn_name}, {case['name']}"
        _, cache = _run_forward(attention_forward, Q, K, V, case["allowed"], bias, what)
        res = call_student(backward, dY, cache, what=what, named=view_error)
        if len(names) == 1:  # one gradient: the array itself (a one-item tuple is accepted too)
            grads = tuple(res) if isinstance(res, tuple) and len(res) == 1 else (res,)
        else:
            grads = items(res, len(names), what, ", ".join(names))
        A = attention(Q, K, V, case["allowed"], bias)[1]  # (T_q, T_k)
        variants = _np_backward_variants(A, Q, K, V, dY)
        for name, g in zip(names, grads):
            compare(array(g, f"{what}: {name}"), ref[name], f"{what}: {name}",
                    "dV = A^T dY, dA = dY V^T, dS = A * (dA - rowsum(dA * A)), dQ = dS K / sqrt(d_k), "
                    "dK = dS^T Q / sqrt(d_k).", atol=GRAD_TOL, rtol=GRAD_TOL, mistake_tol=(1e-9, 1e-8),
                    mistakes={msg: v[name] for msg, v in variants.items() if name in v},
                    shape_hint="Each gradient has the shape of what it is the gradient of.",
                    observed=lambda g, name=name: f"differs from autograd beyond {GRAD_TOL:g} "
                                                  f"({first_bad(g, ref[name], GRAD_TOL, GRAD_TOL)})")


def check_attention_backward(attention_forward: Callable, attention_backward: Callable) -> None:
    """dQ, dK, dV against torch autograd in float64 to 1e-10 (square first, then T_q != T_k with mask and bias)."""
    _check_grads(attention_forward, attention_backward, ("dQ", "dK", "dV"), "attention_backward")


def check_score_bias_grad(attention_forward: Callable, score_bias_grad: Callable) -> None:
    """The gradient of an additive score bias against torch autograd in float64 to 1e-10."""
    _check_grads(attention_forward, score_bias_grad, ("dB",), "score_bias_grad")
