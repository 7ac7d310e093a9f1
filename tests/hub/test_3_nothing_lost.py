"""Nothing is lost: a submission made while the TA collects, and the hub killed and restarted."""

from __future__ import annotations

import os
import subprocess

from conftest import LAB, MLBOOK, as_student, mlbook
from hubpage import log_in, open_assignments, wait_listed
from mlbook.hub.site import start_hub


def newest_attempt(exchange, person) -> str:
    attempts = sorted((exchange.course / "inbound").glob(f"{person.name}+{LAB}+*"))
    return (attempts[-1] / "timestamp.txt").read_text()


def test_submit_during_collect(people, hub, course, exchange):
    """A submits from a shell while collect runs: collected now, or by the next collect."""
    a = people.students["A"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    collecting = subprocess.Popen([*MLBOOK, "hub", "collect", LAB], cwd=course.root, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=lambda: os.umask(0o007))
    submitted = as_student(hub["hub"].site, a, "submit", LAB, "--course", exchange.course_id)
    out, _ = collecting.communicate(timeout=600)
    assert submitted.returncode == 0, submitted.stderr
    assert collecting.returncode == 0, out
    mlbook(course, "hub", "collect", LAB)
    assert (course.submitted(a.name, LAB) / "timestamp.txt").read_text() == newest_attempt(exchange, a)
    again = mlbook(course, "hub", "collect", LAB)
    assert "collected 0 new attempt(s)" in again, again


def test_hub_killed_and_restarted(chromium, people, hub, site, course, exchange):
    """SIGKILL of the hub mid-course; a restart finds every attempt and A's list as it was."""
    inbound = sorted(p.name for p in (exchange.course / "inbound").iterdir())
    hub["hub"].stop(kill=True)
    hub["hub"] = start_hub(site)
    assert sorted(p.name for p in (exchange.course / "inbound").iterdir()) == inbound
    a = people.students["A"]
    page = log_in(chromium, site.url, a, hub_log=lambda: hub["hub"].log_tail(60))
    try:
        open_assignments(page)
        mine = [n for n in inbound if n.startswith(f"{a.name}+")]
        wait_listed(page, "submitted", LAB, site.url, a, exchange.root)
    finally:
        page.context.close()
    out = mlbook(course, "hub", "collect", LAB)
    assert "collected 0 new attempt(s)" in out, out
    assert (course.submitted(a.name, LAB) / "timestamp.txt").read_text() == newest_attempt(exchange, a), mine
