"""Support code for lab 3 (causal and padding masks): ready-made layers to point tests at.

Convention of the lab: a boolean mask is True where attention is allowed. The layers here
are built from PyTorch's own attention (``scaled_dot_product_attention`` with
``is_causal`` or a boolean ``attn_mask``, and ``nn.MultiheadAttention`` with its
``key_padding_mask``), not from the lab's answers, so a property test can be tried on a layer
that is known to be right and on one that is known to leak. Every layer works on float32
tensors of width ``D_MODEL``.

The ``*_with_leak`` layers take their weights as an argument: the grader draws fresh ones for
every run and builds the layers in the notebook's kernel, where the student's property test
calls them.
"""

from __future__ import annotations

from typing import Callable

import math

import torch
from torch.nn import functional as F

__all__ = [
    "D_MODEL",
    "CAUSAL_LEAKS",
    "PADDING_LEAKS",
    "library_attention",
    "library_causal_layer",
    "library_padding_layer",
    "causal_layer_with_leak",
    "padding_layer_with_leak",
    "VOCAB",
    "BOS",
    "tiny_decoder",
]

D_MODEL = 8  # width of every layer's tokens: x is (B, T, D_MODEL)
N_HEADS = 2
# The mistakes a ``*_with_leak`` layer can make (None: a correct layer).
CAUSAL_LEAKS = ("no mask", "one future key", "after softmax", "first query sees all")
PADDING_LEAKS = ("no mask", "queries", "first sequence")
VOCAB = 11  # tokens of the tiny decoder: ids 0 .. VOCAB - 1
BOS = 0  # the tiny decoder's begin-of-sequence token
MAX_LEN = 64  # longest sequence the tiny decoder has positions for


def _projections(seed: int) -> torch.nn.Linear:
    with torch.random.fork_rng():  # fixed weights, without touching the notebook's random state
        torch.manual_seed(seed)
        return torch.nn.Linear(D_MODEL, 3 * D_MODEL)


def library_causal_layer(causal: bool = True, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """A two-head self-attention layer from torch's SDPA, causal or not.

    Args:
        causal: pass ``is_causal=True`` to SDPA; with False the layer reads the future.
        seed: seed of the fixed projection weights.

    Returns:
        layer(x) -> y, with x and y (B, T, D_MODEL) float32.
    """
    proj = _projections(seed)
    d_head = D_MODEL // N_HEADS

    @torch.no_grad()
    def layer(x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        qkv = proj(x.float())  # (B, T, 3 * D_MODEL)
        q, k, v = (t.view(B, T, N_HEADS, d_head).transpose(1, 2) for t in qkv.split(D_MODEL, dim=-1))  # (B, H, T, d_head)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, T, d_head)
        return y.transpose(1, 2).reshape(B, T, D_MODEL)  # (B, T, D_MODEL)

    return layer


def library_padding_layer(use_padding: bool = True, seed: int = 0) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A two-head ``nn.MultiheadAttention`` layer that is told about padding, or not.

    Args:
        use_padding: pass ``is_pad`` as MultiheadAttention's ``key_padding_mask`` (whose own
            convention is True = ignore this key); with False the padding is attended to.
        seed: seed of the layer's weights.

    Returns:
        layer(x, is_pad) -> y, with x and y (B, T, D_MODEL) float32 and is_pad (B, T) bool,
        True at padding tokens.
    """
    with torch.random.fork_rng():  # fixed weights, without touching the notebook's random state
        torch.manual_seed(seed)
        mha = torch.nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).eval()

    @torch.no_grad()
    def layer(x: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
        x = x.float()  # (B, T, D_MODEL)
        y, _ = mha(x, x, x, key_padding_mask=is_pad if use_padding else None, need_weights=False)
        return y  # (B, T, D_MODEL)

    return layer


@torch.no_grad()
def library_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
    """torch's ``scaled_dot_product_attention`` in the lab's calling convention.

    Args:
        q: (B, H, T_q, d_k), k: (B, H, T_k, d_k), v: (B, H, T_k, d_v).
        mask: bool broadcastable to (B, H, T_q, T_k), True where attention is allowed; or None.

    Returns:
        (out, None): out is (B, H, T_q, d_v); torch does not return the weights.
    """
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None


def _one_head(x: torch.Tensor, weights: torch.Tensor, allowed: torch.Tensor,
              after_softmax: bool = False) -> torch.Tensor:
    """One head of self-attention of x (B, T, D) under ``allowed`` (bool, broadcastable to (B, T, T)).

    With ``after_softmax`` the weights are zeroed after a softmax over every key (the leak);
    otherwise torch's SDPA applies the mask to the scores.
    """
    W_q, W_k, W_v = weights.to(x.dtype)  # (D, D) each
    q, k, v = x @ W_q, x @ W_k, x @ W_v  # (B, T, D) each
    if not after_softmax:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, T, D)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1) * allowed  # (B, T, T)
    return w @ v  # (B, T, D)


def causal_layer_with_leak(weights: torch.Tensor, leak: str | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A one-head causal self-attention layer, correct or with one of ``CAUSAL_LEAKS``.

    Args:
        weights: (3, D_MODEL, D_MODEL) the query, key and value projections.
        leak: None for a correct layer; "no mask", "one future key" (off by one),
            "after softmax" (weights zeroed after the softmax) or "first query sees all".

    Returns:
        layer(x) -> y, with x and y (B, T, D_MODEL), computed in x's dtype.
    """
    if leak is not None and leak not in CAUSAL_LEAKS:
        raise ValueError(f"unknown causal leak {leak!r}: choose from {CAUSAL_LEAKS}")
    weights = torch.as_tensor(weights).clone()

    @torch.no_grad()
    def layer(x: torch.Tensor) -> torch.Tensor:
        T = x.shape[-2]
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]  # query and key positions
        allowed = {None: j <= i, "no mask": torch.ones(T, T, dtype=torch.bool), "one future key": j <= i + 1,
                   "after softmax": j <= i, "first query sees all": (j <= i) | (i == 0)}[leak]  # (T, T)
        return _one_head(x, weights, allowed, after_softmax=leak == "after softmax")

    return layer


def padding_layer_with_leak(weights: torch.Tensor,
                            leak: str | None = None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A one-head self-attention layer told about padding, correct or with one of ``PADDING_LEAKS``.

    Args:
        weights: (3, D_MODEL, D_MODEL) the query, key and value projections.
        leak: None for a correct layer (padded keys removed); "no mask", "queries" (padded
            queries masked instead of keys) or "first sequence" (the first sequence's padding
            used for the whole batch).

    Returns:
        layer(x, is_pad) -> y, with x and y (B, T, D_MODEL), computed in x's dtype, and is_pad
        (B, T) bool, True at padding tokens.
    """
    if leak is not None and leak not in PADDING_LEAKS:
        raise ValueError(f"unknown padding leak {leak!r}: choose from {PADDING_LEAKS}")
    weights = torch.as_tensor(weights).clone()

    @torch.no_grad()
    def layer(x: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        real = ~is_pad  # (B, T)
        allowed = {None: real[:, None, :], "no mask": torch.ones(B, 1, T, dtype=torch.bool),
                   "queries": real[:, :, None], "first sequence": real[:1, None, :].expand(B, 1, T)}[leak]
        return _one_head(x, weights, allowed)  # allowed broadcasts to (B, T, T)

    return layer


def tiny_decoder(seed: int = 0, vocab: int = VOCAB) -> Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """A one-layer, two-head decoder with random weights: token and position embeddings, one
    self-attention layer (torch's SDPA under the mask it is given) with a residual, and a linear
    read-out to next-token logits.

    Args:
        seed: seed of the weights.
        vocab: number of token ids.

    Returns:
        decoder(tokens, mask) -> logits: tokens (B, T) integer ids (T <= 64), mask bool
        broadcastable to (B, 2, T, T), True where attention is allowed, or None (no mask);
        logits (B, T, vocab) float32, row t being the prediction of the token after position t.
    """
    with torch.random.fork_rng():  # fixed weights, without touching the notebook's random state
        torch.manual_seed(seed)
        embed, pos = torch.nn.Embedding(vocab, D_MODEL), torch.nn.Embedding(MAX_LEN, D_MODEL)
        proj, read_out = torch.nn.Linear(D_MODEL, 3 * D_MODEL), torch.nn.Linear(D_MODEL, vocab)
    d_head = D_MODEL // N_HEADS

    @torch.no_grad()
    def decoder(tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        tokens = torch.as_tensor(tokens).long()
        B, T = tokens.shape
        x = embed(tokens) + pos(torch.arange(T))  # (B, T, D_MODEL)
        q, k, v = (t.view(B, T, N_HEADS, d_head).transpose(1, 2)
                   for t in proj(x).split(D_MODEL, dim=-1))  # (B, H, T, d_head) each
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, d_head)
        h = x + y.transpose(1, 2).reshape(B, T, D_MODEL)  # (B, T, D_MODEL)
        return read_out(h)  # (B, T, vocab)

    return decoder
