"""Benchmark: what the memory-measuring allocator setting costs a lab that does not measure memory.

    .venv/bin/python benchmarks/allocator_cost.py [--lab lab05_entropy_collapse] [--notebooks 2] [--rounds 3]

A lab whose hidden checks measure the kernel's memory (``SANDBOX_PROFILE = "memory"``, lab 6) runs
its sandboxes with glibc set so that resident memory follows what the kernel holds
(``mlbook.sandbox.profiles``); every other lab runs with glibc's defaults. This grades the same
reference notebooks of ``--lab``, sandboxed with warm kernels and one worker, as the lab is
declared and with its plan switched to the memory profile, in ``--rounds`` rounds that alternate
which goes first (so that a shared machine's other load falls on both alike), and prints the
seconds per notebook of each batch, the medians and their ratio. Run it as root.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlbook.authoring import submissions  # noqa: E402
from mlbook.course import Course  # noqa: E402
from mlbook.grading import GradingOptions, autograde  # noqa: E402
from mlbook.judge import plan as plans  # noqa: E402


def grade(lab: str, notebooks: int, measures_memory: bool, root: Path) -> list[float]:
    """Seconds per notebook of one sandboxed batch of ``notebooks`` reference submissions."""
    course = Course(REPO).scratch_copy(root, [lab])
    course.release(lab).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Course(REPO).release(lab), course.release(lab))
    for i in range(notebooks):
        submissions.submit(course, f"s{i}", lab, submissions.reference(course, lab))
    build = plans._build

    def marked(lab_name, nb):
        plan = build(lab_name, nb)
        plan.sandbox_profile = "memory" if measures_memory else plan.sandbox_profile
        return plan

    plans._cache.clear()
    plans._build = marked
    try:
        autograde(course, lab, force=True, progress=False, options=GradingOptions(workers=1))
    finally:
        plans._build = build
        plans._cache.clear()
    status = json.loads((course.root / "autograded" / ".mlbook-status.json").read_text())
    bad = [s for s in status.values() if s["status"] != "graded"]
    if bad:
        raise SystemExit(f"a reference notebook was not graded: {bad[0]}")
    return [s["seconds"] for s in status.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="lab05_entropy_collapse")
    parser.add_argument("--notebooks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mlbook-allocator-") as scratch:
        for r in range(args.rounds):
            for measuring in ((False, True) if r % 2 == 0 else (True, False)):
                got = grade(args.lab, args.notebooks, measuring, Path(scratch) / f"{r}-{measuring}")
                seconds[measuring].extend(got)
                print(f"round {r + 1} {'memory-measuring' if measuring else 'glibc defaults'}: "
                      f"{', '.join(f'{s:.1f}' for s in got)} s", flush=True)
    a, b = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(f"{args.lab}, {args.notebooks} reference notebook(s) per batch, {args.rounds} rounds, sandboxed, warm kernels, "
          f"one worker")
    print(f"  glibc defaults (as the lab runs):      median {a:.1f} s per notebook")
    print(f"  memory-measuring allocator (lab 6's):  median {b:.1f} s per notebook")
    print(f"  ratio of the medians: {b / a:.2f}x   ({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
