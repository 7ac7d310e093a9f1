"""``mlbook hub demo``: a local demo hub of the course for an instructor who wants to try it.

As root: creates the accounts ``mlbook-instructor``, ``mlbook-ta`` and ``mlbook-student1..3``
(random passwords, printed) and the group ``mlbook-staff``, copies the course (config, every
lab's source and release) to ``--folder``, prepares the exchange there, releases lab 1, shields
this checkout from the students (``site.shield_checkout``) and runs the hub on
http://127.0.0.1:PORT/ until Ctrl+C. The accounts and the folder are removed, and the
checkout's permissions put back, when it stops.

``--lti``: people enter by LTI 1.3 launch from the test platform (``mlbook.hub.lti_platform``,
started beside the hub) instead of passwords; the launch links of a student, a TA and an
instructor are printed, and the accounts the launches made are removed at the end.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from mlbook.errors import MlbookError

GROUP = "mlbook-staff"
STAFF = ["mlbook-instructor", "mlbook-ta"]
STUDENTS = ["mlbook-student1", "mlbook-student2", "mlbook-student3"]


def _account(name: str, staff: bool) -> str:
    extra = ["-G", GROUP] if staff else []
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", *extra, name], check=True, capture_output=True)
    password = secrets.token_urlsafe(9)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    os.chmod(Path("/home") / name, 0o700)
    return password


LTI_PREFIX = "mlbook-lti-"


def _lti_platform(site, course_id: str):
    """The test LTI 1.3 platform (``mlbook.hub.lti_platform``) with a student, a TA and an
    instructor of the demo course, started, and the hub registered with it."""
    from mlbook.hub.lti_platform import Context, Person, Platform, Tool
    from mlbook.hub.site import LtiLaunch, free_port

    platform = Platform().start()
    platform.contexts = {course_id: Context(course_id, "ATT101", "Attention labs (demo)")}
    platform.people = {"student": Person("student", "Sam", "Student", {course_id: "student"}),
                       "ta": Person("ta", "Tess", "Assistant", {course_id: "ta"}),
                       "instructor": Person("instructor", "Ines", "Instructor", {course_id: "instructor"})}
    site.port = site.port or free_port()
    site.lti = LtiLaunch(platform.issuer, "mlbook-hub", "demo-deployment", platform.auth_url, platform.jwks_url,
                         account_prefix=LTI_PREFIX, lms_name="the demo LTI platform")
    platform.tool = Tool(site.lti.client_id, site.lti.deployment_id, site.lti.login_url(site),
                         [site.lti.redirect_uri(site)], site.url + "hub/", jwks={"keys": []})
    return platform


def _stop(_signum, _frame) -> None:
    raise KeyboardInterrupt  # SIGTERM (a service manager, `kill`) cleans up as Ctrl+C does


def run_demo(course, args) -> int:
    from mlbook.hub.exchange import Exchange, prepare_exchange, release
    from mlbook.hub.site import HubSite, shield_checkout, start_hub, unshield

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    if os.geteuid() != 0:
        raise MlbookError("`mlbook hub demo` creates system accounts and spawns their servers: run it as root")
    folder = Path(args.folder)
    if folder.exists():
        raise MlbookError(f"{folder} exists: remove it or pass another --folder")
    subprocess.run(["groupadd", GROUP], check=True, capture_output=True)
    passwords, hub, shielded = {}, None, []
    try:
        for name in STAFF + STUDENTS:
            passwords[name] = _account(name, name in STAFF)
        folder.mkdir(parents=True)
        os.chmod(folder, 0o755)
        labs = course.labs()
        demo = course.scratch_copy(folder / "course", labs)
        for lab in labs:
            shutil.copytree(course.release(lab).parent, demo.release(lab).parent, dirs_exist_ok=True)
        exchange = Exchange(folder / "exchange", "attention-labs", GROUP)
        with open(demo.config, "a") as handle:
            handle.write("\n# The demo hub's exchange (mlbook hub demo)\n" + exchange.config_lines())
        subprocess.run(["chgrp", "-R", GROUP, str(demo.root)], check=True)
        subprocess.run(["chmod", "-R", "u+rwX,g+rwX,o-rwx", str(demo.root)], check=True)
        prepare_exchange(exchange)
        release(demo, labs[0], exchange)
        shielded = shield_checkout(GROUP)  # the grader's checkout: the staff's, never the students'
        site = HubSite(folder / "hub", demo.root, exchange, STAFF, STUDENTS, port=args.port)
        if getattr(args, "lti", False):
            platform = _lti_platform(site, exchange.course_id)
            hub = start_hub(site)
            print(f"the course's hub: {site.url} (127.0.0.1 only), entered from the test LTI platform "
                  f"{platform.url}; {labs[0]} is released. Open a launch link:")
            for key, person in platform.people.items():
                role = person.memberships[exchange.course_id]
                print(f"  {key:12} ({role:10}) {platform.launch_url(key, exchange.course_id)}")
            print("Ctrl+C stops the hub, the platform, and removes the accounts the launches made.")
            while hub.process.poll() is None:
                time.sleep(1)
            return 1
        hub = start_hub(site)
        print(f"the course's hub: {site.url} (127.0.0.1 only); {labs[0]} is released. Log in as:")
        for name, password in passwords.items():
            print(f"  {name:18} {password}   ({'staff' if name in STAFF else 'student'})")
        print(f"grade as root in {demo.root}: mlbook hub collect {labs[0]}; mlbook autograde {labs[0]}; "
              f"mlbook hub feedback {labs[0]}.  Ctrl+C stops the hub and removes the accounts.")
        while hub.process.poll() is None:
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        # A second Ctrl+C or SIGTERM (a shell's, a service manager's) must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if hub is not None:
            hub.stop()
        unshield(shielded)
        launched = [p.pw_name for p in pwd.getpwall() if p.pw_name.startswith(LTI_PREFIX)]
        for name in [*passwords, *launched]:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        subprocess.run(["groupdel", GROUP], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
