"""Fixtures of the hub suite: system accounts, a course, nbgrader's exchange, a running JupyterHub.

Conventions:
- The suite runs as root (as in CI): it creates the accounts ``mlbk<hex>-*`` (an instructor,
  a TA and students A, B, C, with random passwords) and their staff group, and removes them
  (homes included) at the end.
- Everything lives under one folder ``/tmp/mlbook-hub-<hex>`` (0755: the accounts read the
  profiles and the course's release; the course itself is root's and the staff group's).
- The hub listens on 127.0.0.1 only. The grading account of the tests is root: it runs
  ``mlbook hub collect``, ``mlbook autograde`` and ``mlbook hub feedback``.
- ``make test`` runs this folder on its own, serially, after the xdist suite
  (``-p no:xdist tests/hub``): a browser loop and a hub beside sandboxed lab grading on two
  cores only measure the load.
- Every wait polls a condition with a generous timeout; screenshots of each step go to the
  test's folder under ``browser-screenshots``.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from browser_suite import REPO  # noqa: E402
from labpage import Shots  # noqa: E402
from mlbook.course import Course  # noqa: E402
from mlbook.hub.exchange import Exchange, prepare_exchange  # noqa: E402
from mlbook.hub.site import HubSite, RunningHub, shield_checkout, start_hub, unshield  # noqa: E402

LAB = "lab01_hand_attention"
MLBOOK = [sys.executable, "-m", "mlbook.cli"]
GRADE_TIMEOUT_S = 900
RUNUSER = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"


@dataclass
class Person:
    name: str
    password: str
    role: str  # "instructor" | "ta" | "student"

    @property
    def home(self) -> Path:
        return Path(pwd.getpwnam(self.name).pw_dir)

    def run(self, *command: str, timeout: float = 120, cwd: str | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """Run ``command`` as this account (runuser), with its own home and no inherited secrets."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "USER": self.name,
               "LOGNAME": self.name, "LANG": "C.UTF-8", **(env or {})}
        return subprocess.run([RUNUSER, "-u", self.name, "--", *command], env=env, cwd=cwd or str(self.home),
                              capture_output=True, text=True, timeout=timeout)


@dataclass
class People:
    group: str
    instructor: Person
    ta: Person
    students: dict[str, Person]  # "A", "B", "C"

    def all(self) -> list[Person]:
        return [self.instructor, self.ta, *self.students.values()]


def _sh(*command: str) -> None:
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({run.returncode}): {run.stderr.strip()}")


@pytest.fixture(scope="session")
def people():
    """The course's system accounts, created now and removed at the end."""
    if os.geteuid() != 0:
        pytest.fail("the hub suite creates system accounts: run it as root (as CI does)", pytrace=False)
    prefix = f"mlbk{secrets.token_hex(3)}"
    group = f"{prefix}-staff"
    _sh("groupadd", group)
    made: list[str] = []
    try:
        def make(suffix: str, role: str) -> Person:
            name = f"{prefix}-{suffix}"
            extra = ["-G", group] if role != "student" else []
            _sh("useradd", "-m", "-s", "/bin/bash", *extra, name)
            made.append(name)
            person = Person(name, secrets.token_urlsafe(12), role)
            subprocess.run(["chpasswd"], input=f"{name}:{person.password}\n", text=True, check=True)
            os.chmod(person.home, 0o700)
            return person

        crew = People(group, make("inst", "instructor"), make("ta", "ta"),
                      {k: make(k.lower(), "student") for k in "ABC"})
        yield crew
    finally:
        for name in made:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture(scope="session")
def base():
    folder = Path(tempfile.mkdtemp(prefix="mlbook-hub-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def share_with_staff(root: Path, group: str) -> None:
    """The course folder: root's, read and written by the staff group (setgid folders), nobody else's."""
    _sh("chgrp", "-R", group, str(root))
    _sh("chmod", "-R", "u+rwX,g+rwX,o-rwx", str(root))
    for path in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        os.chmod(path, 0o2770)


@pytest.fixture(scope="session")
def exchange(base, people) -> Exchange:
    ex = Exchange(base / "exchange", "attention-labs", people.group)
    prepare_exchange(ex)  # before any server starts: a student's list finds the course from the start
    return ex


@pytest.fixture(scope="session")
def course(base, people, exchange) -> Course:
    """A copy of the course (config, lab 1's source and release) owned by root and the staff group."""
    scratch = REPO.scratch_copy(base / "course", [LAB])
    shutil.copytree(REPO.release(LAB).parent, scratch.release(LAB).parent, dirs_exist_ok=True)
    with open(scratch.config, "a") as handle:
        handle.write("\n# The course's hub (tests/hub)\n" + exchange.config_lines())
    share_with_staff(scratch.root, people.group)
    return scratch


@pytest.fixture(scope="session")
def site(base, course, exchange, people) -> HubSite:
    """The hub's site, on this checkout shielded from the students (as a department's admin
    would keep the grader's files: ``shield_checkout``), put back as it was at the end."""
    shielded = shield_checkout(people.group)
    try:
        yield HubSite(base / "hub", course.root, exchange, [people.instructor.name, people.ta.name],
                      [p.name for p in people.students.values()])
    finally:
        unshield(shielded)


@pytest.fixture(scope="session")
def hub(site):
    """The running hub (restartable: tests that kill it start it again through ``restart_hub``)."""
    holder = {"hub": start_hub(site)}
    yield holder
    holder["hub"].stop()


def as_student(site: HubSite, person: Person, *nbgrader_args: str, cwd: str | None = None):
    """``nbgrader ARGS`` as ``person`` from a shell, with the hub's student profile (as their server has)."""
    python = site.python("student")
    env = {"JUPYTER_CONFIG_PATH": str(site.profile("student") / "config"), "PATH": f"{python.parent}:/usr/bin:/bin"}
    return person.run(str(python), "-m", "nbgrader", *nbgrader_args, env=env, cwd=cwd, timeout=300)


def mlbook(course: Course, *args: str, timeout: float = GRADE_TIMEOUT_S) -> str:
    """Run ``mlbook ARGS`` in the course as the grading account (root, staff-group umask); returns stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    run = subprocess.run([*MLBOOK, *args], cwd=course.root, env=env, capture_output=True, text=True,
                         timeout=timeout, preexec_fn=lambda: os.umask(0o007))
    assert run.returncode == 0, f"`mlbook {' '.join(args)}` failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    return run.stdout


def _test_name(request) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")


@pytest.fixture(scope="session")
def hub_screenshots(tmp_path_factory) -> Path:
    configured = os.environ.get("MLBOOK_SCREENSHOTS")
    folder = Path(configured).resolve() if configured else tmp_path_factory.getbasetemp() / "browser-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def shots(request, hub_screenshots) -> Shots:
    return Shots(hub_screenshots / _test_name(request))


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("hub screenshots: see browser-screenshots/ in the run's pytest temporary folder "
                                "(or $MLBOOK_SCREENSHOTS)")
