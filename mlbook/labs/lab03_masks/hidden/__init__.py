"""Hidden checks for lab 3, causal and padding masks (grader only).

Convention, as in the lab: a boolean mask is True where attention is allowed; it broadcasts
against scores of shape (B, H, T_q, T_k).

Every check draws fresh inputs (``fresh_rng``) of other shapes and dtypes than the notebook,
computes the grader's own reference (the kit's NumPy maths in float64, independent of the
notebook's solution) and, on a mismatch, names the known mistake the student's output matches.
Messages quote the student's values and public constants (finfo limits) only.

Checks run in the grader; the student's functions are called in their kernel, so every argument
is data. The layers a student's property test calls, the MultiheadAttention of ``mha_batch_first``
and the decoder of teacher forcing are built here (from the grader's own ``mlbook_helpers.masking``
and torch) and lent to the kernel (``lend``): the student's code can call them, never look inside
(a layer's leak is the answer).

The notebook calls ``hidden.check_x(...)``; the checks live by graded function in
- ``masks``        causal_mask, causal_mask_with_cache, padding_mask, combine_masks;
- ``apply_mask``   the fill value, in four dtypes;
- ``attention``    scaled_dot_product_attention and the deliberately wrong mask_after_softmax;
- ``layers``       the property tests outputs_ignore_future and padding_invariant, on lent layers;
- ``conversions``  SDPA's mask <-> MultiheadAttention's key_padding_mask;
- ``defaults``     mha_batch_first, a sequence-first MultiheadAttention on batch-first tokens;
- ``teacher``      teacher_forced_logits and step_by_step_logits, on a lent decoder;
and ``_common`` holds what they share (dtypes, inputs, the form of a mask).
"""

from .apply_mask import check_apply_mask
from .attention import check_mask_after_softmax, check_scaled_dot_product_attention
from .conversions import check_mask_conversions
from .defaults import check_mha_batch_first
from .layers import check_outputs_ignore_future, check_padding_invariant
from .masks import check_causal_mask, check_causal_mask_with_cache, check_combine_masks, check_padding_mask
from .teacher import check_teacher_forcing

__all__ = [
    "check_causal_mask",
    "check_causal_mask_with_cache",
    "check_padding_mask",
    "check_combine_masks",
    "check_apply_mask",
    "check_scaled_dot_product_attention",
    "check_mask_after_softmax",
    "check_outputs_ignore_future",
    "check_padding_invariant",
    "check_mask_conversions",
    "check_mha_batch_first",
    "check_teacher_forcing",
]
