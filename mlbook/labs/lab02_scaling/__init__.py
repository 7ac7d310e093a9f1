"""Lab 2, the sqrt(d_k) variance experiment: hidden checks and misconception catalogue (grader only)."""
