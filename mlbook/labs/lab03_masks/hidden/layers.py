"""Checks of the student's property tests, outputs_ignore_future and padding_invariant.

Each property test is handed a correct layer, which it must pass, and every leaking layer,
each of which it must catch. The layers are built here from the grader's own
``mlbook_helpers.masking`` (and one causal leak of this module's own) with fresh weights and
lent to the kernel (``lend``): the student's code can call them, never look inside (a layer's
leak is the answer).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from torch.nn import functional as F

from mlbook_helpers.masking import CAUSAL_LEAKS as _CAUSAL_LEAK_NAMES
from mlbook_helpers.masking import PADDING_LEAKS as _PADDING_LEAK_NAMES
from mlbook_helpers.masking import D_MODEL, causal_layer_with_leak, padding_layer_with_leak

from ...kit import boolean, call_student, fail, fresh_rng, lend

__all__ = ["check_outputs_ignore_future", "check_padding_invariant"]


def _layer_weights(rng: np.random.Generator) -> torch.Tensor:
    """Fresh (3, D_MODEL, D_MODEL) float32 query, key and value projections for a test layer."""
    return torch.from_numpy(rng.standard_normal((3, D_MODEL, D_MODEL)) / math.sqrt(D_MODEL)).float()


_EVERY_EARLIER = "Change a later token and check that EVERY earlier output is unchanged (all positions before it)."

# kind -> (what the layer does wrong, the hint when the student's test misses it)
CAUSAL_LEAKS = {
    "no mask": ("has no causal mask at all", _EVERY_EARLIER),
    "one future key": ("lets every query see one future key (a causal mask off by one)",
                       "This leak reads only the next token: change the token right after each position you check "
                       "(e.g. every position t, or the last token while checking ALL earlier outputs)."),
    "after softmax": ("applies the causal mask after the softmax, so the future leaks in through the normaliser",
                      _EVERY_EARLIER),
    "first query sees all": ("lets only the FIRST position read the whole sequence", _EVERY_EARLIER),
}


if set(CAUSAL_LEAKS) != set(_CAUSAL_LEAK_NAMES):
    raise ImportError(f"lab 3 describes the causal leaks {sorted(CAUSAL_LEAKS)} but mlbook_helpers.masking "
                      f"builds {sorted(_CAUSAL_LEAK_NAMES)}: keep the two lists the same")

# Leaks built here, grader-side only (the given helpers build the others): kind -> (description, hint).
# "first query reads the next key": one future token leaks into one earlier position, so only a test that
# changes more than the last token (every position after t, for every t) sees it.
GRADER_CAUSAL_LEAKS = {
    "first query reads the next key": (
        "lets the FIRST position also read the second token (one mask entry off)",
        "This leak reads only token 1, and only into position 0: for every position t, change the tokens AFTER t "
        "(not only the last one) and check the outputs up to t."),
}


def _causal_layer(weights: torch.Tensor, leak: str | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A one-head causal layer, correct or with a leak: the given helpers' leaks, and the grader's own."""
    if leak not in GRADER_CAUSAL_LEAKS:
        return causal_layer_with_leak(weights, leak)
    W_q, W_k, W_v = weights.clone()  # (D_MODEL, D_MODEL) each

    @torch.no_grad()
    def layer(x: torch.Tensor) -> torch.Tensor:
        T = x.shape[-2]
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]  # query and key positions
        allowed = (j <= i) | ((i == 0) & (j == 1))  # (T, T): causal, and query 0 reads key 1
        q, k, v = (x @ W.to(x.dtype) for W in (W_q, W_k, W_v))  # (B, T, D_MODEL) each
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, T, D_MODEL)

    return layer


def _verdict(test: Callable, layer: Any, what: str) -> bool:
    """The student's property test called on ``layer``: its verdict, a truth value (a one-entry boolean
    tensor counts), never a number."""
    res = call_student(test, layer, what=what)
    if isinstance(res, torch.Tensor) and res.dtype == torch.bool and res.numel() == 1:
        res = res.reshape(())
    return boolean(res, what, "A property test returns True (property holds) or False (it is violated).")


def _expect_every_leak_caught(test: Callable, name: str, build: Callable, correct: str, correct_hint: str,
                              leaks: dict[str, tuple[str, str]]) -> None:
    """The student's property test ``name`` must return True on a correct layer and False on each leaking one.

    Args:
        build: (fresh weights, a leak's kind or None for no leak) -> the layer, built here; it is
            lent to the kernel, which can call it, never see which leak it has.
        correct: the correct layer, for the message: "a correctly masked layer".
        leaks: kind -> (what that layer does wrong, the hint when the test misses it).
    """
    weights = _layer_weights(fresh_rng())
    what = f"{name}({correct})"
    if not _verdict(test, lend(build(weights, None)), what):
        fail(what, "returned False", correct_hint)
    for kind, (description, hint) in leaks.items():
        what = f"{name}(a layer that {description})"
        if _verdict(test, lend(build(weights, kind)), what):
            fail(what, "returned True, so the leak went unnoticed", hint)


def check_outputs_ignore_future(outputs_ignore_future: Callable) -> None:
    """The student's property test must pass a correct causal layer and catch every leak."""
    _expect_every_leak_caught(outputs_ignore_future, "outputs_ignore_future", _causal_layer,
                              "a correctly masked causal layer",
                              "A correct layer must pass: change only LATER tokens, compare only the EARLIER outputs, "
                              "and compare with a tolerance (torch.allclose), not ==.",
                              {**CAUSAL_LEAKS, **GRADER_CAUSAL_LEAKS})


PADDING_LEAKS = {
    "no mask": ("ignores the padding mask", "Append padding tokens (random vectors, is_pad True) and compare the real outputs."),
    "queries": ("masks padded QUERIES instead of padded keys",
                "Appended padding must not change the real tokens' outputs; padded keys are the ones to remove."),
    "first sequence": ("uses the first sequence's padding for the whole batch",
                       "Also compare a padded BATCH of sequences of different lengths with each sequence run alone."),
}


if set(PADDING_LEAKS) != set(_PADDING_LEAK_NAMES):
    raise ImportError(f"lab 3 describes the padding leaks {sorted(PADDING_LEAKS)} but mlbook_helpers.masking "
                      f"builds {sorted(_PADDING_LEAK_NAMES)}: keep the two lists the same")


def check_padding_invariant(padding_invariant: Callable) -> None:
    """The student's property test must pass a correct key-padding layer and catch every leak."""
    _expect_every_leak_caught(padding_invariant, "padding_invariant", padding_layer_with_leak,
                              "a correctly masked layer",
                              "A correct layer must pass: compare only the REAL positions (padded outputs are "
                              "discarded), with a tolerance (torch.allclose).", PADDING_LEAKS)
