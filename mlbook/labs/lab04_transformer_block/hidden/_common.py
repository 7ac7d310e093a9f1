"""What lab 4's checks share: the message for a .view on a non-contiguous tensor, and the
tolerance of float64 results."""

from __future__ import annotations

__all__ = ["GRAD_TOL", "view_error"]

GRAD_TOL = 1e-10  # float64 against torch autograd (and the block's float64 reference)


def view_error(kind: str, text: str) -> tuple[str, str] | None:
    """``call_student``'s ``named`` hook: the classic error of a flattening .view after a transpose."""
    if kind == "RuntimeError" and "view size is not compatible" in text:
        return ("raised RuntimeError from .view on a non-contiguous tensor",
                "After a transpose the strides are permuted, so a flattening .view has no valid stride "
                "interpretation: call .contiguous() first (or use reshape, which copies).")
    return None
