"""A test LTI 1.3 platform on localhost: what Canvas or Moodle does for the hub, and nothing more.

Conventions (IMS LTI 1.3 Core, IMS Security Framework 1.0, LTI AGS 2.0):
- The platform signs with one RSA key (RS256, ``kid`` in its JWKS at ``/jwks``). Its issuer is
  its base URL (``http://127.0.0.1:PORT``).
- A launch starts at ``/launch/<person>/<context>``: a page that posts the third-party
  initiated login (``iss``, ``login_hint``, ``lti_message_hint``, ``target_link_uri``,
  ``client_id``, ``lti_deployment_id``) to the tool's login initiation URL. The tool answers with
  an OIDC authentication request to ``/auth``; the platform checks it (client, registered
  redirect URI, ``response_type=id_token``, ``response_mode=form_post``, ``scope=openid``,
  ``prompt=none``, the login hint it issued) and answers with a page that posts the signed
  ``id_token`` and the tool's ``state`` to the tool's redirect URI.
- ``?attack=NAME`` on a launch makes the platform's auth endpoint send a hostile token instead
  (``ATTACKS``); every form it posted is kept in ``posted`` for replay tests.
- ``/token``: OAuth 2 client credentials with a JWT assertion (RFC 7523) signed by the tool's
  key and checked against the tool's registered JWKS; answers a bearer token with the granted
  AGS scopes. ``/contexts/<ctx>/lineitems`` and ``.../lineitems/<n>/scores`` are the AGS line
  item and score services; every score received is kept (``LineItem.scores``).

The server is a ``ThreadingHTTPServer`` in a daemon thread: ``Platform.start()`` / ``stop()``.
"""

from __future__ import annotations

import base64
import html
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
AGS_SCOPES = ("https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
              "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly",
              "https://purl.imsglobal.org/spec/lti-ags/scope/score")
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

# The LIS role URIs a person's membership carries (LTI 1.3 Core, appendix A.2).
ROLES = {
    "student": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"],
    "ta": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor#TeachingAssistant"],
    "instructor": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"],
}
ID_TOKEN_LIFETIME_S = 300
ACCESS_TOKEN_LIFETIME_S = 3600

# Hostile launches the auth endpoint can send instead of an honest one (what a forger or a
# man in the middle would try). Each names what it changes.
ATTACKS = {
    "bad_signature": "the id_token is signed by a key the platform never published under its kid",
    "expired": "exp and iat lie an hour in the past",
    "wrong_audience": "aud is another tool's client id",
    "escalated_role": "an honest Learner token whose payload is rewritten to Instructor, signature kept",
    "unknown_deployment": "deployment_id is one the tool was never installed with",
}


def b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def public_jwk(private_key, kid: str) -> dict:
    """The public half of an RSA key as a JWK (RFC 7517) for RS256 signatures."""
    numbers = private_key.public_key().public_numbers()
    return {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
            "n": b64url_uint(numbers.n), "e": b64url_uint(numbers.e)}


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Person:
    """Someone the platform knows: ``memberships`` maps a context id to "student" | "ta" | "instructor"."""

    key: str
    given_name: str
    family_name: str
    memberships: dict[str, str]
    sub: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def email(self) -> str:
        return f"{self.key}@example.edu"


@dataclass
class Context:
    id: str
    label: str
    title: str


@dataclass
class LineItem:
    id: int
    context: str
    label: str
    score_maximum: float
    resource_id: str = ""
    tag: str = ""
    scores: list[dict] = field(default_factory=list)  # every score posted, in order

    def latest(self) -> dict[str, dict]:
        """The score the platform's gradebook holds for each userId (the latest timestamp wins)."""
        held: dict[str, dict] = {}
        for score in self.scores:
            old = held.get(score["userId"])
            if old is None or score["timestamp"] >= old["timestamp"]:
                held[score["userId"]] = score
        return held


@dataclass
class Tool:
    """The tool's registration with the platform (what an LMS admin types in)."""

    client_id: str
    deployment_id: str
    login_url: str  # OIDC login initiation
    redirect_uris: list[str]
    target_link_uri: str
    jwks: dict  # the tool's public keys, for client-credentials assertions


class Platform:
    """The platform: people, contexts, one registered tool, line items and a server."""

    def __init__(self, port: int = 0):
        self.key = new_key()
        self.kid = secrets.token_hex(6)
        self.people: dict[str, Person] = {}
        self.contexts: dict[str, Context] = {}
        self.tool: Tool | None = None
        self.lineitems: dict[int, LineItem] = {}
        self.posted: list[dict] = []  # every id_token form the auth endpoint posted
        self.tokens: dict[str, tuple[float, set[str]]] = {}  # access token -> (expiry, scopes)
        self.seen_jti: set[str] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self.server.platform = self
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def auth_url(self) -> str:
        return self.url + "/auth"

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks"

    @property
    def token_url(self) -> str:
        return self.url + "/token"

    def jwks(self) -> dict:
        return {"keys": [public_jwk(self.key, self.kid)]}

    def launch_url(self, person: str, context: str, attack: str = "") -> str:
        return f"{self.url}/launch/{person}/{context}" + (f"?attack={attack}" if attack else "")

    def lineitems_url(self, context: str) -> str:
        return f"{self.url}/contexts/{context}/lineitems"

    def add_lineitem(self, context: str, label: str, score_maximum: float, resource_id: str = "") -> LineItem:
        with self.lock:
            item = LineItem(len(self.lineitems) + 1, context, label, score_maximum, resource_id)
            self.lineitems[item.id] = item
            return item

    def lineitem_url(self, item: LineItem) -> str:
        return f"{self.lineitems_url(item.context)}/{item.id}"

    def start(self) -> "Platform":
        self.thread = threading.Thread(target=self.server.serve_forever, name="lti-platform", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- the launch ---

    def claims(self, person: Person, context: Context, nonce: str, resource_link: str) -> dict:
        """The id_token of an honest LtiResourceLinkRequest (LTI 1.3 Core section 5)."""
        tool = self.tool
        now = int(time.time())
        return {
            "iss": self.issuer, "aud": tool.client_id, "azp": tool.client_id, "sub": person.sub,
            "exp": now + ID_TOKEN_LIFETIME_S, "iat": now, "nonce": nonce,
            "name": f"{person.given_name} {person.family_name}", "given_name": person.given_name,
            "family_name": person.family_name, "email": person.email,
            LTI + "message_type": "LtiResourceLinkRequest", LTI + "version": "1.3.0",
            LTI + "deployment_id": tool.deployment_id, LTI + "target_link_uri": tool.target_link_uri,
            LTI + "roles": ROLES[person.memberships[context.id]],
            LTI + "context": {"id": context.id, "label": context.label, "title": context.title,
                              "type": ["http://purl.imsglobal.org/vocab/lis/v2/course#CourseOffering"]},
            LTI + "resource_link": {"id": resource_link, "title": f"{context.label}: the labs"},
            LTI + "tool_platform": {"guid": self.kid, "name": "mlbook test platform", "product_family_code": "mlbook"},
            AGS_CLAIM: {"scope": list(AGS_SCOPES), "lineitems": self.lineitems_url(context.id)},
        }

    def sign(self, claims: dict, key=None) -> str:
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": self.kid})

    def id_token(self, person: Person, context: Context, nonce: str, attack: str) -> str:
        """The token the auth endpoint sends: honest, or changed as ``ATTACKS[attack]`` says."""
        claims = self.claims(person, context, nonce, resource_link=f"{context.id}-labs")
        if attack == "bad_signature":
            return self.sign(claims, key=new_key())
        if attack == "expired":
            claims["iat"] -= 3600
            claims["exp"] = claims["iat"] + ID_TOKEN_LIFETIME_S
        elif attack == "wrong_audience":
            claims["aud"] = claims["azp"] = "another-tool"
        elif attack == "unknown_deployment":
            claims[LTI + "deployment_id"] = "deployment-nobody-installed"
        elif attack == "escalated_role":
            header, _payload, signature = self.sign(claims).split(".")
            claims[LTI + "roles"] = ROLES["instructor"]
            forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
            return f"{header}.{forged}.{signature}"
        elif attack:
            raise ValueError(f"unknown attack {attack!r}")
        return self.sign(claims)

    # --- client credentials (Security Framework 4.1) ---

    def grant(self, form: dict[str, str]) -> tuple[int, dict]:
        """An access token for a client-credentials request, or (400/401, an OAuth error)."""
        tool = self.tool
        if form.get("grant_type") != "client_credentials" or form.get("client_assertion_type") != ASSERTION_TYPE:
            return 400, {"error": "unsupported_grant_type"}
        assertion = form.get("client_assertion", "")
        try:
            kid = jwt.get_unverified_header(assertion).get("kid")
            keys = [k for k in tool.jwks.get("keys", []) if k.get("kid") == kid]
            if not keys:
                return 401, {"error": "invalid_client", "error_description": f"no registered tool key with kid {kid!r}"}
            key = jwt.PyJWK(keys[0]).key
            claims = jwt.decode(assertion, key, algorithms=["RS256"], audience=self.token_url,
                                issuer=tool.client_id, options={"require": ["exp", "iat", "jti", "sub"]})
        except jwt.PyJWTError as exc:
            return 401, {"error": "invalid_client", "error_description": str(exc)}
        if claims["sub"] != tool.client_id:
            return 401, {"error": "invalid_client", "error_description": "sub is not the client id"}
        with self.lock:
            if claims["jti"] in self.seen_jti:
                return 401, {"error": "invalid_client", "error_description": "assertion jti already used"}
            self.seen_jti.add(claims["jti"])
            asked = set(form.get("scope", "").split())
            granted = asked & set(AGS_SCOPES)
            if not granted:
                return 400, {"error": "invalid_scope"}
            token = secrets.token_urlsafe(24)
            self.tokens[token] = (time.time() + ACCESS_TOKEN_LIFETIME_S, granted)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": ACCESS_TOKEN_LIFETIME_S,
                     "scope": " ".join(sorted(granted))}

    def scopes_of(self, authorization: str) -> set[str]:
        if not authorization.startswith("Bearer "):
            return set()
        expiry, scopes = self.tokens.get(authorization[7:], (0, set()))
        return scopes if expiry > time.time() else set()

    def lineitem_json(self, item: LineItem) -> dict:
        return {"id": self.lineitem_url(item), "label": item.label, "scoreMaximum": item.score_maximum,
                "resourceId": item.resource_id, "tag": item.tag}


SCOPE = dict(zip(("lineitem", "readonly", "score"), AGS_SCOPES))


def _autopost(action: str, fields: dict[str, str], title: str) -> bytes:
    """A page that posts ``fields`` to ``action`` as soon as it loads (OIDC form_post)."""
    inputs = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                     for k, v in fields.items())
    return (f"<!doctype html><html><head><title>{html.escape(title)}</title></head>"
            f"<body onload=\"document.forms[0].submit()\"><p>{html.escape(title)}...</p>"
            f'<form method="post" action="{html.escape(action)}">{inputs}'
            f'<noscript><button type="submit">Continue</button></noscript></form></body></html>').encode()


class _Handler(BaseHTTPRequestHandler):
    server_version = "mlbook-lti-platform"

    def log_message(self, *args) -> None:  # quiet: tests read the recorded state, not a log
        pass

    @property
    def platform(self) -> Platform:
        return self.server.platform

    def send(self, status: int, body: bytes | dict | list, content_type: str = "application/json") -> None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        query = urllib.parse.urlsplit(self.path).query
        pairs = urllib.parse.parse_qsl(query) + urllib.parse.parse_qsl(body)
        return dict(pairs)

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def route(self, method: str) -> None:
        parts = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
        if parts == ["jwks"]:
            return self.send(200, self.platform.jwks())
        if parts[0] == "launch" and len(parts) == 3:
            return self.launch(parts[1], parts[2])
        if parts == ["auth"]:
            return self.auth()
        if parts == ["token"] and method == "POST":
            status, body = self.platform.grant(self.form())
            return self.send(status, body)
        if parts[0] == "contexts" and len(parts) >= 3 and parts[2] == "lineitems":
            return self.ags(method, parts[1], parts[3:])
        self.send(404, {"error": "not found"})

    def launch(self, person: str, context: str) -> None:
        p = self.platform
        if person not in p.people or context not in p.people[person].memberships:
            return self.send(404, b"no such membership", "text/plain")
        attack = self.form().get("attack", "")
        hint = json.dumps({"person": person, "context": context, "attack": attack})
        fields = {"iss": p.issuer, "login_hint": p.people[person].sub, "lti_message_hint": hint,
                  "target_link_uri": p.tool.target_link_uri, "client_id": p.tool.client_id,
                  "lti_deployment_id": p.tool.deployment_id}
        self.send(200, _autopost(p.tool.login_url, fields, "Opening the course's JupyterHub"), "text/html")

    def auth(self) -> None:
        p, args = self.platform, self.form()
        problems = [f"{k} must be {v}" for k, v in (("response_type", "id_token"), ("response_mode", "form_post"),
                                                     ("scope", "openid"), ("prompt", "none"),
                                                     ("client_id", p.tool.client_id)) if args.get(k) != v]
        if args.get("redirect_uri") not in p.tool.redirect_uris:
            problems.append(f"redirect_uri {args.get('redirect_uri')!r} is not registered")
        if not args.get("nonce"):
            problems.append("no nonce")
        try:
            hint = json.loads(args.get("lti_message_hint", ""))
            person, context = p.people[hint["person"]], p.contexts[hint["context"]]
        except (ValueError, KeyError, TypeError):
            problems.append("lti_message_hint is not one this platform issued")
        else:
            if args.get("login_hint") != person.sub:
                problems.append("login_hint does not match the person of lti_message_hint")
        if problems:
            return self.send(400, {"error": "invalid_request", "error_description": "; ".join(problems)})
        token = p.id_token(person, context, args["nonce"], hint.get("attack", ""))
        fields = {"id_token": token, "state": args.get("state", "")}
        with p.lock:
            p.posted.append({"action": args["redirect_uri"], **fields})
        self.send(200, _autopost(args["redirect_uri"], fields, "Signing you in"), "text/html")

    def ags(self, method: str, context: str, rest: list[str]) -> None:
        p = self.platform
        scopes = p.scopes_of(self.headers.get("Authorization", ""))
        if not scopes:
            return self.send(401, {"error": "invalid_token"})
        items = [i for i in p.lineitems.values() if i.context == context]
        if not rest:
            if method == "GET" and scopes & {SCOPE["lineitem"], SCOPE["readonly"]}:
                wanted = self.form()
                shown = [p.lineitem_json(i) for i in items
                         if all(getattr(i, k) == wanted[q] for q, k in (("resource_id", "resource_id"),
                                                                        ("tag", "tag"), ("label", "label"))
                                if q in wanted)]
                return self.send(200, shown, LINEITEMS_TYPE)
            if method == "POST" and SCOPE["lineitem"] in scopes:
                body = self.json_body()
                if not isinstance(body, dict) or not body.get("label") or not isinstance(body.get("scoreMaximum"), (int, float)):
                    return self.send(400, {"error": "a line item needs a label and a numeric scoreMaximum"})
                item = p.add_lineitem(context, body["label"], float(body["scoreMaximum"]), body.get("resourceId", ""))
                item.tag = body.get("tag", "")
                return self.send(201, p.lineitem_json(item), LINEITEM_TYPE)
            return self.send(403, {"error": "insufficient_scope"})
        item = next((i for i in items if str(i.id) == rest[0]), None)
        if item is None:
            return self.send(404, {"error": "no such line item"})
        if rest[1:] == ["scores"] and method == "POST":
            if SCOPE["score"] not in scopes:
                return self.send(403, {"error": "insufficient_scope"})
            if self.headers.get("Content-Type", "").split(";")[0].strip() != SCORE_TYPE:
                return self.send(415, {"error": f"a score is {SCORE_TYPE}"})
            return self.score(item, self.json_body())
        if not rest[1:] and method == "GET":
            return self.send(200, p.lineitem_json(item), LINEITEM_TYPE)
        self.send(404, {"error": "not found"})

    def json_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return None

    def score(self, item: LineItem, body) -> None:
        """AGS 2.0 section 3.4: userId (a member of the line item's context), timestamp,
        activityProgress and gradingProgress required; scoreGiven needs scoreMaximum. A score older
        than the one held is not applied (409)."""
        required = ("userId", "timestamp", "activityProgress", "gradingProgress")
        if not isinstance(body, dict) or any(not body.get(k) for k in required):
            return self.send(400, {"error": f"a score needs {', '.join(required)}"})
        if "scoreGiven" in body and not isinstance(body.get("scoreMaximum"), (int, float)):
            return self.send(400, {"error": "scoreGiven without a numeric scoreMaximum"})
        members = {p.sub for p in self.platform.people.values() if item.context in p.memberships}
        if body["userId"] not in members:
            return self.send(422, {"error": f"userId {body['userId']!r} is not a member of context {item.context!r}"})
        with self.platform.lock:
            held = item.latest().get(body["userId"])
            if held is not None and body["timestamp"] < held["timestamp"]:
                return self.send(409, {"error": "a later score is already held for this user"})
            item.scores.append(body)
        self.send(200, b"", SCORE_TYPE)
