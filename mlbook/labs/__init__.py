"""Per-lab grading material: hidden checks and misconception catalogues (grader only)."""
