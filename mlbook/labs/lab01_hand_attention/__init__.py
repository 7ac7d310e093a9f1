"""Lab 1, attention by hand: grading material."""

#: The lab's declared total (autograded and manually graded points); `mlbook check` verifies it.
TOTAL_POINTS = 26
