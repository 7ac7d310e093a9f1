"""``SchedulePenalty`` where course configurations written before ``mlbook.calendar`` name it.

A course's ``nbgrader_config.py`` imports nbgrader's late-submission plugin by this path
(``from mlbook.lms.late import SchedulePenalty``); the penalty itself is ``mlbook.calendar.late``.
"""

from mlbook.calendar.late import SchedulePenalty

__all__ = ["SchedulePenalty"]
