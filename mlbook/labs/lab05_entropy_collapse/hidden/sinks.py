"""Checks of the attention-sink functions: sink_mass (the detector) and sliding_window_mask (the cache)."""

from __future__ import annotations

import numpy as np
import torch

from ...kit import array, call_student, close, diagnose, fail, fresh_rng, softmax

__all__ = ["check_sink_mass", "check_sliding_window_mask", "window_allowed"]


def _weights_with_sinks(rng: np.random.Generator, shape: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Random causal-or-not attention rows in which some heads park most of their mass on key 0.

    Returns:
        (B, H, T_q, T_k) weights and the (H,) bool of the planted sink heads.
    """
    B, H, T_q, T_k = shape
    logits = rng.normal(size=shape) * rng.uniform(0.5, 2.0)  # (B, H, T_q, T_k)
    sinks = rng.random(H) < 0.5  # (H,)
    sinks[rng.integers(H)] = True  # at least one sink head
    logits[:, sinks, :, 0] += rng.uniform(2.0, 5.0)  # (B, n_sinks, T_q): key 0 favoured by the sink heads
    keep = rng.random(shape) > 0.3  # (B, H, T_q, T_k): some keys masked
    keep[..., 0] = True  # key 0 is always readable
    w = softmax(np.where(keep, logits, -np.inf))  # (B, H, T_q, T_k), exact zeros where masked
    return w, sinks


def _reference(w: np.ndarray, from_query: int) -> np.ndarray:
    """(B, H, T_q, T_k) -> (H,): mass on key 0, mean over the batch and queries from from_query on."""
    return w[:, :, from_query:, 0].mean(axis=(0, 2))


def check_sink_mass(sink_mass) -> None:
    rng = fresh_rng()
    cases = [((3, 4, 9, 7), torch.float64, int(rng.integers(2, 5))),
             ((2, 3, 6, 11), torch.float32, 1),
             ((4, 5, 12, 12), torch.float64, int(rng.integers(2, 5)))]
    for shape, dtype, from_query in cases:
        B, H, T_q, T_k = shape
        w, _ = _weights_with_sinks(rng, shape)
        attn = torch.tensor(w, dtype=dtype)
        w = attn.double().numpy()  # the reference sees exactly what the student sees
        pristine = attn.clone()
        what = f"sink_mass on {dtype} weights of shape (B, H, T_q, T_k) = {shape}, from_query={from_query}"
        got = call_student(sink_mass, attn, from_query, what=what)
        if not torch.equal(attn, pristine):
            fail(what, "the input weights were changed in place", "Read the weights; never modify attn.")
        got = array(got, what, hint="Return a tensor with one sink mass per head.")
        if got.shape != (H,):
            axes = {(T_q - from_query,): "the batch and the heads", (T_q,): "the batch and the heads",
                    (B,): "the heads and the queries", (B, H): "the queries only", (): "everything",
                    (T_k,): "the batch and the heads"}
            averaged = axes.get(got.shape)
            fail(what, f"shape is {got.shape}, expected one value per head, ({H},)",
                 (f"It looks averaged over {averaged}: wrong axis. " if averaged else "Wrong axes. ")
                 + "Take key 0's column (attn[..., 0]) and average it over the batch (axis 0) and the queries (axis 2).")
        ref = _reference(w, from_query)  # (H,)
        atol = 1e-9 if dtype == torch.float64 else 2e-6
        if close(got, ref, atol=atol, rtol=1e-6):
            continue
        hint = diagnose(got, {
            "query 0 and the other queries before from_query were counted: leave them out": _reference(w, 0),
            "one query too many was left out: count the queries from from_query on, from_query included":
                _reference(w, from_query + 1),
            "one query too few was left out: queries 0 .. from_query - 1 are the ones to skip":
                _reference(w, max(from_query - 1, 0)),
            "that is query 0's row (attn[..., 0, :]), not key 0's column (attn[..., 0]): wrong axis":
                w[:, :, 0, :].mean(axis=(0, 2)),
            "that reads the last key instead of the first (position 0)": w[:, :, from_query:, -1].mean(axis=(0, 2)),
            "the mass is summed over the queries instead of averaged": w[:, :, from_query:, 0].sum(axis=2).mean(axis=0),
            "the mass is summed over the batch instead of averaged": w[:, :, from_query:, 0].sum(axis=0).mean(axis=-1),
            "the weights on every key were averaged, not only those on key 0: take attn[..., 0]":
                w[:, :, from_query:, :].mean(axis=(0, 2, 3)),
        }, atol=max(atol, 1e-6), rtol=1e-5)
        fail(what, f"got {np.round(got, 4).tolist()}, which is not each head's mean weight on key 0",
             hint or "Average attn[b, h, i, 0] over the batch and over the queries i >= from_query.")


def window_allowed(T: int, window: int, n_sinks: int, causal: bool = True, inclusive: bool = False,
                   sink_causal: bool = True) -> np.ndarray:
    """The grader's (T, T) sliding-window-with-sinks mask, True where allowed; the options are known mistakes."""
    i = np.arange(T)[:, None]  # (T, 1)
    j = np.arange(T)[None, :]  # (1, T)
    past = j <= i if causal else np.ones((T, T), bool)  # (T, T)
    recent = past & ((i - j <= window) if inclusive else (i - j < window))  # (T, T)
    sinks = (j < n_sinks) & (past if sink_causal else True)  # (T, T)
    return recent | sinks


def check_sliding_window_mask(sliding_window_mask) -> None:
    rng = fresh_rng()
    T = int(rng.integers(9, 15))
    cases = [(T, int(rng.integers(2, 5)), int(rng.integers(1, 4))),  # the usual case
             (T + 1, 1, 2),  # a query reads itself and the sinks
             (T, T + int(rng.integers(0, 3)), 0),  # a window as long as the sequence: causal
             (T - 2, int(rng.integers(2, 4)), 0),  # a plain sliding window
             (T, 2, int(rng.integers(4, 7)))]  # more sinks than the window
    for T_, window, n_sinks in cases:
        what = f"sliding_window_mask(T={T_}, window={window}, n_sinks={n_sinks})"
        got = call_student(sliding_window_mask, T_, window, n_sinks, what=what)
        got = array(got, what, shape=(T_, T_), kind="b",
                    hint="Return a (T, T) boolean tensor, True where query i may read key j.")
        ref = window_allowed(T_, window, n_sinks)
        if np.array_equal(got, ref):
            continue
        rows = got.sum(axis=1)  # (T,): keys each query reads
        if (got & ~np.tril(np.ones((T_, T_), bool))).any():
            i, j = map(int, np.argwhere(got & ~np.tril(np.ones((T_, T_), bool)))[0])
            known = {
                "the sink tokens are readable before they exist: a sink j must still satisfy j <= i":
                    window_allowed(T_, window, n_sinks, sink_causal=False),
                "the window reaches into the future: keep j <= i": window_allowed(T_, window, n_sinks, causal=False),
            }
            hint = next((h for h, m in known.items() if np.array_equal(got, m)), None)
            fail(what, f"query {i} may read key {j}, a later token", hint or "A query never reads a key after it.")
        hint = next((h for h, m in {
            "the window keeps window + 1 tokens: with i - j <= window the query reads one key too many; the "
            "window counts the query itself (i - j < window)": window_allowed(T_, window, n_sinks, inclusive=True),
            "the sink tokens are missing: keys 0 .. n_sinks - 1 stay readable by every later query":
                window_allowed(T_, window, 0),
            "the window is one token short: the window counts the query itself, so i - j < window":
                window_allowed(T_, max(window - 1, 0), n_sinks),
            "one sink too many: the sinks are the first n_sinks tokens, keys j < n_sinks (j <= n_sinks keeps one "
            "more)": window_allowed(T_, window, n_sinks + 1),
        }.items() if np.array_equal(got, m)), None)
        fail(what, f"rows read {rows.astype(int).tolist()} keys, which is not the window plus the sinks",
             hint or "Query i reads keys j <= i with i - j < window, and keys j < n_sinks (j <= i).")
