"""Lab 6: chunked attention and the online softmax (grader only)."""

TOTAL_POINTS = 29
