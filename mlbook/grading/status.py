"""How each grading attempt ended, kept beside nbgrader's gradebook.

nbgrader records scores but not failures: a submission whose kernel died shows as a plain 0
in its CSV export. mlbook records one entry per (lab, student): ``graded`` or ``error`` with a
one-line reason and the time it took. A student with a submission and no entry is ``missing``
(not graded yet). The file is rewritten atomically after every student, so a killed run
loses at most the student it was grading.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlbook.files import write_atomic

GRADED, ERROR, MISSING = "graded", "error", "missing"


@dataclass
class Attempt:
    lab: str
    student: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    finished_at: float = 0.0
    warning: str = ""  # graded, but a TA should know (e.g. a renamed notebook)
    timings: dict = field(default_factory=dict)  # where the seconds went (start-up, kernel, ..., recording)


class StatusStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, Attempt] = {}
        if path.is_file():
            for key, value in json.loads(path.read_text() or "{}").items():
                known = {k: v for k, v in value.items() if k in Attempt.__dataclass_fields__}
                self._entries[key] = Attempt(**known)

    @staticmethod
    def _key(lab: str, student: str) -> str:
        return f"{lab}/{student}"

    def get(self, lab: str, student: str) -> Attempt:
        return self._entries.get(self._key(lab, student), Attempt(lab, student, MISSING))

    def attempts(self, lab: str) -> list[Attempt]:
        """Every recorded attempt of ``lab`` (one per student)."""
        return [a for a in self._entries.values() if a.lab == lab]

    def forget(self, lab: str, student: str) -> None:
        """Drop the entry of a submission that changed (``mlbook collect``): it is not graded
        any more, so the next ``autograde`` grades it again."""
        if self._entries.pop(self._key(lab, student), None) is not None:
            self._write()

    def record(self, attempt: Attempt) -> None:
        attempt.finished_at = attempt.finished_at or time.time()
        self._entries[self._key(attempt.lab, attempt.student)] = attempt
        self._write()

    def _write(self) -> None:
        write_atomic(self.path, json.dumps({k: asdict(v) for k, v in sorted(self._entries.items())}, indent=1))
