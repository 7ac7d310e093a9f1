"""``mlbook export --lti LAB``: each student's final score to the LMS's line item by LTI AGS 2.0.

Conventions:
- The tool's registration lives in ``lti.toml`` in the course folder: ``client_id``,
  ``token_url`` (the platform's OAuth 2 token endpoint), ``lineitems`` (the course context's
  line items URL, the ``lineitems`` of a launch's AGS endpoint claim), ``key_file`` (the tool's
  RSA private key, PEM, relative to the course folder) and ``kid`` (its key id in the JWKS the
  platform was given).
- A token is asked for by client credentials with a JWT assertion signed by the tool's key
  (IMS Security Framework 4.1; RFC 7523): ``iss`` = ``sub`` = client id, ``aud`` = token URL.
- The lab's line item is the one whose ``resourceId`` is the lab, made when missing (label the
  lab, ``scoreMaximum`` the lab's points).
- The score is ``mlbook.outputs.results``'s: after the late penalty, as ``grades.csv``'s ``score``.
  A student is posted only when graded and named by an LMS user id (nbgrader's ``lms_user_id``:
  their launch's ``sub``, or the roster's LMS id); every other student is listed with why not.
- Idempotent: what the platform accepted is recorded in ``exports/lti-<lab>.json`` (userId ->
  score and timestamp). A re-run posts only scores that changed (with a new timestamp) or were
  not accepted before; one unchanged is not sent again. AGS keys a result on (line item, userId)
  and keeps the latest timestamp, so a score sent twice with its timestamp cannot count twice.
- A failure (the platform's answer, or no connection) names the student and the reason; the run
  goes on with the others, and the summary says exactly what was posted and what was not.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.files import write_atomic
from mlbook.grading.status import GRADED

CONFIG_NAME = "lti.toml"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
SCOPES = ("https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
          "https://purl.imsglobal.org/spec/lti-ags/scope/score")
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
TIMEOUT_S = 30


@dataclass(frozen=True)
class ToolConfig:
    client_id: str
    token_url: str
    lineitems: str
    key_pem: bytes
    kid: str


@dataclass
class PostReport:
    """What ``post_grades`` did, student by student."""

    lab: str
    lineitem: str = ""
    posted: list[tuple[str, float, float]] = field(default_factory=list)  # (student, score, max)
    unchanged: list[str] = field(default_factory=list)
    not_posted: list[tuple[str, str]] = field(default_factory=list)  # (student, why)

    def summary(self) -> str:
        lines = [f"{self.lab}: line item {self.lineitem}",
                 f"  posted {len(self.posted)}: " + (", ".join(f"{s} {g:g}/{m:g}" for s, g, m in self.posted) or "none"),
                 f"  already held by the LMS, not sent again {len(self.unchanged)}: " + (", ".join(self.unchanged) or "none"),
                 f"  NOT posted {len(self.not_posted)}" + ("" if self.not_posted else ": none")]
        lines += [f"    {student}: {why}" for student, why in self.not_posted]
        return "\n".join(lines)


def load_tool(course: Course) -> ToolConfig:
    """The course's ``lti.toml``, checked; a missing or incomplete file says what it needs."""
    path = course.root / CONFIG_NAME
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise MlbookError(f"no {path}: `--lti` needs the tool's registration there (client_id, token_url, "
                          "lineitems, key_file, kid; see mlbook/outputs/lti_grades.py)") from None
    except tomllib.TOMLDecodeError as exc:
        raise MlbookError(f"{path}: {exc}") from None
    missing = [k for k in ("client_id", "token_url", "lineitems", "key_file", "kid") if not raw.get(k)]
    if missing:
        raise MlbookError(f"{path} sets no {', '.join(missing)}")
    key_path = course.root / raw["key_file"]
    try:
        key_pem = key_path.read_bytes()
    except OSError as exc:
        raise MlbookError(f"{path}: cannot read the tool's key {key_path}: {exc.strerror or exc}") from None
    return ToolConfig(raw["client_id"], raw["token_url"], raw["lineitems"], key_pem, raw["kid"])


def _request(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None) -> tuple[int, str]:
    """(status, body) of one HTTP request; a refused request returns its status, a failed one raises."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def access_token(tool: ToolConfig) -> str:
    """A bearer token with the line item and score scopes (client credentials, JWT assertion)."""
    import jwt

    now = int(time.time())
    assertion = jwt.encode({"iss": tool.client_id, "sub": tool.client_id, "aud": tool.token_url, "iat": now,
                            "exp": now + 300, "jti": secrets.token_hex(16)},
                           tool.key_pem, algorithm="RS256", headers={"kid": tool.kid})
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "client_assertion_type": ASSERTION_TYPE,
                                   "client_assertion": assertion, "scope": " ".join(SCOPES)}).encode()
    try:
        status, text = _request(tool.token_url, "POST", form, {"Content-Type": "application/x-www-form-urlencoded"})
    except OSError as exc:
        raise MlbookError(f"the LMS's token endpoint {tool.token_url} did not answer: {exc}; nothing was posted") from None
    if status != 200:
        raise MlbookError(f"the LMS's token endpoint refused the tool (HTTP {status}: {text[:300]}); nothing was posted")
    return json.loads(text)["access_token"]


def lineitem_for(tool: ToolConfig, token: str, lab: str, maximum: float) -> str:
    """The URL of ``lab``'s line item (``resourceId`` = lab), made when the context has none."""
    auth = {"Authorization": f"Bearer {token}"}
    status, text = _request(tool.lineitems + "?" + urllib.parse.urlencode({"resource_id": lab}),
                            headers={**auth, "Accept": LINEITEMS_TYPE})
    if status != 200:
        raise MlbookError(f"the LMS did not list its line items (HTTP {status}: {text[:300]}); nothing was posted")
    found = [item for item in json.loads(text) if item.get("resourceId") == lab]
    if found:
        return found[0]["id"]
    body = json.dumps({"label": lab, "scoreMaximum": maximum, "resourceId": lab, "tag": "mlbook"}).encode()
    status, text = _request(tool.lineitems, "POST", body, {**auth, "Content-Type": LINEITEM_TYPE})
    if status not in (200, 201):
        raise MlbookError(f"the LMS did not make the line item of {lab} (HTTP {status}: {text[:300]}); nothing was posted")
    return json.loads(text)["id"]


def ledger_path(course: Course, lab: str) -> Path:
    return course.exports_dir / f"lti-{lab}.json"


def post_grades(course: Course, lab: str) -> PostReport:
    """Post every graded student's final score of ``lab`` to its line item; see the module docstring.

    Args:
        course: the course (its ``lti.toml``, gradebook and schedule).
        lab: the lab.

    Returns:
        What was posted, what the LMS already held, and each student not posted with why.
    """
    from mlbook.nbgrader_env import gradebook
    from mlbook.outputs.results import collect

    tool = load_tool(course)
    results = collect(course, lab)
    with gradebook(course) as gb:
        lms_ids = {s.id: s.lms_user_id for s in gb.students}
    report = PostReport(lab)
    ledger_file = ledger_path(course, lab)
    ledger = json.loads(ledger_file.read_text()) if ledger_file.is_file() else {}
    wanted = []
    for r in sorted(results, key=lambda r: r.student):
        if r.status != GRADED:
            report.not_posted.append((r.student, f"not graded ({r.status}{': ' + r.reason if r.reason else ''})"))
        elif not lms_ids.get(r.student):
            report.not_posted.append((r.student, "no LMS user id (never launched from the LMS, and the roster "
                                                 "gives none): `mlbook roster import` a class list with it"))
        else:
            wanted.append(r)
    if not wanted:
        return report
    token = access_token(tool)
    report.lineitem = lineitem_for(tool, token, lab, max(r.max_score for r in wanted))
    for r in wanted:
        user = lms_ids[r.student]
        held = ledger.get(report.lineitem, {}).get(user)
        score, maximum = round(r.score, 6), r.max_score
        if held and held["scoreGiven"] == score and held["scoreMaximum"] == maximum:
            report.unchanged.append(r.student)
            continue
        stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
        body = {"userId": user, "scoreGiven": score, "scoreMaximum": maximum, "timestamp": stamp,
                "activityProgress": "Completed", "gradingProgress": "FullyGraded",
                "comment": f"late: {r.hours_late:.1f} h, penalty {r.late_penalty:g}" if r.late else ""}
        try:
            status, text = _request(report.lineitem.rstrip("/") + "/scores", "POST", json.dumps(body).encode(),
                                    {"Authorization": f"Bearer {token}", "Content-Type": SCORE_TYPE})
        except OSError as exc:
            report.not_posted.append((r.student, f"the LMS did not answer ({exc})"))
            continue
        if status not in (200, 201, 202, 204):
            report.not_posted.append((r.student, f"the LMS refused the score (HTTP {status}: {text[:200]})"))
            continue
        report.posted.append((r.student, score, maximum))
        ledger.setdefault(report.lineitem, {})[user] = {"student": r.student, "scoreGiven": score,
                                                        "scoreMaximum": maximum, "timestamp": stamp}
        ledger_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(ledger_file, json.dumps(ledger, indent=1, sort_keys=True))  # after each: a crash loses none
    return report
