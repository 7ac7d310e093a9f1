"""Lab 1, attention by hand: grading material."""

# Visible test cells without a `<cell>_hidden` partner, and the hidden cells that must also pass
# (mlbook.judge.plan): the worked examples are computed with the student's attention.
COVERED_BY = {"test_worked_examples": ("test_attention_hidden",)}
