"""Lab 4, the transformer block: grading material (grader only): ``hidden/`` and ``catalogue``."""

# Visible test cells and the hidden cells that must also pass (mlbook.judge.plan): each visible
# cell is covered by the hidden checks of the functions it exercises.
COVERED_BY = {
    # split_heads on labelled channels: check_heads.
    "test_split_heads": ("test_heads_hidden",),
    # merge_heads of labelled heads: check_heads.
    "test_merge_heads": ("test_heads_hidden",),
    # MultiHeadAttention's output and weight shapes, self- and cross-attention: check_mha.
    "test_mha_shapes": ("test_mha_hidden",),
    # MultiHeadAttention + load_from_torch against torch's layer: check_mha.
    "test_mha_matches_torch": ("test_mha_hidden",),
    # MultiHeadAttention's parameter count, for several numbers of heads: check_mha.
    "test_mha_params": ("test_mha_hidden",),
    # apply_rope's hand-sized rotations: check_apply_rope (named here for the record; it is the default).
    "test_apply_rope": ("test_apply_rope_hidden",),
    # apply_rope's properties (identity at 0, norms, shift invariance, layout permutation): check_apply_rope.
    "test_rope_properties": ("test_apply_rope_hidden",),
    # rope_step_scores over a whole sequence, built on the student's apply_rope: both checks.
    "test_rope_step": ("test_rope_step_hidden", "test_apply_rope_hidden"),
    # the lesson block's output shape and post-LN row statistics: check_block.
    "test_block_shape_norm": ("test_block_hidden",),
    # permutation equivariance of the block, broken by sinusoidal positions: check_block.
    "test_block_permutation": ("test_block_hidden",),
    # the causal mask reaching the block's attention: check_block.
    "test_block_causal": ("test_block_hidden",),
}

# Visible cells the grader cannot re-run outside the kernel; their covering cells decide them.
# test_mha_matches_torch builds a torch.nn.MultiheadAttention in the cell and hands it to the
# student's load_from_torch: replayed in the grader, that module would be the grader's, which
# cannot be sent to the kernel. check_mha does the same comparison with a kernel-side copy.
NOT_REPLAYED = {"test_mha_matches_torch"}

# Library shortcuts the task forbids (mlbook.grading.policy): flagged for a TA, never scored.
FORBIDDEN_CALLS = {
    "MultiHeadAttention": ("MultiheadAttention", "multi_head_attention_forward", "scaled_dot_product_attention"),
}
