"""Hidden checks for lab 4, the transformer block (grader only).

Conventions (the lab's, restated once here):
- A mask is a boolean array that is True where attention is allowed, broadcastable to the
  scores (B, H, T_q, T_k) in PyTorch or (T_q, T_k) in NumPy. torch.nn.MultiheadAttention uses
  the opposite convention (True = blocked) for both key_padding_mask and a boolean attn_mask.
- Heads own contiguous channels: head h of a (B, T, d_model) tensor is channels
  [h * d_head, (h + 1) * d_head) of every token.
- FLOPs count a (m, k) @ (k, n) matmul as 2 m k n (a multiply and an add).

Every check draws fresh inputs (``fresh_rng``) with other shapes than the notebook's, computes
the grader's own reference here (NumPy, or torch.nn.MultiheadAttention and torch autograd),
and on a mismatch names the known mistake whose result the student's output reproduces.
Messages quote the student's values only.

Checks run in the grader; the student's functions and classes may live in a sandboxed kernel
(``mlbook.judge.remote``), where only data can be sent. A module a check hands to student code
(the torch layer for ``load_from_torch``, the sublayers swapped into a ``TransformerBlock``) is
therefore built twice from the same drawn weights: the grader's copy computes the reference,
the kernel's copy (``helper``) is what the student's code receives.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from mlbook.labs._support import RemoteError, array, call_student, close, diagnose, fail, fresh_rng, helper, items, number
from mlbook_helpers.checks import Misconception, describe
from mlbook_helpers.transformer_block import TorchAttention
from mlbook_kernel.wire import Handle, WireError

__all__ = [
    "check_heads",
    "check_mha",
    "check_sinusoidal",
    "check_block",
    "check_attention_forward",
    "check_attention_backward",
    "check_score_bias_grad",
    "check_attention_flops",
    "check_attention_share",
    "check_attention_matrix_bytes",
    "check_crossover_length",
]

MHA_ATOL, MHA_RTOL = 1e-5, 1e-4  # float32 against torch.nn.MultiheadAttention
GRAD_TOL = 1e-10  # float64 against torch autograd


# ---------------------------------------------------------------------------------------------
# small utilities
# ---------------------------------------------------------------------------------------------


def _first_diff(actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> str:
    """Where the student's array first leaves the tolerance, quoting the student's value only."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(actual - expected) <= atol + rtol * np.abs(expected))  # nan counts as wrong
    if not bad.any():
        return "every entry within tolerance on its own"
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"first wrong entry at index {idx} (yours: {actual[idx]:.6g})"


def _call(fn: Callable, *args: Any, what: str, **kwargs: Any) -> Any:
    """call_student, with a precise message for the classic non-contiguous .view error.

    Args:
        fn: the student's function or class (local, or a RemoteObject in the kernel).
        args, kwargs: data, or RemoteObjects built in the kernel.
        what: the call as the student should read it in a failure message.
    """
    try:
        return fn(*args, **kwargs)
    except (Misconception, WireError, EOFError, OSError, TimeoutError):
        raise  # a verdict, or the kernel went away
    except Exception as exc:  # noqa: BLE001 - the student's error, reported through call_student
        # A RemoteError carries the kernel's exception type and text.
        kind, text = (exc.type_name, exc.message) if isinstance(exc, RemoteError) else (type(exc).__name__, str(exc))
        if kind == "RuntimeError" and "view size is not compatible" in text:
            fail(what, "raised RuntimeError from .view on a non-contiguous tensor",
                 "After a transpose the strides are permuted, so a flattening .view has no valid "
                 "stride interpretation: call .contiguous() first (or use reshape, which copies).")
        # call_student describes its arguments with hasattr(a, "shape"), which a kernel object
        # answers with a RemoteError: it gets data arguments only.
        if kind == "NotImplementedError" or not any(isinstance(a, Handle) for a in args):
            return call_student(_reraise(exc), *[a for a in args if not isinstance(a, Handle)], what=what)
        fail(what, f"raised {kind}: {text}",
             "Check that your code works for other sizes than the lesson's (other d_model and n_heads, bias=False).")


def _reraise(exc: Exception) -> Callable:
    def raiser(*_args: Any, **_kwargs: Any) -> Any:
        raise exc

    return raiser


def _pair(result: Any, what: str, names: str) -> tuple:
    return items(result, 2, what, f"the pair {names}")


# ---------------------------------------------------------------------------------------------
# split_heads / merge_heads
# ---------------------------------------------------------------------------------------------

DIRECT_VIEW = ("head h received a block of whole tokens instead of channels [h*d_head, (h+1)*d_head) "
               "of every token: the direct view (B, H, T, d_head) is silently wrong. View as "
               "(B, T, H, d_head) first, then transpose(1, 2)")
MERGE_NO_TRANSPOSE = ("merge without the transpose: flattening (B, H, T, d_head) straight to "
                      "(B, T, d_model) mixes tokens across heads. Transpose back to (B, T, H, d_head) "
                      "first, then .contiguous().view(B, T, d_model)")


def _split_problem(split_heads: Callable, rng: np.random.Generator) -> None:
    B, T, H, dh = int(rng.integers(2, 4)), int(rng.integers(5, 8)), int(rng.integers(2, 5)), int(rng.integers(2, 6))
    d = H * dh
    x_np = rng.normal(size=(B, T, d)).astype(np.float32)  # (B, T, d_model)
    x = torch.from_numpy(x_np.copy())
    what = f"split_heads(x of shape {(B, T, d)}, n_heads={H})"
    out = array(_call(split_heads, x, H, what=what), what)
    if out.shape != (B, H, T, dh):
        fail(what, f"returned shape {out.shape}", "Expected (B, n_heads, T, d_model // n_heads).")
    expected = x_np.reshape(B, T, H, dh).transpose(0, 2, 1, 3)  # (B, H, T, d_head)
    if close(out, expected, atol=0, rtol=0):
        return
    found = diagnose(out, {
        DIRECT_VIEW: lambda: x_np.reshape(B, H, T, dh),
        "channels were split with d_head as the outer axis (B, T, d_head, H), so head h got every "
        "H-th channel; head h must own a contiguous block of d_head channels":
            lambda: x_np.reshape(B, T, dh, H).transpose(0, 3, 1, 2),
    }, atol=0, rtol=0)
    fail(what, found or "heads do not own contiguous channel blocks",
         None if found else "Head h must hold x[b, t, h*d_head:(h+1)*d_head] at [b, h, t].")


def _merge_problem(merge_heads: Callable, rng: np.random.Generator) -> None:
    B, T, H, dh = int(rng.integers(2, 4)), int(rng.integers(5, 8)), int(rng.integers(2, 5)), int(rng.integers(2, 6))
    base = rng.normal(size=(B, T, H, dh)).astype(np.float32)  # (B, T, H, d_head)
    y = torch.from_numpy(base.copy()).transpose(1, 2)  # (B, H, T, d_head), not contiguous, like split_heads output
    what = f"merge_heads(x of shape {(B, H, T, dh)})"
    out = array(_call(merge_heads, y, what=what), what)
    if out.shape != (B, T, H * dh):
        fail(what, f"returned shape {out.shape}", "Expected (B, T, n_heads * d_head).")
    expected = base.reshape(B, T, H * dh)  # (B, T, d_model)
    if close(out, expected, atol=0, rtol=0):
        return
    heads_first = base.transpose(0, 2, 1, 3)  # (B, H, T, d_head)
    found = diagnose(out, {
        MERGE_NO_TRANSPOSE: lambda: heads_first.reshape(B, T, H * dh),
        "channels interleaved across heads (merged through (B, T, d_head, H)); concatenate each "
        "head's d_head channels in head order": lambda: base.transpose(0, 1, 3, 2).reshape(B, T, H * dh),
    }, atol=0, rtol=0)
    fail(what, found or "the output is not the concatenation of the heads' channels",
         None if found else "Token t's row must be [head 0's d_head channels, head 1's, ...].")


def check_heads(split_heads: Callable, merge_heads: Callable) -> None:
    """split_heads and merge_heads on fresh shapes (non-contiguous input to merge), and their round trip."""
    rng = fresh_rng()
    for _ in range(2):
        _split_problem(split_heads, rng)
        _merge_problem(merge_heads, rng)
    B, T, H, dh = 2, int(rng.integers(3, 9)), int(rng.integers(2, 5)), int(rng.integers(2, 5))
    x = torch.from_numpy(rng.normal(size=(B, T, H * dh)).astype(np.float32))  # (B, T, d_model)
    back = _call(merge_heads, _call(split_heads, x, H, what="split_heads"), what="merge_heads(split_heads(x))")
    if not close(back, x, atol=0, rtol=0):
        fail("merge_heads(split_heads(x, H))", "does not give x back", "merge_heads must undo split_heads exactly.")


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention against torch.nn.MultiheadAttention
# ---------------------------------------------------------------------------------------------


def _np_softmax(S: np.ndarray, axis: int = -1) -> np.ndarray:
    S = S - S.max(axis=axis, keepdims=True)
    E = np.exp(S)
    return E / E.sum(axis=axis, keepdims=True)


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
    if variant == "no_bias":
        bq, bk, bv, bo = (np.zeros_like(b) for b in (bq, bk, bv, bo))
    q, k, v = xq @ Wq.T + bq, xkv @ Wk.T + bk, xkv @ Wv.T + bv  # (B, T_q, d), (B, T_k, d), (B, T_k, d)
    if variant == "direct_view":
        q, k, v = q.reshape(B, H, Tq, dh), k.reshape(B, H, Tk, dh), v.reshape(B, H, Tk, dh)
    else:
        q = q.reshape(B, Tq, H, dh).transpose(0, 2, 1, 3)  # (B, H, T_q, d_head)
        k = k.reshape(B, Tk, H, dh).transpose(0, 2, 1, 3)  # (B, H, T_k, d_head)
        v = v.reshape(B, Tk, H, dh).transpose(0, 2, 1, 3)  # (B, H, T_k, d_head)
    scale = {"scale_model": math.sqrt(d), "no_scale": 1.0, "scale_dk": dh}.get(variant or "", math.sqrt(dh))
    S = q @ k.transpose(0, 1, 3, 2) / scale  # (B, H, T_q, T_k)
    if allowed is not None:
        S = np.where(allowed, S, -np.inf)
    A = _np_softmax(S)  # (B, H, T_q, T_k)
    o = A @ v  # (B, H, T_q, d_head)
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
    "transpose": "the weights were transposed when copied: nn.Linear.weight is (out, in), the same "
                 "layout as the blocks of in_proj_weight, so copy them without .T",
    "swap_qk": "the query and key blocks of in_proj_weight were swapped: its rows are [W_q; W_k; W_v]",
    "direct_view": DIRECT_VIEW,
    "merge_no_transpose": MERGE_NO_TRANSPOSE,
    "no_out_proj": "the output projection W_o was not applied after merging the heads",
}


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
    return None, {}


def check_mha(MultiHeadAttention: type, load_from_torch: Callable, split_heads: Callable | None = None,
              merge_heads: Callable | None = None) -> None:
    """MultiHeadAttention + load_from_torch against torch.nn.MultiheadAttention (batch_first), float32.

    Outputs must agree within atol 1e-5 + rtol 1e-4 and weights (per head) within atol 1e-5, for
    self-attention without a mask, with causal and key-padding masks, cross-attention with
    T_q != T_k (with and without padding), and bias=False.
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
    mha = _call(MHA, d, H, bias=case["bias"], what=f"MultiHeadAttention({d}, {H}, bias={case['bias']})")
    _call(load, mha, _kernel_copy(tmha, d, H, case["bias"]),
          what=f"load_from_torch(mha, torch_mha) with d_model={d}, n_heads={H}, bias={case['bias']}")
    xq_np = rng.normal(size=(B, T_q, d)).astype(np.float32)  # (B, T_q, d)
    xkv_np = rng.normal(size=(B, T_k, d)).astype(np.float32) if case["cross"] else xq_np  # (B, T_k, d)
    xq = torch.from_numpy(xq_np)
    xkv = torch.from_numpy(xkv_np) if case["cross"] else xq  # self-attention: the same tensor
    mask, torch_kwargs = _mha_masks(case, rng)
    ref_out, ref_w = tmha(xq, xkv, xkv, need_weights=True, average_attn_weights=False, **torch_kwargs)
    out, attn = _pair(_call(mha, xq, xkv, mask, what=what), what, "(out, attn)")
    out_np = array(out, f"{what}: out", finite=False)  # nan and inf: diagnosed below
    if out_np.shape != (B, T_q, d):
        fail(what, f"out has shape {out_np.shape}",
             "Expected (B, T_q, d_model): the output always has the query's length.")
    attn_np = array(attn, f"{what}: attn", finite=False)
    if attn_np.shape != (B, H, T_q, T_k):
        fail(what, f"attn has shape {attn_np.shape}", "Expected the per-head weights, (B, n_heads, T_q, T_k).")
    if not np.all(np.isfinite(out_np)):
        fail(what, "the output contains nan or inf", "Are masked scores filled before the softmax, and does "
             "every row keep at least one allowed key?")
    sums = attn_np.sum(-1)
    off = ~(np.abs(sums - 1) <= 1e-4)  # nan rows are off too
    if off.any():
        fail(what, f"attention rows sum to {sums[off][:4].round(4).tolist()}, not 1",
             "Is the softmax taken over the keys (dim=-1), and the mask applied before it, not after?")
    if mask is not None:
        blocked = ~np.broadcast_to(mask.numpy(), attn_np.shape)
        leaked = attn_np[blocked]
        if not (leaked <= 1e-6).all():
            fail(what, f"masked keys receive weight up to {leaked.max():.3g}",
                 "In this lab a mask is True where attention is ALLOWED (torch's key_padding_mask and "
                 "boolean attn_mask use the opposite convention): fill scores where the mask is False.")
    out_ok = np.allclose(out_np, ref_out.numpy(), atol=MHA_ATOL, rtol=MHA_RTOL)
    attn_ok = np.allclose(attn_np, ref_w.numpy(), atol=MHA_ATOL, rtol=0)
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
    if out_ok:
        fail(what, "the output matches torch but the returned weights do not",
             f"Return the post-softmax weights of every head, (B, H, T_q, T_k) ({_first_diff(attn_np, ref_w.numpy(), MHA_ATOL, 0)}).")
    fail(what, f"the output differs from torch.nn.MultiheadAttention beyond atol {MHA_ATOL:g} + rtol {MHA_RTOL:g} "
               f"({_first_diff(out_np, ref_out.numpy(), MHA_ATOL, MHA_RTOL)})",
         "Check the packed in_proj_weight layout [W_q; W_k; W_v], the biases, the scale sqrt(d_head) "
         "and the head split through (B, T, H, d_head).")


# ---------------------------------------------------------------------------------------------
# sinusoidal positions
# ---------------------------------------------------------------------------------------------


def _np_positions(T: int, d: int, variant: str | None = None) -> np.ndarray:
    """Sinusoidal positions (T, d): sin on even dimensions, cos on odd, angle pos / 10000^(2i/d)."""
    pos = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
    i = np.arange(d // 2, dtype=np.float64)[None, :]  # (1, d/2) pair index
    if variant == "dim_index":  # exponent from the dimension index, not the pair index
        k = np.arange(d, dtype=np.float64)[None, :]  # (1, d)
        ang = pos / 10000 ** (k / d)  # (T, d)
        pe = np.where(np.arange(d) % 2 == 0, np.sin(ang), np.cos(ang))
        return pe
    expo = {"no_two": i / d}.get(variant or "", 2 * i / d)
    ang = pos / 10000 ** expo  # (T, d/2)
    if variant == "halves":
        return np.concatenate([np.sin(ang), np.cos(ang)], axis=-1)  # (T, d)
    pe = np.empty((T, d))
    first, second = (np.cos, np.sin) if variant == "swapped" else (np.sin, np.cos)
    pe[:, 0::2], pe[:, 1::2] = first(ang), second(ang)
    return pe


POSITION_VARIANTS = {
    "swapped": "sin and cos are swapped: the paper puts sin on the even dimensions (2i) and cos on the odd ones (2i + 1)",
    "halves": "all sines come first and all cosines second; the paper interleaves them: dimension 2i "
              "is sin, dimension 2i + 1 is the cos of the same angle",
    "dim_index": "the exponent uses the dimension index instead of the pair index: both dimensions 2i "
                 "and 2i + 1 share the angle pos / 10000^(2i / d_model)",
    "no_two": "the exponent is i / d_model; the paper's is 2i / d_model for pair i",
}


def check_sinusoidal(sinusoidal_positions: Callable) -> None:
    """sinusoidal_positions(T, d_model) on fresh even widths and lengths, to 1e-9."""
    rng = fresh_rng()
    for _ in range(2):
        T, d = int(rng.integers(9, 40)), 2 * int(rng.integers(5, 24))
        what = f"sinusoidal_positions({T}, {d})"
        pe = array(_call(sinusoidal_positions, T, d, what=what), what)
        if pe.shape != (T, d):
            fail(what, f"shape is {pe.shape}", "Expected (T, d_model): one row per position.")
        ref = _np_positions(T, d)
        if close(pe, ref, atol=1e-9, rtol=0):
            continue
        found = diagnose(pe, {msg: (lambda v=v: _np_positions(T, d, v)) for v, msg in POSITION_VARIANTS.items()},
                         atol=1e-9, rtol=0)
        fail(what, found or f"values differ from PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) "
                            f"({_first_diff(pe, ref, 1e-9, 0)})")


# ---------------------------------------------------------------------------------------------
# TransformerBlock
# ---------------------------------------------------------------------------------------------


SUBLAYERS = ("attn", "ln1", "ln2", "ff")  # the block's attributes the check replaces


def _grader_sublayers(d: int, H: int, d_ff: int, rng: np.random.Generator) -> nn.ModuleDict:
    """The grader's sublayers for a block, float64, every weight drawn from ``rng``.

    Returns:
        ModuleDict with attn (torch.nn.MultiheadAttention behind the lab's call, TorchAttention),
        ln1 and ln2 (LayerNorm(d)), ff (Linear(d, d_ff), GELU, Linear(d_ff, d)).
    """
    subs = nn.ModuleDict({
        "attn": TorchAttention(d, H),
        "ln1": nn.LayerNorm(d),
        "ln2": nn.LayerNorm(d),
        "ff": nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)),
    }).double()
    with torch.no_grad():
        for name, p in subs.named_parameters():
            if name.startswith("attn."):
                mean, std = 0.0, (1 / math.sqrt(d) if p.dim() == 2 else 0.3)
            else:
                mean, std = (0.3 if p.dim() == 1 else 0.0), 0.6
            p.copy_(torch.from_numpy(rng.normal(mean, std, tuple(p.shape))))
    return subs.eval()


def _kernel_sublayers(subs: nn.ModuleDict, d: int, H: int, d_ff: int) -> Any:
    """The same sublayers built where the student's block lives (the kernel), weights included."""
    torch_nn = lambda name: helper(f"torch.nn:{name}")  # noqa: E731
    copy = torch_nn("ModuleDict")({
        "attn": helper("mlbook_helpers.transformer_block:TorchAttention")(d, H),
        "ln1": torch_nn("LayerNorm")(d),
        "ln2": torch_nn("LayerNorm")(d),
        "ff": torch_nn("Sequential")(torch_nn("Linear")(d, d_ff), torch_nn("GELU")(), torch_nn("Linear")(d_ff, d)),
    })
    copy.double()
    copy.load_state_dict(subs.state_dict())  # a state dict is data: it crosses to the kernel
    copy.eval()
    return copy


def _has(obj: Any, name: str) -> bool:
    """hasattr that also works on a kernel object (whose AttributeError arrives as RemoteError)."""
    try:
        getattr(obj, name)
    except (AttributeError, RemoteError):
        return False
    return True


def _ref_block(subs: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, pre_ln: bool, residual: bool,
               variant: str | None = None) -> torch.Tensor:
    """The grader's block from the grader's sublayers (float64), one mistake optionally injected."""
    ln1, ln2 = (subs.ln2, subs.ln1) if variant == "ln_swapped" else (subs.ln1, subs.ln2)
    ff, attn = subs.ff, subs.attn
    if variant == "mask_dropped":
        mask = None
    if variant == "swap_pre_post":
        pre_ln = not pre_ln
    if variant == "residual_flip":
        residual = not residual
    r = 1.0 if residual else 0.0
    if variant == "ln_inside":  # post-LN asked, sublayer output normalised before the add
        h = r * x + ln1(attn(x, x, mask)[0])
        return r * h + ln2(ff(h))
    if variant == "second_residual_from_x":
        h = ln1(r * x + attn(x, x, mask)[0]) if not pre_ln else r * x + attn(ln1(x), ln1(x), mask)[0]
        return ln2(r * x + ff(h)) if not pre_ln else r * x + ff(ln2(h))
    if pre_ln:
        z = ln1(x)
        h = r * x + attn(z, z, mask)[0]  # (B, T, d)
        return r * h + ff(ln2(h))  # (B, T, d)
    h = ln1(r * x + attn(x, x, mask)[0])  # (B, T, d)
    return ln2(r * h + ff(h))  # (B, T, d)


BLOCK_VARIANTS = {
    "ln_inside": "LayerNorm was applied to the sublayer output before the residual add; post-LN (the "
                 "paper's block) normalises the sum: h = LN1(x + attn(x)), y = LN2(h + ff(h))",
    "swap_pre_post": "the block computes the other LayerNorm placement: post-LN is LN(x + sublayer(x)), "
                     "pre-LN is x + sublayer(LN(x)); check which one the pre_ln flag selects",
    "ln_swapped": "ln1 and ln2 are used in each other's place: ln1 belongs to the attention sublayer, ln2 to the feed-forward",
    "residual_flip": "the residual flag is not honoured: residual=True adds the sublayer input back, residual=False must not",
    "second_residual_from_x": "the feed-forward residual adds the block input x; it must add h, the attention sublayer's output",
    "mask_dropped": "the mask was not passed on to the attention sublayer",
}


def check_block(TransformerBlock: type) -> None:
    """TransformerBlock wiring (post-LN, pre-LN, with and without residual, with a causal mask), float64.

    The block's attention, LayerNorms and feed-forward network are replaced by the grader's
    (torch.nn.MultiheadAttention and torch layers with fresh random weights), so only the wiring
    written in forward is under test; the reference is computed from the grader's own copies.
    """
    rng = fresh_rng()
    H, dh = int(rng.integers(2, 4)), int(rng.integers(2, 5))
    d, B, T = H * dh, int(rng.integers(1, 3)), int(rng.integers(4, 8))
    d_ff = 4 * d
    cases = [
        dict(pre_ln=False, residual=True, causal=False),
        dict(pre_ln=False, residual=True, causal=True),
        dict(pre_ln=True, residual=True, causal=False),
        dict(pre_ln=True, residual=True, causal=True),
        dict(pre_ln=False, residual=False, causal=False),
        dict(pre_ln=True, residual=False, causal=False),
    ]
    with torch.no_grad():  # the grader's reference; every weight is drawn from rng
        for case in cases:
            _check_block_case(TransformerBlock, d, H, d_ff, B, T, case, rng)


def _check_block_case(TB: type, d: int, H: int, d_ff: int, B: int, T: int, case: dict, rng: np.random.Generator) -> None:
    pre_ln, residual, causal = case["pre_ln"], case["residual"], case["causal"]
    label = f"TransformerBlock({d}, {H}, {d_ff}, pre_ln={pre_ln}, residual={residual})"
    what = label + (" with a causal mask" if causal else "")
    block = _call(TB, d, H, d_ff, pre_ln=pre_ln, residual=residual, what=label)
    for name in SUBLAYERS:
        if not _has(block, name):
            fail(label, f"has no attribute {name!r}", "Keep the sublayers the skeleton's __init__ creates.")
    subs = _grader_sublayers(d, H, d_ff, rng)
    kernel_subs = _kernel_sublayers(subs, d, H, d_ff)
    for name in SUBLAYERS:
        setattr(block, name, kernel_subs[name])
    block.double()
    block.eval()
    x = torch.from_numpy(rng.normal(size=(B, T, d)))  # (B, T, d)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None] if causal else None  # (1, 1, T, T)
    y, attn = _pair(_call(block, x, mask, what=what), what, "(y, attn)")
    y_np = array(y, f"{what}: y")
    if y_np.shape != (B, T, d):
        fail(what, f"y has shape {y_np.shape}", "The block's output has its input's shape (B, T, d_model).")
    ref = _ref_block(subs, x, mask, pre_ln, residual).numpy()
    if close(y_np, ref, atol=GRAD_TOL, rtol=1e-8):
        z = subs.ln1(x) if pre_ln else x  # what the attention sublayer reads
        ref_attn = subs.attn(z, z, mask)[1].numpy()
        if isinstance(attn, Handle) or not close(attn, ref_attn, atol=1e-10, rtol=0):
            fail(what, "y is right but the returned attn is not the attention sublayer's weights",
                 "Return the (B, H, T, T) weights that self.attn returned.")
        return
    found = diagnose(y_np, {msg: (lambda v=v: _ref_block(subs, x, mask, pre_ln, residual, v).numpy())
                            for v, msg in BLOCK_VARIANTS.items()}, atol=1e-9, rtol=1e-8)
    fail(what, found or f"output differs from the block's definition ({_first_diff(y_np, ref, GRAD_TOL, 1e-8)})",
         None if found else ("post-LN: h = LN1(x + attn(x)), y = LN2(h + FFN(h)); pre-LN: h = x + attn(LN1(x)), "
                             "y = h + FFN(LN2(h)); residual=False drops the '+ x' and '+ h' terms."))


# ---------------------------------------------------------------------------------------------
# NumPy attention: forward, backward, score-bias gradient (autograd in float64 is the reference)
# ---------------------------------------------------------------------------------------------


def _np_forward(Q, K, V, allowed=None, bias=None, variant=None):
    """Grader's forward: Y (T_q, d_v) and A (T_q, T_k), one mistake optionally injected."""
    d_k = Q.shape[-1]
    scale = {"no_scale": 1.0, "scale_dk": d_k, "scale_dv": math.sqrt(V.shape[-1])}.get(variant or "", math.sqrt(d_k))
    S = Q @ K.T / scale  # (T_q, T_k)
    if bias is not None and variant != "bias_ignored":
        S = S + bias
    if allowed is not None and variant != "mask_after":
        S = np.where(allowed, S, -np.inf)
    A = _np_softmax(S, axis=0 if variant == "axis0" else -1)  # (T_q, T_k)
    if allowed is not None and variant == "mask_after":
        A = np.where(allowed, A, 0.0)
    return A @ V, A


FORWARD_VARIANTS = {
    "no_scale": "scores were not divided by sqrt(d_k)",
    "scale_dk": "scores were divided by d_k instead of sqrt(d_k)",
    "scale_dv": "scores were divided by sqrt(d_v), the value width; the scale uses d_k, the query/key width",
    "axis0": "the softmax was taken over the query axis (axis 0) instead of over the keys (axis -1)",
    "mask_after": "the mask was applied after the softmax: masked scores must be filled before it, so each row still sums to 1",
    "bias_ignored": "the score bias was ignored: add it to the scaled scores before masking and the softmax",
}


def _autograd(Q, K, V, dY, allowed=None, bias=None) -> dict:
    t = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in
         (("Q", Q), ("K", K), ("V", V), ("B", bias if bias is not None else np.zeros((len(Q), len(K)))))}
    S = t["Q"] @ t["K"].T / math.sqrt(Q.shape[-1]) + t["B"]  # (T_q, T_k)
    if allowed is not None:
        S = S.masked_fill(~torch.from_numpy(allowed), float("-inf"))
    Y = S.softmax(-1) @ t["V"]  # (T_q, d_v)
    (Y * torch.from_numpy(dY)).sum().backward()
    return {"Y": Y.detach().numpy(), **{f"d{n}": t[n].grad.numpy() for n in ("Q", "K", "V", "B")}}


def _np_backward_variants(A: np.ndarray, Q, K, V, dY) -> dict[str, dict]:
    """What each known backward mistake returns for dQ, dK, dV and dB (computed lazily: some
    mistakes only have a shape when T_q = T_k)."""
    d_k = Q.shape[-1]
    r = math.sqrt(d_k)
    dA = dY @ V.T  # (T_q, T_k)
    dS = A * (dA - (dA * A).sum(-1, keepdims=True))  # (T_q, T_k)
    dS0 = A * (dA - (dA * A).sum(0, keepdims=True))  # summed over the wrong axis
    dS_nojac = A * dA  # missing the -a a^T term
    return {
        "dK without transposing dS (dK = dS Q); the key gradient is dS^T Q / sqrt(d_k)":
            dict(dK=lambda: dS @ Q / r),
        "the softmax backward summed over the wrong axis: the row-wise sum (dA * A).sum runs over the keys (axis=-1)":
            dict(dQ=lambda: dS0 @ K / r, dK=lambda: dS0.T @ Q / r, dB=lambda: dS0),
        "the softmax Jacobian's off-diagonal term is missing: dS = A * (dA - rowsum(dA * A)), not A * dA":
            dict(dQ=lambda: dS_nojac @ K / r, dK=lambda: dS_nojac.T @ Q / r, dB=lambda: dS_nojac),
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


def _run_forward(attention_forward: Callable, Q, K, V, allowed, bias, what: str):
    kwargs = {} if bias is None else {"bias": bias}
    res = _pair(_call(attention_forward, Q, K, V, allowed, what=what, **kwargs), what, "(Y, cache)")
    return array(res[0], f"{what}: Y"), res[1]


def _forward_problem(attention_forward: Callable, case: dict, Q, K, V, bias, ref_Y) -> str | None:
    what = f"attention_forward, {case['name']}"
    Y, _ = _run_forward(attention_forward, Q, K, V, case["allowed"], bias, what)
    if Y.shape != ref_Y.shape:
        return f"{what}: Y has shape {Y.shape}; expected (T_q, d_v)."
    if close(Y, ref_Y, atol=1e-12, rtol=1e-10):
        return None
    found = diagnose(Y, {msg: (lambda v=v: _np_forward(Q, K, V, case["allowed"], bias, v)[0])
                         for v, msg in FORWARD_VARIANTS.items()}, atol=1e-10, rtol=1e-8)
    return f"{what}: {found or 'Y differs from softmax(Q K^T / sqrt(d_k) + bias, masked) V (' + _first_diff(Y, ref_Y, 1e-12, 1e-10) + ')'}."


def check_attention_forward(attention_forward: Callable) -> None:
    """NumPy forward on fresh shapes (T_q != T_k, d_v != d_k), masks and a score bias, to 1e-12."""
    rng = fresh_rng()
    for case in _backward_cases(rng):
        Q, K, V, dY, bias = _draw(case, rng)
        problem = _forward_problem(attention_forward, case, Q, K, V, bias, _autograd(Q, K, V, dY, case["allowed"], bias)["Y"])
        if problem:
            raise Misconception(problem)


def _check_grads(attention_forward: Callable, backward: Callable, names: tuple[str, ...], fn_name: str) -> None:
    rng = fresh_rng()
    for case in _backward_cases(rng):
        Q, K, V, dY, bias = _draw(case, rng)
        ref = _autograd(Q, K, V, dY, case["allowed"], bias)
        problem = _forward_problem(attention_forward, case, Q, K, V, bias, ref["Y"])
        if problem:
            fail(fn_name, "cannot be checked while attention_forward is wrong", problem)
        what = f"{fn_name}, {case['name']}"
        _, cache = _run_forward(attention_forward, Q, K, V, case["allowed"], bias, what)
        res = _call(backward, dY, cache, what=what)
        if len(names) == 1:  # one gradient: the array itself (a one-item tuple is accepted too)
            grads = tuple(res) if isinstance(res, tuple) and len(res) == 1 else (res,)
        else:
            grads = items(res, len(names), what, ", ".join(names))
        A = _np_forward(Q, K, V, case["allowed"], bias)[1]
        variants = _np_backward_variants(A, Q, K, V, dY)
        for name, g in zip(names, grads):
            g = array(g, f"{what}: {name}")
            if g.shape != ref[name].shape:
                fail(what, f"{name} has shape {g.shape}, expected {ref[name].shape}",
                     "Each gradient has the shape of what it is the gradient of.")
            if close(g, ref[name], atol=GRAD_TOL, rtol=GRAD_TOL):
                continue
            found = diagnose(g, {msg: v[name] for msg, v in variants.items() if name in v}, atol=1e-9, rtol=1e-8)
            fail(what, f"{name} differs from autograd beyond {GRAD_TOL:g}" + (f": {found}" if found else
                 f" ({_first_diff(g, ref[name], GRAD_TOL, GRAD_TOL)})"),
                 None if found else "dV = A^T dY, dA = dY V^T, dS = A * (dA - rowsum(dA * A)), "
                                    "dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k).")


def check_attention_backward(attention_forward: Callable, attention_backward: Callable) -> None:
    """dQ, dK, dV against torch autograd in float64 to 1e-10 (square first, then T_q != T_k with mask and bias)."""
    _check_grads(attention_forward, attention_backward, ("dQ", "dK", "dV"), "attention_backward")


def check_score_bias_grad(attention_forward: Callable, score_bias_grad: Callable) -> None:
    """The gradient of an additive score bias against torch autograd in float64 to 1e-10."""
    _check_grads(attention_forward, score_bias_grad, ("dB",), "score_bias_grad")


# ---------------------------------------------------------------------------------------------
# cost: FLOPs, the n x n share, memory, crossovers
# ---------------------------------------------------------------------------------------------


def _num(x: Any, what: str) -> float:
    return number(x, what, "Return a number (an int or a float).")


def check_attention_flops(attention_flops: Callable) -> None:
    """attention_flops(B, T, d_model) on fresh sizes: exact integers, 2 m k n per matmul."""
    rng = fresh_rng()
    for _ in range(3):
        B, T, d = int(rng.integers(2, 17)), int(rng.integers(100, 5000)), int(rng.integers(64, 2048))
        what = f"attention_flops(B={B}, T={T}, d_model={d})"
        got = _call(attention_flops, B, T, d, what=what)
        if not isinstance(got, dict):
            fail(what, f"returned {describe(got)}", "Return a dict with keys projections, qk_t, av, total.")
        missing = {"projections", "qk_t", "av", "total"} - set(got)
        if missing:
            fail(what, f"the dict lacks {sorted(missing)}", "Keys: projections, qk_t, av, total.")
        ref = {"projections": 8 * B * T * d * d, "qk_t": 2 * B * T * T * d, "av": 2 * B * T * T * d}
        ref["total"] = sum(ref.values())
        variants = {
            "projections": {
                4 * B * T * d * d: "counted multiply-adds, not FLOPs: a (m, k) @ (k, n) matmul costs 2 m k n",
                6 * B * T * d * d: "only three projections: the output projection W_O is a fourth (d, d) matmul",
                2 * B * T * d * d: "one projection counted: Q, K, V and O each cost 2 B T d^2",
                8 * B * T * d: "a projection is (B T, d) @ (d, d): 2 B T d^2, d squared",
            },
            "qk_t": {
                B * T * T * d: "counted multiply-adds, not FLOPs: a (m, k) @ (k, n) matmul costs 2 m k n",
                2 * B * T * d * d: "QK^T is (T, d_head) @ (d_head, T) per head: 2 B T^2 d over all heads, T squared",
            },
            "av": {
                B * T * T * d: "counted multiply-adds, not FLOPs: a (m, k) @ (k, n) matmul costs 2 m k n",
                2 * B * T * d * d: "AV is (T, T) @ (T, d_head) per head: 2 B T^2 d over all heads, T squared",
            },
        }
        for key in ("projections", "qk_t", "av", "total"):
            value = _num(got[key], what)
            if math.isclose(value, ref[key], rel_tol=1e-9):
                continue
            if key == "total":
                parts = sum(_num(got[k], what) for k in ("projections", "qk_t", "av"))
                hint = None if math.isclose(value, parts, rel_tol=1e-9) else "total must be projections + qk_t + av"
                fail(what, f"total is {value:.6g}", hint)
            found = next((m for v, m in variants[key].items() if math.isclose(value, v, rel_tol=1e-9)), None)
            fail(what, f"{key} is {value:.6g}" + (f": {found}" if found else ""),
                 None if found else "Count each matmul (m, k) @ (k, n) as 2 m k n FLOPs.")


def check_attention_share(attention_share: Callable) -> None:
    """attention_share(T, d_model): the n x n share of one layer with a 4x FFN, a fraction in [0, 1]."""
    rng = fresh_rng()
    for _ in range(3):
        T, d = int(rng.integers(64, 40000)), int(rng.integers(64, 8192))
        what = f"attention_share(T={T}, d_model={d})"
        got = _num(_call(attention_share, T, d, what=what), what)
        ref = 4 * T * T * d / (24 * T * d * d + 4 * T * T * d)
        if math.isclose(got, ref, rel_tol=1e-9):
            continue
        found = diagnose(got, {
            "this is the share for the attention sublayer alone; the layer also has a 4x FFN, "
            "2 matmuls of (T, d) @ (d, 4d) = 16 B T d^2 FLOPs": T / (T + 2 * d),
            "the FFN was counted as 8 B T d^2; with d_ff = 4 d its two matmuls cost 16 B T d^2": T / (T + 4 * d),
            "this is the ratio of the n x n part to the rest, not its share of the whole layer": T / (6 * d),
            "a percentage was returned; return a fraction between 0 and 1": 100 * ref,
        }, atol=0, rtol=1e-9)
        fail(what, f"returned {got:.6g}" + (f": {found}" if found else ""),
             None if found else "share = (qk_t + av) / (attention projections + FFN + qk_t + av).")


def check_attention_matrix_bytes(attention_matrix_bytes: Callable) -> None:
    """attention_matrix_bytes(B, H, T, bytes_per_entry=2) on fresh sizes, and its default."""
    rng = fresh_rng()
    for _ in range(3):
        B, H, T = int(rng.integers(1, 33)), int(rng.integers(1, 65)), int(rng.integers(100, 70000))
        bpe = int(rng.choice([1, 4, 8]))
        for args, kwargs, n_bytes in (((B, H, T), {}, 2), ((B, H, T), {"bytes_per_entry": bpe}, bpe)):
            what = f"attention_matrix_bytes({B}, {H}, {T}" + (f", bytes_per_entry={bpe})" if kwargs else ")")
            got = _num(_call(attention_matrix_bytes, *args, what=what, **kwargs), what)
            ref = B * H * T * T * n_bytes
            if math.isclose(got, ref, rel_tol=1e-9):
                continue
            found = diagnose(got, {
                "entries were counted, not bytes: multiply by bytes_per_entry (2 for bf16 by default)": B * H * T * T,
                "the heads were left out: every head stores its own (T, T) matrix": B * T * T * n_bytes,
                "T was not squared: the matrix is T x T per head and sequence": B * H * T * n_bytes,
                "the batch was left out": H * T * T * n_bytes,
                "the result is in megabytes or gigabytes; return bytes": ref / 1e6,
            }, atol=0, rtol=1e-9)
            fail(what, f"returned {got:.6g}" + (f": {found}" if found else ""),
                 None if found else "The matrix has B * H * T^2 entries of bytes_per_entry bytes each.")


def check_crossover_length(crossover_length: Callable) -> None:
    """crossover_length(d_model, full_layer) on fresh widths: 2 d alone, 6 d with the 4x FFN."""
    rng = fresh_rng()
    for _ in range(2):
        d = int(rng.integers(65, 5000))
        for full in (False, True):
            what = f"crossover_length({d}, full_layer={full})"
            got = _num(_call(crossover_length, d, full_layer=full, what=what), what)
            ref = (6 if full else 2) * d
            if math.isclose(got, ref, rel_tol=1e-9):
                continue
            found = diagnose(got, {
                "the two cases are swapped: attention alone crosses at 2 d_model, a full layer with its FFN at 6 d_model":
                    (2 if full else 6) * d,
                "the FFN was counted as 8 B T d^2 instead of 16 B T d^2": 4 * d,
                "the crossover is where 4 B T^2 d (n x n part) equals the per-token part; solve for T": d / 2,
            }, atol=0, rtol=1e-9)
            fail(what, f"returned {got:.6g}" + (f": {found}" if found else ""),
                 None if found else "Solve 4 B T^2 d = (per-token FLOPs) for T.")
