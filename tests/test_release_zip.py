"""The LMS zip (``mlbook release``) and its lint rule (``mlbook check``). No grading needed.

What the zip must hold is stated in ``mlbook/authoring/release_zip.py``; here it is recomputed
independently (regular expressions over the notebook and the helpers) and compared.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from harness import LABS, REPO, scratch_course
from mlbook.course import Course
from mlbook.lint import check_course
from mlbook.authoring.release_zip import default_path, write_release_zip

LAB = "lab01_hand_attention"
MLBOOK = [sys.executable, "-m", "mlbook.cli"]
RULE = "release_zip_is_exact: "


def needed_helpers(course: Course, lab: str) -> set[str]:
    """The helper modules a lab needs, found with regular expressions (independent of the code under test)."""
    todo = re.findall(r"(?:from|import)\s+mlbook_helpers\.(\w+)", course.release(lab).read_text())
    needed = {"__init__"}
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += re.findall(r"from\s+\.(\w+)\s+import", (course.root / "mlbook_helpers" / f"{name}.py").read_text())
    return needed


def notebook_code(course: Course, lab: str) -> str:
    nb = json.loads(course.release(lab).read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def course_with_helpers(tmp_path: Path) -> Course:
    course = scratch_course(LAB, tmp_path)
    shutil.copytree(REPO.root / "mlbook_helpers", tmp_path / "mlbook_helpers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return course


def rule_problems(course: Course) -> list[str]:
    return [p.removeprefix(RULE) for p in check_course(course, [LAB])[LAB] if p.startswith(RULE)]


@pytest.mark.parametrize("lab", LABS)
def test_release_zip_holds_exactly_the_notebook_the_helpers_it_imports_and_a_readme(lab, tmp_path):
    path = write_release_zip(REPO, lab, tmp_path / f"{lab}.zip")
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    helpers = {f"{lab}/mlbook_helpers/{m}.py" for m in needed_helpers(REPO, lab)}
    assert set(members) == {f"{lab}/{lab}.ipynb", f"{lab}/README.txt"} | helpers
    assert members[f"{lab}/{lab}.ipynb"] == REPO.release(lab).read_bytes(), "the notebook is not the release"
    for name in helpers:
        assert members[name] == (REPO.root / name.removeprefix(f"{lab}/")).read_bytes(), name
    readme = members[f"{lab}/README.txt"].decode()
    pip = next(line for line in readme.splitlines() if "pip install" in line)
    imported = set(re.findall(r"^\s*(?:import|from)\s+(\w+)", notebook_code(REPO, lab), flags=re.MULTILINE))
    for package in imported - set(sys.stdlib_module_names) - {"mlbook_helpers"}:
        assert re.search(rf'"{package}\b', pip), f"README.txt does not install {package}: {pip}"
    assert ("torch" not in imported) or '"torch==2.13.0"' in pip, "torch is not pinned as in pyproject.toml"
    assert f"jupyter lab {lab}.ipynb" in readme


def test_release_zip_is_reproducible(tmp_path):
    first = write_release_zip(REPO, LAB, tmp_path / "a.zip").read_bytes()
    assert write_release_zip(REPO, LAB, tmp_path / "b.zip").read_bytes() == first


def test_unpacked_zip_imports_its_own_helpers_and_never_the_grader(tmp_path):
    with zipfile.ZipFile(write_release_zip(REPO, LAB, tmp_path / "lab.zip")) as archive:
        archive.extractall(tmp_path)
    folder = tmp_path / LAB
    # What Jupyter does (the notebook's folder first on sys.path), with the grader package unavailable,
    # then every import statement of the notebook; each helper must come from the unpacked folder.
    script = f'''
import ast, importlib.abc, json, sys
class NoGrader(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mlbook" or name.startswith("mlbook."):
            raise ModuleNotFoundError(f"students do not have {{name}}")
sys.meta_path.insert(0, NoGrader())
sys.path.insert(0, {str(folder)!r})
nb = json.load(open({str(folder / f"{LAB}.ipynb")!r}))
for cell in nb["cells"]:
    if cell["cell_type"] == "code":
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(ast.unparse(node))
print("\\n".join(m.__file__ for n, m in sorted(sys.modules.items()) if n.startswith("mlbook_helpers")))
'''
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd=folder, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    files = done.stdout.split()
    assert files and all(Path(f).is_relative_to(folder) for f in files), files


def setup_commands(readme: str) -> list[str]:
    """The README's "Set up once" commands, as written (the Windows note dropped)."""
    block = readme.split("Set up once", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return [re.sub(r"\s{2,}\(Windows:.*\)$", "", line.strip()) for line in block]


def student_environment(home: Path, venv: Path | None = None) -> dict[str, str]:
    """What a student's shell has: a PATH with python3.11 (and the activated venv), a home of its own,
    the machine's pip configuration and pip's cache; nothing of this project's environment."""
    python = shutil.which("python3.11")
    assert python, "python3.11 is not on the PATH (the README tells students to use it)"
    real = subprocess.run([python, "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                          text=True, check=True).stdout.strip()
    path = [str(venv / "bin")] if venv else []
    env = {"PATH": os.pathsep.join([*path, str(Path(real).parent), "/usr/bin", "/bin"]), "HOME": str(home),
           "LANG": "C.UTF-8", "PIP_CACHE_DIR": subprocess.run([sys.executable, "-m", "pip", "cache", "dir"],
                                                             capture_output=True, text=True).stdout.strip()}
    env |= {k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CACHE_DIR"}
    if venv:
        env["VIRTUAL_ENV"] = str(venv)
    return {k: v for k, v in env.items() if v}


@pytest.mark.slow
def test_a_student_with_only_the_zip_can_validate_in_a_fresh_virtual_environment(tmp_path):
    """The zip unpacked, a new virtual environment (no system site-packages), the README's pip line, then
    its validate command on the untouched release: it runs the notebook and names the missing answers."""
    with zipfile.ZipFile(write_release_zip(REPO, LAB, tmp_path / "lab.zip")) as archive:
        archive.extractall(tmp_path)
    folder, home = tmp_path / LAB, tmp_path / "home"
    home.mkdir()
    readme = (folder / "README.txt").read_text()
    commands = setup_commands(readme)
    assert commands[:2] == ["python3.11 -m venv .venv", ". .venv/bin/activate"], commands
    pip = next(shlex.split(c) for c in commands if c.startswith("pip install"))
    grader_extra = tomllib.loads((REPO.root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["grader"]
    nbgrader_pin = next(spec for spec in grader_extra if spec.startswith("nbgrader"))
    assert nbgrader_pin in pip, f"README.txt does not install what validates: {pip}"
    validate = next(line.split() for line in readme.splitlines() if line.strip().startswith("nbgrader validate"))
    assert validate == ["nbgrader", "validate", f"{LAB}.ipynb"]
    venv = folder / ".venv"
    try:
        made = subprocess.run(shlex.split(commands[0]), cwd=folder, env=student_environment(home),
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-2000:]
        assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
        student = student_environment(home, venv)  # as after `. .venv/bin/activate`
        # The README's pip line verbatim; pip reads PIP_NO_COMPILE as --no-compile: no byte-compiling of the
        # installed files (torch's among them), which a venv used once and then deleted does not need.
        installed = subprocess.run(pip, cwd=folder, env={**student, "PIP_NO_COMPILE": "1"}, capture_output=True,
                                   text=True, timeout=1500)
        assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
        torch = subprocess.run(["python", "-c", "import torch, sys; print(torch.__version__, sys.prefix)"],
                               cwd=folder, env=student, capture_output=True, text=True, timeout=300)
        assert torch.stdout.startswith("2.13.0") and torch.stdout.split()[1] == str(venv), torch.stdout + torch.stderr
        done = subprocess.run(validate, cwd=folder, env=student, capture_output=True, text=True, timeout=600)
        out = done.stdout + done.stderr
        assert "The following cell failed" in done.stdout and "NotImplementedError" in done.stdout, out[-3000:]
        assert "ModuleNotFoundError" not in out and "No module named" not in out, out[-3000:]
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # 1.5 GB
    assert "hidden tests" in readme.lower() and "graded" in readme


def test_check_passes_on_the_repository_release_zips():
    problems = {lab: [p for p in found if p.startswith(RULE)] for lab, found in check_course(REPO, LABS).items()}
    assert problems == {lab: [] for lab in LABS}


def test_check_flags_a_zip_that_holds_grader_code(tmp_path):
    course = course_with_helpers(tmp_path)
    path = write_release_zip(course, LAB)
    assert path == default_path(course, LAB) and rule_problems(course) == []
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(f"{LAB}/mlbook/labs/{LAB}/hidden/attention.py",
                         (REPO.root / f"mlbook/labs/{LAB}/hidden/attention.py").read_text())
    problems = rule_problems(course)
    assert any("course or grader files never go to students" in p for p in problems), problems
    assert any("which students do not need" in p for p in problems), problems


def test_check_flags_a_zip_older_than_the_release(tmp_path):
    course = course_with_helpers(tmp_path)
    write_release_zip(course, LAB)
    course.release(LAB).write_text(course.release(LAB).read_text().replace("Attention by hand", "Attention by foot"))
    assert any(f"{LAB}.ipynb is not the course's current copy; run `mlbook release {LAB}`" in p
               for p in rule_problems(course))


def test_check_flags_a_helper_that_imports_the_grader(tmp_path):
    course = course_with_helpers(tmp_path)
    checks = course.root / "mlbook_helpers" / "checks.py"
    checks.write_text(checks.read_text() + "\nfrom mlbook.labs._support import fresh_rng\n")
    problems = rule_problems(course)
    assert any("mlbook_helpers/checks.py imports the grader package 'mlbook'" in p for p in problems), problems


def test_cli_release_writes_the_zip(tmp_path):
    course = course_with_helpers(tmp_path)
    done = subprocess.run([*MLBOOK, "--course", str(course.root), "release", "lab01"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert zipfile.ZipFile(default_path(course, LAB)).testzip() is None
