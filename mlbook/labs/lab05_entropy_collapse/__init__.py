"""Lab 5, entropy collapse: grading material (grader only): ``hidden/`` and ``catalogue``."""

#: Visible tests that read values given cells computed in the kernel with the student's
#: functions: each counts only when the hidden checks of those functions pass too.
COVERED_BY = {
    # keys_scaled / keys_unscaled come from effective_keys, i.e. from attention_entropy.
    "test_effective_keys": ("test_attention_entropy_hidden",),
    # median_loss / median_entropy: models from scale_qk_init, trained by train_copy_task, logged with attention_entropy.
    "test_collapse": ("test_scale_qk_init_hidden", "test_train_copy_task_hidden", "test_attention_entropy_hidden"),
    # the same runs with qk_decay, which train_copy_task applies.
    "test_rescue": ("test_scale_qk_init_hidden", "test_train_copy_task_hidden", "test_attention_entropy_hidden"),
    # the runs of section 7: warm-up in train_copy_task, QK-LayerNorm through qk_layernorm.
    "test_rescues": ("test_scale_qk_init_hidden", "test_train_copy_task_hidden", "test_attention_entropy_hidden",
                     "test_qk_layernorm_hidden"),
    # the sink models (given training) measured with sink_mass, evicted with sliding_window_mask.
    "test_sinks": ("test_sink_mass_hidden", "test_sliding_window_mask_hidden"),
}
