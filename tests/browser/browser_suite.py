"""What the browser suite's modules share: its xdist group, the course, the browser to launch.

Every test module of this folder sets ``pytestmark = pytest.mark.xdist_group(GROUP)``, so under
``pytest -n 2 --dist loadgroup`` the whole suite runs on one worker with one server and one browser.
"""

from __future__ import annotations

from pathlib import Path

from mlbook.course import Course

GROUP = "browser"
REPO = Course(Path(__file__).resolve().parents[2])  # the repository's course: the labs under test
CHROMIUM = "/usr/bin/chromium"  # Debian's package (`make system`); Playwright's own download is not used
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
WORKSPACE = "browser-suite"  # the JupyterLab workspace the suite's page uses
