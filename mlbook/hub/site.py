"""A JupyterHub for the course: its configuration, the people's Jupyter profiles, start and stop.

The hub is JupyterHub with configurable-http-proxy (``make setup`` installs both: the ``hub``
extra and ``.venv/hub-proxy``), listening on 127.0.0.1 only. People log in with their system
account's password (PAM) and each server is that account's own process (LocalProcessSpawner).

- Staff (instructor and TAs, the ``staff_group``) get JupyterLab in the course folder, with
  nbgrader's formgrader; its Autograde button answers with a message pointing to
  ``mlbook autograde`` (``mlbook.hub.guard``): autograding in the formgrader would run student
  code as the TA, unsandboxed, with in-kernel verdicts.
- Students get JupyterLab in their home with nbgrader's Assignments tab; their nbgrader
  config names the course and the exchange, and submits through ``ConfinedSubmit``.

Every profile lives in the hub's state folder (``HubSite.folder``); nobody's ``~/.jupyter`` is
written. Grading never runs in the hub: the grading account runs ``mlbook hub collect``,
``mlbook autograde`` and ``mlbook hub feedback`` on the course folder.
"""

from __future__ import annotations

import grp
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from mlbook.errors import MlbookError
from mlbook.sandbox.bwrap import package_dir
from mlbook.hub.exchange import Exchange

START_TIMEOUT_S = 120
PROXY = Path(sys.prefix) / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"

# JupyterLab settings for every profile: no news or update checks, no extension manager.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension/plugin.jupyterlab-settings": {"enabled": False},
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class HubCourse:
    """One course of the hub: its LMS context, its folder and its exchange.

    Attributes:
        context_id: the LMS's id of the course (the LTI ``context`` claim's ``id``).
        root: the course folder (root's and ``exchange.staff_group``'s, nobody else's).
        exchange: the course's folder of the hub's one exchange root, with its staff group.
    """

    context_id: str
    root: Path
    exchange: Exchange

    @property
    def course_id(self) -> str:
        return self.exchange.course_id


@dataclass
class LtiLaunch:
    """The hub's registration with an LTI 1.3 platform (what the LMS admin gives the hub's admin).

    Attributes:
        issuer: the platform's ``iss``.
        client_id: the hub's client id at the platform.
        deployment_id: the deployment the course installed.
        auth_url: the platform's OIDC authentication endpoint.
        jwks_url: the platform's JWKS.
        account_prefix: prefix of the system accounts launches make (``mlbook.hub.lti.account_name``).
        lms_name: how pages name the platform.
    """

    issuer: str
    client_id: str
    deployment_id: str
    auth_url: str
    jwks_url: str
    account_prefix: str = "lti-"
    lms_name: str = "your LMS"

    def login_url(self, site: "HubSite") -> str:
        return site.url + "hub/lti13/oauth_login"

    def redirect_uri(self, site: "HubSite") -> str:
        return site.url + "hub/lti13/oauth_callback"


@dataclass
class HubSite:
    """One course's hub.

    Attributes:
        folder: the hub's state (config, database, cookie secret, profiles, log); root's.
        course_root: the course folder staff servers open (group ``staff_group``).
        exchange: nbgrader's exchange of the course.
        staff: instructor and TA accounts (in ``exchange.staff_group``); the first is the hub's admin.
        students: student accounts.
        port: the proxy's public port on 127.0.0.1.
    """

    folder: Path
    course_root: Path
    exchange: Exchange
    staff: list[str]
    students: list[str]
    port: int = 0
    hub_port: int = 0  # the hub's own API, for the proxy and the servers (kept across restarts:
    proxy_api_port: int = 0  # servers left running by a crash find the restarted hub)
    extra_env: dict[str, str] = field(default_factory=dict)
    lti: "LtiLaunch | None" = None  # people arrive by LTI 1.3 launch instead of a PAM password
    more_courses: list[HubCourse] = field(default_factory=list)  # LTI hubs: courses beside the first

    def courses(self) -> list[HubCourse]:
        """Every course of the hub; the first is ``course_root`` and ``exchange`` (its context id: its course id)."""
        return [HubCourse(self.exchange.course_id, self.course_root, self.exchange), *self.more_courses]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def profile(self, role: str) -> Path:
        return self.folder / "profiles" / role

    def python(self, role: str) -> Path:
        """The interpreter of ``role``'s servers and kernels (``staff_python``, ``student_python``)."""
        return self.folder / ("python" if role == "staff" else "student-python") / "bin" / "python3.11"


USERS_PYTHON = Path("/usr/bin/python3.11")

# What a student's server and kernels import of the grader: the lab helpers the notebooks use, and
# the exchange's confined submit (their server submits through it). Nothing of ``mlbook/labs``
# (hidden checks, catalogues, the kit's reference maths) or of the rest of the grader.
STUDENT_FILES = ("mlbook_helpers", "mlbook/__init__.py", "mlbook/errors.py", "mlbook/pyast.py",
                 "mlbook/hub/__init__.py", "mlbook/hub/exchange.py")  # pyast: mlbook/__init__ installs its lock
# Entries of a checkout every account may still read once it is shielded: the environment (the
# hub's accounts run its packages) and the two packages sandboxed kernels import.
SHARED_ENTRIES = (".venv", "mlbook_helpers", "mlbook_kernel")


def _environment(prefix: Path, pth: str) -> Path:
    """A minimal virtual environment every account can run: the system's Python 3.11 (``pyvenv.cfg``
    beside a link to it) whose one ``.pth`` file holds ``pth``; returns its interpreter."""
    if not USERS_PYTHON.is_file():
        raise MlbookError(f"no {USERS_PYTHON}: the hub's accounts need a system Python 3.11 (Debian's python3.11)")
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    packages = prefix / "lib" / "python3.11" / "site-packages"
    packages.mkdir(parents=True, exist_ok=True)
    (prefix / "pyvenv.cfg").write_text(f"home = {USERS_PYTHON.parent}\ninclude-system-site-packages = false\n"
                                       "version = 3.11\n")
    python = prefix / "bin" / "python3.11"
    if not python.is_symlink():
        python.symlink_to(USERS_PYTHON)
    for name in ("python", "python3"):
        if not (prefix / "bin" / name).is_symlink():
            (prefix / "bin" / name).symlink_to("python3.11")
    (packages / "mlbook-environment.pth").write_text(pth + "\n")
    return python


def _open_to_all(prefix: Path) -> None:
    for path in [prefix, *prefix.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)


def staff_python(folder: Path) -> Path:
    """The staff's interpreter: this environment's packages, editable installs included (the
    formgrader's guard and the whole grader); returns it.

    The environment mlbook runs from may sit on a private interpreter (a pyenv build under
    /root, 0700) that the hub's accounts cannot execute, hence a small environment on the
    system's Python whose ``.pth`` adds this environment's site-packages.
    """
    prefix = folder / "python"
    python = _environment(prefix, f"import site; site.addsitedir({str(_site_packages())!r})")
    _open_to_all(prefix)
    return python


def student_python(folder: Path) -> Path:
    """The students' interpreter (their servers and kernels): this environment's third-party
    packages, and of the grader only copies of ``STUDENT_FILES``; returns it.

    The ``.pth`` line is a bare path: the ``.pth`` files in it are not processed, so the editable
    install that maps ``mlbook`` to the checkout is not there, and ``import mlbook.labs`` fails.
    (The checkout itself is shielded from students by ``shield_checkout``.)
    """
    prefix = folder / "student-python"
    python = _environment(prefix, str(_site_packages()))
    packages = prefix / "lib" / "python3.11" / "site-packages"
    for relative in STUDENT_FILES:
        origin, copy = package_dir(relative.split("/")[0]).parent / relative, packages / relative
        if origin.is_dir():
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(origin, copy, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, copy)
    _open_to_all(prefix)
    return python


def _site_packages() -> Path:
    return Path(sys.prefix) / "lib" / "python3.11" / "site-packages"


def shield_checkout(group: str) -> list[tuple[Path, int, int]]:
    """Make the grader's checkout unreadable to students, readable by the staff ``group``.

    A checkout (this repository) holds ``mlbook/labs`` (hidden checks, catalogues), ``source/``
    (the reference solutions), and the demo class's work: every entry but ``SHARED_ENTRIES``
    loses all access for other accounts and takes ``group`` with read access. Only the entry
    itself changes (a folder without search permission hides all below it). Returns what it
    changed, as (path, mode, gid) before, for ``unshield``. An installed grader (no checkout: the
    package in site-packages) shields ``mlbook/labs`` alone.
    """
    gid = grp.getgrnam(group).gr_gid
    package = package_dir("mlbook")
    root = package.parent
    is_checkout = (root / "pyproject.toml").is_file()
    entries = [p for p in root.iterdir() if p.name not in SHARED_ENTRIES] if is_checkout else [package / "labs"]
    changed = []
    for path in entries:
        if path.is_symlink():
            continue
        st = path.lstat()
        changed.append((path, stat.S_IMODE(st.st_mode), st.st_gid))
        os.chown(path, -1, gid)
        os.chmod(path, (stat.S_IMODE(st.st_mode) & ~0o007) | (0o050 if path.is_dir() else 0o040))
    return changed


def unshield(changed: list[tuple[Path, int, int]]) -> None:
    """Put back what ``shield_checkout`` changed."""
    for path, mode, gid in changed:
        try:
            os.chown(path, -1, gid)
            os.chmod(path, mode)
        except OSError:
            pass


def nbgrader_config(site: HubSite, role: str, course: HubCourse | None = None) -> str:
    """The nbgrader config of ``role``'s servers ("staff" or "student"), as the text of a config file.

    Args:
        site: the hub.
        role: "staff" or "student".
        course: the staff's course (default: the hub's first).

    Returns:
        The config. On an LTI hub a student's names no course: their Assignments tab lists every
        course whose ``nbgrader-<course>`` group they are in (nbgrader's ``JupyterHubAuthPlugin``,
        the groups their launches gave them), and keeps each course's labs in a folder of the course
        (``~/<course id>/<lab>``: two courses may both have a lab 1).
    """
    course = course or site.courses()[0]
    lines = course.exchange.config_lines()
    if role == "student" and site.lti is not None:
        lines = "".join(line + "\n" for line in lines.splitlines() if not line.startswith("c.CourseDirectory.course_id"))
        lines += "c.Authenticator.plugin_class = 'nbgrader.auth.JupyterHubAuthPlugin'\n"
        # Two courses may release a lab of the same name: each course's work in its own folder.
        lines += "c.Exchange.path_includes_course = True\n"
    if role == "staff":
        # A user's server starts in the home folder: without the course's root named, the formgrader
        # takes the home for it and, the course lying outside the server's root, shows only an error.
        lines += f"c.CourseDirectory.root = {str(course.root)!r}\n"
        # The formgrader shows each student's notebook as a page of this server: none of its HTML may run.
        lines += "from mlbook.outputs import inert_html\ninert_html.configure(c)\n"
    return lines


def people_config(site: HubSite) -> str:
    """Who may enter and as whom, as hub config lines: PAM accounts named in ``site.staff`` and
    ``site.students``, or LTI 1.3 launches (``mlbook.hub.lti``), whose role comes from the launch."""
    course = site.exchange.course_id
    if site.lti is None:
        return f"""c.Authenticator.allowed_users = {set(site.staff + site.students)!r}
c.Authenticator.admin_users = {{{site.staff[0]!r}}}
c.JupyterHub.load_groups = {{'formgrade-{course}': {site.staff!r}, 'nbgrader-{course}': {site.students!r}}}


def staff_course(name):
    return ('staff', {str(site.course_root)!r}) if name in STAFF else ('', '')
"""
    lti = site.lti
    courses = {c.context_id: {"course_id": c.course_id, "root": str(c.root), "staff_group": c.exchange.staff_group}
               for c in site.courses()}
    roots = {c.course_id: str(c.root) for c in site.courses()}
    return f"""from mlbook.hub.lti import LaunchStore
c.JupyterHub.authenticator_class = 'mlbook.hub.lti.CourseLTIAuthenticator'
c.Authenticator.allow_all = True  # only a launch the platform signed gets in; the launch decides the role
c.Authenticator.manage_groups = True
c.Authenticator.auto_login = True
c.Authenticator.enable_auth_state = False
c.LocalAuthenticator.create_system_users = True
c.LocalAuthenticator.add_user_cmd = ['useradd', '-m', '-s', '/bin/bash']
c.CourseLTIAuthenticator.issuer = {lti.issuer!r}
c.CourseLTIAuthenticator.client_id = {{{lti.client_id!r}}}
c.CourseLTIAuthenticator.authorize_url = {lti.auth_url!r}
c.CourseLTIAuthenticator.jwks_endpoint = {lti.jwks_url!r}
c.CourseLTIAuthenticator.deployment_ids = [{lti.deployment_id!r}]
c.CourseLTIAuthenticator.username_key = 'sub'
c.CourseLTIAuthenticator.uri_scheme = 'http'  # 127.0.0.1 only; behind TLS, 'https'
c.CourseLTIAuthenticator.account_prefix = {lti.account_prefix!r}
c.CourseLTIAuthenticator.lms_name = {lti.lms_name!r}
c.CourseLTIAuthenticator.courses = {courses!r}
c.CourseLTIAuthenticator.store_path = {str(site.folder / 'lti.sqlite')!r}
LAUNCHES = LaunchStore({str(site.folder / 'lti.sqlite')!r})


ROOTS = {roots!r}
c.Spawner.server_token_scopes = ['users:activity!user', 'access:servers!server', 'read:users:name!user',
                                 'read:users:groups!user']  # nbgrader's JupyterHubAuthPlugin reads the groups


def staff_course(name):
    # ('staff-<course>', its folder) for staff of a course (the first, by id, if several), else ('', '')
    staff = sorted(c for c, role in LAUNCHES.enrolments(name).items() if role == 'staff')
    return ('staff-' + staff[0], ROOTS[staff[0]]) if staff else ('', '')
"""


def write_site(site: HubSite) -> Path:
    """Write the hub's config and the two Jupyter profiles; returns the config file."""
    if not PROXY.is_file():
        raise MlbookError(f"no configurable-http-proxy at {PROXY}: run `make setup`")
    site.folder.mkdir(parents=True, exist_ok=True)
    os.chmod(site.folder, 0o755)  # profiles are read by every account; secrets below are 0600
    site.port = site.port or free_port()
    site.hub_port = site.hub_port or free_port()
    site.proxy_api_port = site.proxy_api_port or free_port()
    # Profiles: "student", and "staff" (PAM hub) or "staff-<course id>" for each course (LTI hub).
    staff_profiles = {"staff": site.courses()[0]} if site.lti is None else {f"staff-{c.course_id}": c for c in site.courses()}
    for role_profile in ("student", *staff_profiles):
        role = "student" if role_profile == "student" else "staff"
        profile = site.profile(role_profile)
        (profile / "config").mkdir(parents=True, exist_ok=True)
        for relative, values in LAB_SETTINGS.items():
            path = profile / "settings" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values, indent=2))
        server = ["c.LabApp.expose_app_in_browser = True", "c.LabApp.extension_manager = 'readonly'",
                  f"c.LabApp.app_dir = {str(Path(sys.prefix) / 'share' / 'jupyter' / 'lab')!r}"]
        if role == "staff":
            server.append("c.ServerApp.jpserver_extensions = {'mlbook.hub.guard': True}")
            # JupyterHub's single-user servers refuse every frame ('none'); the formgrader panel is a frame of
            # the server's own pages, so staff servers allow frames of their own origin, and only those.
            server.append("c.ServerApp.tornado_settings = {'headers': {'Content-Security-Policy': "
                          "\"frame-ancestors 'self'\"}}")
        else:  # no formgrader or assignment creation for students
            server.append("c.ServerApp.jpserver_extensions = {'nbgrader.server_extensions.formgrader': False}")
        for name in ("jupyter_server_config.py", "jupyter_lab_config.py"):
            (profile / "config" / name).write_text("\n".join(server) + "\n")
        (profile / "config" / "nbgrader_config.py").write_text(nbgrader_config(site, role, staff_profiles.get(role_profile)))
        for path in [profile, *profile.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    secret = site.folder / "cookie_secret"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32))
    os.chmod(secret, 0o600)
    token_file = site.folder / "proxy_token"
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(24))
    os.chmod(token_file, 0o600)
    proxy_token = token_file.read_text().strip()
    pythons = {"staff": str(staff_python(site.folder)), "student": str(student_python(site.folder))}
    env_common = {"JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"), "OMP_NUM_THREADS": "1",
                  "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **site.extra_env}
    config = f"""# Written by mlbook.hub.site (the course's hub); edit HubSite, not this file.
import os
c = get_config()  # noqa: F821
c.JupyterHub.ip = '127.0.0.1'
c.JupyterHub.port = {site.port}
c.JupyterHub.hub_ip = '127.0.0.1'
c.JupyterHub.hub_port = {site.hub_port}
c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{site.proxy_api_port}'
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.ConfigurableHTTPProxy.auth_token = {proxy_token!r}
c.JupyterHub.db_url = 'sqlite:///' + {str(site.folder / 'jupyterhub.sqlite')!r}
c.JupyterHub.cookie_secret_file = {str(secret)!r}
c.JupyterHub.pid_file = {str(site.folder / 'jupyterhub.pid')!r}
c.JupyterHub.cleanup_servers = True
{people_config(site)}
PYTHONS = {pythons!r}
c.Spawner.default_url = '/lab'
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 300
c.Spawner.ip = '127.0.0.1'
STAFF = {set(site.staff)!r}
COMMON = {env_common!r}


def pre_spawn(spawner):
    profile_name, root = staff_course(spawner.user.name)
    role = 'staff' if profile_name else 'student'
    profile = os.path.join({str(site.folder / 'profiles')!r}, profile_name or 'student')
    spawner.cmd = [PYTHONS[role], '-m', 'jupyterhub.singleuser']  # students' has no grader in it
    spawner.environment.update(COMMON)
    spawner.environment['PATH'] = os.path.dirname(PYTHONS[role]) + ':/usr/local/bin:/usr/bin:/bin'
    spawner.environment['JUPYTER_CONFIG_PATH'] = os.path.join(profile, 'config') + ':' + {str(Path(sys.prefix) / 'etc' / 'jupyter')!r}
    spawner.environment['JUPYTERLAB_SETTINGS_DIR'] = os.path.join(profile, 'settings')
    spawner.notebook_dir = root if role == 'staff' else '~'


c.Spawner.pre_spawn_hook = pre_spawn
"""
    path = site.folder / "jupyterhub_config.py"
    path.write_text(config)
    os.chmod(path, 0o600)
    return path


@dataclass
class RunningHub:
    """A started hub (the leader of its own process group: proxy and user servers included)."""

    site: HubSite
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, kill: bool = False) -> None:
        """Stop the hub: SIGTERM (it stops the user servers and the proxy), or SIGKILL of the
        hub process alone (``kill``: a crash; the proxy and servers are left running)."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def start_hub(site: HubSite, timeout_s: float = START_TIMEOUT_S) -> RunningHub:
    """Start the hub of ``site`` (as root) and wait until it answers on its public URL."""
    if os.geteuid() != 0:
        raise MlbookError("the hub spawns each person's server as their own account: run it as root")
    config = write_site(site)
    log = site.folder / "jupyterhub.log"
    with open(log, "ab") as handle:
        process = subprocess.Popen([str(Path(sys.executable).parent / "jupyterhub"), "-f", str(config)],
                                   cwd=site.folder, stdout=handle, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    hub = RunningHub(site, process, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise MlbookError(f"jupyterhub exited with code {process.returncode}; its log ends:\n{hub.log_tail()}")
        try:
            with urllib.request.urlopen(site.url + "hub/api", timeout=10) as reply:
                if reply.status == 200:
                    return hub
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    hub.stop()
    raise MlbookError(f"jupyterhub did not answer on {site.url} within {timeout_s:.0f} s; its log ends:\n{hub.log_tail()}")
