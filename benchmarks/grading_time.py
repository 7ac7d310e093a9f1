"""Benchmark: per-notebook grading time of each lab's reference notebook in two checkouts, interleaved.

    .venv/bin/python benchmarks/grading_time.py --before /work/wt/before [--after .] [--rounds 3]
        [--labs lab01_hand_attention,...] [--notebooks 1]

Each checkout grades with its own code and its own ``.venv`` (``<tree>/.venv/bin/python``): a
scratch course of one lab, ``--notebooks`` reference submissions, ``autograde`` as ``mlbook
autograde`` runs it (sandboxed, one worker so that the notebooks do not share the cores), and the
per-notebook seconds the status file records. Rounds alternate which checkout goes first, lab by
lab, so that the other load of a shared machine falls on both alike. Prints, per lab, the median
seconds per notebook before and after and their ratio (after / before).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABS = ("lab01_hand_attention", "lab02_scaling", "lab03_masks", "lab04_transformer_block",
        "lab05_entropy_collapse", "lab06_chunked_attention")

# Run by each checkout's own interpreter: grade one lab's reference notebooks, print their seconds (JSON).
WORKER = r"""
import json, shutil, sys, time
from pathlib import Path
tree, lab, notebooks, scratch = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
sys.path.insert(0, str(tree))
from mlbook.authoring import submissions
from mlbook.course import Course
from mlbook.grading import GradingOptions, autograde
repo = Course(tree)
course = repo.scratch_copy(scratch, [lab])
course.release(lab).parent.mkdir(parents=True, exist_ok=True)
shutil.copy2(repo.release(lab), course.release(lab))
for i in range(notebooks):
    submissions.submit(course, f"s{i}", lab, submissions.reference(course, lab))
started = time.perf_counter()
autograde(course, lab, force=True, progress=False, options=GradingOptions(workers=1))
wall = time.perf_counter() - started
status = json.loads((course.root / "autograded" / ".mlbook-status.json").read_text())
bad = [s for s in status.values() if s["status"] != "graded"]
if bad:
    raise SystemExit(f"a reference notebook was not graded: {bad[0]}")
print(json.dumps({"seconds": [s["seconds"] for s in status.values()], "wall": wall}))
"""


def grade(tree: Path, lab: str, notebooks: int) -> list[float]:
    """Seconds per notebook of one batch of ``lab``'s reference notebooks graded by ``tree``'s code."""
    with tempfile.TemporaryDirectory(prefix="mlbook-gradetime-") as scratch:
        done = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-c", WORKER, str(tree), lab, str(notebooks),
                               str(Path(scratch) / "course")], cwd=scratch, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree} could not grade {lab}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout before the change (with its .venv)")
    parser.add_argument("--after", type=Path, default=REPO, help="the checkout after it (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--notebooks", type=int, default=1, help="reference notebooks per batch")
    parser.add_argument("--labs", default=",".join(LABS))
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    labs = args.labs.split(",")
    seconds: dict[tuple[str, str], list[float]] = {(lab, which): [] for lab in labs for which in trees}
    started = time.perf_counter()
    for r in range(args.rounds):
        for i, lab in enumerate(labs):
            order = ("before", "after") if (r + i) % 2 == 0 else ("after", "before")
            for which in order:
                got = grade(trees[which], lab, args.notebooks)
                seconds[lab, which].extend(got)
                print(f"round {r + 1} {lab} {which}: {', '.join(f'{s:.1f}' for s in got)} s", flush=True)
    print(f"\nseconds per notebook (median of {args.rounds} round(s) x {args.notebooks} notebook(s)), sandboxed, "
          f"one worker; before = {trees['before']}, after = {trees['after']}")
    print(f"{'lab':<26}{'before':>9}{'after':>9}{'ratio':>8}")
    for lab in labs:
        b, a = statistics.median(seconds[lab, "before"]), statistics.median(seconds[lab, "after"])
        print(f"{lab:<26}{b:>9.1f}{a:>9.1f}{a / b:>8.2f}")
    print(f"({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
