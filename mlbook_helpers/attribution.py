"""Given code for lab 1's sections on what attention weights show (no solutions here).

- ``six_tokens()``: the lesson's six-token figure as data: seeded random token vectors and
  random projections (d_model = d_k = 16), nothing learned.
- ``spread(weights)``: the lesson's "spread" of a row, 2 ** (its entropy in bits): 1 for one
  key, T for a uniform row.
- ``word_vectors`` and ``refund_logit``: the ticket classifier's forward pass written as a
  function of the word vectors, so a gradient with respect to them can be taken.
- ``random_tickets(rng, n)``: tickets of distinct words from the classifier's vocabulary.

Convention: a mask (or ``keep``) is True where attention is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .ticket_classifier import VOCAB, TicketClassifier

__all__ = ["SixTokens", "six_tokens", "spread", "word_vectors", "refund_logit", "random_tickets"]

# The lesson prints its six-token figure without its seed. With this seed, token vectors drawn
# standard normal and projections drawn with standard deviation 1 / sqrt(d_model) (in the order
# X, W_q, W_k, W_v), the figure's two spreads come out as the lesson prints them (4.8 and 2.3).
SIX_TOKEN_SEED = 73


@dataclass(frozen=True)
class SixTokens:
    """Six random tokens and one random head (d_model = d_k = d_v = 16), nothing learned."""

    tokens: tuple[str, ...]
    X: np.ndarray  # (6, d_model)
    W_q: np.ndarray  # (d_model, d_k)
    W_k: np.ndarray  # (d_model, d_k)
    W_v: np.ndarray  # (d_model, d_v)


def six_tokens(seed: int = SIX_TOKEN_SEED, T: int = 6, d_model: int = 16) -> SixTokens:
    """The lesson's six-token example (another seed or length gives another draw of the same kind).

    Args:
        seed: seed of ``numpy.random.default_rng``.
        T: number of tokens.
        d_model: token width, also d_k and d_v.
    Returns:
        SixTokens with X (T, d_model) and W_q, W_k, W_v (d_model, d_model).
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, d_model))  # (T, d_model)
    W_q, W_k, W_v = (rng.normal(size=(d_model, d_model)) / np.sqrt(d_model) for _ in range(3))  # (d_model, d_k) each
    return SixTokens(tuple(f"t{i}" for i in range(T)), X, W_q, W_k, W_v)


def spread(weights) -> np.ndarray:
    """2 ** H_bits of each row: how many keys a row reads, from 1 (one key) to T_k (uniform).

    Args:
        weights: (..., T_k) rows of attention weights.
    Returns:
        (...) one spread per row.
    """
    w = np.asarray(weights, dtype=float)  # (..., T_k)
    terms = np.zeros_like(w)
    np.multiply(w, np.log2(w, where=w > 0, out=np.zeros_like(w)), out=terms)  # w log2 w, 0 where w = 0
    return np.power(2.0, -terms.sum(axis=-1))  # (...)


def word_vectors(classifier: TicketClassifier, words: Sequence[str]) -> torch.Tensor:
    """The embeddings of ``words`` as a new float64 tensor (a leaf you may mark ``requires_grad``).

    Returns:
        (T, d) one row per word.
    """
    ids = [VOCAB.index(w) for w in words]
    return classifier.embeddings[ids].detach().clone()  # (T, d)


def refund_logit(classifier: TicketClassifier, vectors: torch.Tensor, keep: Sequence[bool] | None = None) -> torch.Tensor:
    """The classifier's logit (before the sigmoid) as a differentiable function of the word vectors.

    ``torch.sigmoid(refund_logit(c, word_vectors(c, words)))`` is ``c.predict(words)[0]``.

    Args:
        vectors: (T, d) word vectors.
        keep: T booleans, True where a word may be attended to; all True when omitted.
    Returns:
        () the logit, a 0-d tensor connected to ``vectors``.
    """
    T = vectors.shape[0]
    keep_t = torch.ones(T, dtype=torch.bool) if keep is None else torch.as_tensor(list(keep), dtype=torch.bool)
    x = vectors[None]  # (1, T, d)
    pooled, _ = classifier.pool(classifier.query, x, x, key_padding_mask=~keep_t[None])  # (1, 1, d)
    return pooled[0, 0] @ classifier.readout + classifier.bias  # ()


def random_tickets(rng: np.random.Generator, n: int, min_words: int = 3, max_words: int = 7) -> list[list[str]]:
    """``n`` tickets of between ``min_words`` and ``max_words`` distinct words from ``VOCAB``.

    Distinct words keep attention weights and importances free of ties, so ranks are defined.
    """
    lengths = rng.integers(min_words, max_words + 1, size=n)  # (n,)
    return [[str(w) for w in rng.choice(VOCAB, size=int(t), replace=False)] for t in lengths]
