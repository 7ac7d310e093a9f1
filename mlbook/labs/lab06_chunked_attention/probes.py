"""Probe inputs for ``mlbook mutate``: inputs on which a mutant of a reference answer may differ.

Interface (every lab's ``probes.py``; every name optional):
- ``PROBES[name](seed)`` -> a list of ``(args, kwargs)`` to call the answer function ``name`` with;
  the analysis calls the reference and the mutant on deep copies of each, from the same torch
  seed, and compares their outputs (and the arguments after the call).
The checks' own calls (on fresh seeds, and again in the other float precision) are replayed as
well; probes add the edge cases the draws may not reach, each within the answer's documented
contract: chunk sizes not dividing T, T smaller than the chunk, chunk size 1, causal and not,
T_q != T_k (not causal), a single query, every score near -1000, d_k != d_v, an empty KV cache,
several new tokens after a cache, G = H and G = 1, entry sizes 1, 2, 4 and 8.
- ``TOLERANCES[name]`` -> the (relative, absolute) tolerance the lab states for answer ``name``'s outputs (the
  check's own constants): memory_sweep's measured peaks, within 1% plus 16 KiB.
Shapes follow the lab: one head q (T_q, d_k), k (T_k, d_k), v (T_k, d_v); batched over heads
(B, H, T, d) in the KV-cache and grouped-query sections. Inputs are float64 unless named float32.
"""

import math

import numpy as np
import torch

from .hidden.sweep import PEAK_RTOL, PEAK_SLACK


def _t(rng, *shape, dtype=torch.float64):
    """Standard normals of ``shape`` as a torch tensor of ``dtype``."""
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype)


def _attention_matrix_bytes(seed):
    rng = np.random.default_rng(seed)
    B, H, T = (int(x) for x in rng.integers(2, 40, size=3))
    return [((B, H, T, per), {}) for per in (1, 2, 4, 8)] + [((1, 1, 1), {}), ((3, 5, 7), {})]


def _kv_cache_bytes(seed):
    rng = np.random.default_rng(seed)
    L, G, d, T, batch = (int(x) for x in rng.integers(2, 50, size=5))
    return ([((L, G, d, T), {"batch": batch, "bytes_per_entry": per}) for per in (1, 2, 4, 8)]
            + [((L, G, d, T), {}), ((1, 1, 1, 1), {"batch": 1, "bytes_per_entry": 1})])


def _online_softmax_update(seed):
    rng = np.random.default_rng(seed)
    n_q, n_k, d_v = 4, 3, 2
    first = (torch.full((n_q,), -math.inf, dtype=torch.float64), torch.zeros(n_q, dtype=torch.float64),
             torch.zeros(n_q, d_v, dtype=torch.float64))  # before the first block
    m, l, acc = _t(rng, n_q), 1 + torch.rand(n_q, dtype=torch.float64), _t(rng, n_q, d_v)  # after some blocks
    s = _t(rng, n_q, n_k) * 3
    s_masked = s.clone()
    s_masked[1] = -math.inf  # a row fully masked in this block, its m already finite
    s_masked[2, 0] = -math.inf
    return [((*first, s, _t(rng, n_k, d_v)), {}),
            ((m, l, acc, s, _t(rng, n_k, d_v)), {}),
            ((m, l, acc, s_masked, _t(rng, n_k, d_v)), {}),
            ((m, l, acc, s[:, :1], _t(rng, 1, d_v)), {}),  # one key
            ((m - 1000, l, acc, s - 1000, _t(rng, n_k, d_v)), {}),  # scores near -1000
            ((m.float(), l.float(), acc.float(), s.float(), _t(rng, n_k, d_v, dtype=torch.float32)), {})]


def _chunked_attention(seed):
    rng = np.random.default_rng(seed)
    out = []
    for T, c in ((13, 4), (5, 8), (7, 1), (9, 9), (1, 3)):  # c not dividing T, T < c, c = 1, c = T, one token
        q, k, v = _t(rng, T, 5), _t(rng, T, 5), _t(rng, T, 3)
        out += [((q, k, v, c), {"causal": causal}) for causal in (False, True)]
    out.append(((_t(rng, 6, 5), _t(rng, 17, 5), _t(rng, 17, 3), 4), {}))  # T_q < T_k, not causal
    out.append(((_t(rng, 17, 5), _t(rng, 6, 5), _t(rng, 6, 3), 4), {}))  # T_q > T_k, not causal
    out.append(((_t(rng, 11, 4) * 30, _t(rng, 11, 4), _t(rng, 11, 2), 3), {"causal": True}))  # scores up to ~100
    shift = torch.full((10, 1), math.sqrt(1000 * math.sqrt(5)), dtype=torch.float64)
    out.append(((torch.cat([_t(rng, 10, 4), -shift], 1), torch.cat([_t(rng, 10, 4), shift], 1), _t(rng, 10, 3), 4),
                {}))  # every score near -1000
    out.append(((_t(rng, 10, 4, dtype=torch.float32), _t(rng, 10, 4, dtype=torch.float32),
                 _t(rng, 10, 6, dtype=torch.float32), 3), {"causal": True}))
    return out


def _reference_forward(q, k, v, causal):
    """(out, lse) of full-matrix attention, for the backward's probes."""
    s = q @ k.T / math.sqrt(q.shape[1])  # (T_q, T_k)
    if causal:
        s = s.masked_fill(torch.ones(s.shape, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def _attention_backward_from_lse(seed):
    rng = np.random.default_rng(seed)
    out = []
    for T_q, T_k, c, causal in ((13, 13, 4, True), (13, 13, 4, False), (5, 5, 8, True), (7, 7, 1, True),
                                (6, 17, 5, False), (17, 6, 4, False), (1, 1, 2, True)):
        q, k, v, dout = _t(rng, T_q, 5), _t(rng, T_k, 5), _t(rng, T_k, 3), _t(rng, T_q, 3)
        o, lse = _reference_forward(q, k, v, causal)
        out.append(((q, k, v, o, dout, lse, c), {"causal": causal}))
    return out


def _kv_cache_append(seed):
    rng = np.random.default_rng(seed)
    empty = (torch.zeros(2, 3, 0, 4, dtype=torch.float64), torch.zeros(2, 3, 0, 5, dtype=torch.float64))
    full = (_t(rng, 2, 3, 4, 4), _t(rng, 2, 3, 4, 5))
    return [((empty, _t(rng, 2, 3, 1, 4), _t(rng, 2, 3, 1, 5)), {}),
            ((empty, _t(rng, 2, 3, 3, 4), _t(rng, 2, 3, 3, 5)), {}),
            ((full, _t(rng, 2, 3, 2, 4), _t(rng, 2, 3, 2, 5)), {})]


def _decode_step(seed):
    rng = np.random.default_rng(seed)
    out = []
    for T_cache, T_new in ((0, 1), (0, 5), (4, 1), (4, 3), (1, 6)):  # empty cache, a prompt, one token, a chunk
        B, H, d_k, d_v = 2, 3, 4, 5
        cache = (_t(rng, B, H, T_cache, d_k), _t(rng, B, H, T_cache, d_v))
        out.append(((_t(rng, B, H, T_new, d_k), _t(rng, B, H, T_new, d_k), _t(rng, B, H, T_new, d_v), cache), {}))
    f32 = torch.float32
    out.append(((_t(rng, 1, 2, 2, 4, dtype=f32), _t(rng, 1, 2, 2, 4, dtype=f32), _t(rng, 1, 2, 2, 3, dtype=f32),
                 (_t(rng, 1, 2, 3, 4, dtype=f32), _t(rng, 1, 2, 3, 3, dtype=f32))), {}))
    return out


def _grouped_query_attention(seed):
    rng = np.random.default_rng(seed)
    out = []
    for H, G, T_q, T_k, causal in ((6, 3, 5, 5, True), (6, 3, 4, 9, False), (4, 4, 5, 5, True), (4, 1, 3, 7, False),
                                   (8, 2, 1, 1, True), (12, 4, 6, 6, False)):
        out.append(((_t(rng, 2, H, T_q, 5), _t(rng, 2, G, T_k, 5), _t(rng, 2, G, T_k, 3)), {"causal": causal}))
    return out


PROBES = {"attention_matrix_bytes": _attention_matrix_bytes, "kv_cache_bytes": _kv_cache_bytes,
          "online_softmax_update": _online_softmax_update, "chunked_attention": _chunked_attention,
          "attention_backward_from_lse": _attention_backward_from_lse, "kv_cache_append": _kv_cache_append,
          "decode_step": _decode_step, "grouped_query_attention": _grouped_query_attention}
DRIVERS: dict = {}
# memory_sweep's peaks are measurements: the order in which q, k, v are drawn, or a few hundred bytes of Python
# objects, changes them by less than the check's relative tolerance (hidden/sweep.py says why; the lab's text too)
TOLERANCES = {"memory_sweep": (PEAK_RTOL, PEAK_SLACK)}
