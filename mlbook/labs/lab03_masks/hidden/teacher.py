"""Check of teacher forcing: one causal pass over the shifted targets equals step-by-step decoding."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from mlbook_helpers.masking import tiny_decoder

from ...kit import ask_array, causal_allowed, compare, fresh_rng, given, lend, seed
from ._common import shape_str
from .graders import graders_causal_mask

__all__ = ["check_teacher_forcing"]

_ATOL, _RTOL = 1e-5, 1e-4  # float32 logits of the same model: only the order of the sums differs


def check_teacher_forcing(teacher_forced_logits: Callable, step_by_step_logits: Callable) -> None:
    """Both functions on a decoder with fresh weights (lent), fresh targets and a drawn BOS id.

    The reference calls the same decoder here: the shifted targets under the causal mask in one
    pass, and the T prefixes one at a time (their last positions).
    """
    # the two passes alone: the causal_mask they call is the grader's (a wrong causal_mask costs its own cells)
    teacher_forced_logits = given(teacher_forced_logits, causal_mask=graders_causal_mask)
    step_by_step_logits = given(step_by_step_logits, causal_mask=graders_causal_mask)
    rng = fresh_rng()
    vocab = int(rng.integers(7, 16))
    decoder = tiny_decoder(seed=seed(rng), vocab=vocab)
    bos = int(rng.integers(1, vocab))  # never the lesson's BOS = 0, so a hard-coded 0 (or BOS) is not bos_id
    B, T = int(rng.integers(1, 4)), int(rng.integers(4, 10))
    targets = torch.from_numpy(rng.choice([t for t in range(vocab) if t != bos], size=(B, T)))  # (B, T) int64
    shifted = torch.cat([torch.full((B, 1), bos, dtype=targets.dtype), targets[:, :-1]], dim=1)  # (B, T)

    def causal(n: int) -> torch.Tensor:
        return torch.from_numpy(causal_allowed(n))[None, None]  # (1, 1, n, n)

    ref = decoder(shifted, causal(T)).numpy()  # (B, T, V): one causal pass
    steps = np.stack([decoder(shifted[:, : t + 1], causal(t + 1))[:, -1].numpy() for t in range(T)], axis=1)
    assert np.allclose(ref, steps, atol=1e-5), "the reference's two passes disagree"  # the grader's own maths
    unshifted = decoder(targets, causal(T)).numpy()  # (B, T, V): position t reads target t
    lesson_bos = torch.cat([torch.zeros((B, 1), dtype=targets.dtype), targets[:, :-1]], dim=1)  # (B, T): 0, not bos
    shape = (B, T, vocab)
    lent = lend(decoder)

    what = f"teacher_forced_logits(decoder, targets of shape {shape_str(targets.shape)}, bos_id={bos})"
    got = ask_array(teacher_forced_logits, lent, targets, bos, what=what, shape=shape,
                    hint=f"Return the decoder's logits for the whole sequence, (B, T, vocab) = {shape}.")
    compare(got, ref, what, "Feed BOS followed by targets[:, :-1] (the targets shifted right by one) to the decoder "
                            "once, with the causal mask.", atol=_ATOL, rtol=_RTOL, mistakes={
        "the decoder ran without the causal mask: position t read the targets it must predict; pass "
        "causal_mask(T)": lambda: decoder(shifted, None).numpy(),
        "the targets were not shifted: position t read target t, the token it must predict; feed BOS followed "
        "by targets[:, :-1]": unshifted,
        "the sequence starts with token 0 (the lesson's BOS), not the bos_id argument: build the shift with "
        "bos_id": lambda: decoder(lesson_bos, causal(T)).numpy(),
    }, observed=lambda _: "the logits differ from one causal pass over BOS followed by targets[:, :-1]")

    what = f"step_by_step_logits(decoder, targets of shape {shape_str(targets.shape)}, bos_id={bos})"
    got = ask_array(step_by_step_logits, lent, targets, bos, what=what, shape=shape,
                    hint=f"Stack the T steps' logits along dim 1: (B, T, vocab) = {shape}.")
    compare(got, steps, what, "At step t run the decoder on the first t + 1 tokens of BOS, targets[:, :-1] and keep "
                              "its last position's logits.", atol=_ATOL, rtol=_RTOL, mistakes={
        "the prefix included the target it must predict: step t feeds BOS and targets[:, :t] (t + 1 tokens)":
            unshifted,
        "the prefixes start with token 0 (the lesson's BOS), not the bos_id argument: build the shift with bos_id":
            lambda: decoder(lesson_bos, causal(T)).numpy(),  # one causal pass equals the steps (asserted above)
        "each step kept the FIRST position's logits: the prediction of the next token is at the LAST position":
            lambda: np.stack([decoder(shifted[:, : t + 1], causal(t + 1))[:, 0].numpy() for t in range(T)], 1),
    }, observed=lambda _: "the logits differ from decoding one prefix at a time")
