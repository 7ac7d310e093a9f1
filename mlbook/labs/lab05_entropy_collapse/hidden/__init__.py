"""Hidden checks for lab 5 (entropy collapse).

Each check builds fresh inputs (other shapes, other models, other seeds than the notebook),
computes the grader's own reference here, and on a mismatch names the known mistake the
student's result matches. Training checks use a smaller model than the notebook (T = 8,
d_model = 16) so they stay cheap, and they grade trends with thresholds measured over many
seeds, never exact curves.

Conventions: attention weights are (B, H, T_q, T_k), rows over the last axis; entropy is in
nats; a TinyDecoder block's ``W_q``/``W_k``/``W_v`` are views of ``attn.in_proj_weight``.

Models: the checks run in the grader, the student's functions in the student's kernel. Every
model a student's function receives is built there with the weights of a model the grader
draws and keeps as its reference; what the function did to the copy is read back as data and
judged here (``_models``). Nothing the kernel computes decides a verdict.

The notebook calls ``hidden.check_x(...)``; the checks live by graded function in ``entropy``
(attention_entropy), ``init_scaling`` (scale_qk_init), ``training`` (train_copy_task, with
``updates``: its updates, warm-up and qk_decay replayed; ``_loop``: the tiny model it trains),
``sinks`` (sink_mass, sliding_window_mask) and ``qk_norm`` (qk_layernorm).
"""

from .entropy import check_attention_entropy
from .init_scaling import check_scale_qk_init
from .qk_norm import check_qk_layernorm
from .sinks import check_sink_mass, check_sliding_window_mask
from .training import check_train_copy_task

__all__ = ["check_attention_entropy", "check_scale_qk_init", "check_train_copy_task", "check_sink_mass",
           "check_sliding_window_mask", "check_qk_layernorm"]
