"""A tiny, fixed ticket classifier with one attention-pooling layer (lab 1's test subject).

It reads a ticket as a list of words and returns the probability that the ticket asks for
a refund, together with the attention weights its pooling layer put on each word. It is
built on ``torch.nn.MultiheadAttention`` (one head): a single learned query attends over
the words, the pooled value goes through a logistic read-out.

Convention: ``keep[i]`` is True where word ``i`` may be attended to; a word with
``keep[i] = False`` is masked out as a key, exactly as if it were padding.

The default weights are set by hand so that the word with the largest attention weight is
not the word the prediction depends on. ``TicketClassifier.random(rng)`` makes other
classifiers with the same interface.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

__all__ = ["TicketClassifier", "VOCAB"]

VOCAB = ("please", "refund", "my", "bag", "delayed", "lost", "thanks", "hello")

# Hand-set embeddings (d = 4). Axis 0: how strongly the classifier's query is drawn to a word;
# axis 1: evidence for a refund request; axes 2-3: everything else.
_EMBEDDINGS = {
    "please": (1.0, 0.0, 0.0, 0.2),
    "refund": (0.0, 10.0, 0.0, 0.0),
    "my": (0.0, 0.0, 0.3, 0.0),
    "bag": (0.0, 0.0, 1.0, 0.0),
    "delayed": (0.2, 1.0, 0.0, 1.0),
    "lost": (0.1, 2.0, 1.0, 0.0),
    "thanks": (0.8, -1.0, 0.0, 0.3),
    "hello": (0.5, 0.0, 0.0, 0.5),
}


class TicketClassifier:
    """P(refund request | words) from one attention-pooling head.

    Args:
        embeddings: (len(VOCAB), d) word vectors.
        query: (d,) the classifier's learned query.
        readout: (d,) logistic weights on the pooled vector.
        bias: logistic bias.
    """

    def __init__(self, embeddings: np.ndarray, query: np.ndarray, readout: np.ndarray, bias: float) -> None:
        d = embeddings.shape[1]
        self.embeddings = torch.as_tensor(embeddings, dtype=torch.float64)  # (V, d)
        self.query = torch.as_tensor(query, dtype=torch.float64).reshape(1, 1, d)  # (1, 1, d)
        self.readout = torch.as_tensor(readout, dtype=torch.float64)  # (d,)
        self.bias = float(bias)
        self.pool = torch.nn.MultiheadAttention(d, num_heads=1, bias=False, batch_first=True, dtype=torch.float64)
        with torch.no_grad():  # identity projections: scores are q . e / sqrt(d), values are the embeddings
            self.pool.in_proj_weight.copy_(torch.cat([torch.eye(d, dtype=torch.float64)] * 3))
            self.pool.out_proj.weight.copy_(torch.eye(d, dtype=torch.float64))
        self.pool.eval()

    @classmethod
    def default(cls) -> "TicketClassifier":
        """The hand-set classifier of the lab."""
        emb = np.array([_EMBEDDINGS[w] for w in VOCAB])  # (V, 4)
        return cls(emb, query=np.array([4.0, 0.0, 0.0, 0.0]), readout=np.array([0.0, 2.0, 0.0, 0.0]), bias=-1.0)

    @classmethod
    def random(cls, rng: np.random.Generator, d: int = 4) -> "TicketClassifier":
        """A classifier with random weights and the same interface."""
        return cls(rng.normal(size=(len(VOCAB), d)) * 1.5, rng.normal(size=d) * 2.0, rng.normal(size=d), rng.normal())

    def predict(self, words: Sequence[str], keep: Sequence[bool] | None = None) -> tuple[float, np.ndarray]:
        """Classify one ticket.

        Args:
            words: T words from ``VOCAB``.
            keep: T booleans, True where the word may be attended to; all True when omitted.
                At least one word must be kept.

        Returns:
            The probability of a refund request, and the (T,) attention weights over the words
            (0 at masked words; the kept weights sum to 1).
        """
        unknown = [w for w in words if w not in VOCAB]
        if unknown:
            raise ValueError(f"unknown words {unknown}; the vocabulary is {VOCAB}")
        keep_t = torch.ones(len(words), dtype=torch.bool) if keep is None else torch.as_tensor(list(keep), dtype=torch.bool)
        if keep_t.shape != (len(words),) or not keep_t.any():
            raise ValueError("keep needs one boolean per word and at least one True")
        ids = torch.tensor([VOCAB.index(w) for w in words])
        x = self.embeddings[ids][None]  # (1, T, d)
        with torch.no_grad():
            pooled, weights = self.pool(self.query, x, x, key_padding_mask=~keep_t[None])  # (1, 1, d), (1, 1, T)
        logit = pooled[0, 0] @ self.readout + self.bias  # ()
        return float(torch.sigmoid(logit)), weights[0, 0].numpy()  # float, (T,)
