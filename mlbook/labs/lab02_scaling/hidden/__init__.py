"""Hidden checks for lab 2, the sqrt(d_k) variance experiment (grader only).

Conventions of this package:
- ``Q`` is (..., T_q, d_k) and ``K`` is (..., T_k, d_k); a row of weights runs over the last
  axis (the keys) and sums to 1. Random query and key components are independent standard
  normals, the situation at initialisation.
- Deterministic answers (scores, entropies, Jacobians) are compared with the grader's own
  reference to 1e-6.
- Random answers are called with generators the grader seeds itself, on other d_k and other
  sizes than the notebook uses, and compared with the grader's own Monte Carlo reference.
  Every statistical comparison allows ``Z_SIGMA`` standard errors, each derived from the
  sample size where it is computed. A correct answer fails one comparison with probability
  2 * (1 - Phi(5)) = 5.7e-7, so the twelve statistical comparisons of one notebook raise a false
  alarm in fewer than 1 run in 100,000.
- Messages quote the student's own values and the call that produced them, never a reference.

The notebook calls ``hidden.check_x(...)``; the checks live by graded function in
- ``spread``             dot_product_std;
- ``scores``             attention_scores and qk_norm_scores;
- ``entropy``            row_entropy and effective_keys;
- ``collapse``           mean_effective_keys;
- ``jacobian``           softmax_jacobian;
- ``temperature``        learn_temperature;
- ``kernel_regression``  nadaraya_watson (the extension);
- ``linear``             linear_attention_step (the extension);
and ``_common`` holds what they share (``Z_SIGMA``, the advice for a result that is not one number).
"""

from .collapse import check_mean_effective_keys
from .entropy import check_effective_keys, check_row_entropy
from .jacobian import check_softmax_jacobian
from .kernel_regression import check_nadaraya_watson
from .linear import check_linear_attention_step
from .scores import check_attention_scores, check_qk_norm_scores
from .spread import check_dot_product_std
from .temperature import check_learn_temperature

__all__ = [
    "check_dot_product_std",
    "check_attention_scores",
    "check_row_entropy",
    "check_effective_keys",
    "check_mean_effective_keys",
    "check_softmax_jacobian",
    "check_learn_temperature",
    "check_qk_norm_scores",
    "check_nadaraya_watson",
    "check_linear_attention_step",
]
