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
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import MlbookError

LAB_PATTERN = re.compile(r"lab\d\d_[a-z0-9_]+")
CONFIG_NAME = "nbgrader_config.py"


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

    def submitted(self, student: str, lab: str) -> Path:
        return self.submitted_dir / student / lab

    def autograded(self, student: str, lab: str) -> Path:
        return self.root / "autograded" / student / lab / f"{lab}.ipynb"

    def feedback(self, student: str, lab: str) -> Path:
        return self.root / "feedback" / student / lab / f"{lab}.html"

    @property
    def status_file(self) -> Path:
        return self.root / "autograded" / ".mlbook-status.json"

    @property
    def exports_dir(self) -> Path:
        return self.root / "exports"

    @property
    def db_url(self) -> str:
        """The gradebook: ``CourseDirectory.db_url`` from the course's nbgrader config when set
        (e.g. a PostgreSQL server the TAs share), else ``gradebook.db`` in the course folder."""
        configured = _configured_db_url(self.config, self.config.stat().st_mtime if self.config.is_file() else 0)
        return configured or f"sqlite:///{self.root / 'gradebook.db'}"

    def students(self, lab: str | None = None) -> list[str]:
        """Students with a submission folder (for ``lab`` when given)."""
        if not self.submitted_dir.is_dir():
            return []
        return sorted(
            p.name for p in self.submitted_dir.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (lab is None or (p / lab).is_dir())
        )

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
