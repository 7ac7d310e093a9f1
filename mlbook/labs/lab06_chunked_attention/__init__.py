"""Lab 6, chunked attention and the online softmax: grading material (grader only): ``hidden/`` and
``catalogue``.

``COVERED_BY`` and ``NOT_REPLAYED`` are read by the judge's plan (mlbook.judge.plan).
"""

COVERED_BY = {
    # reads the peaks memory_sweep measured for naive and chunked attention in the kernel (numbers the
    # kernel can fake): it counts only when chunked_attention's memory, measured from outside the
    # kernel, and memory_sweep's logic pass their hidden checks
    "test_memory_growth": ("test_chunked_attention_memory", "test_memory_sweep_hidden"),
}

# chunked_attention's and attention_backward_from_lse's memory is measured from outside the kernel
SANDBOX_PROFILE = "memory"

NOT_REPLAYED = {
    # hands a lambda to the student's memory_sweep; its hidden cell tests it on probes the grader lends
    "test_memory_sweep",
}

# Library shortcuts the task forbids (mlbook.grading.policy): flagged for a TA, never scored.
FORBIDDEN_CALLS = {
    "chunked_attention": ("scaled_dot_product_attention", "multi_head_attention_forward", "_scaled_dot_product_attention",
                          "scaled_dot_product_flash_attention", "scaled_dot_product_efficient_attention"),
    # the visible test compares with SDPA's enable_gqa=True: the task asks for the head mapping written out
    "grouped_query_attention": ("scaled_dot_product_attention", "_scaled_dot_product_attention",
                                "scaled_dot_product_flash_attention", "scaled_dot_product_efficient_attention"),
}
