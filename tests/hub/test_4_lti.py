"""LTI 1.3 launches into the course's hub, in Chromium, from the suite's own platform.

The platform (``mlbook.hub.lti_platform``) runs on 127.0.0.1 beside a second hub of the course
(its own folder and ports, the same course folder and exchange) whose authenticator is
``mlbook.hub.lti.CourseLTIAuthenticator``, serving two courses: A (the suite's course,
context ``attention-labs``) and B (context ``B``: its own course folder, course id, staff group
and folder of the exchange). People: student A (in A and B), TA T of course A, TA U of course B;
hostile launches are made for a person M, whose account must never exist, and a replay for R.
Context "C" is a course of the platform that this hub does not serve.

Every hostile launch is a real launch in Chromium: the platform's auth endpoint posts the
hostile token (``lti_platform.ATTACKS``) through the browser to the hub's redirect URI.
"""

from __future__ import annotations

import datetime as dt
import grp
import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from browser_suite import REPO, VIEWPORT
from conftest import LAB, MLBOOK, _sh, mlbook, share_with_staff
from hubpage import open_assignments, xsrf
from mlbook.authoring.notebooks import read_nb, reference_answers
from mlbook.hub.exchange import Exchange, prepare_exchange
from mlbook.hub.lti import account_name
from mlbook.hub.lti_platform import ATTACKS, Context, Person, Platform, Tool, new_key, public_jwk
from mlbook.hub.site import HubCourse, HubSite, LtiLaunch, free_port, start_hub
from mlbook.labs import load_catalogue

SPAWN_TIMEOUT_MS = 300_000
CONTEXT = "attention-labs"  # the LMS's id of course A (the hub's course)


@pytest.fixture(scope="module")
def platform():
    p = Platform()
    p.contexts = {CONTEXT: Context(CONTEXT, "ATT101", "Attention labs"),
                  "B": Context("B", "ATT202", "Attention labs, second section"),
                  "C": Context("C", "OTH303", "A course this hub does not serve")}
    p.people = {"A": Person("A", "Ada", "Lovelace", {CONTEXT: "student", "B": "student"}),
                "T": Person("T", "Tom", "Assist", {CONTEXT: "ta"}),
                "U": Person("U", "Una", "Assist", {"B": "ta"}),
                "M": Person("M", "Mallory", "Forge", {CONTEXT: "student", "C": "student"}),
                "R": Person("R", "Rita", "Replay", {CONTEXT: "student"})}
    p.start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def course_b(base, people, exchange):
    """Course B: a copy of the course under its own id, staff group and folder of the exchange."""
    group = f"{people.group.split('-')[0]}-bstaff"
    _sh("groupadd", group)
    ex = Exchange(exchange.root, "second-labs", group)
    prepare_exchange(ex)
    scratch = REPO.scratch_copy(base / "course-b", [LAB])
    shutil.copytree(REPO.release(LAB).parent, scratch.release(LAB).parent, dirs_exist_ok=True)
    with open(scratch.config, "a") as handle:
        handle.write("\n# Course B of the LTI hub (tests/hub/test_4_lti.py)\n" + ex.config_lines())
    share_with_staff(scratch.root, group)
    yield HubCourse("B", scratch.root, ex), scratch
    subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture(scope="module")
def lti_site(base, course, exchange, people, platform, site, course_b):
    """A hub of courses A and B entered by LTI launch (``site`` first: the checkout is shielded)."""
    hub_site = HubSite(base / "lti-hub", course.root, exchange, [], [], port=free_port(),
                       more_courses=[course_b[0]])
    hub_site.lti = LtiLaunch(platform.issuer, "mlbook-hub", "deployment-1", platform.auth_url, platform.jwks_url,
                             account_prefix=f"{people.group.split('-')[0]}l", lms_name="the test platform")
    platform.tool = Tool(hub_site.lti.client_id, hub_site.lti.deployment_id, hub_site.lti.login_url(hub_site),
                         [hub_site.lti.redirect_uri(hub_site)], hub_site.url + "hub/", jwks={"keys": []})
    return hub_site


def account_of(lti_site, platform, key: str) -> str:
    return account_name(lti_site.lti.account_prefix, platform.issuer, platform.people[key].sub)


@pytest.fixture(scope="module")
def lti_hub(lti_site, platform):
    hub = start_hub(lti_site)
    yield hub
    hub.stop()
    for key in platform.people:
        subprocess.run(["userdel", "-r", "-f", account_of(lti_site, platform, key)], capture_output=True)


@pytest.fixture
def browser_context(chromium):
    context = chromium.new_context(viewport=VIEWPORT)
    context.set_default_timeout(60_000)
    yield context
    context.close()


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def hub_users(lti_site) -> set[str]:
    with sqlite3.connect(lti_site.folder / "jupyterhub.sqlite") as db:
        return {row[0] for row in db.execute("SELECT name FROM users")}


def enrolments(lti_site) -> list[tuple]:
    with sqlite3.connect(lti_site.folder / "lti.sqlite") as db:
        return db.execute("SELECT user, course, role FROM enrolments").fetchall()


def roster(course) -> dict[str, str]:
    with Gradebook(course.db_url) as gb:
        return {s.id: s.lms_user_id for s in gb.students}


def launch_lab(context, platform, key: str, lti_hub, where: str = CONTEXT):
    page = context.new_page()
    page.goto(platform.launch_url(key, where))
    try:
        page.wait_for_function("() => !!window.jupyterapp", timeout=SPAWN_TIMEOUT_MS, polling=250)
    except Exception:
        raise AssertionError(f"{key}'s launch did not open JupyterLab; the page {page.url} shows:\n"
                             f"{page.locator('body').inner_text()[:1500]}\nthe hub's log ends:\n"
                             f"{lti_hub.log_tail(40)}") from None
    page.evaluate("() => window.jupyterapp.restored")
    page.locator(".jp-DirListing-content").first.wait_for(timeout=60_000)  # the file browser is shown
    return page


def test_hub_without_launch_says_how_to_enter(lti_hub, lti_site, browser_context, shots):
    page = browser_context.new_page()
    page.goto(lti_site.url)
    page.locator("#lti-title").wait_for()
    assert page.locator("#lti-title").inner_text() == "Enter this hub from your course page"
    assert "the test platform" in page.locator("#lti-message").inner_text()
    shots.take(page, "no-launch")


def test_student_launch_makes_the_account_and_fills_the_roster(lti_hub, lti_site, platform, course,
                                                                browser_context, shots):
    name = account_of(lti_site, platform, "A")
    assert not exists(name)
    page = launch_lab(browser_context, platform, "A", lti_hub)
    assert f"/user/{name}/" in page.url
    shots.take(page, "student-launch")
    assert exists(name), "the launch made no system account"
    assert (name, "attention-labs", "student") in enrolments(lti_site)
    assert roster(course).get(name) == platform.people["A"].sub, "the student is not in the course's gradebook"
    home = page.request.get(f"{lti_site.url}user/{name}/api/contents").json()
    assert "source" not in {e["name"] for e in home["content"]}, "a student's server opened the course folder"


def test_second_launch_reuses_the_account(lti_hub, lti_site, platform, course, browser_context):
    name = account_of(lti_site, platform, "A")
    uid = pwd.getpwnam(name).pw_uid
    launch_lab(browser_context, platform, "A", lti_hub)
    assert pwd.getpwnam(name).pw_uid == uid
    assert [n for n in roster(course) if n == name] == [name]


def test_ta_launch_opens_a_staff_server_in_the_course(lti_hub, lti_site, platform, people, browser_context, shots):
    name = account_of(lti_site, platform, "T")
    page = launch_lab(browser_context, platform, "T", lti_hub)
    shots.take(page, "ta-launch")
    assert name in grp.getgrnam(people.group).gr_mem, "the TA did not join the course's staff group"
    assert (name, "attention-labs", "staff") in enrolments(lti_site)
    root = page.request.get(f"{lti_site.url}user/{name}/api/contents").json()
    assert "source" in {e["name"] for e in root["content"]}, "the TA's server did not open the course folder"


def refused_page(page) -> str:
    page.locator("#lti-title").wait_for(timeout=60_000)
    assert page.locator("#lti-title").inner_text() == "This launch was refused"
    return page.locator("#lti-message").inner_text()


def assert_nothing_created(lti_site, platform, course, key: str = "M") -> None:
    name = account_of(lti_site, platform, key)
    assert not exists(name), f"a refused launch made the account {name}"
    assert name not in hub_users(lti_site), "a refused launch made a hub user"
    assert name not in roster(course), "a refused launch added a student to the roster"
    assert not [e for e in enrolments(lti_site) if e[0] == name], "a refused launch recorded an enrolment"


# What each hostile launch must be refused with (a fragment of the page's reason).
EXPECTED = {"bad_signature": "Signature verification failed", "expired": "expired",
            "wrong_audience": "Audience", "escalated_role": "Signature verification failed",
            "unknown_deployment": "deployment"}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_hostile_launch_is_refused_and_creates_nothing(attack, lti_hub, lti_site, platform, course,
                                                       browser_context, shots):
    page = browser_context.new_page()
    page.goto(platform.launch_url("M", CONTEXT, attack=attack))
    why = refused_page(page)
    shots.take(page, f"refused-{attack}")
    print(f"{attack}: {why}")
    assert EXPECTED[attack].lower() in why.lower(), f"{attack} was refused for another reason: {why}"
    assert_nothing_created(lti_site, platform, course)


def test_launch_into_a_course_the_hub_does_not_serve_is_refused(lti_hub, lti_site, platform, course, browser_context):
    page = browser_context.new_page()
    page.goto(platform.launch_url("M", "C"))
    why = refused_page(page)
    print(f"unserved context: {why}")
    assert "serves no course" in why
    assert_nothing_created(lti_site, platform, course)


def test_replayed_launch_is_refused(lti_hub, lti_site, platform, course, browser_context):
    """R's honest launch is captured whole (form and cookies) on its way to the hub and let through;
    then replayed: in the same browser (the library's nonce cookie is spent) and from a copy of the
    request with its cookies (the hub's own record of spent nonces)."""
    captured = {}

    def capture(route, request):
        captured.setdefault("body", request.post_data)
        captured.setdefault("cookie", request.all_headers().get("cookie", ""))
        route.continue_()

    browser_context.route("**/hub/lti13/oauth_callback", capture)
    page = browser_context.new_page()
    page.goto(platform.launch_url("R", CONTEXT))
    page.wait_for_url(f"**/user/{account_of(lti_site, platform, 'R')}/**", timeout=SPAWN_TIMEOUT_MS)
    browser_context.unroute("**/hub/lti13/oauth_callback")
    form = platform.posted[-1]
    page.evaluate("""f => { const d = document.createElement('form'); d.method = 'post';
        d.action = f.action; for (const k of ['id_token', 'state']) { const i = document.createElement('input');
        i.type = 'hidden'; i.name = k; i.value = f[k]; d.appendChild(i); } document.body.appendChild(d); d.submit(); }""",
                  form)
    in_browser = refused_page(page)
    print(f"replay in the same browser: {in_browser}")
    assert "nonce" in in_browser.lower() or "state" in in_browser.lower()
    request = urllib.request.Request(form["action"], data=captured["body"].encode(), method="POST",
                                     headers={"Cookie": captured["cookie"],
                                              "Content-Type": "application/x-www-form-urlencoded"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    body = refused.value.read().decode(errors="replace")
    print(f"replay with the captured cookies: HTTP {refused.value.code}")
    assert refused.value.code == 400 and "already used" in body, body[:2000]


def test_student_of_two_courses_sees_both(lti_hub, lti_site, platform, course, course_b, browser_context, shots):
    """A's launch from course B enrols them there too (B's roster, B's group); their Assignments tab
    lists both courses (nbgrader's JupyterHubAuthPlugin reads the groups the launches gave)."""
    name = account_of(lti_site, platform, "A")
    for scratch in (course, course_b[1]):  # the Assignments tab lists a course once it has released a lab
        mlbook(scratch, "hub", "release", LAB)
    page = launch_lab(browser_context, platform, "A", lti_hub, where="B")
    assert roster(course_b[1]).get(name) == platform.people["A"].sub, "B's roster did not fill from the launch"
    assert roster(course).get(name) == platform.people["A"].sub
    assert {"attention-labs", "second-labs"} <= set(courses_listed(page, lti_site, name)), \
        f"A's Assignments tab lists {courses_listed(page, lti_site, name)}; the hub's log ends:\n{lti_hub.log_tail(30)}"
    open_assignments(page)
    page.wait_for_function("() => document.querySelectorAll('#course_list > li').length >= 2", timeout=120_000)
    page.locator("#course_list_dropdown").click()
    shots.take(page, "two-courses")
    assert {"attention-labs", "second-labs"} <= set(page.locator("#course_list > li").all_inner_texts())


def courses_listed(page, lti_site, name) -> list[str]:
    reply = page.request.get(f"{lti_site.url}user/{name}/courses")
    assert reply.ok, f"GET courses -> {reply.status}: {reply.text()[:500]}"
    return reply.json().get("value", [])


def test_staff_of_one_course_cannot_see_the_other(lti_hub, lti_site, platform, course, course_b, browser_context):
    """U, TA of B only: their server opens B's folder; A's course folder (and its submissions) is closed to them."""
    name = account_of(lti_site, platform, "U")
    page = launch_lab(browser_context, platform, "U", lti_hub, where="B")
    assert (name, "second-labs", "staff") in enrolments(lti_site)
    assert name in grp.getgrnam(course_b[0].exchange.staff_group).gr_mem
    assert name not in grp.getgrnam(lti_site.exchange.staff_group).gr_mem
    listing = page.request.get(f"{lti_site.url}user/{name}/api/contents").json()
    assert "source" in {e["name"] for e in listing["content"]}
    run = subprocess.run(["runuser", "-u", name, "--", "ls", str(course.root)], capture_output=True, text=True)
    assert run.returncode != 0, f"B's TA listed course A's folder: {run.stdout}"
    t = account_of(lti_site, platform, "T")
    run = subprocess.run(["runuser", "-u", t, "--", "ls", str(course_b[0].root)], capture_output=True, text=True)
    assert run.returncode != 0, f"A's TA listed course B's folder: {run.stdout}"


# --- The loop of two courses side by side, grades back to each course's line item --------------------

def schedule(scratch, due: dt.datetime) -> None:
    """``course.toml`` of a hub course: lab 1 released a week before ``due``; 10 % a started day late."""
    (scratch.root / "course.toml").write_text(
        'timezone = "UTC"\n\n[late]\npolicy = "per_day"\npercent = 10\ncap_percent = 50\ngrace_minutes = 0\n\n'
        f"[labs.{LAB}]\nrelease = {due - dt.timedelta(days=7):%Y-%m-%dT%H:%M:%S}\ndue = {due:%Y-%m-%dT%H:%M:%S}\n")


def register_tool_key(scratch, platform, context: str, key) -> None:
    """The tool's AGS registration in the course folder (``lti.toml``), its key in the platform's JWKS."""
    from cryptography.hazmat.primitives import serialization

    (scratch.root / "lti-tool-key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (scratch.root / "lti.toml").write_text(f'client_id = "{platform.tool.client_id}"\n'
                                           f'token_url = "{platform.token_url}"\n'
                                           f'lineitems = "{platform.lineitems_url(context)}"\n'
                                           'key_file = "lti-tool-key.pem"\nkid = "tool-1"\n')


def server_action(page, server: str, action: str, course_id: str) -> dict:
    """What the student's Assignments tab asks of their server: ``assignments/<action>`` for a course."""
    token = xsrf(page)
    reply = page.request.post(f"{server}assignments/{action}", headers={"X-XSRFToken": token},
                              form={"course_id": course_id, "assignment_id": LAB}, timeout=300_000)
    assert reply.ok, f"{action} in {course_id}: HTTP {reply.status}: {reply.text()[:1000]}"
    body = reply.json()
    assert body.get("success"), f"{action} in {course_id} failed: {str(body)[:2000]}"
    return body


def fill_in_server(page, server: str, path: str, filled: dict[str, str]) -> None:
    """Put ``filled`` (grade id -> source) into the answer cells of the notebook at ``path``, through
    the student's own server (the contents API JupyterLab saves with)."""
    token = xsrf(page)
    got = page.request.get(f"{server}api/contents/{path}?content=1&type=notebook")
    assert got.ok, f"GET {path}: HTTP {got.status}: {got.text()[:500]}"
    notebook = got.json()["content"]
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and grade_id in filled:
            cell["source"] = filled[grade_id]
    put = page.request.put(f"{server}api/contents/{path}", headers={"X-XSRFToken": token},
                           data=json.dumps({"type": "notebook", "format": "json", "content": notebook}))
    assert put.ok, f"PUT {path}: HTTP {put.status}: {put.text()[:500]}"


def test_two_courses_run_their_loop_side_by_side_and_grades_reach_each_line_item(
        lti_hub, lti_site, platform, course, course_b, browser_context, shots):
    """Student A, entered by launch, works lab 1 in course A (the reference, handed in a day and a half
    after the due date: 20 % off) and in course B (a misconception, on time); each course collects,
    grades and hands back its own; ``mlbook export --lti`` puts each final score on its own context's
    line item, and neither course's grade reaches the other's."""
    from mlbook.outputs.results import collect

    name = account_of(lti_site, platform, "A")
    b_course = course_b[1]
    courses = {CONTEXT: ("attention-labs", course), "B": ("second-labs", b_course)}
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0, tzinfo=None)
    schedule(course, now - dt.timedelta(hours=36))
    schedule(b_course, now + dt.timedelta(days=3))
    mutant = [m for m in load_catalogue(LAB).mutants if m.demo][0]
    reference = reference_answers(read_nb(course.source(LAB)))
    handed_in = {CONTEXT: reference, "B": {**reference, **mutant.cells}}
    tool_key = new_key()
    platform.tool.jwks["keys"].append(public_jwk(tool_key, "tool-1"))

    page = launch_lab(browser_context, platform, "A", lti_hub)
    server = f"{lti_site.url}user/{name}/"
    home = Path(pwd.getpwnam(name).pw_dir)
    for context, (course_id, scratch) in courses.items():
        mlbook(scratch, "hub", "release", LAB)
        server_action(page, server, "fetch", course_id)
        fetched = home / course_id / LAB / f"{LAB}.ipynb"  # each course's lab in its own folder
        assert fetched.is_file(), f"{course_id}'s fetch did not put the lab at {fetched}"
        fill_in_server(page, server, f"{course_id}/{LAB}/{LAB}.ipynb", handed_in[context])
        server_action(page, server, "submit", course_id)

    final = {}
    for context, (course_id, scratch) in courses.items():
        out = mlbook(scratch, "hub", "collect", LAB)
        assert name in out, out
        graded = mlbook(scratch, "autograde", LAB, "--quiet")
        assert "errors 0" in graded, graded
        final[context] = {r.student: r for r in collect(scratch, LAB)}[name]
        assert final[context].status == "graded", final[context]
        register_tool_key(scratch, platform, context, tool_key)
        run = subprocess.run([*MLBOOK, "export", "--lti", LAB], cwd=scratch.root, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert f"{name}" in run.stdout.split("posted")[1], f"export --lti in {course_id}:\n{run.stdout}\n{run.stderr}"
        assert "released" in mlbook(scratch, "hub", "feedback", LAB)
        server_action(page, server, "fetch_feedback", course_id)
        pages_found = sorted((home / course_id / LAB / "feedback").rglob(f"{LAB}.html"))
        assert pages_found, f"no feedback of {course_id} under {home / course_id / LAB / 'feedback'}"
        text = pages_found[-1].read_text()
        assert "BEGIN HIDDEN" not in text
        if context == "B":
            assert mutant.matches(text), f"B's feedback does not name {mutant.misconception}"

    a_final, b_final = final[CONTEXT], final["B"]
    auto = {k: (sum(c.score or 0.0 for c in r.auto_cells.values()), sum(c.max_score for c in r.auto_cells.values()))
            for k, r in final.items()}
    assert auto[CONTEXT][0] == auto[CONTEXT][1] > 0, f"course A: the reference lost points: {a_final.cells}"
    assert a_final.late_share == pytest.approx(0.2) and a_final.score == pytest.approx(a_final.raw_score * 0.8), \
        f"course A: handed in 36 h late must lose 2 started days x 10 %: {a_final}"
    assert auto["B"][0] < auto["B"][1] and b_final.late_share == 0, f"course B: a misconception, on time: {b_final}"
    sub = platform.people["A"].sub
    for context, expected in ((CONTEXT, a_final), ("B", b_final)):
        items = [i for i in platform.lineitems.values() if i.context == context and i.resource_id == LAB]
        assert len(items) == 1, f"{context}: line items {[(i.context, i.resource_id) for i in platform.lineitems.values()]}"
        held = items[0].latest()
        assert set(held) == {sub}, f"{context}'s line item holds {set(held)}"
        assert held[sub]["scoreGiven"] == pytest.approx(expected.score), (context, held[sub], expected)
        assert held[sub]["scoreMaximum"] == expected.max_score
    print(f"course A: {a_final.raw_score} -> {a_final.score} of {a_final.max_score} (late); "
          f"course B: {b_final.score} of {b_final.max_score}; both on their own line items")
