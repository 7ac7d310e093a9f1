"""Hidden checks for lab 1, attention by hand (grader only).

Each check draws fresh inputs (other shapes than the notebook's: T_q != T_k, d_k != d_v),
computes the grader's own reference, and on a mismatch names the known mistake the
student's result matches. Convention: a mask is True where attention is allowed.

The notebook calls ``hidden.check_x(...)``; the checks live by section in
- ``by_hand``      1a-3: token 0 worked by hand, softmax_rows, project_qkv;
- ``attention``    4-5: attention, attention_shapes, row_attention (the worked examples);
- ``properties``   6: rows_are_distributions and outputs_in_value_range;
- ``attribution``  7: token importance by masking, gradient x input, Spearman.
"""

from .by_hand import check_hand_token0, check_softmax_rows, check_project_qkv
from .attention import check_attention, check_attention_shapes, check_row_attention
from .properties import check_property_checks
from .attribution import check_token_importance, check_gradient_x_input, check_spearman

__all__ = [
    "check_hand_token0",
    "check_softmax_rows",
    "check_project_qkv",
    "check_attention",
    "check_attention_shapes",
    "check_row_attention",
    "check_property_checks",
    "check_token_importance",
    "check_gradient_x_input",
    "check_spearman",
]
