"""``mlbook release LAB``: the zip an instructor uploads to the LMS, one per lab.

What a student needs, and nothing else. The zip unpacks to one folder, ``<lab>/``, holding:
  <lab>.ipynb       the release notebook, byte for byte as built (``release/<lab>/<lab>.ipynb``)
  mlbook_helpers/   the helper modules the notebook imports, with the helper modules those
                    import and the package's ``__init__.py`` (found by reading the import
                    statements); no other helper module. Beside the notebook, Jupyter finds it.
  README.txt        what the folder holds, the pip command for the third-party packages the
                    notebook and those helpers import (pinned as in pyproject.toml) plus
                    nbgrader (``STUDENT_TOOLS``: its Validate button and ``nbgrader validate``
                    are how a student checks the visible tests before handing in), and how
                    to hand in.
Never in it: ``source/`` or any solution, hidden tests, rubrics, the build manifest, the
grader (``mlbook/``), other labs, or third-party packages themselves (torch alone is ~200 MB).

The zip is reproducible: members sorted, fixed timestamps, so the same release gives the same
bytes and ``mlbook check`` can tell a stale zip from a fresh one.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import sys
import zipfile
from pathlib import Path

from nbformat import NotebookNode

from mlbook import pyast
from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.files import write_atomic
from mlbook.authoring.notebooks import read_nb

HELPERS = "mlbook_helpers"
GRADER = "mlbook"
# What a student installs beside the notebook's imports: nbgrader gives JupyterLab its Validate
# button and the `nbgrader validate` command (the visible tests; hidden ones run at grading).
STUDENT_TOOLS = ("nbgrader", "jupyterlab")
# import name -> the distribution that provides it, where the two differ
DISTRIBUTIONS = {"IPython": "ipykernel"}
_EPOCH = (1980, 1, 1, 0, 0, 0)
_MAGIC = re.compile(r"^\s*[%!].*$", re.MULTILINE)


def default_path(course: Course, lab: str) -> Path:
    return course.exports_dir / "release" / f"{lab}.zip"


@functools.lru_cache(maxsize=256)  # the same helper modules are read for every lab
def _import_statements(code: str) -> tuple[tuple[int, str | None, tuple[str, ...]], ...]:
    """(level, module, names) of each import statement; level is -1 for ``import x``."""
    statements = []
    for node in ast.walk(pyast.parse(_MAGIC.sub("", code))):
        if isinstance(node, ast.Import):
            statements.append((-1, None, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            statements.append((node.level, node.module, tuple(alias.name for alias in node.names)))
    return tuple(statements)


def imports_of(code: str, package: str | None = None, where: str = "code") -> tuple[set[str], set[str]]:
    """The modules ``code`` imports.

    Args:
        code: Python source; IPython ``%magic`` and ``!shell`` lines are ignored.
        package: the package ``code`` belongs to, to resolve relative imports.
        where: what ``code`` is, for the error message.
    Returns:
        (modules, members): absolute names that must be modules, and the ``x.y`` of each
        ``from x import y``, which may be a module or a name defined in ``x``.
    """
    try:
        statements = _import_statements(code)
    except SyntaxError as exc:
        raise MlbookError(f"cannot read the imports of {where}: line {exc.lineno}: {exc.msg}") from None
    modules, members = set(), set()
    for level, module, names in statements:
        if level < 0:
            modules |= set(names)
        else:
            base = ".".join(filter(None, [package if level else None, module]))
            modules.add(base)
            members |= {f"{base}.{name}" for name in names}
    return modules, members


def notebook_code(nb: NotebookNode) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def _module_file(course: Course, name: str) -> Path | None:
    base = course.root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def helper_files(course: Course, lab: str, code: str) -> dict[str, Path]:
    """Every helper module the lab's release needs: path inside the course -> file.

    Args:
        course: the course (``mlbook_helpers/`` sits at its root).
        lab: the lab, for messages.
        code: the release notebook's code cells.

    Raises:
        MlbookError: the notebook or a helper imports a helper module that does not exist.
    """
    found: dict[str, Path] = {}
    todo = [(HELPERS, True), (f"{lab} notebook", None)]
    while todo:
        name, required = todo.pop()
        if required is None:  # the notebook itself
            modules, members = imports_of(code, where=f"release/{lab}")
        else:
            path = _module_file(course, name)
            if path is None and required:
                raise MlbookError(f"{lab} needs {name}, but {name.replace('.', '/')}.py does not exist")
            key = path and path.relative_to(course.root).as_posix()
            if path is None or key in found:
                continue
            found[key] = path
            parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
            todo += [(parent, True) for parent in parents]
            package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
            modules, members = imports_of(path.read_text(), package, where=key)
        todo += [(n, True) for n in modules if n.split(".")[0] == HELPERS]
        todo += [(n, False) for n in members if n.split(".")[0] == HELPERS]
    return dict(sorted(found.items()))


def third_party(course: Course, code: str, helpers: dict[str, Path]) -> list[str]:
    """The distributions the notebook (``code``) and its helpers import, pinned as in pyproject.toml."""
    texts = [code] + [p.read_text() for p in helpers.values()]
    tops = {name.split(".")[0] for text in texts for name in imports_of(text, HELPERS)[0]}
    tops -= set(sys.stdlib_module_names) | {HELPERS, GRADER}
    pins = _pins(course)
    distributions = sorted({DISTRIBUTIONS.get(top, top) for top in tops}, key=str.lower)
    return [pins.get(d.lower(), d) for d in distributions] + [pins.get(t, t) for t in STUDENT_TOOLS]


def _pins(course: Course) -> dict[str, str]:
    """distribution (lower case) -> its requirement in pyproject.toml (dependencies, then extras)."""
    pyproject = course.root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    import tomllib

    project = tomllib.loads(pyproject.read_text()).get("project", {})
    specs = [*project.get("dependencies", [])]
    specs += [spec for extra in project.get("optional-dependencies", {}).values() for spec in extra]
    pins: dict[str, str] = {}
    for spec in specs:
        pins.setdefault(re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0].lower(), spec)
    return pins


def readme(nb: NotebookNode, lab: str, requirements: list[str]) -> str:
    """README.txt: what the folder holds, how to install and open it, how to hand in."""
    title = next((line.lstrip("# ").strip() for c in nb.cells if c.cell_type == "markdown"
                  for line in c.source.splitlines() if line.startswith("# ")), lab)
    packages = " ".join(f'"{r}"' for r in requirements)
    return f"""{title}

This folder holds:
  {lab}.ipynb    the lab: open it in JupyterLab and work top to bottom
  mlbook_helpers/   code the notebook imports (examples, plots, checks); keep it next to the notebook
  README.txt     this file

Set up once (Python 3.11; a virtual environment keeps it apart from other work):
  python3.11 -m venv .venv
  . .venv/bin/activate            (Windows: .venv\\Scripts\\activate)
  pip install {packages}
  jupyter lab {lab}.ipynb

Before you hand in, check it: Kernel > Restart Kernel and Run All Cells, then the Validate
button in the notebook's toolbar, or from a terminal in this folder:
  nbgrader validate {lab}.ipynb
Either runs the visible tests and names each one that fails. Hidden tests are not in your copy:
they run on fresh inputs when your notebook is graded, so passing the visible ones is necessary,
not sufficient.
Hand in only {lab}.ipynb, under that name.
"""


def expected_files(course: Course, lab: str) -> dict[str, bytes]:
    """What the zip must hold: member name -> bytes (see the module docstring)."""
    if not course.release(lab).is_file():
        raise MlbookError(f"no release notebook for {lab}; run `mlbook build {lab}`")
    nb = read_nb(course.release(lab))
    code = notebook_code(nb)
    helpers = helper_files(course, lab, code)
    files = {f"{lab}/{lab}.ipynb": course.release(lab).read_bytes()}
    files |= {f"{lab}/{key}": path.read_bytes() for key, path in helpers.items()}
    files[f"{lab}/README.txt"] = readme(nb, lab, third_party(course, code, helpers)).encode()
    return dict(sorted(files.items()))


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in sorted(files.items()):
            info = zipfile.ZipInfo(name, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def write_release_zip(course: Course, lab: str, path: Path | None = None) -> Path:
    """Write the lab's LMS zip (default ``exports/release/<lab>.zip``) atomically; returns its path."""
    return write_atomic(path or default_path(course, lab), zip_bytes(expected_files(course, lab)))
