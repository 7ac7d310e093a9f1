"""The course calendar: when each lab is released and due, who has longer, and what lateness costs.

Below grading and everything after it: grading writes the due dates and extensions into
nbgrader's gradebook and nbgrader's late-submission plugin charges the penalty; the outputs show
it; ``lms`` and ``hub`` release on the schedule. Each is handed these decisions as values read
from here, never the other way round.

Modules:
- ``schedule``    ``course.toml``: each lab's release and due date (explicit time zone) and the
                  late policy; the due dates written into nbgrader's gradebook;
- ``extensions``  ``extensions.toml``: per-student extensions (``mlbook extend``);
- ``late``        hours late and the penalty (one function, used by nbgrader's late-submission
                  plugin at autograde and by every output that shows a score).
"""
