"""Check of the two mask conventions' conversions: SDPA's attn_mask and MultiheadAttention's key_padding_mask."""

from __future__ import annotations

from typing import Callable

import torch

from ...kit import call_student, fail, fresh_rng
from ._common import expect_bool_tensor, shape_str

__all__ = ["check_mask_conversions"]


def check_mask_conversions(to_key_padding_mask: Callable, to_sdpa_mask: Callable) -> None:
    """SDPA (B, 1, 1, T_k) True = attend  <->  MultiheadAttention (B, T_k) True = ignore; B = 1 too."""
    rng = fresh_rng()
    T_k = int(rng.integers(3, 9))
    for B in (int(rng.integers(2, 5)), 1):  # a batch of one: squeeze() would drop its batch axis too
        sdpa = torch.from_numpy(rng.random((B, 1, 1, T_k)) < 0.6)  # (B, 1, 1, T_k)
        what = f"to_key_padding_mask of a {shape_str(sdpa.shape)} SDPA mask"
        kpm = call_student(to_key_padding_mask, sdpa, what=what)
        if isinstance(kpm, torch.Tensor) and tuple(kpm.shape) != (B, T_k) and kpm.numel() == B * T_k:
            fail(what, f"shape is {shape_str(kpm.shape)}, expected {shape_str((B, T_k))}",
                 "Drop only the two axes of size 1 (sdpa_mask[:, 0, 0, :], or squeeze(1).squeeze(1)): a bare "
                 "squeeze() also drops the batch axis when B = 1.")
        expect_bool_tensor(kpm, (B, T_k), what)
        if torch.equal(kpm, sdpa[:, 0, 0, :]):
            fail(what, "True where the SDPA mask is True",
                 "MultiheadAttention's key_padding_mask is True where a key is IGNORED: invert with ~.")
        if not torch.equal(kpm, ~sdpa[:, 0, 0, :]):
            fail(what, "entries do not match the inverted SDPA mask", "Drop the two axes of size 1 and invert.")
        kpm2 = torch.from_numpy(rng.random((B, T_k)) < 0.4)  # (B, T_k)
        what = f"to_sdpa_mask of a {shape_str(kpm2.shape)} key_padding_mask"
        back = call_student(to_sdpa_mask, kpm2, what=what)
        expect_bool_tensor(back, (B, 1, 1, T_k), what)
        if torch.equal(back[:, 0, 0, :], kpm2):
            fail(what, "True where key_padding_mask is True (the padding)",
                 "SDPA's boolean attn_mask is True where attention is ALLOWED: invert with ~.")
        if not torch.equal(back[:, 0, 0, :], ~kpm2):
            fail(what, "entries do not match the inverted key_padding_mask", "Invert, then add the head and query axes.")
