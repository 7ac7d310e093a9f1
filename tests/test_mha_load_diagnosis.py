"""Lab 4's load_from_torch check names the tensor a load left uncopied, whatever the module's layout.

A tensor that load_from_torch never copies keeps the student's module's initial values, so no
formula of torch's weights reproduces the output; the hidden check then looks for torch's values
among the module's parameters (``hidden.mha._never_copied``). Students lay their module out in
many ways, so this holds for three of them (separate W_q, W_k, W_v, W_o as the notebook does; one
packed qkv layer; one small layer per head): a complete load reports nothing, a load that skips a
tensor reports exactly that tensor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mlbook.labs.lab04_transformer_block.hidden.mha import _never_copied, _random_torch_mha

D, H = 12, 3


class Separate(nn.Module):
    """W_q, W_k, W_v and W_o, each nn.Linear(d, d)."""

    def __init__(self):
        super().__init__()
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(D, D) for _ in range(4))

    def load(self, tmha: nn.MultiheadAttention, skip: str | None) -> None:
        for i, lin in enumerate((self.W_q, self.W_k, self.W_v)):
            lin.weight.copy_(tmha.in_proj_weight[i * D:(i + 1) * D])  # (d, d)
            if skip != "in_bias":
                lin.bias.copy_(tmha.in_proj_bias[i * D:(i + 1) * D])  # (d,)
        if skip != "out_weight":
            self.W_o.weight.copy_(tmha.out_proj.weight)  # (d, d)
        if skip != "out_bias":
            self.W_o.bias.copy_(tmha.out_proj.bias)  # (d,)


class Packed(nn.Module):
    """One qkv layer nn.Linear(d, 3d), as torch packs it, and W_o."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)

    def load(self, tmha: nn.MultiheadAttention, skip: str | None) -> None:
        self.qkv.weight.copy_(tmha.in_proj_weight)  # (3d, d)
        if skip != "in_bias":
            self.qkv.bias.copy_(tmha.in_proj_bias)  # (3d,)
        if skip != "out_weight":
            self.out.weight.copy_(tmha.out_proj.weight)
        if skip != "out_bias":
            self.out.bias.copy_(tmha.out_proj.bias)


class PerHead(nn.Module):
    """One nn.Linear(d, d_head) per head for each of q, k, v, stored transposed in a Parameter for W_o."""

    def __init__(self):
        super().__init__()
        dh = D // H
        self.q, self.k, self.v = (nn.ModuleList(nn.Linear(D, dh) for _ in range(H)) for _ in range(3))
        self.o_t, self.o_b = nn.Parameter(torch.randn(D, D)), nn.Parameter(torch.randn(D))

    def load(self, tmha: nn.MultiheadAttention, skip: str | None) -> None:
        dh = D // H
        for block, heads in enumerate((self.q, self.k, self.v)):
            for h, lin in enumerate(heads):
                rows = slice(block * D + h * dh, block * D + (h + 1) * dh)
                lin.weight.copy_(tmha.in_proj_weight[rows])  # (d_head, d)
                if skip != "in_bias":
                    lin.bias.copy_(tmha.in_proj_bias[rows])  # (d_head,)
        if skip != "out_weight":
            self.o_t.copy_(tmha.out_proj.weight.T)  # (d, d), transposed on purpose
        if skip != "out_bias":
            self.o_b.copy_(tmha.out_proj.bias)


MISSING = {None: [], "in_bias": ["b_q", "b_v"], "out_weight": ["W_o (out_proj.weight)"],
           "out_bias": ["W_o's bias (out_proj.bias)"]}


@pytest.mark.parametrize("layout", [Separate, Packed, PerHead], ids=lambda c: c.__name__)
@pytest.mark.parametrize("skip", list(MISSING), ids=lambda s: s or "complete")
def test_uncopied_tensors_are_named_in_every_layout(layout, skip):
    torch.manual_seed(0)
    tmha, P = _random_torch_mha(D, H, True, np.random.default_rng(7))
    module = layout()
    with torch.no_grad():
        module.load(tmha, skip)
    missing = _never_copied(module, P, True, "state_dict()")
    assert [m.split(" (")[0] if m.startswith("b_") else m for m in missing] == MISSING[skip], missing


def test_bias_free_layers_are_asked_for_weights_only():
    tmha, P = _random_torch_mha(D, H, False, np.random.default_rng(8))
    module = nn.ModuleDict({"qkv": nn.Linear(D, 3 * D, bias=False), "out": nn.Linear(D, D, bias=False)})
    with torch.no_grad():
        module["qkv"].weight.copy_(tmha.in_proj_weight)
    assert _never_copied(module, P, False, "state_dict()") == ["W_o (out_proj.weight)"]
