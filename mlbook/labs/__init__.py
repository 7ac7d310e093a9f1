"""Per-lab grading material (grader only): one package per lab, ``mlbook/labs/<lab>/``.

- ``hidden.py`` (or a ``hidden/`` package): the hidden checks the judge runs (``mlbook.judge.server``),
  written with the lab kit (``mlbook.labs.kit``);
- ``catalogue.py``: misconception mutants and alternative correct solutions (written with
  ``mlbook.authoring.catalogue``, read by ``load_catalogue`` here);
- ``__init__.py``: the lab's settings, read here once (``settings``), each optional:

  ``COVERED_BY``
      visible test cell -> the cells whose verdicts it also needs (default ``<cell>_hidden``
      when that cell exists; an explicit ``()``: the cell checks answer data only).
  ``NOT_REPLAYED``
      test cells the judge cannot re-run outside the kernel, decided by their covering cells.
  ``FORBIDDEN_CALLS``
      answer cell -> library names the task forbids, flagged for a TA (``mlbook.grading.policy``).
  ``EXTRA_FILES``
      files besides the notebook a submission may hand in and the grader takes in (none today).
  ``SANDBOX_PROFILE``
      the name of the sandbox its notebooks run in (default ``"standard"``; what each name means:
      ``mlbook.sandbox.profiles``). ``"memory"`` is for hidden checks that measure the kernel's
      memory from outside (``mlbook.sandbox.procmem``): only there does the sandbox set the
      allocator so that resident memory follows what the kernel holds, a setting that slows
      allocation-heavy notebooks, and only there does a check learn the sandbox's root pid.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mlbook.authoring.catalogue import Catalogue, resolve_cells

# A course may keep its labs' grading material outside this package (a private repository of
# hidden tests, a lab added next term): each folder named in MLBOOK_LABS_PATH (separated by
# os.pathsep) holds more ``<lab>/`` packages, imported as ``mlbook.labs.<lab>`` like these.
__path__ += [folder for folder in os.environ.get("MLBOOK_LABS_PATH", "").split(os.pathsep) if folder]


@dataclass(frozen=True)
class LabSettings:
    lab: str
    covered_by: dict[str, tuple[str, ...]]
    not_replayed: frozenset[str]
    forbidden_calls: dict[str, tuple[str, ...]]
    extra_files: tuple[str, ...]
    sandbox_profile: str = "standard"


def lab_module(lab: str, name: str | None = None) -> ModuleType:
    """Import ``mlbook.labs.<lab>`` (or its module ``name``), with a clear error when there is none."""
    qualname = f"mlbook.labs.{lab}" + (f".{name}" if name else "")
    try:
        return importlib.import_module(qualname)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == qualname or qualname.startswith(exc.name + ".")):
            from mlbook.errors import MlbookError

            raise MlbookError(f"lab {lab} has no grading {'module' if name else 'package'} "
                              f"mlbook/labs/{lab}/{name + '.py' if name else ''}") from None
        raise


@functools.lru_cache(maxsize=None)
def settings(lab: str) -> LabSettings:
    """The settings ``mlbook/labs/<lab>/__init__.py`` declares, with their defaults."""
    module = lab_module(lab)
    extra = tuple(getattr(module, "EXTRA_FILES", ()))
    for name in extra:
        if not name or name in (".", "..") or "/" in name or "\0" in name or name.endswith(".ipynb"):
            raise ValueError(f"{lab}: EXTRA_FILES names a file by a plain name, not a notebook: {name!r}")
    return LabSettings(
        lab=lab,
        covered_by={gid: tuple(cells) for gid, cells in getattr(module, "COVERED_BY", {}).items()},
        not_replayed=frozenset(getattr(module, "NOT_REPLAYED", ())),
        forbidden_calls={gid: tuple(names) for gid, names in getattr(module, "FORBIDDEN_CALLS", {}).items()},
        extra_files=extra,
        sandbox_profile=str(getattr(module, "SANDBOX_PROFILE", "standard")),
    )


def _repository_source(lab: str) -> Path:
    return Path(__file__).resolve().parents[2] / "source" / lab / f"{lab}.ipynb"


def load_catalogue(lab: str, source: Path | None = None) -> Catalogue:
    """Read a lab's catalogue, with every cell resolved against the lab's reference answers.

    Args:
        lab: the lab's name.
        source: its source notebook (default: the repository's ``source/<lab>/<lab>.ipynb``),
            whose solution blocks are the reference answers that patches edit.
    Raises:
        ValueError: a name is not usable as a student id, or two entries share one.
        MlbookError: a patch does not apply to the reference.
    """
    module = lab_module(lab, "catalogue")
    mutants = tuple(getattr(module, "MUTANTS", ()))
    alternatives = tuple(getattr(module, "ALTERNATIVES", ()))
    names = [m.name for m in mutants] + [a.name for a in alternatives]
    for name in names:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise ValueError(f"{lab}: catalogue name {name!r} must match [a-z0-9-]+")
    if len(set(names)) != len(names):
        raise ValueError(f"{lab}: catalogue names must be unique")
    answers = _reference_answers(source or _repository_source(lab))
    resolve = lambda entry: dataclasses.replace(  # noqa: E731
        entry, cells=resolve_cells(entry.cells, answers, f"{lab} catalogue entry {entry.name!r}"))
    return Catalogue(lab, tuple(map(resolve, mutants)), tuple(map(resolve, alternatives)))


def _reference_answers(source: Path) -> dict[str, str]:
    from mlbook.authoring.notebooks import read_nb, reference_answers

    return reference_answers(read_nb(source)) if source.is_file() else {}
