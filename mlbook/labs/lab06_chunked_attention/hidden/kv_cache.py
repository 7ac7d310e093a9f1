"""kv_cache_append and kv_cache_bytes: the key-value cache itself, and its size.

The grader's cache is NumPy concatenation along the time axis (-2); its size formula is
2 (K and V) * n_layers * n_kv_heads * d_head * T * batch * bytes_per_entry.
"""

from __future__ import annotations

import numpy as np
import torch

from ...kit import ask_number, call_student, close, compare, diagnose, dtype_name, fail, float_tolerance, fresh_rng, items
from ._common import floats, tensor

__all__ = ["cache_pair", "check_kv_cache_append", "check_kv_cache_bytes"]

_PAIR_HINT = "(K, V) of shapes (B, H, T_cache + T_new, d_k) and (B, H, T_cache + T_new, d_v)"


def cache_pair(got, what: str, K_shape: tuple, V_shape: tuple, dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray]:
    """A returned cache (K, V), validated: two float arrays of the given shapes, as float64."""
    K, V = items(got, 2, what, "the pair (K, V)")
    return (floats(K, f"{what}: K", K_shape, dtype, _PAIR_HINT),
            floats(V, f"{what}: V", V_shape, dtype, _PAIR_HINT))


def _cache_variants(old, new, which: str) -> dict:
    """What known mistakes would have returned for K or V (``which``)."""
    return {
        f"the new rows of {which} were put before the cached ones: append them after, so that row t is still token t":
            np.concatenate([new, old], axis=-2),
        f"the returned {which} holds only the new tokens: keep the cached rows and append the new ones": new,
    }


def check_kv_cache_append(fn) -> None:
    rng = fresh_rng()
    cases = [(0, int(rng.integers(1, 4))), (int(rng.integers(1, 9)), 1), (int(rng.integers(10, 40)), int(rng.integers(2, 6)))]
    for i, (T_cache, T_new) in enumerate(cases):
        dtype = torch.float32 if i == 1 else torch.float64
        B, H = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        d_k, d_v = int(rng.integers(2, 9)), int(rng.integers(2, 9))
        K, V = rng.standard_normal((B, H, T_cache, d_k)), rng.standard_normal((B, H, T_cache, d_v))
        k_new, v_new = rng.standard_normal((B, H, T_new, d_k)), rng.standard_normal((B, H, T_new, d_v))
        if dtype == torch.float32:
            K, V, k_new, v_new = (x.astype(np.float32).astype(np.float64) for x in (K, V, k_new, v_new))
        what = (f"kv_cache_append(cache of {T_cache} tokens, {T_new} new) with B={B}, H={H}, d_k={d_k}, d_v={d_v}, "
                f"{dtype_name(dtype)}")
        got = call_student(fn, (tensor(K, dtype), tensor(V, dtype)), tensor(k_new, dtype), tensor(v_new, dtype),
                           what=what)
        T = T_cache + T_new
        gK, gV = cache_pair(got, what, (B, H, T, d_k), (B, H, T, d_v), dtype)
        tol = float_tolerance(dtype)
        for name, mine, old, new in (("K", gK, K, k_new), ("V", gV, V, v_new)):
            compare(mine, np.concatenate([old, new], axis=-2), f"{what}: {name}",
                    "Concatenate the cached rows and then the new ones along the time axis (dim -2).", **tol,
                    mistakes=_cache_variants(old, new, "keys" if name == "K" else "values"))


def check_kv_cache_bytes(fn) -> None:
    rng = fresh_rng()
    # Each entry size 1, 2, 4 and 8 in every run (fresh order), batch >= 2 and every other argument drawn again
    # per call, all distinct, so no argument can be ignored (or confused with another) by luck of the draw.
    for per in (int(x) for x in rng.permutation([1, 2, 4, 8])):
        while True:
            L, G, d = int(rng.integers(2, 97)), int(rng.integers(2, 33)), int(rng.choice([32, 64, 80, 96, 128, 256]))
            T, batch = int(rng.integers(100, 33000)), int(rng.integers(2, 17))
            if len({L, G, d, T, batch, per, 2 * per}) == 7:
                break
        call = f"kv_cache_bytes({L}, {G}, {d}, {T}, batch={batch}, bytes_per_entry={per})"
        got = ask_number(fn, L, G, d, T, batch=batch, bytes_per_entry=per, what=call,
                         hint="Return the number of bytes as one int.")
        want = 2 * L * G * d * T * batch * per
        if close(got, want, atol=0.5, rtol=1e-12):
            continue
        if per == 4:  # a 2-byte answer for 4-byte entries is half the bytes, as is counting the keys only
            cause = diagnose(got, {"half the bytes: either bytes_per_entry is ignored (the answer is right only for "
                                   "2-byte entries) or only the keys are counted (the cache holds a key AND a value)":
                                   want // 2}, atol=0.5, rtol=1e-12)
            if cause:
                fail(call, f"got {got:.10g}", cause)
        cause = diagnose(got, {
            "only the keys are counted: the cache holds a key AND a value per token, head and layer (the factor 2)":
                want // 2,
            "the number of layers is missing: every layer has its own cache": want // L,
            "the batch is missing: every sequence has its own cache": want // batch,
            "bytes_per_entry is ignored: the answer is right only for 2-byte entries": want // per * 2,
            "d_head is missing: every head caches d_head numbers per key and per value": want // d,
            "T is missing: the cache holds every token of the sequence": want // T,
            "the entries are counted, not the bytes": want // per,
            "the kv heads are missing": want // G,
        }, atol=0.5, rtol=1e-12)
        fail(call, f"got {got:.10g}",
             cause or "2 (K and V) x n_layers x n_kv_heads x d_head x T x batch x bytes_per_entry.")
