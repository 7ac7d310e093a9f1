"""Hidden checks for lab 4, the transformer block (grader only).

Conventions (the lab's, restated once here):
- A mask is a boolean array that is True where attention is allowed, broadcastable to the
  scores (B, H, T_q, T_k) in PyTorch or (T_q, T_k) in NumPy. torch.nn.MultiheadAttention uses
  the opposite convention (True = blocked) for both key_padding_mask and a boolean attn_mask.
- Heads own contiguous channels: head h of a (B, T, d_model) tensor is channels
  [h * d_head, (h + 1) * d_head) of every token.
- FLOPs count a (m, k) @ (k, n) matmul as 2 m k n (a multiply and an add).
- RoPE layouts: "interleaved" pairs channels (2i, 2i + 1), "half" pairs (i, i + d/2).

Every check draws fresh inputs (``fresh_rng``) with other shapes than the notebook's, computes
the grader's own reference here (the kit's NumPy maths, torch.nn.MultiheadAttention and torch
autograd), and on a mismatch names the known mistake whose result the student's output
reproduces. Messages quote the student's values only.

Checks run in the grader; the student's functions and classes may live in a sandboxed kernel
(``kit.helper``, ``kit.lend``), where only data can be sent. A module a check hands to student
code (the torch layer for ``load_from_torch``, the sublayers swapped into a ``TransformerBlock``)
is therefore built twice from the same drawn weights: the grader's copy computes the reference,
the kernel's copy (``helper``) is what the student's code receives.

The notebook calls ``hidden.check_x(...)``; the checks live by graded function in
- ``heads``      split_heads and merge_heads;
- ``mha``        MultiHeadAttention and load_from_torch, against torch.nn.MultiheadAttention;
- ``positions``  sinusoidal_positions;
- ``rope``       apply_rope (both layouts) and rope_step_scores (one cached decoding step);
- ``block``      the TransformerBlock's wiring;
- ``backward``   the NumPy attention_forward, attention_backward and score_bias_grad;
- ``flops``      the cost question: FLOPs of one attention layer;
- ``extension``  the optional extension's fused_qkv;
and ``_common`` holds what they share.
"""

from .backward import check_attention_backward, check_attention_forward, check_score_bias_grad
from .block import check_block
from .extension import check_fused_qkv
from .flops import check_attention_flops
from .heads import check_heads
from .mha import check_mha
from .positions import check_sinusoidal
from .rope import check_apply_rope, check_rope_step

__all__ = [
    "check_heads",
    "check_mha",
    "check_sinusoidal",
    "check_apply_rope",
    "check_rope_step",
    "check_block",
    "check_attention_forward",
    "check_attention_backward",
    "check_score_bias_grad",
    "check_attention_flops",
    "check_fused_qkv",
]
