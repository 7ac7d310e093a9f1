"""A course's SQLite gradebook is created with the grading account's umask.

SQLite on its own creates a database 0644 less the umask, never group-writable: in a course
folder shared with the staff group (umask 007, as on the hub), TAs could read the gradebook but
not save a manual grade in the formgrader. ``mlbook.nbgrader_env`` creates the file first.
"""

from __future__ import annotations

import os
import stat

import pytest

from harness import LABS, REPO
from mlbook import nbgrader_env


@pytest.mark.parametrize(("umask", "mode"), [(0o007, 0o660), (0o022, 0o644)])
def test_a_new_gradebook_takes_the_umask_so_a_staff_group_can_write_it(tmp_path, umask, mode):
    course = REPO.scratch_copy(tmp_path / "course", LABS[:1])
    previous = os.umask(umask)
    try:
        with nbgrader_env.gradebook(course) as gb:
            gb.add_student("ada")  # a write: the schema and a row reach the file
    finally:
        os.umask(previous)
    path = course.root / "gradebook.db"
    assert stat.S_IMODE(path.stat().st_mode) == mode, oct(path.stat().st_mode)
    with nbgrader_env.gradebook(course) as gb:  # the file SQLite found empty is a real gradebook
        assert [s.id for s in gb.students] == ["ada"]


def test_an_existing_gradebook_keeps_its_mode(tmp_path):
    course = REPO.scratch_copy(tmp_path / "course", LABS[:1])
    with nbgrader_env.gradebook(course) as gb:
        gb.add_student("ada")
    path = course.root / "gradebook.db"
    os.chmod(path, 0o600)
    with nbgrader_env.gradebook(course) as gb:
        gb.add_student("bo")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
