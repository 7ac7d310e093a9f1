"""Support code for lab 6's decoding section: a tiny causal language model to decode with.

``TinyCausalLM`` is a decoder-only model in float64 with fixed random weights: token and
learned position embeddings, ``n_layers`` causal multi-head self-attention layers with a
residual connection, and an unembedding to logits. It has no MLP and no normalisation: they act
on each token separately and change nothing about what a key-value cache must hold.

It runs in two ways:
- ``full_logits(tokens)``: the full causal forward pass over every token at once, with its own
  (T, T) masked attention;
- ``decode(prompt, n_new, step)``: greedy generation that feeds the prompt in one call and then
  one token at a time, every layer calling ``step(q_new, k_new, v_new, cache)`` for its
  attention. ``step`` is the student's function: the model never looks inside the cache, it
  only hands back to each layer the cache that layer's last call returned.

Shapes: one sequence (B = 1); q, k, v are (1, H, T, d_head); a cache is the pair (K, V) of
(1, H, T_cache, d_head) tensors, and ``empty_cache`` makes the one with T_cache = 0.

This module computes the full pass and the projections; the cached attention step is not here.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

__all__ = ["TinyCausalLM", "empty_cache", "StepFn"]

# step(q_new, k_new, v_new, cache) -> (out (1, H, T_new, d_head), new cache)
StepFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, tuple], tuple]


def empty_cache(B: int, H: int, d_k: int, d_v: int | None = None,
                dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache holding no tokens yet: K (B, H, 0, d_k) and V (B, H, 0, d_v)."""
    return torch.zeros(B, H, 0, d_k, dtype=dtype), torch.zeros(B, H, 0, d_k if d_v is None else d_v, dtype=dtype)


class TinyCausalLM:
    """A small causal language model in float64 whose attention can run with a cache.

    Args:
        seed: seed of the fixed random weights.
        vocab: number of token ids.
        d_model: width of the residual stream.
        n_heads: attention heads per layer (d_head = d_model // n_heads).
        n_layers: attention layers.
        max_len: longest sequence (learned positions).
    """

    def __init__(self, seed: int = 0, vocab: int = 24, d_model: int = 16, n_heads: int = 4, n_layers: int = 2,
                 max_len: int = 64):
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not a multiple of n_heads={n_heads}")
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.max_len = vocab, d_model, n_heads, n_layers, max_len
        self.d_head = d_model // n_heads
        g = torch.Generator().manual_seed(int(seed))
        f64 = dict(generator=g, dtype=torch.float64)
        self.embed = torch.randn(vocab, d_model, **f64)  # (vocab, d_model)
        self.positions = 0.5 * torch.randn(max_len, d_model, **f64)  # (max_len, d_model)
        self.w_qkv = [torch.randn(d_model, 3 * d_model, **f64) / math.sqrt(d_model)
                      for _ in range(n_layers)]  # (d_model, 3 d_model) each
        self.w_out = [torch.randn(d_model, d_model, **f64) / math.sqrt(d_model)
                      for _ in range(n_layers)]  # (d_model, d_model) each
        self.unembed = torch.randn(d_model, vocab, **f64) / math.sqrt(d_model)  # (d_model, vocab)

    def _inputs(self, tokens: list[int], start: int) -> torch.Tensor:
        """Embeddings of ``tokens`` placed at positions start, start + 1, ...: (T, d_model)."""
        if start + len(tokens) > self.max_len:
            raise ValueError(f"positions up to {start + len(tokens)} exceed max_len={self.max_len}")
        ids = torch.tensor(list(tokens), dtype=torch.long)  # (T,)
        return self.embed[ids] + self.positions[start:start + len(tokens)]  # (T, d_model)

    def _heads(self, x: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of x (T, d_model) for one layer, each (1, H, T, d_head)."""
        T = x.shape[0]
        qkv = x @ self.w_qkv[layer]  # (T, 3 d_model)
        return tuple(t.reshape(T, self.n_heads, self.d_head).transpose(0, 1)[None]
                     for t in qkv.split(self.d_model, dim=-1))  # (1, H, T, d_head) each

    def _merge(self, heads: torch.Tensor, layer: int) -> torch.Tensor:
        """(1, H, T, d_head) head outputs -> (T, d_model), through the layer's output projection."""
        T = heads.shape[-2]
        return heads[0].transpose(0, 1).reshape(T, self.d_model) @ self.w_out[layer]  # (T, d_model)

    @torch.no_grad()
    def full_logits(self, tokens: list[int]) -> torch.Tensor:
        """The full causal forward pass: (T, vocab) logits, row t predicting token t + 1."""
        x = self._inputs(tokens, 0)  # (T, d_model)
        T = x.shape[0]
        future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # (T, T): True above the diagonal
        for layer in range(self.n_layers):
            q, k, v = self._heads(x, layer)  # (1, H, T, d_head) each
            s = (q @ k.transpose(-2, -1)) * self.d_head ** -0.5  # (1, H, T, T)
            w = s.masked_fill(future, float("-inf")).softmax(dim=-1)  # (1, H, T, T)
            x = x + self._merge(w @ v, layer)  # (T, d_model)
        return x @ self.unembed  # (T, vocab)

    @torch.no_grad()
    def decode(self, prompt: list[int], n_new: int, step: StepFn) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy decoding with a key-value cache per layer, attention done by ``step``.

        The prompt goes through in one call per layer (T_new = len(prompt)), then each
        generated token in a call of its own (T_new = 1); the next token is the argmax of the
        last logits row.

        Args:
            prompt: token ids, at least one.
            n_new: tokens to generate.
            step: step(q_new, k_new, v_new, cache) -> (out, cache), q_new, k_new, v_new
                (1, H, T_new, d_head), cache the pair (K, V) this layer's previous call returned
                (``empty_cache`` at first), out (1, H, T_new, d_head).

        Returns:
            (tokens, logits): the prompt followed by the n_new generated ids, and one (T_new, vocab)
            logits tensor per call (the prompt's rows first, then one row per generated token
            that was fed back; the last generated token is not fed).
        """
        caches = [empty_cache(1, self.n_heads, self.d_head) for _ in range(self.n_layers)]
        tokens, fed, logits = list(prompt), list(prompt), []
        for i in range(n_new):
            x = self._inputs(fed, len(tokens) - len(fed))  # (T_new, d_model)
            for layer in range(self.n_layers):
                q, k, v = self._heads(x, layer)  # (1, H, T_new, d_head) each
                out, caches[layer] = step(q, k, v, caches[layer])
                x = x + self._merge(torch.as_tensor(out, dtype=torch.float64), layer)  # (T_new, d_model)
            logits.append(x @ self.unembed)  # (T_new, vocab)
            tokens.append(int(logits[-1][-1].argmax()))
            fed = tokens[-1:]
        return tokens, logits
