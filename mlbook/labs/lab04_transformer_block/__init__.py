"""Lab 4, the transformer block: grading material (hidden checks and the catalogue)."""

TOTAL_POINTS = 43
