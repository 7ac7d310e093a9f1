"""Where everything lives in a course directory.

Conventions:
- A course directory is any folder holding ``nbgrader_config.py``; the repository is one, and
  the tests and the build make throw-away ones.
- A lab is named ``labNN_topic``; its authored file is ``notebooks/<lab>.py`` and nbgrader's
  assignment id and notebook name are the lab name itself.
- nbgrader's own folders keep nbgrader's names: ``source/``, ``release/``, ``submitted/``,
  ``autograded/``, ``feedback/``; mlbook adds ``exports/`` (CSV) and a status file that records
  how each grading attempt ended.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import unicodedata
import warnings
from dataclasses import dataclass
from pathlib import Path

from mlbook.errors import MlbookError

LAB_PATTERN = re.compile(r"lab\d\d_[a-z0-9_]+")
CONFIG_NAME = "nbgrader_config.py"


def student_id_problem(student: str) -> str:
    """Why ``student`` cannot be a student id (a folder name under ``submitted/`` that every
    other folder of the course is named after), or "" when it can. A student names their folder:
    an id that is empty, starts with a dot (``.``, ``..``, hidden), holds a path separator or a
    control character would make the grader's paths leave the course or hide from a TA."""
    if not isinstance(student, str) or not student:
        return "a student id must not be empty"
    if student.startswith("."):
        return f"the student id {student!r} starts with a dot"
    if any(sep in student for sep in {"/", "\\", os.sep, os.altsep or "/"}):
        return f"the student id {student!r} contains a path separator"
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in student):
        return f"the student id {student!r} contains a control character"
    return ""


def _checked(student: str) -> str:
    if problem := student_id_problem(student):
        raise MlbookError(f"refused: {problem}")
    return student


@dataclass(frozen=True)
class Course:
    """Paths of one course directory."""

    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Course":
        """The course containing ``start`` (default: the working directory) or the repository."""
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).is_file() and (folder / "notebooks").is_dir():
                return cls(folder)
        raise MlbookError(f"no course here: no folder above {here} holds {CONFIG_NAME} and notebooks/")

    # --- authored and built files -------------------------------------------------------
    def labs(self) -> list[str]:
        """Every lab authored in ``notebooks/``, in order."""
        return sorted(p.stem for p in (self.root / "notebooks").glob("lab*.py") if LAB_PATTERN.fullmatch(p.stem))

    def resolve_labs(self, names: list[str] | None) -> list[str]:
        """Expand user-given lab names (full name, or a prefix such as ``lab01``) or all labs."""
        known = self.labs()
        if not names:
            return known
        chosen = []
        for name in names:
            hits = [lab for lab in known if lab == name or lab.startswith(name + "_")]
            if len(hits) != 1:
                raise MlbookError(f"unknown lab {name!r}; labs here: {', '.join(known) or 'none'}")
            chosen.append(hits[0])
        return chosen

    def authored(self, lab: str) -> Path:
        return self.root / "notebooks" / f"{lab}.py"

    def source(self, lab: str) -> Path:
        return self.root / "source" / lab / f"{lab}.ipynb"

    def release(self, lab: str) -> Path:
        return self.root / "release" / lab / f"{lab}.ipynb"

    def build_manifest(self, lab: str) -> Path:
        return self.root / "release" / lab / ".mlbook-build.json"

    # --- nbgrader's working folders -----------------------------------------------------
    @property
    def config(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def submitted_dir(self) -> Path:
        return self.root / "submitted"

    # Every path named after a student checks the id first (``student_id_problem``): a crafted
    # id raises MlbookError instead of naming a path outside the course.
    def submitted(self, student: str, lab: str) -> Path:
        return self.submitted_dir / _checked(student) / lab

    def autograded(self, student: str, lab: str) -> Path:
        return self.root / "autograded" / _checked(student) / lab / f"{lab}.ipynb"

    def feedback(self, student: str, lab: str) -> Path:
        return self.root / "feedback" / _checked(student) / lab / f"{lab}.html"

    @property
    def status_file(self) -> Path:
        return self.root / "autograded" / ".mlbook-status.json"

    @property
    def exports_dir(self) -> Path:
        return self.root / "exports"

    @property
    def db_url(self) -> str:
        """The gradebook: ``CourseDirectory.db_url`` from the course's nbgrader config when set
        (e.g. a PostgreSQL server the TAs share; a relative SQLite path is taken from the course
        folder, not the working directory), else ``gradebook.db`` in the course folder."""
        configured = _configured_db_url(self.config, self.config.stat().st_mtime if self.config.is_file() else 0)
        if configured and configured.startswith("sqlite:///") and not configured[len("sqlite:///"):].startswith("/"):
            return f"sqlite:///{self.root / configured[len('sqlite:///'):]}"  # relative: to the course root
        return configured or f"sqlite:///{self.root / 'gradebook.db'}"

    def students(self, lab: str | None = None) -> list[str]:
        """Students with a submission folder (for ``lab`` when given).

        Listed from the entries themselves (``lstat``): a student folder, or a lab folder in it,
        that is a symbolic link is listed too, so that grading refuses it with its reason
        (``mlbook.grading.intake``) instead of following it or leaving it out unseen. An entry
        whose name cannot be a student id (``student_id_problem``) is skipped with a warning; a
        hidden one (a leading dot) silently.
        """
        if not self.submitted_dir.is_dir():
            return []
        found = []
        for p in self.submitted_dir.iterdir():
            try:
                mode = p.lstat().st_mode
            except OSError:
                continue
            if not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                continue  # a stray file next to the student folders: nobody's submission
            if p.name.startswith("."):
                continue  # hidden (.ipynb_checkpoints, say): nobody's submission, as in nbgrader
            if problem := student_id_problem(p.name):
                warnings.warn(f"skipped {p.name!r} in {self.submitted_dir}: {problem}", stacklevel=2)
                continue
            if lab is None or self.has_submission(p.name, lab):
                found.append(p.name)
        return sorted(found)

    def has_submission(self, student: str, lab: str) -> bool:
        """Whether ``submitted/<student>/<lab>`` is there at all, link or not (no link is
        followed: a student folder that is a link counts for every lab, and is refused)."""
        entry = self.submitted_dir / _checked(student)
        return entry.is_symlink() or os.path.lexists(entry / lab)

    # --- scratch courses ----------------------------------------------------------------
    def scratch_copy(self, dest: Path, labs: list[str]) -> "Course":
        """A new course at ``dest`` with this course's config, and the authored and source notebooks of ``labs``."""
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.config, dest / CONFIG_NAME)
        (dest / "notebooks").mkdir(exist_ok=True)
        for lab in labs:
            shutil.copy2(self.authored(lab), dest / "notebooks" / f"{lab}.py")
            target = dest / "source" / lab
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.source(lab), target / f"{lab}.ipynb")
        return Course(dest)


@functools.lru_cache(maxsize=32)
def _configured_db_url(config: Path, mtime: float) -> str | None:
    if not config.is_file():
        return None
    from traitlets.config.loader import PyFileConfigLoader

    loaded = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    url = loaded.get("CourseDirectory", {}).get("db_url")
    return str(url) if url else None
