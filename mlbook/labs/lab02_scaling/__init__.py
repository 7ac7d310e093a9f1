"""Lab 2, the sqrt(d_k) variance experiment: grading material (grader only): ``hidden/`` and ``catalogue``."""
