"""Files written so that a reader sees the old content or the new one, never half of either.

Every file mlbook writes for others to read (the status file, CSVs, reports, feedback pages,
notebooks, zips) goes through here: the content is written to a temporary file beside the
target, flushed to disk, and renamed over the target in one step.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; it replaces ``path`` when the block ends
    without an exception, and is removed otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_atomic(path: Path, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to ``path`` atomically; returns ``path``."""
    with replacing(path) as tmp:
        tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path
