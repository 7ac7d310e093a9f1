"""Lab 1, attention by hand: grading material."""

#: The lab's declared total (autograded and manually graded points); `mlbook check` verifies it.
TOTAL_POINTS = 26

# Visible test cells without a `<cell>_hidden` partner, and the hidden cells that must also pass
# (mlbook.judge.plan): the worked examples are computed with the student's attention.
COVERED_BY = {"test_worked_examples": ("test_attention_hidden",)}
