"""attention_matrix_bytes: the size of the matrix chunked attention never builds."""

from __future__ import annotations

from ...kit import ask_number, close, diagnose, fail, fresh_rng

__all__ = ["check_attention_matrix_bytes"]


def check_attention_matrix_bytes(fn) -> None:
    rng = fresh_rng()
    # Every run asks for each entry size 1, 2, 4 and 8 (in a fresh order) with B >= 2: an answer that ignores
    # bytes_per_entry (right only for 2-byte entries) or the batch cannot pass by luck of the draw. The other
    # arguments are drawn again for each call, and a draw is kept only when every known mistake gives a
    # different number, so the message names the one made.
    for per in (int(x) for x in rng.permutation([1, 2, 4, 8])):
        while True:
            B, H, T = int(rng.integers(2, 9)), int(rng.integers(2, 17)), int(rng.integers(100, 5000))
            want = B * H * T * T * per
            wrong = [w for w in (H * T * T * per, B * T * T * per, B * H * T * per, B * H * T * T * 2, B * H * T * T)
                     if w != want]  # what each mistake gives that differs from the answer
            if len({B, H, T, per}) == 4 and len(set(wrong)) == len(wrong):
                break
        what = f"attention_matrix_bytes({B}, {H}, {T}, {per})"
        got = ask_number(fn, B, H, T, per, what=what,
                         hint="Return the number of bytes as one int: B * H * T * T * bytes_per_entry.")
        if close(got, want, atol=0.5, rtol=1e-9):
            continue
        cause = diagnose(got, {
            "the batch size B is missing": H * T * T * per,
            "the number of heads H is missing": B * T * T * per,
            "T is not squared: the matrix has T x T entries per head": B * H * T * per,
            "bytes_per_entry is ignored: the answer is right only for 2-byte entries": B * H * T * T * 2,
            "the entries are counted, not the bytes": B * H * T * T,
        }, atol=0.5, rtol=1e-9)
        fail(f"attention_matrix_bytes(B={B}, H={H}, T={T}, bytes_per_entry={per})", f"got {got:.10g}",
             cause or "The matrix has B * H * T * T entries of bytes_per_entry bytes each.")
