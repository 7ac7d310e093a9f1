"""Hidden checks for lab 6, chunked attention (grader only).

Conventions:
- The lab's API takes torch tensors, one head at a time: q (T_q, d_k), k (T_k, d_k),
  v (T_k, d_v); causal means key j is masked for query i when j > i (then T_q == T_k).
  Students' results may be torch tensors or NumPy arrays; both are compared as float64.
- The grader's references are its own: full-matrix NumPy float64 attention (``kit.attention``)
  for outputs and log-sum-exp, torch float64 autograd (``kit.attention_grads``) for gradients.
  They are never the notebook's text.
- Known mistakes are reproduced by ``chunked._stream``, the grader's own NumPy streaming
  implementation with one switch per mistake; ``diagnose`` names the one a result matches.
- Every result is validated before it is compared, and fails closed (``kit.array``, ``items``,
  ``number``): a NaN, an inf, an empty or object result, another shape, integers where floats
  are due, or float32 where float64 inputs came in is a failure that says what came back. A
  comparison is ``close`` (False when it cannot be made) or ``not (err <= tol)``, never
  ``err > tol``, which NaN passes.

The notebook calls ``hidden.check_x(...)``; the checks live by graded function in
- ``sizes``           attention_matrix_bytes;
- ``online_softmax``  online_softmax_update;
- ``chunked``         chunked_attention's results;
- ``memory``          the memory of chunked_attention and attention_backward_from_lse, measured from
                      outside the kernel (its docstring says how);
- ``backward``        attention_backward_from_lse's gradients, and its memory through ``memory``;
- ``sweep``           memory_sweep, on probes the grader lends;
- ``kv_cache``        kv_cache_append and kv_cache_bytes;
- ``decode``          decode_step, alone and as the attention of greedy decoding with the grader's
                      TinyCausalLM, against the full causal pass;
- ``gqa``             grouped_query_attention;
and ``_common`` holds what they share (inputs, references, the validation of results).
"""

from .backward import check_backward_from_lse
from .chunked import check_chunked_attention
from .decode import check_decode_step, check_greedy_decoding
from .gqa import check_grouped_query_attention
from .kv_cache import check_kv_cache_append, check_kv_cache_bytes
from .memory import check_chunked_memory
from .online_softmax import check_online_softmax_update
from .sizes import check_attention_matrix_bytes
from .sweep import check_memory_sweep

__all__ = [
    "check_attention_matrix_bytes",
    "check_online_softmax_update",
    "check_chunked_attention",
    "check_chunked_memory",
    "check_backward_from_lse",
    "check_memory_sweep",
    "check_kv_cache_append",
    "check_decode_step",
    "check_greedy_decoding",
    "check_kv_cache_bytes",
    "check_grouped_query_attention",
]
