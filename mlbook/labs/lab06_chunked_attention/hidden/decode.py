"""decode_step: one step of cached causal attention, alone and inside greedy decoding.

The grader's reference is full-matrix float64 attention (``kit.attention``) of the new queries
against the cache followed by the new keys, under ``kit.causal_allowed(T_new, T_total)``: query i
of the T_new new ones is at absolute position T_total - T_new + i (lab 3's rule). Known mistakes
are options of ``_step``, the grader's own step in NumPy, never the notebook's text.

``check_greedy_decoding`` runs the grader's own ``TinyCausalLM`` (fresh weights, more heads than
the notebook's) with the student's decode_step as every layer's attention, hands the student's
returned cache back at the next step, and compares every position's logits with the model's full
causal pass.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mlbook_helpers.decoding import TinyCausalLM

from ...kit import ask_items, attention, causal_allowed, close, compare, dtype_name, fail, float_tolerance, fresh_rng, seed
from ._common import floats, tensor
from .kv_cache import cache_pair

__all__ = ["check_decode_step", "check_greedy_decoding"]


def _step(q, k_new, v_new, K, V, *, mistake: str | None = None):
    """The grader's cached step in float64: (out, K_all, V_all), with one known mistake or none."""
    K_all, V_all = np.concatenate([K, k_new], axis=-2), np.concatenate([V, v_new], axis=-2)
    T_new, T_total = q.shape[-2], K_all.shape[-2]
    allowed = causal_allowed(T_new, T_total)  # (T_new, T_total)
    if mistake == "before-append":  # scores against the old cache only
        if K.shape[-2] == 0:
            return np.zeros(q.shape[:-1] + (V.shape[-1],)), K_all, V_all
        return attention(q, K, V)[0], K_all, V_all
    if mistake == "prepend":
        K_all, V_all = np.concatenate([k_new, K], axis=-2), np.concatenate([v_new, V], axis=-2)
    if mistake == "top-left":
        allowed = np.arange(T_total)[None, :] <= np.arange(T_new)[:, None]
    if mistake == "no-mask":
        allowed = None
    if mistake == "strict":
        allowed = np.arange(T_total)[None, :] < np.arange(T_total - T_new, T_total)[:, None]
    out = attention(q, K_all, V_all, allowed, scale=1.0 if mistake == "no-scale" else None)[0]
    if mistake == "cache-outputs":
        V_all = np.concatenate([V, out], axis=-2)
    return out, K_all, V_all


_STEP_MISTAKES = {
    "top-left": "the mask is not offset by the cache length: the new queries are the LAST T_new positions, query i "
                "at T_total - T_new + i may read keys 0 .. T_total - T_new + i (lab 3's causal_mask_with_cache)",
    "before-append": "the new tokens do not read their own keys: the scores were computed before k_new, v_new were "
                     "appended to the cache; append first",
    "no-mask": "there is no causal mask among the new tokens: with several new tokens, each may read the cache and the "
               "new tokens up to itself, not those after it",
    "prepend": "the new keys and values were put before the cached ones: append them after, so that row t is token t",
    "strict": "a new query may not read its own key: allow key j for the query at position p when j <= p",
    "no-scale": "the scores are not divided by sqrt(d_k)",
    "cache-outputs": "the cache holds the step's attention outputs (post-softmax results) instead of the values: cache "
                     "each token's keys and values, which every later query needs",
}


def _inputs(rng, B, H, T_cache, T_new, d_k, d_v, dtype):
    shapes = [(B, H, T_new, d_k), (B, H, T_new, d_k), (B, H, T_new, d_v), (B, H, T_cache, d_k), (B, H, T_cache, d_v)]
    xs = [rng.standard_normal(s) for s in shapes]
    return [x.astype(np.float32).astype(np.float64) for x in xs] if dtype == torch.float32 else xs


def _step_case(fn, rng, B, H, T_cache, T_new, d_k, d_v, dtype) -> None:
    q, k_new, v_new, K, V = _inputs(rng, B, H, T_cache, T_new, d_k, d_v, dtype)
    what = (f"decode_step({T_new} new token{'s' if T_new > 1 else ''}, cache of {T_cache}) with B={B}, H={H}, "
            f"d_k={d_k}, d_v={d_v}, {dtype_name(dtype)}")
    got = ask_items(fn, tensor(q, dtype), tensor(k_new, dtype), tensor(v_new, dtype), (tensor(K, dtype), tensor(V, dtype)),
                    n=2, what=what, names="the pair (out, cache)")
    T = T_cache + T_new
    out = floats(got[0], f"{what}: out", (B, H, T_new, d_v), dtype, "out of shape (B, H, T_new, d_v)")
    gK, gV = cache_pair(got[1], f"{what}: the returned cache", (B, H, T, d_k), (B, H, T, d_v), dtype)
    want, want_K, want_V = _step(q, k_new, v_new, K, V)
    tol = float_tolerance(dtype)
    compare(out, want, f"{what}: out", "Append k_new, v_new to the cache, score the new queries against every cached "
            "key (scaled by 1/sqrt(d_k)), mask key j for the query at position T_total - T_new + i when j is later, "
            "softmax over the keys and weight the values.", **tol,
            mistakes={msg: (lambda m=m: _step(q, k_new, v_new, K, V, mistake=m)[0]) for m, msg in _STEP_MISTAKES.items()})
    compare(gK, want_K, f"{what}: the returned cache's K",
            "Return the cache grown by the new keys: the cached rows, then k_new.", **tol)
    compare(gV, want_V, f"{what}: the returned cache's V",
            "Return the cache grown by the new values: the cached rows, then v_new.", **tol,
            mistakes={_STEP_MISTAKES["cache-outputs"]: lambda: _step(q, k_new, v_new, K, V, mistake="cache-outputs")[2]})


def check_decode_step(fn) -> None:
    rng = fresh_rng()
    d_k, d_v = int(rng.integers(3, 9)), int(rng.integers(2, 7))
    # one new token: on an empty cache, on a short one (float32) and a long one
    _step_case(fn, rng, int(rng.integers(1, 3)), int(rng.integers(1, 4)), 0, 1, d_k, d_v, torch.float64)
    _step_case(fn, rng, 1, int(rng.integers(2, 5)), int(rng.integers(1, 6)), 1, d_k, d_v, torch.float32)
    _step_case(fn, rng, int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(20, 41)), 1, d_k, d_v,
               torch.float64)
    # several new tokens: a whole prompt at once, and a chunk after a cache
    _step_case(fn, rng, int(rng.integers(1, 3)), int(rng.integers(1, 4)), 0, int(rng.integers(3, 9)), d_k, d_v,
               torch.float64)
    _step_case(fn, rng, int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(2, 12)),
               int(rng.integers(2, 6)), d_k, d_v, torch.float64)


def _grader_step(mistake=None):
    """The grader's step for TinyCausalLM.decode, with one known mistake or none."""
    def step(q, k, v, cache):
        out, K, V = _step(*(np.asarray(t, dtype=np.float64) for t in (q, k, v, *cache)), mistake=mistake)
        return torch.from_numpy(out), (torch.from_numpy(K), torch.from_numpy(V))
    return step


def _student_step(fn, model: TinyCausalLM, label: str, calls: list):
    """The student's decode_step as the model's attention, its results validated before the model uses them."""
    H, d = model.n_heads, model.d_head

    def step(q, k, v, cache):
        calls.append(1)
        T_new, T_cache = q.shape[-2], np.asarray(cache[0]).shape[-2]
        what = f"decode_step inside greedy decoding ({label}), call {len(calls)}: {T_new} new, cache of {T_cache}"
        got = ask_items(fn, q, k, v, cache, n=2, what=what, names="the pair (out, cache)")
        out = floats(got[0], f"{what}: out", (1, H, T_new, d), torch.float64, "out of shape (B, H, T_new, d_v)")
        K, V = cache_pair(got[1], f"{what}: the returned cache", (1, H, T_cache + T_new, d), (1, H, T_cache + T_new, d),
                          torch.float64)
        return torch.from_numpy(out), (torch.from_numpy(K), torch.from_numpy(V))

    return step


def check_greedy_decoding(fn) -> None:
    rng = fresh_rng()
    H = int(rng.choice([2, 4, 8]))
    model = TinyCausalLM(seed=seed(rng), vocab=int(rng.integers(16, 40)), d_model=H * int(rng.integers(2, 5)),
                         n_heads=H, n_layers=2, max_len=40)
    prompts = [[int(rng.integers(model.vocab))] for _ in range(1)]
    prompts += [list(map(int, rng.integers(0, model.vocab, size=int(n)))) for n in (rng.integers(2, 6), rng.integers(6, 14))]
    for prompt in prompts:
        n_new = int(rng.integers(5, 10))
        label = f"a prompt of {len(prompt)} token{'s' if len(prompt) > 1 else ''}, {n_new} new, {H} heads"
        calls: list = []
        tokens, step_logits = model.decode(prompt, n_new, _student_step(fn, model, label, calls))
        cached = torch.cat(step_logits).numpy()  # (T, vocab)
        full = model.full_logits(tokens[:-1]).numpy()  # (T, vocab)
        tol = dict(atol=1e-10, rtol=0.0)
        bad = [p for p in range(cached.shape[0]) if not close(cached[p], full[p], **tol)]
        if not bad:
            continue
        cause = None
        for mistake, message in _STEP_MISTAKES.items():
            m_tokens, m_logits = model.decode(prompt, n_new, _grader_step(mistake))
            if m_tokens == tokens and close(torch.cat(m_logits).numpy(), cached, atol=1e-8, rtol=1e-8, equal_nan=True):
                cause = message
                break
        pos = bad[0]
        step_no = 0 if pos < len(prompt) else pos - len(prompt) + 1
        fail(f"greedy decoding with your decode_step ({label})",
             f"the logits differ from the full causal pass from position {pos} on (step {step_no} of the decoding; "
             f"{len(bad)} of {cached.shape[0]} positions differ)",
             cause or "Every step must give exactly the full pass's rows: append the new keys and values to the cache "
                      "first, mask with the offset causal rule, and return the grown cache of keys and values.")
