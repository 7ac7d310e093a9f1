"""The course on a JupyterHub: nbgrader's exchange, hardened (``exchange``), the hub and the
people's profiles (``site``), the formgrader's Autograde button pointed to ``mlbook autograde``
(``guard``), the ``mlbook hub`` commands (``commands``) and a local demo hub for an instructor to
try (``demo``).

The loop: ``mlbook hub release LAB`` -> students fetch, work, validate and submit in their
Assignments tab -> ``mlbook hub collect LAB`` -> ``mlbook autograde LAB`` (sandboxed) -> manual
grades in the formgrader -> ``mlbook hub feedback LAB`` -> students fetch their feedback.
"""
