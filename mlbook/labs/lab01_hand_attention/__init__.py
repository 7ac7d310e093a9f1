"""Lab 1, attention by hand: grading material (grader only): ``hidden/`` and ``catalogue``."""

