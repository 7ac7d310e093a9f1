"""Fresh inputs for every grading run.

Hidden checks draw their inputs anew each time a notebook is graded, so an answer fitted to one
draw fails the next. ``MLBOOK_SEED`` pins the draws, so a TA can reproduce one run and the tests
can prove a check on many seeds (``tests/test_hidden_draws.py``). The seed appears in no
message: it reveals nothing, but it is noise to a student.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["fresh_rng", "seed", "torch_generator", "random_mask"]


def fresh_rng() -> np.random.Generator:
    """A generator seeded from ``MLBOOK_SEED`` when set, from the OS otherwise."""
    seed = os.environ.get("MLBOOK_SEED")
    return np.random.default_rng(int(seed) if seed else None)


def seed(rng: np.random.Generator) -> int:
    """A seed drawn from ``rng``, for a generator the student's code or a given model is built from."""
    return int(rng.integers(2**31 - 1))


def torch_generator(rng: np.random.Generator):
    """A ``torch.Generator`` seeded from ``rng`` (torch is imported only by the labs that use it)."""
    import torch

    return torch.Generator().manual_seed(seed(rng))


def random_mask(rng: np.random.Generator, T_q: int, T_k: int, p: float = 0.5) -> np.ndarray:
    """(T_q, T_k) bool, each entry True with probability ``p``, and at least one True per row."""
    mask = rng.random((T_q, T_k)) < p  # (T_q, T_k)
    mask[np.arange(T_q), rng.integers(0, T_k, size=T_q)] = True
    return mask
