"""Autograding a class: intake -> prepare -> execute in sandboxes -> record in nbgrader's gradebook.

- ``intake``     ``submitted/<student>/<lab>/`` checked without following links, copied privately;
- ``prepare``    find each submission's notebook (renamed ones too) and sanitize it, nbgrader's way;
- ``policy``     library shortcuts a task forbids, flagged for a TA (never a score change);
- ``admission``  how many sandboxes run at once (one per core, more while cores sit idle);
- ``executors``  run prepared notebooks in sandboxes, on local threads or a Dask cluster; a
                 grader error is retried, then recorded;
- ``record``     nbgrader's autograder with the sandbox result in place of its kernel (one writer);
- ``register``   put a lab in the gradebook before its first submission;
- ``status``     how each grading attempt ended (graded, or error with its reason), with timings;
- ``batch``      the whole class, every lab in one batch, resumable, with a progress bar.
"""

from mlbook.nbgrader_env import api_for
from mlbook.grading.register import assignment_registered, register_assignment
from mlbook.grading.batch import GradingOptions, GradingRun, autograde, autograde_labs

__all__ = ["autograde", "autograde_labs", "GradingOptions", "GradingRun", "assignment_registered",
           "register_assignment", "api_for"]
