"""Lab 3: causal and padding masks (grader only)."""

TOTAL_POINTS = 40
