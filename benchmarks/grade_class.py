"""Benchmark: plain sequential ``nbgrader autograde`` against ``mlbook autograde`` on one class.

    .venv/bin/python benchmarks/grade_class.py [--workers N] [--per-kind 1] [--keep DIR]

Builds a synthetic class over all six labs (per lab: a correct submission, a partly wrong one
from the lab's misconception catalogue, a broken one (truncated JSON) and a slow one (correct,
with an 8 s pause); ``--per-kind`` copies of each, 24 notebooks at 1), copies it into three
identical courses and grades them:
- plain nbgrader: one ``nbgrader autograde <lab>`` per lab, hidden tests in the kernel, unsandboxed;
- ``mlbook autograde``: sandboxed, verdicts outside the kernel, parallel with its default (one
  sandbox per core, and more while cores sit idle) or ``--workers N``;
- ``mlbook autograde --workers <cores>``: one sandbox per core, fixed, to show what admitting
  more while cores are idle adds.
Prints the wall times and their ratios, where a notebook's time goes in mlbook's run, and the
peak memory of each run. mlbook's two runs must give the same grades; plain nbgrader's differ
only for partly wrong submissions, by design (in mlbook a visible test counts only when the
hidden checks of the same function pass).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlbook.authoring import submissions  # noqa: E402
from mlbook.labs import load_catalogue  # noqa: E402
from mlbook.labs import load_catalogue
from mlbook.course import Course  # noqa: E402
from mlbook.grading.admission import available_memory, usable_cpus  # noqa: E402
from mlbook.authoring.notebooks import grade_id, is_answer, read_nb, reference_answers  # noqa: E402

BIN = Path(sys.executable).parent
SLOW = "\nimport time\ntime.sleep(8)  # a slow but correct submission\n"
MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n")


def make_course(root: Path, per_kind: int) -> Course:
    repo = Course(REPO)
    course = repo.scratch_copy(root, repo.labs())
    for lab in repo.labs():
        course.release(lab).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo.release(lab), course.release(lab))
        mutant = load_catalogue(lab).mutants[0]
        source = read_nb(course.source(lab))
        first_answer = next(grade_id(c) for c in source.cells if is_answer(c) and c.cell_type == "code")
        answers = reference_answers(source)
        for i in range(per_kind):
            submissions.submit(course, f"correct-{i}", lab, submissions.reference(course, lab))
            submissions.submit(course, f"partly-wrong-{i}", lab, submissions.reference(course, lab, mutant.cells))
            submissions.submit(course, f"broken-{i}", lab, raw=submissions.corrupt_text(course, lab))
            slow = answers[first_answer] + SLOW
            submissions.submit(course, f"slow-{i}", lab, submissions.reference(course, lab, {first_answer: slow}))
    return course


def timed(command: list[str], cwd: Path, env: dict) -> tuple[float, int, int]:
    """Wall seconds, peak resident memory of the largest process (KiB) and the machine's peak
    memory use above what it used before ``command`` started (bytes, MemAvailable sampled every 0.1 s)."""
    before = available_memory() or 0
    lowest = [before]
    finished = threading.Event()

    def sample() -> None:
        while not finished.wait(0.1):
            lowest[0] = min(lowest[0], available_memory() or before)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *command], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    finished.set()
    sampler.join()
    maxrss, _ = done.stdout.split()
    return seconds, int(maxrss), before - lowest[0]


def gradebook_scores(course: Course) -> dict:
    """(lab, student) -> autograded score, as the gradebook holds it."""
    from mlbook.nbgrader_env import gradebook

    with gradebook(course) as gb:
        return {(a.name, s.student.id): round(s.code_score, 3) for a in gb.assignments for s in a.submissions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, help="mlbook's sandboxes at once (default: mlbook's own default)")
    parser.add_argument("--per-kind", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="keep the three graded courses in this folder")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="mlbook-bench-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # nbgrader runs alembic by name

    plain = make_course(work / "plain", args.per_kind)
    mine, fixed = Course(work / "mlbook"), Course(work / "mlbook-fixed")
    shutil.copytree(plain.root, mine.root)
    shutil.copytree(plain.root, fixed.root)
    cores = len(usable_cpus())
    labs = plain.labs()
    notebooks = sum(len(plain.students(lab)) for lab in labs)
    print(f"class: {notebooks} notebooks over {len(labs)} labs ({args.per_kind} of each kind per lab); {cores} cores")
    for course in (plain, mine, fixed):  # register every lab first: not part of any timing
        for lab in labs:
            made = subprocess.run([BIN / "nbgrader", "generate_assignment", lab, "--force", "--log-level=ERROR"],
                                  cwd=course.root, env=env, capture_output=True, text=True)
            if made.returncode != 0:
                sys.exit(f"nbgrader generate_assignment {lab} failed:\n{made.stderr[-2000:]}")

    plain_s, plain_max, plain_machine = 0.0, 0, 0
    for lab in labs:
        seconds, rss, machine = timed([str(BIN / "nbgrader"), "autograde", lab, "--force", "--log-level=ERROR"],
                                      plain.root, env)
        plain_s += seconds
        plain_max, plain_machine = max(plain_max, rss), max(plain_machine, machine)
        print(f"  plain nbgrader autograde {lab}: {seconds:6.1f} s")
    def mlbook_autograde(course: Course, workers: int | None) -> tuple[float, int, int]:
        flags = ["--workers", str(workers)] if workers else []
        return timed([str(BIN / "mlbook"), "--course", str(course.root), "autograde", "--force", "--quiet", *flags],
                     course.root, env)

    mine_s, mine_max, mine_machine = mlbook_autograde(mine, args.workers)
    fixed_s, _, _ = mlbook_autograde(fixed, cores)

    how = f"{args.workers} workers" if args.workers else "default workers"
    print(f"\nwall time, whole class: plain nbgrader {plain_s:.1f} s, mlbook autograde (sandboxed, {how}) "
          f"{mine_s:.1f} s, mlbook autograde --workers {cores} (one per core, fixed) {fixed_s:.1f} s")
    print(f"ratio (plain / mlbook): {plain_s / mine_s:.2f}x throughput "
          f"(with --workers {cores}: {plain_s / fixed_s:.2f}x)")
    print(f"per notebook: plain {plain_s / notebooks:.2f} s, mlbook {mine_s / notebooks:.2f} s (wall / notebooks)")
    print(f"peak resident memory of one process: plain {plain_max / 1024:.0f} MiB, mlbook {mine_max / 1024:.0f} MiB")
    print(f"peak memory of the whole machine above its idle use: plain {plain_machine / 2**20:.0f} MiB, "
          f"mlbook {mine_machine / 2**20:.0f} MiB")

    status = json.loads(mine.status_file.read_text())
    parts: dict[str, list[float]] = {}
    for entry in status.values():
        for part, seconds in (entry.get("timings") or {}).items():
            parts.setdefault(part, []).append(seconds)
    print("\nwhere a notebook's time goes in mlbook's run (median seconds over the notebooks that ran):")
    for part, values in parts.items():
        print(f"  {part:18s} {statistics.median(values):6.2f}")

    a, b = gradebook_scores(plain), gradebook_scores(mine)
    same = gradebook_scores(fixed) == b
    print(f"\nmlbook's two runs (default and --workers {cores}) gave {'the same' if same else 'DIFFERENT'} grades")
    differ = {k: (a.get(k), b.get(k)) for k in set(a) | set(b)
              if a.get(k) != b.get(k) and not k[1].startswith("broken")}  # a broken file: an error in mlbook
    print(f"\ngrades that differ between plain nbgrader and mlbook (broken submissions aside): {len(differ)}")
    for key, pair in sorted(differ.items()):
        print(f"  {key}: plain {pair[0]}, mlbook {pair[1]}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
