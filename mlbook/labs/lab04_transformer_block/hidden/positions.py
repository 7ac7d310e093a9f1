"""sinusoidal_positions: the paper's interleaved sines and cosines."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...kit import ask_array, close, compare, fail, fresh_rng
from ._common import view_error

__all__ = ["check_sinusoidal"]


def _np_positions(T: int, d: int, variant: str | None = None) -> np.ndarray:
    """Sinusoidal positions (T, d): sin on even dimensions, cos on odd, angle pos / 10000^(2i/d)."""
    pos = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
    i = np.arange(d // 2, dtype=np.float64)[None, :]  # (1, d/2) pair index
    if variant == "dim_index":  # exponent from the dimension index, not the pair index
        k = np.arange(d, dtype=np.float64)[None, :]  # (1, d)
        ang = pos / 10000 ** (k / d)  # (T, d)
        pe = np.where(np.arange(d) % 2 == 0, np.sin(ang), np.cos(ang))
        return pe
    expo = {"no_two": i / d, "two_twice": 4 * i / d}.get(variant or "", 2 * i / d)
    ang = pos / 10000 ** expo  # (T, d/2)
    if variant == "halves":
        return np.concatenate([np.sin(ang), np.cos(ang)], axis=-1)  # (T, d)
    pe = np.empty((T, d))
    first, second = (np.cos, np.sin) if variant == "swapped" else (np.sin, np.cos)
    pe[:, 0::2], pe[:, 1::2] = first(ang), second(ang)
    return pe


POSITION_VARIANTS = {
    "swapped": "sin and cos are swapped: the paper puts sin on the even dimensions (2i) and cos on the odd ones (2i + 1)",
    "halves": "all sines come first and all cosines second; the paper interleaves them: dimension 2i "
              "is sin, dimension 2i + 1 is the cos of the same angle",
    "dim_index": "the exponent uses the dimension index instead of the pair index: both dimensions 2i "
                 "and 2i + 1 share the angle pos / 10000^(2i / d_model)",
    "no_two": "the exponent is i / d_model; the paper's is 2i / d_model for pair i",
    "two_twice": "the exponent doubles the pair index twice (4i / d_model): when i already runs over the even "
                 "dimensions 0, 2, 4, ... (np.arange(0, d_model, 2)), the exponent is i / d_model",
}


def check_sinusoidal(sinusoidal_positions: Callable) -> None:
    """sinusoidal_positions(T, d_model) on fresh even widths and lengths, to 1e-9."""
    rng = fresh_rng()
    for _ in range(2):
        T, d = int(rng.integers(9, 40)), 2 * int(rng.integers(5, 24))
        what = f"sinusoidal_positions({T}, {d})"
        pe = ask_array(sinusoidal_positions, T, d, what=what, named=view_error)
        ref = _np_positions(T, d)  # (T, d)
        if pe.shape == ref.shape and not close(pe, ref, atol=1e-9, rtol=0) and close(pe, ref, atol=2e-5, rtol=0):
            fail(what, "the values are right only to float32 precision (off by up to about 1e-6)",
                 "Return float64: compute with NumPy (np.arange, np.zeros give float64), or in torch with "
                 "dtype=torch.float64; torch's default float32 is too coarse.")
        compare(pe, ref, what, "Values differ from PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
                "PE(pos, 2i+1) = cos(...).", atol=1e-9, rtol=0,
                mistakes={msg: (lambda v=v: _np_positions(T, d, v)) for v, msg in POSITION_VARIANTS.items()},
                shape_hint="Expected (T, d_model): one row per position.")
