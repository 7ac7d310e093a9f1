"""The submission folder is hostile, through the real pipeline.

One batch of lab 2 submissions is graded once (``mlbook.grading.autograde``, sandboxed) and
its feedback generated (``mlbook.outputs.feedback``): correct bystanders beside submission folders
that try to make the grader, possibly running as root, follow a link (a notebook that is a
link to the source notebook, extra links to the source notebook and to /etc/passwd, a
dangling link at the expected name beside a renamed notebook, a linked subfolder, a linked
lab folder, a linked student folder), block on or open a special file (a FIFO, a socket, a
device), read a file outside through a hard link, or read a huge file (the cap is made small
here through ``Limits.submission_bytes``). Each is an error with a reason naming the entry
refused; nothing outside the course is written, nothing in ``submitted/`` is written, and
``autograded/`` and ``feedback/`` hold only each student's notebook and page. A folder with
extra *regular* files is graded: the extra files are not copied on. Folder names that cannot
be student ids are skipped with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
import re
import shutil
import socket
import stat
import warnings
from pathlib import Path

import pytest

from harness import scratch_course
from mlbook.authoring import submissions
from mlbook.errors import MlbookError
from mlbook.outputs.feedback import generate_feedback
from mlbook.grading import GradingOptions, autograde
from mlbook.authoring.notebooks import write_nb_atomic
from mlbook.outputs.results import collect
from mlbook.sandbox.limits import Limits
from mlbook.grading.status import ERROR, GRADED, StatusStore

LAB = "lab02_scaling"
NB = f"{LAB}.ipynb"
COPY = f"{LAB}-Copy1.ipynb"
CAP = 200_000  # bytes; the reference notebook is about 45 kB
LIMITS = Limits(submission_bytes=CAP)
SOURCE_LINK = f"../../../source/{LAB}/{NB}"  # from submitted/<student>/<lab>/
BYSTANDERS = ("bystander-a", "bystander-m", "bystander-z")
CRAFTED = ("bad\x1b[31mname", ".hidden-student", "tab\there")
pytestmark = [pytest.mark.xdist_group("submission-folder"), pytest.mark.slow]

# student -> a pattern the reason of the refusal must match (it names the entry refused)
REFUSED = {
    "attack-symlinked-notebook": rf"submitted/attack-symlinked-notebook/{LAB}/{re.escape(NB)} is a symbolic link",
    "attack-extra-symlinks": rf"submitted/attack-extra-symlinks/{LAB}/\S+ is a symbolic link",
    "attack-link-to-source": rf"submitted/attack-link-to-source/{LAB}/solution\.ipynb is a symbolic link",
    "attack-link-to-passwd": rf"submitted/attack-link-to-passwd/{LAB}/passwd is a symbolic link \(to /etc/passwd\)",
    "attack-dangling-at-expected-name": rf"submitted/attack-dangling-at-expected-name/{LAB}/{re.escape(NB)} is a "
                                        rf"symbolic link",
    "attack-symlinked-subfolder": rf"submitted/attack-symlinked-subfolder/{LAB}/data is a symbolic link",
    "attack-link-in-subfolder": rf"submitted/attack-link-in-subfolder/{LAB}/notes/answers\.ipynb is a symbolic link",
    "attack-symlinked-lab-folder": rf"the submission folder submitted/attack-symlinked-lab-folder/{LAB} is a "
                                   rf"symbolic link",
    "attack-symlinked-student-folder": r"the student folder submitted/attack-symlinked-student-folder is a symbolic link",
    "attack-fifo-notebook": rf"submitted/attack-fifo-notebook/{LAB}/{re.escape(NB)} is a FIFO",
    "attack-fifo-beside": rf"submitted/attack-fifo-beside/{LAB}/pipe is a FIFO",
    "attack-socket": rf"submitted/attack-socket/{LAB}/sock is a socket",
    "attack-device": rf"submitted/attack-device/{LAB}/{re.escape(NB)} is a character device",
    "attack-hard-link": rf"submitted/attack-hard-link/{LAB}/{re.escape(NB)} is a hard link",
    "attack-oversized": rf"submitted/attack-oversized/{LAB}/{re.escape(NB)} is \d+ bytes, over the {CAP}-byte cap",
}


def _tree(path: Path) -> dict[str, tuple]:
    """Everything under ``path`` as lstat sees it (no link followed): name -> kind, size, mtime, target."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            st = full.lstat()
            target = os.readlink(full) if stat.S_ISLNK(st.st_mode) else None
            digest = hashlib.sha256(full.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else None
            seen[str(full.relative_to(path))] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, target, digest)
    return seen


def _place(course, outside: Path) -> set[str]:
    """Write the batch's submissions; returns the attacks actually placed (a device needs CAP_MKNOD)."""
    reference = submissions.reference(course, LAB)
    for student in BYSTANDERS:
        submissions.submit(course, student, LAB, reference)
    submissions.submit(course, "renamed", LAB, reference, filename=COPY)
    submissions.submit(course, "extra-files", LAB, reference)
    folder = course.submitted("extra-files", LAB)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "data").mkdir()
    (folder / "data" / "scratch.npy").write_bytes(b"\x93NUMPY" + bytes(100))
    (folder / ".ipynb_checkpoints").mkdir()
    write_nb_atomic(reference, folder / ".ipynb_checkpoints" / f"{LAB}-checkpoint.ipynb")

    def folder_of(student: str) -> Path:
        path = course.submitted(student, LAB)
        path.mkdir(parents=True)
        return path

    outside.mkdir()
    secret = outside / "secret.ipynb"  # a correct notebook outside the course, of someone else
    write_nb_atomic(reference, secret)
    (outside / "student-folder" / LAB).mkdir(parents=True)
    write_nb_atomic(reference, outside / "student-folder" / LAB / NB)
    (outside / "lab-folder").mkdir()
    write_nb_atomic(reference, outside / "lab-folder" / NB)

    os.symlink(SOURCE_LINK, folder_of("attack-symlinked-notebook") / NB)

    full = folder_of("attack-extra-symlinks")  # every kind of link of the issue in one folder
    write_nb_atomic(reference, full / COPY)
    os.symlink(outside / "planted.ipynb", full / NB)  # dangling, at the expected name
    os.symlink(SOURCE_LINK, full / "solution.ipynb")
    os.symlink("/etc/passwd", full / "passwd")
    os.symlink(f"../../../source/{LAB}", full / "data")

    submissions.submit(course, "attack-link-to-source", LAB, reference)
    os.symlink(SOURCE_LINK, course.submitted("attack-link-to-source", LAB) / "solution.ipynb")
    submissions.submit(course, "attack-link-to-passwd", LAB, reference)
    os.symlink("/etc/passwd", course.submitted("attack-link-to-passwd", LAB) / "passwd")
    dangling = folder_of("attack-dangling-at-expected-name")
    write_nb_atomic(reference, dangling / COPY)
    os.symlink(outside / "planted-by-copy.ipynb", dangling / NB)
    submissions.submit(course, "attack-symlinked-subfolder", LAB, reference)
    os.symlink(f"../../../source/{LAB}", course.submitted("attack-symlinked-subfolder", LAB) / "data")
    submissions.submit(course, "attack-link-in-subfolder", LAB, reference)
    (course.submitted("attack-link-in-subfolder", LAB) / "notes").mkdir()
    os.symlink(f"../../../../source/{LAB}/{NB}", course.submitted("attack-link-in-subfolder", LAB) / "notes" / "answers.ipynb")

    (course.submitted_dir / "attack-symlinked-lab-folder").mkdir()
    os.symlink(outside / "lab-folder", course.submitted_dir / "attack-symlinked-lab-folder" / LAB)
    os.symlink(outside / "student-folder", course.submitted_dir / "attack-symlinked-student-folder")

    os.mkfifo(folder_of("attack-fifo-notebook") / NB)
    submissions.submit(course, "attack-fifo-beside", LAB, reference)
    os.mkfifo(course.submitted("attack-fifo-beside", LAB) / "pipe")
    submissions.submit(course, "attack-socket", LAB, reference)
    with contextlib.chdir(course.submitted("attack-socket", LAB)):  # a socket path is limited to 108 bytes
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("sock")
        sock.close()
    placed = set(REFUSED)
    try:
        os.mknod(folder_of("attack-device") / NB, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # /dev/null
    except PermissionError:
        placed.discard("attack-device")
        shutil.rmtree(course.submitted_dir / "attack-device")

    os.link(secret, folder_of("attack-hard-link") / NB)

    big = submissions.reference(course, LAB)
    big.cells[0].source += "\n\n" + "padding " * (CAP // 8 + 1)
    submissions.submit(course, "attack-oversized", LAB, big)

    for name in CRAFTED:  # folder names that cannot be student ids, each with a correct notebook
        (course.submitted_dir / name / LAB).mkdir(parents=True)
        write_nb_atomic(reference, course.submitted_dir / name / LAB / NB)
    return placed


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("submission-folder")
    course = scratch_course(LAB, root / "course")
    outside = root / "outside"
    placed = _place(course, outside)
    before = {"outside": _tree(outside), "submitted": _tree(course.submitted_dir), "source": _tree(course.root / "source")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = autograde(course, LAB, force=True, progress=False, options=GradingOptions(limits=LIMITS))
        pages = generate_feedback(course, LAB)
        results = {r.student: r for r in collect(course, LAB)}
    after = {"outside": _tree(outside), "submitted": _tree(course.submitted_dir), "source": _tree(course.root / "source")}
    return course, run, results, pages, placed, before, after, [str(w.message) for w in caught]


def _auto(result) -> tuple[float, float]:
    return (sum(c.score or 0.0 for c in result.auto_cells.values()),
            sum(c.max_score for c in result.auto_cells.values()))


@pytest.mark.parametrize("student", sorted(REFUSED))
def test_an_attacking_submission_folder_is_refused_with_a_reason_naming_the_entry(batch, student):
    course, run, results, pages, placed, *_ = batch
    if student not in placed:
        pytest.skip("creating a device node needs CAP_MKNOD")
    result = results[student]
    assert result.status == ERROR, (result.status, _auto(result))
    assert result.reason.startswith("refused: ") and re.search(REFUSED[student], result.reason), result.reason
    assert not course.autograded(student, LAB).parent.exists()


def test_a_symlinked_notebook_is_refused_and_never_graded_as_the_source(batch):
    course, run, results, *_ = batch
    result = results["attack-symlinked-notebook"]
    assert result.status == ERROR and "symbolic link" in result.reason and not result.cells


def test_the_correct_bystanders_get_full_marks(batch):
    _, run, results, *_ = batch
    for student in BYSTANDERS + ("extra-files",):
        result = results[student]
        assert result.status == GRADED, f"{student}: {result.reason}"
        score, total = _auto(result)
        assert total > 0 and score == total, {g: c.message for g, c in result.auto_cells.items()}


def test_a_renamed_notebook_is_graded_from_a_private_copy_with_a_warning(batch):
    course, run, results, _, _, before, after, _ = batch
    assert results["renamed"].status == GRADED
    assert all(c.passed for c in results["renamed"].auto_cells.values())
    warning = next(a.warning for a in run.attempts if a.student == "renamed")
    assert "Copy1" in warning and "grade ids" in warning
    assert sorted(os.listdir(course.submitted("renamed", LAB))) == [COPY]  # nothing was copied into submitted/


def test_nothing_outside_the_course_and_nothing_in_submitted_is_written(batch):
    course, run, results, pages, placed, before, after, _ = batch
    assert after == before
    outside = course.root.parent / "outside"
    assert not (outside / "planted.ipynb").exists() and not (outside / "planted-by-copy.ipynb").exists()
    assert sorted(os.listdir(outside)) == ["lab-folder", "secret.ipynb", "student-folder"]


def _every_entry(path: Path):
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            yield Path(dirpath) / name


def test_autograded_and_feedback_hold_only_each_students_notebook_and_page(batch):
    course, run, results, pages, *_ = batch
    graded = {s for s, r in results.items() if r.status == GRADED}
    assert graded == set(BYSTANDERS) | {"renamed", "extra-files"}
    allowed = {Path("autograded") / s / LAB / NB for s in graded} | {Path("autograded") / ".mlbook-status.json"}
    allowed |= {Path("feedback") / s / LAB / f"{LAB}.html" for s in results}
    for top in ("autograded", "feedback"):
        for entry in _every_entry(course.root / top):
            mode = entry.lstat().st_mode
            assert not stat.S_ISLNK(mode), f"a link in {top}/: {entry}"
            assert stat.S_ISDIR(mode) or stat.S_ISREG(mode), entry
            if stat.S_ISREG(mode):
                assert entry.relative_to(course.root) in allowed, f"an unexpected file: {entry}"
    for path in allowed:
        if path.name != ".mlbook-status.json":
            assert (course.root / path).is_file(), path


def test_no_solution_or_hidden_test_reaches_a_student_through_the_folder(batch):
    course, run, results, pages, *_ = batch
    source = course.source(LAB).read_text()
    assert "BEGIN HIDDEN TESTS" in source and "BEGIN SOLUTION" in source
    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    for entry in _every_entry(course.root / "feedback"):
        if entry.is_file():
            text = entry.read_text(errors="replace")
            assert "BEGIN HIDDEN TESTS" not in text and "BEGIN SOLUTION" not in text, entry
            assert passwd not in text, entry
    for student, result in results.items():
        if result.status != GRADED:
            continue
        text = course.autograded(student, LAB).read_text()
        assert "BEGIN SOLUTION" not in text and passwd not in text, student


def test_a_refused_submission_gets_a_feedback_page_with_its_reason(batch):
    course, run, results, pages, placed, *_ = batch
    for student in placed:
        page = course.feedback(student, LAB)
        assert page in pages and page.is_file(), student
        assert html.escape(results[student].reason) in page.read_text(), student


def test_folder_names_that_cannot_be_student_ids_are_skipped_and_never_graded(batch):
    course, run, results, pages, placed, before, after, caught = batch
    for name in CRAFTED:
        assert name not in results and name not in {a.student for a in run.attempts}
        if not name.startswith("."):  # a hidden folder (.ipynb_checkpoints, say) is skipped silently
            assert any(repr(name) in message and "skipped" in message for message in caught), (name, caught)
    store = StatusStore(course.status_file)
    assert all(a.student not in CRAFTED for a in store.attempts(LAB))
    for top in ("autograded", "feedback"):
        assert not set(os.listdir(course.root / top)) & set(CRAFTED)


@pytest.mark.parametrize("student", ["..", "../../elsewhere", ".", "", "a/b", "nul\x00", "esc\x1b"])
def test_a_crafted_student_id_given_by_name_is_refused_before_anything_is_written(tmp_path, student):
    course = scratch_course(LAB, tmp_path / "course")
    (course.submitted_dir).mkdir()
    with pytest.raises(MlbookError, match="refused"):
        autograde(course, LAB, [student], force=True, progress=False, options=GradingOptions(limits=LIMITS))
    with pytest.raises(MlbookError, match="refused"):
        generate_feedback(course, LAB, [student])
    assert sorted(os.listdir(tmp_path)) == ["course"]
    assert not (course.root / "autograded").exists() and not (course.root / "feedback").exists()
