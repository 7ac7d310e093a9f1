"""Lab 1, attention by hand: grading material."""

