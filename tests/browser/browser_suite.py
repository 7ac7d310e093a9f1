"""What the browser suite's modules share: its xdist group, the course, the page size.

Every test module of this folder sets ``pytestmark = pytest.mark.xdist_group(GROUP)``, so under
``pytest -n 2 --dist loadgroup`` the whole suite runs on one worker with one server and one browser.
"""

from __future__ import annotations

from pathlib import Path

from mlbook.course import Course

GROUP = "browser"
REPO = Course(Path(__file__).resolve().parents[2])  # the repository's course: the labs under test
VIEWPORT = {"width": 1400, "height": 900}
WORKSPACE = "browser-suite"  # the JupyterLab workspace the suite's page uses
