"""Benchmark: lab 6's memory checks, call by call: what correct answers touch against the rule.

    .venv/bin/python benchmarks/memory_margins.py [--copies 1] [--kinds reference,numpy,...]

Grades lab 6's reference notebook and the catalogue alternatives that change the measured
functions (float64 copies, float64 tiles, a (T, d) state for all queries, NumPy, the backward
tiled both ways) through the real pipeline (sandboxed, ``autograde``), and records every measured
call of ``hidden.memory`` in this process, where the judge runs: the length T, the peak growth,
the pages the call touched, the idle round trip's and what is charged
(``touched - min(idle, _ROUND_TRIP_CAP)``). Prints, per submission and function, the largest
charge at T2 against the touched rule (``_TOUCHED_FORWARD`` or ``_BACKWARD`` of a float32 T2 x T2 matrix) and
the smallest margin; then, for the smallest T2 the checks draw, what a T x T matrix kept in
memory prepared before the call is charged at the least (its bytes less the cap) against the
rule, for 4-, 2- and 1-byte entries.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlbook.authoring import submissions  # noqa: E402
from mlbook.authoring.catalogue import load_catalogue  # noqa: E402
from mlbook.course import Course  # noqa: E402
from mlbook.grading import GradingOptions, autograde  # noqa: E402
from mlbook.labs.lab06_chunked_attention.hidden import memory  # noqa: E402
from mlbook.outputs.results import collect  # noqa: E402
from mlbook.sandbox import procmem  # noqa: E402

LAB = "lab06_chunked_attention"
ALTERNATIVES = ("float64-copies-of-the-inputs", "float64-accumulation", "key-outer-loop", "numpy",
                "backward-tiled-both-ways")
_local = threading.local()
_calls: list[dict] = []
_lock = threading.Lock()


class _Recording(procmem.TreePeak):
    def __exit__(self, *exc):
        super().__exit__(*exc)
        record = getattr(_local, "record", None)
        if record is not None:
            record.append((self.referenced, self.bytes))


def _recorded_call(original):
    def call(fn, args, kwargs, what, root):
        _local.record = []
        try:
            got, grown, charged = original(fn, args, kwargs, what, root)
        finally:
            parts, _local.record = _local.record, None
        refs = [b for referenced, b in parts if referenced]
        idle, touched = (refs[0], refs[1]) if len(refs) == 2 else (0, charged)
        T = next(a for a in args if hasattr(a, "shape")).shape[0]
        with _lock:
            _calls.append({"what": what, "T": T, "grown": grown, "touched": touched, "idle": idle, "charged": charged,
                           "sandboxed": root != __import__("os").getpid()})
        return got, grown, charged
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1, help="notebooks of each kind")
    parser.add_argument("--kinds", default="reference," + ",".join(ALTERNATIVES), help="which submissions")
    args = parser.parse_args()
    procmem.TreePeak = _Recording  # memory.py reads procmem.TreePeak at call time
    memory._measured_call = _recorded_call(memory._measured_call)
    catalogue = load_catalogue(LAB)
    wanted = args.kinds.split(",")
    kinds = {"reference": {}} | {a.name: a.cells for a in catalogue.alternatives if a.name in wanted}
    with tempfile.TemporaryDirectory(prefix="mlbook-memmargins-") as scratch:
        repo = Course(REPO)
        course = repo.scratch_copy(Path(scratch), [LAB])
        course.release(LAB).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo.release(LAB), course.release(LAB))
        for kind, cells in kinds.items():
            for i in range(args.copies):
                submissions.submit(course, f"{kind}-{i}", LAB, submissions.reference(course, LAB, cells))
        results, by = {}, defaultdict(list)
        for student in (f"{kind}-{i}" for kind in kinds for i in range(args.copies)):
            start = len(_calls)
            autograde(course, LAB, [student], force=True, progress=False, options=GradingOptions(workers=1))
            results[student], = (r for r in collect(course, LAB) if r.student == student)
            for c in _calls[start:]:
                by[student, c["what"].split("(")[0]].append(c)
    full = {n: c.score for n, c in results["reference-0"].auto_cells.items()}
    for student, result in results.items():
        for n, c in result.auto_cells.items():
            if c.score != full[n]:
                print(f"{student}: {n} scored {c.score} of {full[n]}: {c.message}")
    rules = {"chunked_attention": memory._TOUCHED_FORWARD, "attention_backward_from_lse": memory._TOUCHED_BACKWARD}
    print(f"{len(_calls)} measured calls, rule: charged < {rules} x a float32 T2 x T2 matrix, "
          f"cap {memory._ROUND_TRIP_CAP:,} B")
    print(f"{'submission':<34}{'function':<28}{'T2':>6}{'touched':>9}{'idle':>7}{'charged':>9}{'rule':>7}"
          f"{'margin':>8}  scores")
    for (student, function), calls in by.items():
        T2 = max(c["T"] for c in calls)
        at_T2 = [c for c in calls if c["T"] >= T2 * 0.9]
        worst = max(at_T2, key=lambda c: c["charged"] / (rules[function] * 4 * c["T"] ** 2))
        rule = rules[function] * 4 * worst["T"] ** 2
        lost = {n: s for n, s in ((n, c.score) for n, c in results[student].auto_cells.items()) if s != full[n]}
        print(f"{student:<34}{function:<28}{worst['T']:>6}{worst['touched'] / 1e6:>8.1f}M{worst['idle'] / 1e6:>6.1f}M"
              f"{worst['charged'] / 1e6:>8.1f}M{rule / 1e6:>6.1f}M{rule / max(worst['charged'], 1):>7.1f}x  "
              f"{'full marks' if not lost else lost}")
    for function, t1 in (("chunked_attention", memory._FORWARD_T1), ("attention_backward_from_lse", memory._BACKWARD_T1)):
        low = 2 * t1[0] + 1
        rule = rules[function] * 4 * low ** 2
        print(f"\n{function} at the smallest T2 drawn ({low:,}): rule {rule / 1e6:.1f} MB; a T x T matrix in prepared "
              f"memory is charged at least its bytes less the cap:")
        for entry in (4, 2, 1):
            least = entry * low ** 2 - memory._ROUND_TRIP_CAP
            print(f"  {entry}-byte entries: {least / 1e6:.1f} MB, {least / rule:.2f}x the rule")

if __name__ == "__main__":
    main()
