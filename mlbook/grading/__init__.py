"""Autograding: prepare -> execute in the sandbox -> record in nbgrader's gradebook.

- ``prepare``    find each submission (renamed notebooks too) and sanitize it, nbgrader's way;
- ``executors``  run the prepared notebooks in sandboxes, on local threads or a Dask cluster;
- ``verdicts``   turn the judge's verdicts into the test cells' outputs nbgrader scores;
- ``record``     nbgrader's autograder with the sandbox result in place of its kernel (one writer);
- ``register``   put a lab in the gradebook before its first submission;
- ``run``        the whole class, resumable, with a progress bar.
"""

from ..nbgrader_env import api_for
from .register import assignment_registered, register_assignment
from .run import GradingOptions, GradingRun, autograde, autograde_labs

__all__ = ["autograde", "autograde_labs", "GradingOptions", "GradingRun", "assignment_registered",
           "register_assignment", "api_for"]
