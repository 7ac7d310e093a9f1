"""Seconds per draw of the test cells whose checks are not cheap, measured once (reference
solution, in-process, 2-core machine under load, 2026-12-02: `tests/test_hidden_draws.py` says how).

Frozen here so that which seeds a draw test runs never depends on the speed of the machine that
runs it: a cell not listed costs under 2 ms a draw and gets every draw.
"""

COSTS: dict[str, dict[str, float]] = {
    "lab01_hand_attention": {
        "test_token_importance_hidden": 0.045,
        "test_gradient_x_input": 0.004,
        "test_gradient_x_input_hidden": 0.018,
        "test_spearman_hidden": 0.003,
    },
    "lab02_scaling": {
        "test_dot_product_std": 0.055,
        "test_dot_product_std_hidden": 0.158,
        "test_mean_effective_keys": 0.002,
        "test_mean_effective_keys_hidden": 1.07,
        "test_learn_temperature": 0.237,
        "test_learn_temperature_hidden": 0.101,
    },
    "lab03_masks": {
        "test_scaled_dot_product_attention_hidden": 0.021,
        "test_outputs_ignore_future_hidden": 0.003,
        "test_padding_invariant": 0.003,
        "test_padding_invariant_hidden": 0.006,
        "test_mha_batch_first_hidden": 0.01,
        "test_teacher_forcing": 0.005,
        "test_teacher_forcing_hidden": 0.03,
    },
    "lab04_transformer_block": {
        "test_mha_matches_torch": 0.005,
        "test_mha_params": 0.024,
        "test_mha_hidden": 0.01,
        "test_rope_properties": 0.062,
        "test_rope_step": 0.022,
        "test_rope_step_hidden": 0.003,
        "test_block_hidden": 0.013,
    },
    "lab05_entropy_collapse": {
        "test_scale_qk_init": 0.035,
        "test_scale_qk_init_hidden": 0.03,
        "test_train_copy_task": 0.377,
        "test_train_copy_task_hidden": 1.049,
    },
    "lab06_chunked_attention": {
        "test_chunked_attention": 0.026,
        "test_chunked_attention_hidden": 0.053,
        "test_chunked_attention_memory": 0.431,
        "test_attention_backward_from_lse": 0.003,
        "test_attention_backward_from_lse_hidden": 0.546,
        "test_memory_sweep_hidden": 0.011,
        "test_kv_cache_append_hidden": 0.008,
        "test_decode_step": 0.004,
        "test_decode_step_hidden": 0.012,
        "test_greedy_decoding": 0.04,
        "test_greedy_decoding_hidden": 0.059,
        "test_grouped_query_attention": 0.005,
        "test_grouped_query_attention_hidden": 0.009,
    },
}
