"""Plain-text tables for the terminal (no dependency, fixed-width columns)."""

from __future__ import annotations

from typing import Sequence


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], max_width: int = 70) -> str:
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])
