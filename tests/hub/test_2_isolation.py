"""Isolation between people on the hub, tested as the students' own accounts (after the loop).

Student C is the one who tries: reading A's attempt in the exchange, the course's ``source/``,
the gradebook, A's home; releasing or collecting; handing in a link, a crafted name or an
oversized notebook (refused at submit), planting such folders directly in ``inbound`` and a
folder claiming to be A's (refused at collect, without hiding A's attempt).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import LAB, as_student, mlbook


@pytest.fixture(scope="module")
def c(people, hub, course):
    mlbook(course, "hub", "release", LAB)  # already released by the loop; releasing again is harmless
    return people.students["C"]


def reads(person, path: Path) -> bool:
    """Whether ``person`` can list (a folder) or read (a file) ``path``."""
    command = ["ls", "-a", str(path)] if path.is_dir() else ["head", "-c", "1", str(path)]
    return person.run(*command).returncode == 0


def test_student_reads_no_one_elses_work(c, people, course, exchange):
    a = people.students["A"]
    inbound = exchange.course / "inbound"
    assert not reads(c, inbound), "C listed the exchange's inbound folder"
    attempts = sorted(inbound.glob(f"{a.name}+{LAB}+*"))
    assert attempts, "the loop left no attempt of A"
    for attempt in attempts:  # even knowing the folder's name
        assert not reads(c, attempt), f"C listed A's attempt {attempt.name}"
        assert not reads(c, attempt / f"{LAB}.ipynb"), "C read A's submitted notebook"
        assert c.run("touch", str(attempt / "planted.txt")).returncode != 0, "C wrote into A's attempt"
    assert not reads(c, course.root / "source"), "C listed the course's source/"
    assert not reads(c, course.root / "gradebook.db"), "C read the gradebook"
    assert not reads(c, course.root / "submitted"), "C listed submitted/"
    assert not reads(c, a.home), "C listed A's home"
    assert not reads(c, exchange.course / "feedback"), "C listed the released feedback"
    assert c.run("mv", str(exchange.course), str(exchange.root / "moved")).returncode != 0, \
        "C renamed the course's exchange folder"


PROBE = """
import glob, importlib, site, sys
import mlbook_helpers.plotting, mlbook.hub.exchange  # what a student's notebooks and server use
for name in ("mlbook.labs", "mlbook.judge", "mlbook.authoring.catalogue"):
    try:
        importlib.import_module(name)
        print("IMPORTED", name)
    except ImportError:
        pass
for finder in glob.glob(sys.argv[1] + "/__editable__*finder.py"):  # the grader's editable install, forced
    sys.path.insert(0, sys.argv[1])
    module = importlib.import_module(finder.rsplit("/", 1)[1][:-3])
    module.install()
    for name in list(sys.modules):
        if name == "mlbook" or name.startswith("mlbook."):
            del sys.modules[name]
    try:
        importlib.import_module("mlbook.labs.lab01_hand_attention.catalogue")
        print("IMPORTED through", finder)
    except (ImportError, OSError):
        pass
print("ok")
"""


def test_student_python_holds_no_grader(c, site):
    """A student's interpreter (their server's and their kernels') imports the lab helpers and the
    exchange's submit, and nothing else of the grader, even when the student installs the
    grader's editable finder by hand; every file of the checkout holding hidden checks or
    solutions is unreadable to them."""
    from mlbook.hub.site import SHARED_ENTRIES, _site_packages
    from mlbook.sandbox.bwrap import package_dir

    run = c.run(str(site.python("student")), "-c", PROBE, str(_site_packages()))
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
    assert "IMPORTED" not in run.stdout, run.stdout
    checkout = package_dir("mlbook").parent
    secret = [checkout / "mlbook" / "labs" / LAB / "catalogue.py", checkout / "source" / LAB / f"{LAB}.ipynb",
              *sorted((checkout / "mlbook" / "labs" / LAB).glob("hidden*"))]
    for path in secret:
        assert path.exists(), path
        assert not reads(c, path), f"C read the grader's {path.relative_to(checkout)}"
    shared = [checkout / name for name in SHARED_ENTRIES if (checkout / name).exists()]
    assert all(reads(c, path) for path in shared), "the shield hid what the hub's accounts and kernels run"


def test_student_cannot_release_or_collect(c, site, exchange):
    work = c.home / "release-try"
    (work / "release" / "evil").mkdir(parents=True, exist_ok=True)
    (work / "release" / "evil" / "evil.ipynb").write_text("{}")
    os.system(f"chown -R {c.name} {work}")
    released = as_student(site, c, "release_assignment", "evil", "--course", exchange.course_id, cwd=str(work))
    assert released.returncode != 0 and not (exchange.course / "outbound" / "evil").exists(), released.stderr
    collected = as_student(site, c, "collect", LAB, "--course", exchange.course_id, cwd=str(work))
    assert collected.returncode != 0, collected.stdout + collected.stderr
    assert not (work / "submitted").exists() or not any((work / "submitted").iterdir())


def _prepare_fetched(c, site, exchange) -> Path:
    folder = c.home / LAB
    if not folder.is_dir():
        fetched = as_student(site, c, "fetch_assignment", LAB, "--course", exchange.course_id)
        assert fetched.returncode == 0, fetched.stderr
    return folder


@pytest.mark.parametrize("kind", ["link-to-course", "link-to-home", "dangling-link", "crafted-name", "oversized"])
def test_submit_refuses(kind, c, site, exchange, course, people):
    folder = _prepare_fetched(c, site, exchange)
    planted = {
        "link-to-course": lambda: os.symlink(course.root / "source" / LAB / f"{LAB}.ipynb", folder / "answers.ipynb"),
        "link-to-home": lambda: os.symlink(people.students["A"].home / LAB / f"{LAB}.ipynb", folder / "copy.ipynb"),
        "dangling-link": lambda: os.symlink("/nonexistent/file", folder / "gone.txt"),
        "crafted-name": lambda: (folder / "$(touch pwned);x.ipynb").write_text("{}"),
        "oversized": lambda: os.truncate(_touch(folder / "big.ipynb"), 65 * 2**20),
    }
    before = sorted((exchange.course / "inbound").glob(f"{c.name}+*"))
    planted[kind]()
    os.system(f"chown -h -R {c.name} {folder}")
    try:
        run = as_student(site, c, "submit", LAB, "--course", exchange.course_id)
        said = run.stdout + run.stderr
        assert run.returncode != 0 and "Not submitted:" in said, said[-2000:]
        assert {"link-to-course": "is a link", "link-to-home": "is a link", "dangling-link": "is a link",
                "crafted-name": "is not allowed", "oversized": "over the 64 MiB cap"}[kind] in said, said[-2000:]
        assert sorted((exchange.course / "inbound").glob(f"{c.name}+*")) == before, "a refused attempt reached inbound"
    finally:
        for entry in list(folder.iterdir()):
            if entry.name not in (f"{LAB}.ipynb", ".mlbook-build.json"):
                entry.unlink() if not entry.is_dir() or entry.is_symlink() else None


def _touch(path: Path) -> Path:
    path.write_text("")
    return path


def test_collect_refuses_planted_folders_and_keeps_a(c, people, course, exchange):
    """C plants, straight into inbound: a folder named as A's newest attempt, and an attempt of
    C's own holding a link to the course's source. Collect refuses both, says why, and A's
    real attempt is still the one in submitted/."""
    a = people.students["A"]
    inbound = exchange.course / "inbound"
    stamp = "2099-01-01 00:00:00.000000 UTC"
    forged, linked = inbound / f"{a.name}+{LAB}+{stamp}+forged", inbound / f"{c.name}+{LAB}+{stamp}+linked"
    script = (f"mkdir '{forged}' && echo '{{}}' > '{forged}/{LAB}.ipynb' && echo '{stamp}' > '{forged}/timestamp.txt' && "
              f"mkdir '{linked}' && ln -s '{course.root}/source/{LAB}/{LAB}.ipynb' '{linked}/{LAB}.ipynb' && "
              f"echo '{stamp}' > '{linked}/timestamp.txt'")
    planted = c.run("sh", "-c", script)
    assert planted.returncode == 0, planted.stderr  # inbound is writable by students: that is how they submit
    before = (course.submitted(a.name, LAB) / "timestamp.txt").read_text()
    out = mlbook(course, "hub", "collect", LAB)
    assert f"REFUSED {a.name}" in out and "belongs to" in out and c.name in out, out
    assert f"REFUSED {c.name}" in out and "is a link" in out, out
    assert (course.submitted(a.name, LAB) / "timestamp.txt").read_text() == before, "the forged folder replaced A's"
    assert not course.submitted(c.name, LAB).exists() or not (course.submitted(c.name, LAB) / f"{LAB}.ipynb").is_symlink()
    # tidy: the planted folders go (root), so later collects are not noisy
    for path in (forged, linked):
        os.system(f"rm -rf '{path}'")
