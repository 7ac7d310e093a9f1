"""MultiHeadAttention and load_from_torch against torch.nn.MultiheadAttention."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ...kit import (Misconception, array, ask_items, attention, call_student, close, data_array, diagnose, fail,
                    first_bad, fresh_rng, helper, softmax)
from ._common import view_error
from .heads import DIRECT_VIEW, MERGE_NO_TRANSPOSE, check_heads

__all__ = ["check_mha"]

MHA_ATOL, MHA_RTOL = 1e-5, 1e-4  # float32 against torch.nn.MultiheadAttention


# Orders in which the three blocks of in_proj_weight may be copied by mistake (block i read as role order[i]).
_BLOCK_ORDERS = {"order_qvk": (0, 2, 1), "order_kvq": (1, 2, 0), "order_vqk": (2, 0, 1), "order_vkq": (2, 1, 0)}


def _np_mha(xq: np.ndarray, xkv: np.ndarray, allowed: np.ndarray | None, P: dict, H: int,
            variant: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The grader's multi-head attention in float64, with one known mistake optionally injected.

    Args:
        xq: (B, T_q, d), xkv: (B, T_k, d); allowed: broadcastable to (B, H, T_q, T_k), True = attend.
        P: torch-layout parameters: in_w (3d, d) rows [W_q; W_k; W_v], in_b (3d,), out_w (d, d), out_b (d,).
    Returns:
        out (B, T_q, d), weights (B, H, T_q, T_k).
    """
    B, Tq, d = xq.shape
    Tk, dh = xkv.shape[1], d // H
    Wq, Wk, Wv = np.split(P["in_w"], 3, axis=0)  # each (d, d) as (out, in)
    bq, bk, bv = np.split(P["in_b"], 3)  # each (d,)
    Wo, bo = P["out_w"], P["out_b"]
    if variant == "transpose":
        Wq, Wk, Wv, Wo = Wq.T, Wk.T, Wv.T, Wo.T
    if variant == "swap_qk":
        Wq, Wk, bq, bk = Wk, Wq, bk, bq
    if variant in _BLOCK_ORDERS:
        order = _BLOCK_ORDERS[variant]
        Wq, Wk, Wv = ((Wq, Wk, Wv)[i] for i in order)
        bq, bk, bv = ((bq, bk, bv)[i] for i in order)
    if variant == "no_bias":
        bq, bk, bv, bo = (np.zeros_like(b) for b in (bq, bk, bv, bo))
    if variant == "no_in_bias":
        bq, bk, bv = (np.zeros_like(b) for b in (bq, bk, bv))
    if variant == "mask_inverted" and allowed is not None:
        allowed = ~allowed
    if variant == "mask_head0" and allowed is not None and allowed.ndim == 4:
        allowed = allowed[:, :1]  # (B, 1, T_q, T_k): head 0's mask broadcast over every head
    q, k, v = xq @ Wq.T + bq, xkv @ Wk.T + bk, xkv @ Wv.T + bv  # (B, T_q, d), (B, T_k, d), (B, T_k, d)
    if variant == "direct_view":
        q, k, v = q.reshape(B, H, Tq, dh), k.reshape(B, H, Tk, dh), v.reshape(B, H, Tk, dh)
    else:
        q = q.reshape(B, Tq, H, dh).transpose(0, 2, 1, 3)  # (B, H, T_q, d_head)
        k = k.reshape(B, Tk, H, dh).transpose(0, 2, 1, 3)  # (B, H, T_k, d_head)
        v = v.reshape(B, Tk, H, dh).transpose(0, 2, 1, 3)  # (B, H, T_k, d_head)
    scale = {"scale_model": math.sqrt(d), "no_scale": 1.0, "scale_dk": dh}.get(variant or "")  # None: sqrt(d_head)
    if variant in ("mask_inverted", "fill_zero") and allowed is not None:
        # A finite fill, as torch.finfo(dtype).min gives: a row with no allowed key comes out uniform, not nan.
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(dh)  # (B, H, T_q, T_k)
        A = softmax(np.where(allowed, s, 0.0 if variant == "fill_zero" else -1e30))  # (B, H, T_q, T_k)
        o = A @ v  # (B, H, T_q, d_head)
    else:
        o, A = attention(q, k, v, allowed, scale=scale)  # (B, H, T_q, d_head), (B, H, T_q, T_k)
    if variant == "merge_no_transpose":
        o = o.reshape(B, Tq, d)
    else:
        o = o.transpose(0, 2, 1, 3).reshape(B, Tq, d)  # (B, T_q, d)
    if variant == "no_out_proj":
        return o, A
    return o @ Wo.T + bo, A  # (B, T_q, d)


MHA_VARIANTS = {
    "scale_model": "scores were divided by sqrt(d_model) instead of sqrt(d_head): each head's dot "
                   "products have d_head terms, so scale by sqrt(d_model // n_heads)",
    "scale_dk": "scores were divided by d_head instead of sqrt(d_head)",
    "no_scale": "scores were not scaled by 1/sqrt(d_head)",
    "no_bias": "the biases were not copied: in_proj_bias holds [b_q; b_k; b_v] and out_proj.bias b_o",
    "no_in_bias": "the biases of W_q, W_k and W_v were not copied: in_proj_bias holds [b_q; b_k; b_v], "
                  "packed like in_proj_weight",
    **{v: f"the blocks of in_proj_weight were copied in another order (as if its rows were "
          f"[{'; '.join(('W_q', 'W_k', 'W_v')[i] for i in order)}]): its rows are [W_q; W_k; W_v], "
          f"and in_proj_bias is packed the same way"
       for v, order in _BLOCK_ORDERS.items()},
    "transpose": "the weights were transposed when copied: nn.Linear.weight is (out, in), the same "
                 "layout as the blocks of in_proj_weight, so copy them without .T",
    "swap_qk": "the query and key blocks of in_proj_weight were swapped: its rows are [W_q; W_k; W_v]",
    "direct_view": DIRECT_VIEW,
    "merge_no_transpose": MERGE_NO_TRANSPOSE,
    "no_out_proj": "the output projection W_o was not applied after merging the heads",
}


MASK_CONVENTION = ("In this lab a mask is True where attention is ALLOWED (torch's key_padding_mask and boolean "
                   "attn_mask use the opposite convention).")
MASK_VARIANTS = {
    "mask_inverted": "the mask was read with torch's convention, True = blocked: in this lab a mask is True where "
                     "attention is ALLOWED, so fill the scores where the mask is False",
    "fill_zero": "the masked scores were set to 0 (or the scores multiplied by the mask), and exp(0) still gives those "
                 "keys weight: fill them with -inf or torch.finfo(scores.dtype).min before the softmax",
    "mask_head0": "every head was masked with head 0's mask: a (B, H, T_q, T_k) mask gives each head its own "
                  "mask; apply it as given and let only its size-1 dimensions broadcast",
}


def _torch_tensors(P: dict, bias: bool) -> dict[str, np.ndarray]:
    """What load_from_torch must carry over, each named as torch stores it: name -> values."""
    d = P["out_w"].shape[0]
    tensors = {f"{role} (rows {i * d}:{(i + 1) * d} of in_proj_weight)": P["in_w"][i * d:(i + 1) * d]
               for i, role in enumerate(("W_q", "W_k", "W_v"))}
    tensors["W_o (out_proj.weight)"] = P["out_w"]
    if bias:  # b_k is left out: it adds q . b_k to every score of a row, which the softmax cancels
        tensors.update({f"{role} (in_proj_bias[{i * d}:{(i + 1) * d}])": P["in_b"][i * d:(i + 1) * d]
                        for i, role in ((0, "b_q"), (2, "b_v"))})
        tensors["W_o's bias (out_proj.bias)"] = P["out_b"]
    return tensors


def _never_copied(mha: Any, P: dict, bias: bool, what: str) -> list[str]:
    """Torch's tensors none of whose values is among the student's parameters after the load.

    Whatever layout the student chose (separate W_q, W_k, W_v, one packed qkv layer, one small
    layer per head), a copy keeps every float32 value exactly, transposed or sliced; values drawn
    at random are never met by chance. So a tensor of which fewer than half the values are found
    was not copied, and the module still holds its own initial values there.
    """
    weights = call_student(lambda: mha.state_dict(), what=what)
    if not isinstance(weights, dict):  # state_dict() itself replaced: nothing to say about the load
        return []
    arrays = [data_array(v) for v in weights.values()]
    held = np.concatenate([a.astype(np.float32).ravel() for a in arrays
                           if a is not None and a.dtype.kind == "f"] or [np.zeros(0, np.float32)])
    return [name for name, values in _torch_tensors(P, bias).items()
            if np.isin(values.astype(np.float32).ravel(), held).mean() < 0.5]


def _random_torch_mha(d: int, H: int, bias: bool, rng: np.random.Generator) -> tuple[nn.MultiheadAttention, dict]:
    tmha = nn.MultiheadAttention(d, H, bias=bias, batch_first=True)
    P = {
        "in_w": rng.normal(0, 1 / math.sqrt(d), (3 * d, d)),
        "in_b": rng.normal(0, 0.5, 3 * d) if bias else np.zeros(3 * d),
        "out_w": rng.normal(0, 1 / math.sqrt(d), (d, d)),
        "out_b": rng.normal(0, 0.5, d) if bias else np.zeros(d),
    }
    P = {k: v.astype(np.float32).astype(np.float64) for k, v in P.items()}  # exactly representable in float32
    with torch.no_grad():
        tmha.in_proj_weight.copy_(torch.from_numpy(P["in_w"]))
        tmha.out_proj.weight.copy_(torch.from_numpy(P["out_w"]))
        if bias:
            tmha.in_proj_bias.copy_(torch.from_numpy(P["in_b"]))
            tmha.out_proj.bias.copy_(torch.from_numpy(P["out_b"]))
    tmha.eval()
    return tmha, P


def _kernel_copy(tmha: nn.MultiheadAttention, d: int, H: int, bias: bool) -> Any:
    """The same torch layer built where the student's code runs (the kernel), weights included.

    The grader keeps ``tmha`` as the reference; the copy is what load_from_torch reads.
    """
    copy = helper("torch.nn:MultiheadAttention")(d, H, bias=bias, batch_first=True)
    copy.load_state_dict(tmha.state_dict())  # a state dict is data: it crosses to the kernel
    copy.eval()
    return copy


def _mha_cases(rng: np.random.Generator) -> list[dict]:
    H = int(rng.integers(2, 5))
    dh = int(rng.integers(3, 7))
    B = int(rng.integers(2, 4))
    T = int(rng.integers(4, 8))
    T_k = T + int(rng.integers(1, 4))  # cross-attention: T_q != T_k
    cases = [
        dict(name="self-attention without a mask", T_q=T, T_k=T, cross=False, mask=None, bias=True),
        dict(name="self-attention with a causal mask", T_q=T, T_k=T, cross=False, mask="causal", bias=True),
        dict(name="self-attention with a key-padding mask", T_q=T, T_k=T, cross=False, mask="padding", bias=True),
        dict(name=f"cross-attention, T_q = {T} and T_k = {T_k}", T_q=T, T_k=T_k, cross=True, mask=None, bias=True),
        dict(name=f"cross-attention with a key-padding mask, T_q = {T} and T_k = {T_k}", T_q=T, T_k=T_k,
             cross=True, mask="padding", bias=True),
        dict(name="self-attention with bias=False and a causal mask", T_q=T, T_k=T, cross=False, mask="causal",
             bias=False),
        # Every shape the docstring accepts, with masks that differ per head and per batch row in
        # every draw (see _varied_mask): broadcasting over heads, or a 2-D mask, is exercised.
        dict(name=f"cross-attention with a 2-D (T_q, T_k) mask, T_q = {T} and T_k = {T_k}", T_q=T, T_k=T_k,
             cross=True, mask="2d", bias=True),
        dict(name="self-attention with a (B, 1, T_q, T_k) mask that differs per batch row", T_q=T, T_k=T,
             cross=False, mask="per_batch", bias=True),
        dict(name=f"cross-attention with a (B, H, T_q, T_k) mask that differs per head and batch row, "
                  f"T_q = {T} and T_k = {T_k}", T_q=T, T_k=T_k, cross=True, mask="per_head", bias=True),
    ]
    for c in cases:
        c.update(H=H, dh=dh, B=B)
    return cases


def _mha_masks(case: dict, rng: np.random.Generator) -> tuple[torch.Tensor | None, dict]:
    """Our mask (True = attend) and the equivalent torch keyword arguments (True = blocked)."""
    B, T_q, T_k = case["B"], case["T_q"], case["T_k"]
    if case["mask"] == "causal":
        allowed = torch.tril(torch.ones(T_q, T_k, dtype=torch.bool))  # (T_q, T_k)
        return allowed[None, None], {"attn_mask": ~allowed}  # (1, 1, T_q, T_k)
    if case["mask"] == "padding":
        lengths = rng.integers(1, T_k, size=B)  # every sequence keeps >= 1 key and has >= 1 pad
        is_pad = torch.from_numpy(np.arange(T_k)[None, :] >= lengths[:, None])  # (B, T_k)
        return (~is_pad)[:, None, None, :], {"key_padding_mask": is_pad}  # (B, 1, 1, T_k)
    if case["mask"] in _VARIED_SHAPES:
        B_m, H_m = _VARIED_SHAPES[case["mask"]](B, case["H"])
        allowed = _varied_mask(B_m, H_m, T_q, T_k, rng)  # (B_m, H_m, T_q, T_k)
        blocked = (~allowed).expand(B, case["H"], T_q, T_k).reshape(B * case["H"], T_q, T_k)  # (B*H, T_q, T_k)
        return (allowed[0, 0] if case["mask"] == "2d" else allowed), {"attn_mask": blocked}
    return None, {}


# Mask kind -> the (batch, head) sizes of the mask given (B, H); "2d" is then passed as (T_q, T_k).
_VARIED_SHAPES = {"2d": lambda B, H: (1, 1), "per_batch": lambda B, H: (B, 1), "per_head": lambda B, H: (B, H)}


def _varied_mask(B: int, H: int, T_q: int, T_k: int, rng: np.random.Generator) -> torch.Tensor:
    """A random mask (True = attend) in which every (batch, head) slice differs from its neighbours.

    Row q of slice (b, h) always allows key (q + b + h) % T_k and always blocks key (q + b + h + 1) % T_k
    (T_k >= 4), so every row keeps an allowed key and neighbouring heads and batch rows disagree
    on that key in every draw, not by chance.
    """
    allowed = rng.random((B, H, T_q, T_k)) < 0.6  # (B, H, T_q, T_k)
    b, h, q = np.meshgrid(np.arange(B), np.arange(H), np.arange(T_q), indexing="ij")  # each (B, H, T_q)
    allowed[b, h, q, (q + b + h) % T_k] = True
    allowed[b, h, q, (q + b + h + 1) % T_k] = False
    return torch.from_numpy(allowed)


def check_mha(MultiHeadAttention: type, load_from_torch: Callable, split_heads: Callable | None = None,
              merge_heads: Callable | None = None) -> None:
    """MultiHeadAttention + load_from_torch against torch.nn.MultiheadAttention (batch_first), float32.

    Outputs must agree within atol 1e-5 + rtol 1e-4 and weights (per head) within atol 1e-5, for
    self-attention without a mask, with causal and key-padding masks, cross-attention with
    T_q != T_k (with and without padding), bias=False, and masks of every accepted shape,
    (T_q, T_k), (B, 1, T_q, T_k) and (B, H, T_q, T_k), that differ per head and per batch row.
    """
    rng = fresh_rng()
    with torch.no_grad():  # the grader's reference; every weight is drawn from rng
        for case in _mha_cases(rng):
            _check_mha_case(MultiHeadAttention, load_from_torch, case, rng, split_heads, merge_heads)


def _check_mha_case(MHA: type, load: Callable, case: dict, rng: np.random.Generator,
                    split_heads: Callable | None, merge_heads: Callable | None) -> None:
    B, H, dh, T_q, T_k = case["B"], case["H"], case["dh"], case["T_q"], case["T_k"]
    d = H * dh
    what = f"MultiHeadAttention({d}, {H}, bias={case['bias']}), {case['name']}"
    tmha, P = _random_torch_mha(d, H, case["bias"], rng)
    mha = call_student(MHA, d, H, bias=case["bias"], what=f"MultiHeadAttention({d}, {H}, bias={case['bias']})",
                       named=view_error)
    call_student(load, mha, _kernel_copy(tmha, d, H, case["bias"]),
                 what=f"load_from_torch(mha, torch_mha) with d_model={d}, n_heads={H}, bias={case['bias']}",
                 named=view_error)
    xq_np = rng.normal(size=(B, T_q, d)).astype(np.float32)  # (B, T_q, d)
    xkv_np = rng.normal(size=(B, T_k, d)).astype(np.float32) if case["cross"] else xq_np  # (B, T_k, d)
    xq = torch.from_numpy(xq_np)
    xkv = torch.from_numpy(xkv_np) if case["cross"] else xq  # self-attention: the same tensor
    mask, torch_kwargs = _mha_masks(case, rng)
    ref_out, ref_w = tmha(xq, xkv, xkv, need_weights=True, average_attn_weights=False, **torch_kwargs)
    out, attn = ask_items(mha, xq, xkv, mask, n=2, what=what, names="the pair (out, attn)", named=view_error)
    out_np = array(out, f"{what}: out", finite=False)  # nan and inf: diagnosed below
    if out_np.shape != (B, T_q, d):
        fail(what, f"out has shape {out_np.shape}",
             "Expected (B, T_q, d_model): the output always has the query's length.")
    attn_np = array(attn, f"{what}: attn", finite=False)
    if attn_np.shape != (B, H, T_q, T_k):
        fail(what, f"attn has shape {attn_np.shape}", "Expected the per-head weights, (B, n_heads, T_q, T_k).")
    if not np.all(np.isfinite(out_np)):
        fail(what, "the output contains nan or inf", "Are masked scores filled before the softmax, and does "
             "every row keep at least one allowed key?" + ("" if mask is None else " " + MASK_CONVENTION))
    sums = attn_np.sum(-1)
    off = ~(np.abs(sums - 1) <= 1e-4)  # nan rows are off too
    if off.any():
        fail(what, f"attention rows sum to {sums[off][:4].round(4).tolist()}, not 1",
             "Is the softmax taken over the keys (dim=-1), and the mask applied before it, not after?")
    if mask is not None:
        blocked = ~np.broadcast_to(mask.numpy(), attn_np.shape)
        leaked = attn_np[blocked]
        if not (leaked <= 1e-6).all():
            xq64, xkv64 = xq_np.astype(np.float64), xkv_np.astype(np.float64)
            found = diagnose(attn_np, {msg: (lambda v=v: _np_mha(xq64, xkv64, mask.numpy(), P, H, v)[1])
                                       for v, msg in MASK_VARIANTS.items()}, atol=1e-4, rtol=1e-3)
            fail(what, f"masked keys receive weight up to {leaked.max():.3g}",
                 found or "Fill the scores where the mask is False with -inf or torch.finfo(scores.dtype).min, "
                          "before the softmax, with the mask as given: (T_q, T_k), (B, 1, T_q, T_k) and "
                          "(B, H, T_q, T_k) all broadcast to the scores, and each head and batch row keeps its own "
                          "mask. " + MASK_CONVENTION)
    out_ok = close(out_np, ref_out.numpy(), atol=MHA_ATOL, rtol=MHA_RTOL)
    attn_ok = close(attn_np, ref_w.numpy(), atol=MHA_ATOL, rtol=0)
    if out_ok and attn_ok:
        return
    if split_heads is not None and merge_heads is not None:
        try:
            check_heads(split_heads, merge_heads)
        except Misconception as exc:
            fail(what, "differs from torch.nn.MultiheadAttention because split_heads/merge_heads are wrong", str(exc))
    allowed = None if mask is None else mask.numpy()
    xkv64 = xkv_np.astype(np.float64)
    found = diagnose(out_np, {msg: (lambda v=v: _np_mha(xq_np.astype(np.float64), xkv64, allowed, P, H, v)[0])
                              for v, msg in MHA_VARIANTS.items()}, atol=1e-4, rtol=1e-3)
    if found:
        fail(what, found)
    missing = _never_copied(mha, P, case["bias"], f"{what}: your module's state_dict() after load_from_torch")
    if missing:
        listed = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
        fail(what, f"load_from_torch left {listed} uncopied: none of {'their' if len(missing) > 1 else 'its'} values "
                   f"is among your module's parameters, which still hold their initial values there",
             "Copy every weight and bias of torch_mha into the matching layer of your module, in place.")
    if out_ok:
        fail(what, "the output matches torch but the returned weights do not",
             f"Return the post-softmax weights of every head, (B, H, T_q, T_k) "
             f"({first_bad(attn_np, ref_w.numpy(), MHA_ATOL, 0)}).")
    if attn_ok:
        fail(what, "the weights match torch's but the output does not "
                   f"({first_bad(out_np, ref_out.numpy(), MHA_ATOL, MHA_RTOL)})",
             "Everything up to the softmax is right: look after it, at the values (W_v and its bias), attn @ v, "
             "the merge of the heads and the output projection W_o (out_proj.weight copied without .T, and its "
             "bias). Nothing random, such as dropout, may act on the weights.")
    fail(what, f"the output differs from torch.nn.MultiheadAttention beyond atol {MHA_ATOL:g} + rtol {MHA_RTOL:g} "
               f"({first_bad(out_np, ref_out.numpy(), MHA_ATOL, MHA_RTOL)})",
         "Check the packed in_proj_weight layout [W_q; W_k; W_v], the biases, the scale sqrt(d_head) "
         "and the head split through (B, T, H, d_head).")
