"""Warm kernels (forks of ``mlbook_kernel.forkserver`` entering each sandbox) keep every promise a
fresh interpreter in the sandbox keeps: same user, capabilities, environment and view; nothing
one submission leaves behind reaches the next; the same verdicts and outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess

import nbformat
import pytest

from harness import REPO
from mlbook.errors import MlbookError
from mlbook.labs import load_catalogue, settings
from mlbook.authoring.notebooks import fill_answers, read_nb, reference_answers
from mlbook.sandbox import bwrap, forkserver, profiles
from mlbook.sandbox.limits import Limits
from mlbook.judge.plan import lab_plan
from mlbook.sandbox.notebook import execute_sandboxed

LAB = "lab02_scaling"


@pytest.fixture(autouse=True)
def _as_root():
    """The fork server needs root (without it every notebook starts cold: nothing to compare).
    CI runs as root, so there a missing root is a failure, never a skip."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("these tests must run as root in CI: the fork server was not tested")
        pytest.skip("the fork server needs root (without it, each notebook starts cold)")


PROBE = """\
import json, os, sys
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
print("PROBE" + json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "cap_eff": status["CapEff"], "cap_bnd": status["CapBnd"], "no_new_privs": status["NoNewPrivs"],
    "seccomp": status["Seccomp"], "sig_ign": status["SigIgn"], "sig_blk": status["SigBlk"],
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "grader_modules": sorted(m for m in sys.modules if m == "mlbook" or m.startswith("mlbook.")),
    "env": dict(os.environ), "tmp": sorted(os.listdir("/tmp")), "home": sorted(os.listdir(os.path.expanduser("~"))),
    "hostname": os.uname().nodename, "cwd": os.getcwd(), "path0": sys.path[0],
    "random": __import__("numpy").random.rand(), "top": sorted(os.listdir("/")),
}))
"""

LEAVE_TRACES = """\
import os, time
for folder in ("/tmp", os.path.expanduser("~")):
    with open(os.path.join(folder, "left-behind"), "w") as f:
        f.write("from an earlier student")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.5)  # a daemon that would outlive the notebook if the sandbox let it
    os._exit(0)
time.sleep(0.5)
"""


def _kinds(outputs: list) -> list[tuple]:
    """What a cell showed, by kind: a stream printed in several bursts (timing) counts once."""
    kinds: list[tuple] = []
    for out in outputs:
        kind = (out.output_type, out.get("name") or sorted(out.get("data", {})))
        if not (kinds and kind == kinds[-1] and out.output_type == "stream"):
            kinds.append(kind)
    return kinds


def _notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def _probe(warm: bool, lab: str = LAB) -> dict:
    result = execute_sandboxed(_notebook(PROBE), lab_plan(lab, REPO.source(lab)), Limits(), warm=warm)
    assert result.error is None, result.log
    text = "".join(o.get("text", "") for o in result.notebook.cells[0].outputs)
    assert "PROBE" in text, result.notebook.cells[0].outputs
    return json.loads(text.split("PROBE", 1)[1])


def test_a_warm_kernel_has_the_user_rights_and_view_of_a_fresh_one():
    warm, cold = _probe(True), _probe(False)
    for probe in (warm, cold):  # each its own fresh sandbox user (test_each_submission_runs_under_...)
        assert probe["uid"] == probe["gid"] and bwrap.UID_RANGE[0] <= probe["uid"] < bwrap.UID_RANGE[1]
    assert warm["groups"] == []
    assert warm["cap_eff"] == warm["cap_bnd"] == "0000000000000000" and warm["no_new_privs"] == "1"
    assert warm["seccomp"] == "2", "the warm kernel runs without the sandbox's syscall filter"
    assert warm["grader_modules"] == [], "the grader's package is in the warm kernel's memory"
    for probe in (warm, cold):  # the kernel's connection file has a random name
        probe["tmp"] = [re.sub(r"^tmp\w+\.json$", "<connection file>", name) for name in probe["tmp"]]
    for key in ("groups", "cap_eff", "cap_bnd", "no_new_privs", "seccomp", "sig_ign", "sig_blk", "tmp", "home", "hostname", "cwd", "path0",
                "top", "grader_modules"):
        assert warm[key] == cold[key], (key, warm[key], cold[key])
    ignored = {"JPY_PARENT_PID", "JPY_SESSION_NAME", "PYDEVD_USE_FRAME_EVAL"}  # set per launch by jupyter_client
    assert {k: v for k, v in warm["env"].items() if k not in ignored} == \
        {k: v for k, v in cold["env"].items() if k not in ignored}
    assert forkserver.shared() is not None, "no fork server: the warm kernel above was a cold one"
    assert max(warm["pids"]) < 10, f"the warm kernel sees processes outside its sandbox: {warm['pids']}"


def test_only_a_lab_that_measures_memory_runs_with_the_allocator_set_for_it():
    # lab 6 measures the kernel's memory from outside; lab 5's training loops would pay ~1.5x for the setting
    for lab, measures in (("lab06_chunked_attention", True), ("lab05_entropy_collapse", False)):
        for warm in (True, False):
            env = _probe(warm, lab)["env"]
            assert ("MALLOC_MMAP_THRESHOLD_" in env) == ("MALLOC_TRIM_THRESHOLD_" in env) == measures, (lab, warm, env)
    memory, standard = profiles.profile("memory"), profiles.profile("standard")
    assert forkserver.shared(memory) is not forkserver.shared(standard), "one warm server for both allocator settings"


def test_nothing_a_warm_submission_leaves_behind_reaches_the_next():
    before = _probe(True)
    traces = execute_sandboxed(_notebook(LEAVE_TRACES), lab_plan(LAB, REPO.source(LAB)), Limits())
    assert traces.error is None, traces.log
    after = _probe(True)
    assert "left-behind" not in after["tmp"] and "left-behind" not in after["home"]
    assert after["pids"] == before["pids"], "a process from the earlier submission is still alive beside this one"
    assert after["random"] != before["random"], "two warm kernels drew the same numpy random numbers"


def test_each_submission_runs_under_an_identity_no_earlier_submission_had(monkeypatch):
    uids = [_probe(warm)["uid"] for warm in (True, False, True, False)]
    assert len(set(uids)) == len(uids), f"two submissions ran under one user id: {uids}"
    low, high = bwrap.UID_RANGE
    assert all(low <= uid < high for uid in uids)
    # The draw skips an id some process on this machine runs under, and one drawn before.
    busy = subprocess.Popen(["sleep", "60"], user=low + 12345, group=low + 12345)
    try:
        draws = iter([12345, uids[0] - low, 777])
        monkeypatch.setattr(bwrap.secrets, "randbelow", lambda n: next(draws))
        assert bwrap.fresh_uid() == low + 777
    finally:
        busy.kill()
        busy.wait()


def test_warm_kernels_grade_exactly_like_fresh_ones():
    plan = lab_plan(LAB, REPO.source(LAB))
    source = read_nb(REPO.source(LAB))
    mutant = load_catalogue(LAB).mutants[0]
    for answers in (reference_answers(source), {**reference_answers(source), **mutant.cells}):
        nb = fill_answers(read_nb(REPO.release(LAB)), answers)
        runs = {}
        for warm in (True, False):
            result = execute_sandboxed(nb, plan, Limits(), warm=warm)
            assert result.error is None, result.log
            runs[warm] = ({gid: v.passed for gid, v in result.verdicts.items()},
                          [_kinds(c.get("outputs", [])) for c in result.notebook.cells if c.cell_type == "code"])
        assert runs[True][0] == runs[False][0], "warm and fresh kernels disagree on a verdict"
        assert runs[True][1] == runs[False][1], "warm and fresh kernels produced different kinds of output"


def test_a_lab_naming_an_unknown_sandbox_profile_gets_an_error_naming_the_profiles():
    with pytest.raises(MlbookError) as raised:
        profiles.profile("huge-pages")
    assert "'huge-pages'" in str(raised.value) and "memory" in str(raised.value) and "standard" in str(raised.value)
    assert {lab: settings(lab).sandbox_profile for lab in ("lab05_entropy_collapse", "lab06_chunked_attention")} == \
        {"lab05_entropy_collapse": "standard", "lab06_chunked_attention": "memory"}
