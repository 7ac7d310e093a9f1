"""Lab 3, causal and padding masks: grading material (grader only): ``hidden/`` and ``catalogue``."""

#: Visible test cells without a ``<cell>_hidden`` partner -> the hidden checks of the student's
#: functions that computed the values they read (see mlbook.judge.plan).
COVERED_BY = {
    # ticket_causal and bank_causal come from the student's scaled_dot_product_attention and causal_mask.
    "test_causal_tables": ("test_scaled_dot_product_attention_hidden", "test_causal_mask_hidden"),
    # The fill-value experiments call torch only (no function of the student's): decided by the replay alone.
    "test_fill_values": (),
    # weight_on_padding is computed from the student's padding_mask (sdpa_dead and mha_dead from torch alone).
    "test_convention_mixup": ("test_padding_mask_hidden",),
    # w_cross, w_cross_causal, keys_read: the student's padding_mask, causal_mask, combine_masks and attention.
    "test_cross_attention": ("test_padding_mask_hidden", "test_causal_mask_hidden", "test_combine_masks_hidden",
                             "test_scaled_dot_product_attention_hidden"),
}
