"""The worked examples of the lesson and the chapter, as data.

Every lab that reuses an example takes it from here, so a number printed in the lesson is
typed once. Matrices are row-major with one token per row, as in the lesson:
``X`` is (T, d_model), ``W_q``/``W_k`` are (d_model, d_k), ``W_v`` is (d_model, d_v).
These are inputs only; nothing here computes attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TicketExample", "ticket_example", "BankSession", "bank_session", "chapter_qkv"]


@dataclass(frozen=True)
class TicketExample:
    """The three-token ticket 'bag delayed refund' with hand-set projections (d_k = 2)."""

    tokens: tuple[str, ...] = ("bag", "delayed", "refund")
    X: np.ndarray = field(default_factory=lambda: np.eye(3))  # (3, 3) one-hot tokens
    W_q: np.ndarray = field(default_factory=lambda: np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))  # (3, 2)
    W_k: np.ndarray = field(default_factory=lambda: np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]))  # (3, 2)
    W_v: np.ndarray = field(default_factory=lambda: np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]))  # (3, 2)


def ticket_example() -> TicketExample:
    """A fresh copy of the ticket example (arrays are new each call, so edits do not leak)."""
    return TicketExample()


@dataclass(frozen=True)
class BankSession:
    """Three events of a bank session, already projected (d_k = 4, d_v = 2).

    Only the queries the lesson works by hand are given: ``queries[1]`` (new-device)
    and ``queries[2]`` (transfer).
    """

    tokens: tuple[str, ...] = ("login", "new-device", "transfer")
    K: np.ndarray = field(default_factory=lambda: np.array([[1.0, 0, 0, 0], [1, 1, 0, 1], [0, 1, 1, 0]]))  # (3, 4)
    V: np.ndarray = field(default_factory=lambda: np.array([[1.0, 0], [0, 1], [1, 1]]))  # (3, 2)
    queries: dict = field(
        default_factory=lambda: {1: np.array([0.0, 1, 1, 0]), 2: np.array([1.0, 1, 0, 1])}
    )  # position -> (4,)


def bank_session() -> BankSession:
    """A fresh copy of the bank-session example."""
    return BankSession()


def chapter_qkv() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chapter's T = 3, d_k = 2 example: Q = K = [[1,0],[0,1],[1,1]], V = [[10,0],[0,10],[5,5]].

    Returns:
        Q: (3, 2), K: (3, 2), V: (3, 2).
    """
    Q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # (3, 2)
    V = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])  # (3, 2)
    return Q, Q.copy(), V
