"""attention_matrix_bytes: the size of the matrix chunked attention never builds."""

from __future__ import annotations

from ...kit import ask_number, close, diagnose, fail, fresh_rng

__all__ = ["check_attention_matrix_bytes"]


def check_attention_matrix_bytes(fn) -> None:
    rng = fresh_rng()
    for _ in range(4):
        B, H, T = int(rng.integers(2, 9)), int(rng.integers(2, 17)), int(rng.integers(100, 5000))
        per = int(rng.choice([1, 2, 4]))
        what = f"attention_matrix_bytes({B}, {H}, {T}, {per})"
        got = ask_number(fn, B, H, T, per, what=what,
                         hint="Return the number of bytes as one int: B * H * T * T * bytes_per_entry.")
        want = B * H * T * T * per
        if close(got, want, atol=0.5, rtol=1e-9):
            continue
        cause = diagnose(got, {
            "the batch size B is missing": H * T * T * per,
            "the number of heads H is missing": B * T * T * per,
            "T is not squared: the matrix has T x T entries per head": B * H * T * per,
            "bytes_per_entry is ignored": B * H * T * T * 2,
            "the entries are counted, not the bytes": B * H * T * T,
        }, atol=0.5, rtol=1e-9)
        fail(f"attention_matrix_bytes(B={B}, H={H}, T={T}, bytes_per_entry={per})", f"got {got:.10g}",
             cause or "The matrix has B * H * T * T entries of bytes_per_entry bytes each.")
