"""Check of qk_layernorm: LayerNorm without gain or bias of every query and key vector, over d_head."""

from __future__ import annotations

import numpy as np
import torch

from ...kit import array, call_student, close, diagnose, dtype_name, fail, fresh_rng, items

__all__ = ["check_qk_layernorm", "layernorm_rows"]


def layernorm_rows(x: np.ndarray, eps: float, ddof: int = 0, centre: bool = True, axis: int = -1) -> np.ndarray:
    """The grader's LayerNorm of every vector of ``x`` along ``axis``, float64; the options are known mistakes."""
    mean = x.mean(axis=axis, keepdims=True) if centre else 0.0
    if centre:
        var = x.var(axis=axis, keepdims=True, ddof=ddof)
    else:
        var = (x**2).mean(axis=axis, keepdims=True)  # RMSNorm: the mean square
    return (x - mean) / np.sqrt(var + eps)


def _vectors(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Vectors with their own offset and scale, so that the mean and the variance both matter."""
    offset = rng.normal(size=shape[:-1] + (1,)) * 2.0  # (..., T, 1)
    scale = rng.uniform(0.3, 6.0, size=shape[:-1] + (1,))  # (..., T, 1)
    return offset + scale * rng.normal(size=shape)  # (..., T, d_head)


def check_qk_layernorm(qk_layernorm) -> None:
    rng = fresh_rng()
    cases = [((2, 3, 5), (2, 3, 7), 6, torch.float64, 1e-5),  # (B, H, T_q), (B, H, T_k), d_head
             ((4, 6), (4, 3), 16, torch.float32, 1e-5),
             ((1, 2, 4, 3), (1, 2, 4, 9), 5, torch.float64, float(rng.choice([1e-3, 0.1, 0.5])))]
    for q_lead, k_lead, d_head, dtype, eps in cases:
        q_np = _vectors(rng, q_lead + (d_head,))
        k_np = _vectors(rng, k_lead + (d_head,))
        q_np[(0,) * len(q_lead)] = rng.normal()  # one constant query: variance 0, only eps keeps it finite
        q, k = torch.tensor(q_np, dtype=dtype), torch.tensor(k_np, dtype=dtype)
        q_np, k_np = q.double().numpy(), k.double().numpy()  # the reference sees what the student sees
        pristine_q, pristine_k = q.clone(), k.clone()
        what = (f"qk_layernorm(q of shape {tuple(q.shape)}, k of shape {tuple(k.shape)}, eps={eps:g}) "
                f"in {dtype_name(dtype)}")
        got = call_student(qk_layernorm, q, k, eps, what=what)
        if not (torch.equal(q, pristine_q) and torch.equal(k, pristine_k)):
            fail(what, "q or k was changed in place", "Return new tensors; never modify the queries and keys.")
        q_hat, k_hat = items(got, 2, what, "(q_hat, k_hat)")
        hint_shape = "Return (q_hat, k_hat) shaped like q and k."
        q_hat = array(q_hat, f"{what}: q_hat", shape=q.shape, finite=False, hint=hint_shape)
        k_hat = array(k_hat, f"{what}: k_hat", shape=k.shape, finite=False, hint=hint_shape)
        if not (np.isfinite(q_hat).all() and np.isfinite(k_hat).all()):
            fail(what, "the result contains nan or inf",
                 "One query is constant (variance 0): add eps to the variance inside the square root.")
        tol = dict(atol=1e-8, rtol=1e-8) if dtype == torch.float64 else dict(atol=2e-4, rtol=2e-4)
        for name, got_x, x in (("q_hat", q_hat, q_np), ("k_hat", k_hat, k_np)):
            ref = layernorm_rows(x, eps)
            if close(got_x, ref, **tol):
                continue
            hint = diagnose(got_x, {
                f"{'the queries' if name == 'q_hat' else 'the keys'} came back as they were: not normalised": x,
                "the variance was divided by d_head - 1 (unbiased, torch's default for .var and .std): "
                "LayerNorm uses the population variance (unbiased=False)": layernorm_rows(x, eps, ddof=1),
                "the mean was not subtracted (that is RMSNorm): LayerNorm centres each vector first":
                    layernorm_rows(x, eps, centre=False),
                "each vector was divided by its length (unit vectors, lab 2's cosine form), not by its standard "
                "deviation": x / np.linalg.norm(x, axis=-1, keepdims=True),
                "eps was added to the standard deviation, not to the variance inside the square root":
                    (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + eps),
                "the eps argument was ignored (a fixed 1e-5 used instead): add the eps you are given to the "
                "variance": layernorm_rows(x, 1e-5),
                "the vectors were normalised over the positions (axis -2), not over their d_head entries "
                "(axis -1): wrong axis": layernorm_rows(x, eps, axis=-2),
            }, atol=max(tol["atol"], 1e-6), rtol=max(tol["rtol"], 1e-5))
            last = got_x.reshape(-1, d_head)[-1]  # (d_head,): a vector with a non-zero variance
            fail(f"{what}: {name}", f"its last vector starts {np.round(last[:3], 4).tolist()}, which is not the vector minus its "
                                    "mean over d_head divided by sqrt(variance + eps)",
                 hint or "Normalise each vector over its last axis: (x - mean) / sqrt(population variance + eps).")
