"""LTI 1.3 launch into the course's hub: ``jupyterhub-ltiauthenticator`` plus what it leaves to the tool.

What the library checks (``ltiauthenticator.lti13``, version 1.6.3, read from its source): the
login initiation's arguments; the OIDC ``state`` against its cookie; the id_token's RS256
signature against the platform's JWKS, ``iss``, ``aud`` (our client ids), ``exp`` and ``iat``
(no older than ``max_age``), ``azp`` when ``aud`` is a list, the required LTI claims, version
1.3.0, the message type and the resource link id; the ``nonce`` against the hash of a cookie it
set at login initiation (then clears).

What it leaves to us, and this module does (``CourseLTIAuthenticator``):
- the ``deployment_id``: only the deployments the course was installed with;
- replay: a nonce is accepted once (``LaunchStore.spend_nonce``); a token replayed with its
  cookies (a captured request, not just the form) is refused;
- the course: the launch's context id must be one of the hub's courses (``LtiCourse``);
- the role: LIS role URIs (Learner -> "student"; Instructor and its sub-roles, TeachingAssistant
  included -> "staff" of that course); a launch with neither is refused;
- the account: a system account named from ``iss`` and ``sub`` (``account_name``; made on the
  first launch by JupyterHub's ``LocalAuthenticator`` with ``useradd``); staff join the course's
  staff group; every launch records the enrolment (``LaunchStore``) and a student's launch fills
  the course's roster (``mlbook.lms.roster.import_entries``, as ``mlbook roster import`` does).

Nothing is written (account, enrolment, roster, nonce) before every check has passed. A refused
launch gets a page saying why and that nothing was created; going to the hub without a launch
gets a page saying how to enter it from the LMS.
"""

from __future__ import annotations

import grp
import hashlib
import html
import os
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from jupyterhub.auth import LocalAuthenticator
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.error import ValidationError
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler, LTI13LoginInitHandler
from tornado.web import HTTPError
from traitlets import Dict, List, Unicode

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
INSTITUTION = "http://purl.imsglobal.org/vocab/lis/v2/institution/person#"


@dataclass(frozen=True)
class LtiCourse:
    """One course of the hub, as its LMS context names it.

    Attributes:
        context_id: the LMS's context id (the ``context`` claim's ``id``).
        course_id: nbgrader's course id (the exchange's folder of the course).
        root: the course folder (nbgrader's ``CourseDirectory.root``; its gradebook holds the roster).
        staff_group: the system group of its instructors and TAs.
    """

    context_id: str
    course_id: str
    root: str
    staff_group: str


def role_of(roles: list[str]) -> str:
    """"staff" for an Instructor (any of its sub-roles, TeachingAssistant among them), "student" for
    a Learner, "" for neither (LTI 1.3 Core A.2: context roles; short forms are the full URIs' tails).

    Args:
        roles: the ``roles`` claim.

    Returns:
        "staff", "student" or "".
    """
    def context_role(uri: str) -> str:
        if uri.startswith(MEMBERSHIP):
            return uri[len(MEMBERSHIP):].split("#")[0]
        return uri if "/" not in uri and ":" not in uri else ""  # the spec's short context roles
    found = {context_role(r) for r in roles if isinstance(r, str)}
    if "Instructor" in found:
        return "staff"
    if "Learner" in found:
        return "student"
    return ""


def account_name(prefix: str, issuer: str, sub: str) -> str:
    """The system account of the person ``sub`` of platform ``issuer``: ``prefix`` and 10 hex digits
    of their hash (stable across launches, unique per platform, a valid Debian user name)."""
    return prefix + hashlib.sha256(f"{issuer}\n{sub}".encode()).hexdigest()[:10]


class LaunchStore:
    """The hub's record of launches (SQLite in the hub's folder): spent nonces and enrolments."""

    def __init__(self, path: str):
        self.path = path
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS nonces (iss TEXT, nonce TEXT, exp INTEGER, PRIMARY KEY (iss, nonce))")
            db.execute("CREATE TABLE IF NOT EXISTS enrolments (user TEXT, course TEXT, role TEXT, "
                       "PRIMARY KEY (user, course))")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def spend_nonce(self, issuer: str, nonce: str, exp: int) -> bool:
        """Record ``nonce`` as used; False when it was used before (a replay)."""
        with self._db() as db:
            db.execute("DELETE FROM nonces WHERE exp < ?", (int(time.time()) - 3600,))
            try:
                db.execute("INSERT INTO nonces VALUES (?, ?, ?)", (issuer, nonce, exp))
            except sqlite3.IntegrityError:
                return False
        return True

    def enrol(self, user: str, course: str, role: str) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO enrolments VALUES (?, ?, ?)", (user, course, role))

    def enrolments(self, user: str) -> dict[str, str]:
        """``user``'s courses: course id -> "staff" | "student"."""
        with self._db() as db:
            return dict(db.execute("SELECT course, role FROM enrolments WHERE user = ?", (user,)).fetchall())


def page(title: str, body: str) -> str:
    return (f"<h1 id='lti-title'>{html.escape(title)}</h1>"
            f"<p id='lti-message'>{html.escape(body)}</p>")


class Refused(HTTPError):
    """A launch refused: the page shows ``why`` and that nothing was created."""

    def __init__(self, status: int, why: str):
        super().__init__(status, why, reason="Launch refused")
        self.jupyterhub_message = why
        self.jupyterhub_html_message = page(
            "This launch was refused",
            f"{why}. Nothing was created on the hub. Open the course's JupyterHub link again from "
            "your course page in the LMS; if it is refused again, tell your instructor.")


class LoginInit(LTI13LoginInitHandler):
    """The login initiation endpoint; without a launch's ``iss``, a page saying how to enter."""

    def get(self):
        if not self.get_argument("iss", ""):
            self.set_status(401)
            return self.finish(self.authenticator.no_launch_page())
        return super().post()

    post = get


class Callback(LTI13CallbackHandler):
    """The launch (redirect URI): the library's checks, each refusal worded for the person."""

    def decode_and_validate_launch_request(self):
        try:
            return super().decode_and_validate_launch_request()
        except HTTPError as exc:
            raise Refused(exc.status_code, f"the LMS's launch did not verify ({exc.log_message})") from None
        except ValidationError as exc:  # the token's checks (signature, exp, aud, claims) raise these
            raise Refused(400, f"the LMS's launch did not verify ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # a malformed token: the library lets some errors through
            raise Refused(400, f"the LMS's launch could not be read ({type(exc).__name__}: {exc})") from None


class CourseLTIAuthenticator(LTI13Authenticator, LocalAuthenticator):
    """LTI 1.3 launches into the hub's courses; accounts made by ``useradd`` on the first launch."""

    login_handler = LoginInit
    callback_handler = Callback

    deployment_ids = List(Unicode(), config=True, help="the LTI deployment ids the course was installed with")
    courses = Dict(config=True, help="context id -> {course_id, root, staff_group} (LtiCourse's fields)")
    account_prefix = Unicode("lti-", config=True, help="prefix of the system accounts launches make")
    store_path = Unicode(config=True, help="the LaunchStore's SQLite file")
    lms_name = Unicode("your LMS", config=True, help="how pages name the platform (Canvas, Moodle)")

    def no_launch_page(self) -> str:
        return ("<!doctype html><html><head><title>Enter from your course page</title></head><body>"
                + page("Enter this hub from your course page",
                       f"This JupyterHub is opened from {self.lms_name}: go to your course there and follow "
                       "its JupyterHub (External Tool) link. You are then signed in as yourself, in that "
                       "course, with your course role; there is no password to type here.")
                + "</body></html>")

    def course_of(self, context_id: str) -> LtiCourse | None:
        entry = self.courses.get(context_id)
        return LtiCourse(context_id, **entry) if entry else None

    async def authenticate(self, handler, data=None):
        """Every check the library leaves to the tool, then the records of the launch.

        Args:
            handler: the launch's handler.
            data: the verified id_token's claims.

        Returns:
            JupyterHub's auth model: the account name, the groups of every course the person is in.
        """
        token = data or {}
        if token.get(LTI + "deployment_id") not in self.deployment_ids:
            raise Refused(403, f"the launch came from deployment {token.get(LTI + 'deployment_id')!r}, "
                               "which this hub was not installed with")
        context = token.get(LTI + "context") or {}
        course = self.course_of(str(context.get("id", "")))
        if course is None:
            raise Refused(403, f"this hub serves no course for the LMS course {context.get('title') or context.get('id')!r}")
        role = role_of(token.get(LTI + "roles") or [])
        if not role:
            raise Refused(403, "the launch gives neither a Learner nor an Instructor role in this course")
        if not token.get("sub"):
            raise Refused(400, "the launch names nobody (no sub claim)")
        store = LaunchStore(self.store_path)
        if not store.spend_nonce(token["iss"], token["nonce"], int(token["exp"])):
            raise Refused(400, "this launch was already used (its nonce was seen before: a replay)")
        name = account_name(self.account_prefix, token["iss"], token["sub"])
        store.enrol(name, course.course_id, role)
        if role == "student":
            self.fill_roster(course, name, token)
        groups = [f"{'formgrade' if r == 'staff' else 'nbgrader'}-{c}" for c, r in store.enrolments(name).items()]
        self.log.info("LTI launch: %s as %s of %s (context %s)", name, role, course.course_id, course.context_id)
        return {"name": name, "groups": groups, "auth_state": {"course": course.course_id, "role": role}}

    def fill_roster(self, course: LtiCourse, name: str, token: dict) -> None:
        """Add or update the student in the course's gradebook (``mlbook roster import``'s code)."""
        from mlbook.course import Course
        from mlbook.lms.records import RosterEntry
        from mlbook.lms.roster import import_entries

        entry = RosterEntry(0, name, token.get("given_name", ""), token.get("family_name", ""),
                            token.get("email", ""), token["sub"])
        old = os.umask(0o007)  # the gradebook stays the staff group's (mlbook's convention)
        try:
            report = import_entries(Course(Path(course.root)), [entry], "LTI launch")
        finally:
            os.umask(old)
        for problem in report.problems:
            self.log.warning("roster of %s: %s", course.course_id, problem)

    async def add_user(self, user):
        """The system account (``LocalAuthenticator``: ``useradd`` when missing), home 0700, and
        staff in their courses' staff groups."""
        await super().add_user(user)
        self.join_groups(user.name)

    def join_groups(self, name: str) -> None:
        home = Path("/home") / name
        if home.is_dir():
            os.chmod(home, 0o700)
        store = LaunchStore(self.store_path)
        for course_id, role in store.enrolments(name).items():
            course = next((LtiCourse(c, **e) for c, e in self.courses.items() if e["course_id"] == course_id), None)
            if role == "staff" and course and name not in grp.getgrnam(course.staff_group).gr_mem:
                subprocess.run(["usermod", "-aG", course.staff_group, name], check=True, capture_output=True)

    def pre_spawn_start(self, user, spawner):
        """A returning person may have become staff of a course since their account was made."""
        self.join_groups(user.name)
