"""A Jupyter server extension for staff servers: the formgrader's Autograde button runs nothing.

nbgrader's formgrader autogrades a submission inside the TA's own server: the student's code
runs as the TA, outside any sandbox, and the verdicts come from the student's own kernel.
This extension answers the button's request (``/formgrader/api/submission/<lab>/<student>/autograde``)
before the formgrader does, with a failure whose message says to grade with ``mlbook autograde``
on the grading account. Nothing is run and nothing is written.
"""

from __future__ import annotations

import json

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

MESSAGE = ("Autograding from the formgrader is switched off on this hub: it would run the student's code "
           "as you, outside the grading sandbox, with the student's kernel deciding the verdicts. "
           "The grading account grades with `mlbook autograde {lab} --student {student}` "
           "(or `mlbook autograde --scheduler ...`); the results then show here.")


class RefuseAutograde(JupyterHandler):
    @web.authenticated
    def post(self, lab: str, student: str) -> None:
        self.log.warning("formgrader Autograde of %s/%s refused: mlbook autograde grades in the sandbox", lab, student)
        # As nbgrader's own handler answers (JSON text, tornado's default text/html type): the formgrader's
        # page calls JSON.parse on the reply, which fails on a reply jQuery has already parsed as JSON, and
        # then shows no dialog at all.
        self.finish(json.dumps({"success": False, "error": MESSAGE.format(lab=lab, student=student),
                                "log": MESSAGE.format(lab=lab, student=student)}))


def _jupyter_server_extension_points():
    return [{"module": "mlbook.hub.guard"}]


def _load_jupyter_server_extension(server_app) -> None:
    webapp = server_app.web_app
    pattern = url_path_join(webapp.settings["base_url"], r"/formgrader/api/submission/([^/]+)/([^/]+)/autograde")
    rules = webapp.default_router.rules
    before = set(map(id, rules))
    webapp.add_handlers(".*$", [(pattern, RefuseAutograde)])
    ours = next(rule for rule in rules if id(rule) not in before)
    rules.remove(ours)
    rules.insert(0, ours)  # ahead of the formgrader's handlers, whichever extension loaded first
    server_app.log.info("mlbook.hub.guard: the formgrader's Autograde button points to `mlbook autograde`")
