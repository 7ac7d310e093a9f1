"""Lab 5, entropy collapse: grading material."""

#: The lab's declared total (autograded and manually graded points); `mlbook check` verifies it.
TOTAL_POINTS = 24
