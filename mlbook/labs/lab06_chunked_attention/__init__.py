"""Lab 6: chunked attention and the online softmax (grader only).

``COVERED_BY`` and ``NOT_REPLAYED`` are read by the grading sandbox (mlbook.sandbox.plan).
"""

TOTAL_POINTS = 29

COVERED_BY = {
    # reads the peaks memory_sweep measured for naive and chunked attention in the kernel
    "test_memory_growth": ("test_chunked_attention_memory", "test_memory_sweep_hidden"),
    # reads the times the kernel measured for chunked_attention; the replay redoes the arithmetic
    "test_timing_answers": ("test_chunked_attention_hidden",),
}

NOT_REPLAYED = {
    # hands a lambda to the student's memory_sweep; its hidden cell tests it on probes built in the kernel
    "test_memory_sweep",
}
