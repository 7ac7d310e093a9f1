"""What lab 3's checks share: the dtypes they grade, fresh torch inputs, the form of a mask.

Convention, as in the lab: a boolean mask is True where attention is allowed; it broadcasts
against scores of shape (B, H, T_q, T_k).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ...kit import describe, dtype_name, fail

__all__ = ["DTYPES", "POLARITY", "randn", "shape_str", "as_numpy", "expect_bool_tensor",
           "float16_overflow"]

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
POLARITY = "The course's convention: a mask is True where attention is ALLOWED."


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64, scale: float = 1.0) -> torch.Tensor:
    """Standard normals drawn in float64 from ``gen``, times ``scale``, then cast to ``dtype``:
    the same draw whatever dtype a check grades."""
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def shape_str(shape: Any) -> str:
    """A shape as Python writes a tuple: (2, 3), (8,), ()."""
    return str(tuple(int(s) for s in shape))


def as_numpy(x: torch.Tensor) -> np.ndarray:
    """A tensor as float64 NumPy, for the reference maths."""
    return x.detach().to(torch.float64).cpu().numpy()


def expect_bool_tensor(m: Any, shape: tuple[int, ...], what: str, shape_hint: str | None = None) -> None:
    """Fail unless ``m`` is a torch bool tensor of exactly ``shape`` (``shape_hint``: the advice for another
    shape with as many axes, when a check knows better than the general one)."""
    if not isinstance(m, torch.Tensor):
        fail(what, f"returned {describe(m)}, not a torch tensor", "Build the mask with torch.")
    if m.dtype != torch.bool:
        fail(what, f"dtype is {m.dtype}, not torch.bool",
             "Return a boolean mask (True where attention is allowed): a 0/1 float mask would be "
             "added to or multiplied with the scores instead of selecting them.")
    if tuple(m.shape) != shape:
        fail(what, f"shape is {shape_str(m.shape)}, expected {shape_str(shape)}",
             shape_hint if shape_hint is not None and m.dim() == len(shape) else
             "Keep the broadcast axes of size 1 so the mask lines up with (B, H, T_q, T_k) scores.")


def float16_overflow(dtype: torch.dtype, observed: str, hint: str) -> Callable[[str, str], tuple[str, str] | None]:
    """A ``named=`` hook for kit.call_student: torch's RuntimeError on a fill value that float16
    cannot hold (-1e9, say) becomes (``observed``, ``hint``); the same error in another dtype (a
    fill taken from a wider dtype's finfo, written into a narrower tensor) is named too; any other
    error is reported as usual."""
    def named(kind: str, text: str) -> tuple[str, str] | None:
        if kind != "RuntimeError" or "overflow" not in text:
            return None
        if dtype == torch.float16:
            return observed, hint
        return (f"raised RuntimeError: {text[:160]}",
                f"A fill value must fit the dtype of the tensor it is written into (the scores are {dtype_name(dtype)}): "
                "take it from torch.finfo of that same tensor's dtype, not of another dtype.")

    return named
