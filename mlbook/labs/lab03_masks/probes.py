"""Probe inputs for ``mlbook mutate`` on lab 3 (interface: mlbook/labs/lab01_hand_attention/probes.py).

Convention, as in the lab: a boolean mask is True where attention is allowed; it broadcasts against
scores of shape (B, H, T_q, T_k). The edge cases the checks' draws may miss: fully masked rows (with
large positive and negative scores, where an additive mask differs from a fill), one token (T = 1),
cross-attention shapes (T_q != T_k, d_k != d_v), masks of every broadcast shape, float16.
"""

import torch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def _apply_mask(seed):
    g = _gen(seed)
    out = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        scores = (torch.randn(2, 1, 3, 5, generator=g, dtype=torch.float64) * 30).to(dtype)  # (2, 1, 3, 5)
        mask = torch.rand(2, 1, 3, 5, generator=g) < 0.5  # (2, 1, 3, 5)
        mask[0, 0, 1] = False  # a fully masked row, its scores up to +-90
        out.append(((scores, mask), {}))
    one = torch.randn(1, 1, 1, 1, generator=g)  # (1, 1, 1, 1): T = 1
    out += [((one, torch.zeros(1, 1, 1, 1, dtype=torch.bool)), {}), ((one, torch.ones(1, 1, 1, 1, dtype=torch.bool)), {}),
            ((one, None), {})]
    return out


def _sdpa(seed):
    g = _gen(seed)
    out = []
    for dtype in (torch.float32, torch.float16):
        q = torch.randn(2, 2, 3, 4, generator=g).to(dtype)  # (B, H, T_q, d_k): cross-attention, T_q != T_k
        k, v = torch.randn(2, 2, 6, 4, generator=g).to(dtype), torch.randn(2, 2, 6, 5, generator=g).to(dtype)
        pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]  # (2, 1, 1, 6)
        dead = pad.clone().expand(2, 1, 3, 6).clone()  # (2, 1, 3, 6)
        dead[1, 0, 0] = False  # a fully masked query row
        out += [((q, k, v), {}), ((q, k, v, pad), {}), ((q, k, v, dead), {}), ((q * 20, k, v, dead), {}),
                ((q, k, v, torch.zeros(3, 6, dtype=torch.bool)), {})]  # every row fully masked, a 2-D mask
    q1, k1, v1 = (torch.randn(1, 1, 1, 3, generator=g) for _ in range(3))  # T = 1
    out += [((q1, k1, v1), {}), ((q1, k1, v1, torch.ones(1, 1, 1, 1, dtype=torch.bool)), {}),
            ((q1, k1, v1, torch.zeros(1, 1, 1, 1, dtype=torch.bool)), {})]
    return out


def _mask_after_softmax(seed):
    g = _gen(seed)
    q, k, v = torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 5, 4, generator=g), torch.randn(1, 2, 5, 2, generator=g)
    mask = torch.rand(1, 1, 3, 5, generator=g) < 0.5  # (1, 1, 3, 5)
    mask[..., 1, :] = False  # a fully masked row: its weights are all zero
    q1, k1, v1 = (torch.randn(1, 1, 1, 3, generator=g) for _ in range(3))  # T = 1
    return [((q, k, v, mask), {}), ((q1, k1, v1, torch.ones(1, 1, 1, 1, dtype=torch.bool)), {})]


def _causal_mask(seed):
    return [((1,), {}), ((2,), {}), ((5,), {})]


def _causal_mask_with_cache(seed):
    return [((1, 1), {}), ((1, 6), {}), ((4, 4), {}), ((2, 7), {})]


def _padding_mask(seed):
    g = _gen(seed)
    return [((torch.ones(1, 3, dtype=torch.bool),), {}), ((torch.zeros(1, 1, dtype=torch.bool),), {}),
            ((torch.rand(3, 5, generator=g) < 0.5,), {})]


def _combine_masks(seed):
    g = _gen(seed)
    a, b = torch.rand(2, 1, 1, 4, generator=g) < 0.5, torch.rand(1, 1, 4, 4, generator=g) < 0.7
    return [((a,), {}), ((None, a), {}), ((a, b), {}), ((b, None, a), {}), ((), {}), ((None,), {})]


PROBES = {"apply_mask": _apply_mask, "scaled_dot_product_attention": _sdpa, "mask_after_softmax": _mask_after_softmax,
          "causal_mask": _causal_mask, "causal_mask_with_cache": _causal_mask_with_cache,
          "padding_mask": _padding_mask, "combine_masks": _combine_masks}
DRIVERS: dict = {}
