"""Probe inputs for ``mlbook mutate``: inputs on which a mutant of a reference answer may differ.

Interface (every lab's ``probes.py``; every name optional):
- ``PROBES[name](seed)`` -> a list of ``(args, kwargs)`` to call the answer function ``name`` with;
  the analysis calls the reference and the mutant on deep copies of each, from the same torch
  seed, and compares their outputs (and the arguments after the call).
- ``DRIVERS[name]`` -> functions ``driver(impl, seed)`` for answers that are not simply called
  (here the two classes, MultiHeadAttention and TransformerBlock).
- ``TOLERANCES[name]`` -> the relative tolerance the lab states for answer ``name``'s outputs
  (none here: every answer is compared to the last few units in the last place).
The checks' own calls (on fresh seeds, and again in the other float precision) are replayed as
well; probes add the edge cases the draws may not reach, each within the answer's documented
contract: T = 1 (one query, one key), one head, d_head = 1, B = 1, float32 and float64, masks of
every accepted shape ((T_q, T_k), (B, 1, T_q, T_k), (B, H, T_q, T_k), a key-padding (B, 1, 1, T_k)),
an empty RoPE cache, d = 2, rows of scores near +-1000. Not probed, being outside the contracts:
d_model not divisible by n_heads (MultiHeadAttention's docstring requires it), odd RoPE widths, T = 0
for apply_rope, and rows with no allowed key (attention_forward's docstring excludes them;
MultiHeadAttention's checks never give one, and the lab accepts -inf fills, which make such a row nan).
Shapes follow the lab: a batch of token rows is (B, T, d_model), heads (B, H, T, d_head); a mask is
True where attention is allowed.
"""

import zlib

import numpy as np
import torch
from torch import nn


def _gen(rng):
    """A torch generator seeded from a NumPy one: the same tensors for the reference and the mutant."""
    return torch.Generator().manual_seed(int(rng.integers(2**31)))


def _randn(g, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------- section 1: heads

def _split_heads(seed):
    g = _gen(np.random.default_rng(seed))
    return [((_randn(g, 1, 1, 6), 2), {}),  # B = T = 1
            ((_randn(g, 2, 3, 5), 1), {}),  # one head: d_head = d_model
            ((_randn(g, 2, 4, 3, dtype=torch.float64), 3), {})]  # d_head = 1, float64


def _merge_heads(seed):
    g = _gen(np.random.default_rng(seed))
    return [((_randn(g, 1, 1, 1, 4),), {}),  # B = H = T = 1
            ((_randn(g, 2, 3, 4, 2).permute(0, 2, 1, 3),), {}),  # a permuted (non-contiguous) (2, 4, 3, 2)
            ((_randn(g, 2, 3, 5, 1, dtype=torch.float64),), {})]  # d_head = 1, float64


# ---------------------------------------------------------------------------- section 2: multi-head attention

def _fill_parameters(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter drawn from a generator seeded by its own name: the same values in the reference
    and in a mutant whatever else it creates (a dropped bias does not shift the others)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            g = torch.Generator().manual_seed(seed * 7919 + zlib.crc32(name.encode()))
            std = 1 / p.shape[-1] ** 0.5 if p.dim() == 2 else 0.5
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * std)
    return module


def _mha_cases(seed):
    """(d_model, n_heads, bias, B, T_q, T_k, cross, mask kind, dtype) for the driver."""
    return [(6, 2, True, 2, 1, 1, False, None, torch.float32),  # T = 1
            (5, 1, True, 2, 4, 4, False, "2d", torch.float32),  # one head, a (T, T) causal mask
            (6, 6, False, 1, 3, 5, True, "per_head", torch.float32),  # d_head = 1, cross, (B, H, T_q, T_k)
            (8, 2, True, 3, 4, 6, True, "padding", torch.float64),  # key padding (B, 1, 1, T_k), float64
            (8, 4, True, 2, 5, 5, False, "per_batch", torch.float64),  # (B, 1, T_q, T_k)
            (4, 2, True, 1, 1, 3, True, "2d", torch.float32)]  # one query, a (1, T_k) mask


def _mha_mask(kind, B, H, T_q, T_k, rng):
    if kind is None:
        return None
    if kind == "padding":
        lengths = rng.integers(1, T_k + 1, size=B)  # every sequence keeps >= 1 key
        return torch.from_numpy(np.arange(T_k)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T_k)
    shape = {"2d": (T_q, T_k), "per_batch": (B, 1, T_q, T_k), "per_head": (B, H, T_q, T_k)}[kind]
    allowed = rng.random(shape) < 0.6
    allowed[..., 0] = True  # every row keeps a key
    if kind == "2d" and T_q == T_k:
        allowed = np.tril(np.ones((T_q, T_k), dtype=bool))  # (T, T) causal
    return torch.from_numpy(allowed)


def _drive_mha(impl, seed):
    """MultiHeadAttention on every case: (out, attn) of each, weights drawn by parameter name."""
    rng = np.random.default_rng(seed)
    g = _gen(rng)
    results = []
    for d, H, bias, B, T_q, T_k, cross, kind, dtype in _mha_cases(seed):
        mha = _fill_parameters(impl(d, H, bias=bias), seed).to(dtype).eval()
        x_q = _randn(g, B, T_q, d, dtype=dtype)  # (B, T_q, d)
        x_kv = _randn(g, B, T_k, d, dtype=dtype) if cross else x_q  # (B, T_k, d)
        with torch.no_grad():
            results.append(mha(x_q, x_kv, _mha_mask(kind, B, H, T_q, T_k, rng)))
    return results


class _Shell(nn.Module):
    """The parameters load_from_torch fills, named as the lab's MultiHeadAttention names them."""

    def __init__(self, d_model, bias):
        super().__init__()
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))


def _load_from_torch(seed):
    out = []
    for d, H, bias in ((1, 1, True), (6, 3, False), (4, 1, True)):
        torch.manual_seed(seed)
        torch_mha = _fill_parameters(nn.MultiheadAttention(d, H, bias=bias, batch_first=True), seed + 1)
        out.append(((_fill_parameters(_Shell(d, bias), seed + 2), torch_mha), {}))
    return out


# ---------------------------------------------------------------------------- section 3: positions

def _sinusoidal_positions(seed):
    rng = np.random.default_rng(seed)
    return [((1, 2), {}), ((int(rng.integers(2, 9)), 2), {}), ((3, 2 * int(rng.integers(1, 40))), {})]


def _apply_rope(seed):
    rng = np.random.default_rng(seed)
    g = _gen(rng)
    at = lambda *p: torch.tensor(p)  # noqa: E731 - a (T,) positions tensor
    return [((_randn(g, 1, 2), at(int(rng.integers(1, 5000)))), {}),  # T = 1, d = 2, 2-D
            ((_randn(g, 3, 2, dtype=torch.float64), at(0, 7, 3)), {"layout": "half"}),  # d = 2 half-split
            ((_randn(g, 2, 1, 4, 6), at(5, 4, 3, 2)), {"layout": "half", "base": 500.0}),  # one head, float32
            ((_randn(g, 4, 8, dtype=torch.float64), at(0, 1, 2, 3)), {"layout": "interleaved", "base": 1e6})]


def _rope_step_scores(seed):
    rng = np.random.default_rng(seed)
    g = _gen(rng)
    return [((_randn(g, 1, 1, 1, 2), _randn(g, 1, 1, 1, 2), _randn(g, 1, 1, 0, 2)), {}),  # empty cache, d = 2
            ((_randn(g, 2, 1, 1, 4, dtype=torch.float64), _randn(g, 2, 1, 1, 4, dtype=torch.float64),
              _randn(g, 2, 1, 3, 4, dtype=torch.float64)), {"layout": "half"}),  # one head
            ((_randn(g, 1, 3, 1, 6), _randn(g, 1, 3, 1, 6), _randn(g, 1, 3, 1, 6)), {"layout": "interleaved"})]


# ---------------------------------------------------------------------------- section 4: the block

def _drive_block(impl, seed):
    """TransformerBlock in every setting: (y, attn) for T = 1, masks of each accepted shape, float64.

    The constructor is the skeleton's (not an answer), so torch's seed gives both blocks the same weights.
    """
    rng = np.random.default_rng(seed)
    g = _gen(rng)
    results = []
    for pre_ln, residual, d, H, B, T, kind, dtype in (
            (False, True, 4, 2, 2, 1, None, torch.float32),  # T = 1
            (True, True, 6, 3, 2, 5, "causal2d", torch.float64),  # a (T, T) mask
            (False, False, 6, 1, 1, 4, "per_head", torch.float32),  # one head, (B, H, T, T)
            (True, False, 8, 2, 3, 4, "padding", torch.float32),  # (B, 1, 1, T) key padding
            (False, True, 8, 4, 2, 3, "per_batch", torch.float64)):  # (B, 1, T, T)
        torch.manual_seed(seed)
        block = impl(d, H, 2 * d, pre_ln=pre_ln, residual=residual).to(dtype).eval()
        x = _randn(g, B, T, d, dtype=dtype)  # (B, T, d)
        mask = (torch.tril(torch.ones(T, T, dtype=torch.bool)) if kind == "causal2d"
                else _mha_mask(kind, B, H, T, T, rng))
        with torch.no_grad():
            results.append(block(x, mask))
    return results


# ---------------------------------------------------------------------------- section 5: forward and backward

def _np_softmax(S):
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def _attention_forward(seed):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(1, 3)), rng.normal(size=(1, 3)), rng.normal(size=(1, 2))  # T_q = T_k = 1
    Q4, K6, V6 = rng.normal(size=(4, 1)), rng.normal(size=(6, 1)), rng.normal(size=(6, 5))  # d_k = 1
    one_key = np.zeros((4, 6), dtype=bool)
    one_key[np.arange(4), rng.integers(0, 6, 4)] = True  # each row keeps exactly one key
    return [((Q, K, V), {}), ((Q, K, V), {"mask": np.ones((1, 1), bool), "bias": rng.normal(size=(1, 1))}),
            ((Q4, K6, V6), {"mask": one_key}), ((Q4, K6, V6), {"bias": 5 * rng.normal(size=(4, 6))}),
            ((Q4, K6, V6), {"bias": rng.normal(size=(4, 6)) + np.array([[1e3], [-1e3], [2e3], [-3e3]])})]  # large rows


def _cache(Q, K, V, allowed=None, bias=None):
    """The reference forward's cache, for probing the backward on its own."""
    S = Q @ K.T / np.sqrt(Q.shape[-1]) + (0 if bias is None else bias)  # (T_q, T_k)
    A = _np_softmax(S if allowed is None else np.where(allowed, S, -np.inf))  # (T_q, T_k)
    return {"Q": Q, "K": K, "V": V, "A": A}


def _backward_inputs(seed):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(1, 3)), rng.normal(size=(1, 3)), rng.normal(size=(1, 2))  # T = 1: A = 1, dS = 0
    Q3, K5, V5 = rng.normal(size=(3, 2)), rng.normal(size=(5, 2)), rng.normal(size=(5, 4))
    allowed = np.tril(np.ones((3, 5), dtype=bool))  # (3, 5): row 0 keeps one key
    return [((rng.normal(size=(1, 2)), _cache(Q, K, V)), {}),
            ((rng.normal(size=(3, 4)), _cache(Q3, K5, V5, allowed, rng.normal(size=(3, 5)))), {}),
            ((rng.normal(size=(3, 4)), _cache(Q3, K5, V5)), {})]


# ---------------------------------------------------------------------------- section 6 and the extension

def _attention_flops(seed):
    rng = np.random.default_rng(seed)
    return [((1, 1, 1), {}), ((2, 3, 5), {}), ((int(rng.integers(1, 9)), int(rng.integers(1, 9000)), 4096), {})]


def _fused_qkv(seed):
    g = _gen(np.random.default_rng(seed))
    return [((_randn(g, 1, 1, 4), _randn(g, 4, 12), 2), {}),  # B = T = 1, float32
            ((_randn(g, 2, 3, 5, dtype=torch.float64), _randn(g, 5, 15, dtype=torch.float64), 1), {}),  # one head
            ((_randn(g, 2, 4, 3), _randn(g, 3, 9), 3), {})]  # d_head = 1


PROBES = {"split_heads": _split_heads, "merge_heads": _merge_heads, "load_from_torch": _load_from_torch,
          "sinusoidal_positions": _sinusoidal_positions, "apply_rope": _apply_rope,
          "rope_step_scores": _rope_step_scores, "attention_forward": _attention_forward,
          "attention_backward": _backward_inputs, "score_bias_grad": _backward_inputs,
          "attention_flops": _attention_flops, "fused_qkv": _fused_qkv}
DRIVERS = {"MultiHeadAttention": [_drive_mha], "TransformerBlock": [_drive_block]}
TOLERANCES: dict = {}  # none: the lab states no tolerance looser than a few units in the last place
