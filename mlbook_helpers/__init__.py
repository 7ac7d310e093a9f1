"""Helpers that the attention labs import: worked examples, heat maps and checks.

Student-facing and light: no lab solutions, no hidden tests, no grading tooling.
Import the submodule you need (``from mlbook_helpers.plotting import attention_heatmap``);
importing the package itself pulls in nothing heavy.
"""

__version__ = "0.1.0"
