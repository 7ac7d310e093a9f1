"""Time `mlbook similarity` for a class of 200 on one lab (issue 41; target < 30 s).

Run: .venv/bin/python benchmarks/similarity_200.py [lab]              (comparison only)
     .venv/bin/python benchmarks/similarity_200.py --end-to-end [lab] (the command, on disk)

The class cycles the test class's students (tests/test_similarity.py: catalogue alternatives,
own answers, the reference and four planted copies). Comparison only: the cycled students'
cells as they are, under 200 submission ids. End to end: a scratch course whose
``submitted/s000..s199/<lab>/<lab>.ipynb`` are the release notebook filled with those answers, each
made distinct (a comment naming the student in every code cell, a sentence in every written
answer), and ``mlbook similarity <lab>`` run as a subprocess in it (imports, intake, comparison,
HTML, CSV); then the same steps in-process, timed one by one. Prints the seconds."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from test_similarity import build_class, notebook  # noqa: E402

from mlbook import similarity  # noqa: E402

N = 200


def cycled(names: list[str]) -> dict[str, str]:
    """Submission id -> the test-class student whose answers it holds."""
    return {f"s{i:03d}": names[i % len(names)] for i in range(N)}


def comparison_only(lab: str) -> None:
    tc = build_class(lab)
    subs = {sid: tc.subs[name] for sid, name in cycled(sorted(tc.subs)).items()}
    start = time.perf_counter()
    pairs = similarity.compare_class(subs, tc.boilerplate)
    print(f"{lab}: {N} students, {len(pairs)} pairs compared in {time.perf_counter() - start:.1f} s")


def distinct(cells: dict[str, str], code_cells: set[str], sid: str) -> dict[str, str]:
    """The answers with a mark of the student's own in each cell (the files all differ)."""
    return {g: (f"# {sid}'s answer\n{text}" if g in code_cells else f"{text}\n\nWritten by {sid}.")
            for g, text in cells.items()}


def build_course(lab: str, root: Path) -> None:
    from harness import scratch_course

    course = scratch_course(lab, root)
    release = json.loads(course.release(lab).read_text())
    code_cells = {c["metadata"]["nbgrader"]["grade_id"] for c in release["cells"]
                  if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}
    tc = build_class(lab)
    for sid, name in cycled(sorted(tc.answers)).items():
        cells, reorder = tc.answers[name]
        cells = distinct(cells, code_cells, sid)
        nb = notebook(release, cells, reorder)
        folder = course.submitted(sid, lab)
        folder.mkdir(parents=True)
        (folder / f"{lab}.ipynb").write_text(json.dumps(nb, indent=1))


def end_to_end(lab: str) -> None:
    from mlbook.course import Course

    with tempfile.TemporaryDirectory(prefix="similarity-200-") as tmp:
        root = Path(tmp) / "course"
        build_course(lab, root)
        start = time.perf_counter()
        out = subprocess.run([str(REPO / ".venv/bin/mlbook"), "similarity", lab], cwd=root, check=True,
                             capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}).stdout
        command = time.perf_counter() - start
        flagged = sum(line.startswith("FLAG ") for line in out.splitlines())
        course = Course(root)
        html_path, csv_path = course.exports_dir / f"similarity-{lab}.html", course.exports_dir / f"similarity-{lab}.csv"
        sizes = f"HTML {html_path.stat().st_size / 1e6:.1f} MB, CSV {csv_path.stat().st_size / 1e6:.1f} MB"
        steps, t = {}, time.perf_counter()
        subs, refused = similarity.read_class(course, lab)
        steps["intake"], t = time.perf_counter() - t, time.perf_counter()
        pairs = similarity.compare_class(subs, similarity.boilerplate(course, lab))
        steps["comparison"], t = time.perf_counter() - t, time.perf_counter()
        similarity.write_html(html_path, lab, pairs, subs, similarity.DEFAULT_THRESHOLD, refused)
        steps["HTML"], t = time.perf_counter() - t, time.perf_counter()
        similarity.write_csv(csv_path, pairs)
        steps["CSV"] = time.perf_counter() - t
    assert len(subs) == N and not refused, refused
    print(f"{lab}: `mlbook similarity` on {N} submitted notebooks ({len(pairs)} pairs, {flagged} flagged; "
          f"{sizes}) in {command:.1f} s end to end; in-process: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab", nargs="?", default="lab03_masks")
    parser.add_argument("--end-to-end", action="store_true")
    args = parser.parse_args()
    (end_to_end if args.end_to_end else comparison_only)(args.lab)
