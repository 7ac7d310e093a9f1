"""Lab 4's RoPE follows the published conventions it names.

The lab's `apply_rope(x, positions, layout)` has two layouts: "half" must be Hugging Face
transformers' rotate_half form and "interleaved" Meta's original Llama form (complex numbers
built with torch.polar). Both published formulas are transcribed below from their source, with
the file, commit and function named; the only change is the dtype: the published code works in
float32 (Meta's `.float()`, HF's `.float()` on the frequencies), which here is float64 so that
agreement can be shown to 1e-12 (at positions below 1,024; beyond, the float64 rounding of the angle p * theta itself,
half an ulp of p, about 2e-13 at p = 4,096, is what two correct routes differ by, so the
tolerance grows in proportion: 1e-12 * p / 1,024). Checked are the notebook's reference solution
(notebooks/lab04_transformer_block.py, answer cell `apply_rope`) and the grader's own reference
(`mlbook.labs.lab04_transformer_block.hidden.rope.rope_reference`), on random inputs, and the
channel permutation that maps one layout onto the other (the one HF's conversion script applies
to Meta's W_Q and W_K).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from draws import solutions
from mlbook.labs.lab04_transformer_block.hidden.rope import rope_reference

LAB = "lab04_transformer_block"
ATOL = 1e-12
BASE = 10000.0


# ------------------------------------------------------------------ Hugging Face transformers
# huggingface/transformers, src/transformers/models/llama/modeling_llama.py (commit 002272831fba):
# LlamaRotaryEmbedding.__init__ (inv_freq) and .forward (freqs, emb = cat(freqs, freqs), cos, sin),
# rotate_half, apply_rotary_pos_emb. q, k are (batch, heads, seq_len, head_dim); position_ids
# (batch, seq_len).

def hf_cos_sin(head_dim: int, position_ids: torch.Tensor, base: float = BASE):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).double() / head_dim))
    inv_freq_expanded = inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].double()
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def hf_rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (hf_rotate_half(q) * sin)
    k_embed = (k * cos) + (hf_rotate_half(k) * sin)
    return q_embed, k_embed


# huggingface/transformers, src/transformers/models/llama/convert_llama_weights_to_hf.py
# (commit 01cc9cd9d804): write_model's permute, "permute for sliced rotary", applied to Meta's
# wq and wk rows.

def hf_permute(w, n_heads, dim1, dim2):
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


# ------------------------------------------------------------------ Meta's original Llama
# meta-llama/llama, llama/model.py (commit 0504cf440a50): precompute_freqs_cis, reshape_for_broadcast,
# apply_rotary_emb, and Transformer.forward's slice freqs_cis[start_pos : start_pos + seqlen] for
# cached decoding. xq, xk are (bsz, seqlen, n_heads, head_dim).

def meta_precompute_freqs_cis(dim: int, end: int, theta: float = BASE):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].double() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).double()
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex128 here (complex64 published)
    return freqs_cis


def meta_reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def meta_apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.double().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.double().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = meta_reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


# ------------------------------------------------------------------ the lab's two implementations


@pytest.fixture(scope="module")
def notebook_rope():
    """The notebook's reference apply_rope, from its solution block."""
    namespace = {"torch": torch, "math": math, "np": np}
    exec(compile(solutions(LAB)["reference"]["apply_rope"], "<lab04 apply_rope>", "exec"), namespace)  # noqa: S102
    return namespace["apply_rope"]


def _implementations(notebook_rope):
    """name -> f(x (..., T, d) float64 tensor, positions (T,), layout) -> float64 tensor."""
    return {
        "notebook": notebook_rope,
        "grader": lambda x, pos, layout: torch.as_tensor(rope_reference(x.numpy(), pos.numpy(), layout)),
    }


def _draw(seed: int, B=2, H=3, T=7, d=16, start=0, spread=4096):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, d, generator=g, dtype=torch.float64)  # (B, H, T, d)
    k = torch.randn(B, H, T, d, generator=g, dtype=torch.float64)  # (B, H, T, d)
    pos = start + torch.randperm(spread, generator=g)[:T]  # (T,) unsorted positions below start + spread
    return q, k, pos


def _tol(pos: torch.Tensor) -> float:
    """1e-12 up to position 1,024, then in proportion to the largest position (the angle's own rounding)."""
    return ATOL * max(1.0, float(pos.max()) / 1024)


def _max_gap(a, b) -> float:
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("which", ["notebook", "grader"])
def test_half_layout_is_hugging_face_rotate_half(notebook_rope, which, seed):
    d = (8, 16, 64, 128, 6)[seed]
    q, k, pos = _draw(seed, d=d, spread=(1024, 512, 4096, 1024, 8192)[seed])
    cos, sin = hf_cos_sin(d, pos[None].expand(q.shape[0], -1))  # (B, T, d) each
    q_hf, k_hf = hf_apply_rotary_pos_emb(q, k, cos, sin)
    rope = _implementations(notebook_rope)[which]
    assert _max_gap(rope(q, pos, "half"), q_hf) < _tol(pos)
    assert _max_gap(rope(k, pos, "half"), k_hf) < _tol(pos)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("which", ["notebook", "grader"])
def test_interleaved_layout_is_meta_polar_form(notebook_rope, which, seed):
    d = (8, 16, 64, 128, 6)[seed]
    T, start = 5, (0, 17, 300, 2000, 4000)[seed]  # a block of T tokens after start_pos cached ones
    q, k, _ = _draw(seed, d=d, T=T)
    freqs_cis = meta_precompute_freqs_cis(d, 2 * 4096)[start:start + T]  # Transformer.forward's slice
    xq, xk = q.transpose(1, 2), k.transpose(1, 2)  # (B, T, H, d): Meta's layout
    q_meta, k_meta = meta_apply_rotary_emb(xq, xk, freqs_cis)
    rope = _implementations(notebook_rope)[which]
    pos = torch.arange(start, start + T)  # (T,)
    assert _max_gap(rope(q, pos, "interleaved"), q_meta.transpose(1, 2)) < _tol(pos)
    assert _max_gap(rope(k, pos, "interleaved"), k_meta.transpose(1, 2)) < _tol(pos)


def test_permutation_maps_meta_checkpoints_to_hugging_face(notebook_rope):
    """HF's conversion permutes Meta's W_Q, W_K rows, within each head, by (0, 2, 4, ..., 1, 3, 5, ...);
    Meta's interleaved rotation of the old projection, permuted, is HF's half-split rotation of the new
    one, and every score is the same: the two layouts are one rotation with the channels reordered."""
    g = torch.Generator().manual_seed(11)
    n_heads, head_dim, T = 4, 16, 9
    dim = n_heads * head_dim
    w_q = torch.randn(dim, dim, generator=g, dtype=torch.float64)  # Meta's wq: (out, in)
    w_k = torch.randn(dim, dim, generator=g, dtype=torch.float64)  # Meta's wk
    x = torch.randn(1, T, dim, generator=g, dtype=torch.float64)  # (B, T, dim) token rows
    pos = torch.arange(T) + 100  # (T,)

    def heads(w):
        return (x @ w.T).view(1, T, n_heads, head_dim).transpose(1, 2)  # (B, H, T, head_dim)

    perm = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])  # the lab's perm
    assert torch.equal(hf_permute(torch.arange(dim).double()[:, None], n_heads, dim, 1)[:head_dim, 0].long(), perm)

    q_meta, k_meta = heads(w_q), heads(w_k)  # Meta's projections, interleaved layout
    q_hf, k_hf = heads(hf_permute(w_q, n_heads, dim, dim)), heads(hf_permute(w_k, n_heads, dim, dim))
    assert _max_gap(q_hf, q_meta[..., perm]) < ATOL  # HF's channels are Meta's, permuted within each head

    freqs_cis = meta_precompute_freqs_cis(head_dim, 256)[100:100 + T]
    rq_meta, rk_meta = (y.transpose(1, 2) for y in meta_apply_rotary_emb(q_meta.transpose(1, 2),
                                                                       k_meta.transpose(1, 2), freqs_cis))
    cos, sin = hf_cos_sin(head_dim, pos[None])
    rq_hf, rk_hf = hf_apply_rotary_pos_emb(q_hf, k_hf, cos, sin)
    assert _max_gap(rq_hf, rq_meta[..., perm]) < ATOL
    assert _max_gap(rq_hf @ rk_hf.transpose(-2, -1), rq_meta @ rk_meta.transpose(-2, -1)) < 1e-10  # scores ~ 16
    # and the lab's function says the same about its own layouts
    assert _max_gap(notebook_rope(q_hf, pos, "half"), notebook_rope(q_meta, pos, "interleaved")[..., perm]) < ATOL
    inverse = torch.argsort(perm)  # (0, 8, 1, 9, ...): half-split back to interleaved
    assert _max_gap(notebook_rope(q_hf, pos, "half")[..., inverse], rq_meta) < ATOL


def test_layouts_differ_so_the_name_matters(notebook_rope):
    """The two layouts give different rotations of the same vector (a checkpoint read in the wrong one
    computes other scores): the test above is not vacuous."""
    q, k, pos = _draw(3)
    s_half = notebook_rope(q, pos, "half") @ notebook_rope(k, pos, "half").transpose(-2, -1)
    s_inter = notebook_rope(q, pos, "interleaved") @ notebook_rope(k, pos, "interleaved").transpose(-2, -1)
    assert _max_gap(s_half, s_inter) > 1.0
