"""Time `mlbook similarity`'s comparison for a class of 200 on one lab (issue 41; target < 30 s).

Run: .venv/bin/python benchmarks/similarity_200.py [lab]. The class cycles the test class's
students (tests/test_similarity.py), each a distinct submission id; prints the seconds."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_similarity import build_class  # noqa: E402

from mlbook import similarity  # noqa: E402

lab = sys.argv[1] if len(sys.argv) > 1 else "lab03_masks"
tc = build_class(lab)
base, bp = tc.subs, tc.boilerplate
names = sorted(base)
subs = {f"s{i:03d}": base[names[i % len(names)]] for i in range(200)}
start = time.perf_counter()
pairs = similarity.compare_class(subs, bp)
print(f"{lab}: 200 students, {len(pairs)} pairs compared in {time.perf_counter() - start:.1f} s")
