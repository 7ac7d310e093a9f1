"""Step 0 of grading: the submission folder is hostile; check it, then take a private copy.

``submitted/<student>/<lab>/`` is the one place a student controls, and the grader may run as
root. Before anything of a submission is read, the folder is checked without following any
link: the student folder and the lab folder must be plain directories, and everything in the
lab folder (subfolders too) a plain directory or a regular file with one link (a hard link
may name a file outside), at most ``Limits.submission_bytes`` each and in total. A symbolic
link anywhere (dangling or not), a FIFO, a device, a socket, a hard link or a file over the cap
refuses the whole submission with a reason naming the entry: it is recorded as an error, never
followed, and never stops the batch. Names are looked up relative to open directory
descriptors, ``O_NOFOLLOW`` on every open, and each file read is checked again on its own
descriptor (``fstat``), so a folder changed while it is read is refused, not followed.

What is graded is a private copy the grader writes under ``autograded/.intake/<student>/<lab>``:
the notebook (a renamed one is matched by its grade ids and copied under the expected name),
the files a lab declares in ``EXTRA_FILES`` (``mlbook/labs/<lab>/__init__.py``; none today) and
nbgrader's ``timestamp.txt`` (read for late penalties, never copied on). nbgrader's autograder
reads that copy (``record.Recorder``), so nothing else in the student's folder reaches
``autograded/`` or ``feedback/``, and the grader never writes into ``submitted/``.

``autograded/.intake`` is grading's alone. Another reader of submissions (``mlbook similarity``)
passes its own ``root`` (a fresh temporary folder per run) to ``take`` and ``discard``, so it
never replaces or deletes a copy grading still has to read, and grading never deletes its copy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from mlbook.course import Course, student_id_problem
from mlbook.labs import settings
from mlbook.authoring.notebooks import grade_id

INTAKE = "autograded/.intake"
TIMESTAMP = "timestamp.txt"  # written by nbgrader's collect; read by its autograder for late penalties
MAX_ENTRIES = 2000  # files and folders in one submission folder
MAX_DEPTH = 16

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refused(Exception):
    """The submission folder holds something the grader does not read; the message says what."""


@dataclass
class Intake:
    """A submission taken in: the private copy of its notebook, or why it was refused."""

    notebook: Path | None
    error: str = ""
    warning: str = ""


def intake_folder(course: Course, student: str, lab: str, root: Path | None = None) -> Path:
    """The private copy of ``submitted/<student>/<lab>``: under ``root`` when given, else grading's
    (``autograded/.intake``, what nbgrader reads)."""
    return (course.root / INTAKE if root is None else root) / student / lab


def discard(course: Course, student: str, lab: str, root: Path | None = None) -> None:
    """Remove the private copy (under ``root``, as ``take`` wrote it) once it is read or refused."""
    if not student_id_problem(student):
        folder = intake_folder(course, student, lab, root)
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # the student's folder, once empty


def extra_files(lab: str) -> tuple[str, ...]:
    """Files besides the notebook that ``lab`` grades (``EXTRA_FILES`` in its package; none by default)."""
    return settings(lab).extra_files


def take(course: Course, lab: str, student: str, max_bytes: int, root: Path | None = None) -> Intake:
    """Check ``submitted/<student>/<lab>`` and copy what is graded into the private folder.

    Args:
        root: the folder the private copies go under; ``None`` is grading's (``INTAKE``). A reader
            other than grading passes its own, so that neither deletes a copy the other reads.
    Returns:
        The copy's notebook path, or ``notebook=None`` and the reason it was refused."""
    if problem := student_id_problem(student):
        return Intake(None, error=f"refused: {problem}")
    shown = f"submitted/{student}/{lab}"
    try:
        with _Folder.open_submission(course, student, lab) as folder:
            files = folder.survey(max_bytes)
            name, data, warning = _choose_notebook(course, lab, folder, files, max_bytes)
            extras = {extra: folder.read(extra, files[extra], max_bytes)
                      for extra in (*extra_files(lab), TIMESTAMP) if extra in files}
    except Refused as refused:
        return Intake(None, error=str(refused))
    except OSError as exc:  # unreadable as a whole (permissions, I/O): still only this student
        return Intake(None, error=f"{shown} could not be read: {exc.strerror or exc}")
    if data is None:
        return Intake(None, error=warning)
    target = intake_folder(course, student, lab, root)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for filename, content in {f"{lab}.ipynb": data, **extras}.items():
        _write_new(target / filename, content)
    return Intake(target / f"{lab}.ipynb", warning=warning)


def _choose_notebook(course: Course, lab: str, folder: "_Folder", files: dict[str, os.stat_result],
                     max_bytes: int) -> tuple[str, bytes | None, str]:
    """The notebook to grade: ``<lab>.ipynb``, else the top-level notebook whose grade ids overlap
    the lab's most (at least half of them), graded under the expected name with a warning."""
    expected = f"{lab}.ipynb"
    if expected in files:
        return expected, folder.read(expected, files[expected], max_bytes), ""
    wanted = _grade_ids(course.source(lab).read_bytes()) or set()
    candidates = sorted(n for n in files if n.endswith(".ipynb") and "/" not in n)
    best, best_data, best_overlap = None, None, 0
    for candidate in candidates:
        data = folder.read(candidate, files[candidate], max_bytes)
        ids = _grade_ids(data)
        overlap = len(ids & wanted) if ids else 0
        if overlap > best_overlap:
            best, best_data, best_overlap = candidate, data, overlap
    if best is None or best_overlap * 2 < len(wanted):
        found = ", ".join(_show(n) for n in candidates) or "no notebook"
        return "", None, f"no notebook for {lab} in the submission (found: {found})"
    return best, best_data, (f"graded {_show(best)} as {expected} "
                             f"(renamed notebook, matched by its cells' grade ids)")


def _grade_ids(data: bytes) -> set[str] | None:
    import nbformat

    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception:  # unreadable: not a candidate
        return None
    return {gid for c in nb.cells if (gid := grade_id(c))}


class _Folder:
    """An open submission folder: every name is looked up relative to its descriptor."""

    def __init__(self, fd: int, shown: str):
        self.fd, self.shown = fd, shown

    @classmethod
    def open_submission(cls, course: Course, student: str, lab: str) -> "_Folder":
        top = os.open(course.submitted_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the TA's folder
        try:
            student_fd = _open_dir(top, student, f"the student folder submitted/{student}")
        finally:
            os.close(top)
        try:
            lab_fd = _open_dir(student_fd, lab, f"the submission folder submitted/{student}/{lab}")
        finally:
            os.close(student_fd)
        return cls(lab_fd, f"submitted/{student}/{lab}")

    def __enter__(self) -> "_Folder":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)

    def survey(self, max_bytes: int) -> dict[str, os.stat_result]:
        """Every regular file of the folder, by relative path; refuses anything else."""
        files: dict[str, os.stat_result] = {}
        self._survey(self.fd, "", 0, files, [0], max_bytes)
        total = sum(st.st_size for st in files.values())
        if total > max_bytes:
            raise Refused(f"refused: {self.shown} holds {total} bytes in {len(files)} files, over the "
                          f"{max_bytes}-byte cap for a submission")
        return files

    def _survey(self, fd: int, prefix: str, depth: int, files: dict, count: list[int], max_bytes: int) -> None:
        for name in sorted(os.listdir(fd)):
            count[0] += 1
            if count[0] > MAX_ENTRIES:
                raise Refused(f"refused: {self.shown} holds more than {MAX_ENTRIES} files and folders")
            rel = prefix + name
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            what = f"{self.shown}/{_show(rel)}"
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= MAX_DEPTH:
                    raise Refused(f"refused: {what} is nested more than {MAX_DEPTH} folders deep")
                sub = _open_dir(fd, name, what)
                try:
                    self._survey(sub, rel + "/", depth + 1, files, count, max_bytes)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                _check_regular(st, what, max_bytes)
                files[rel] = st
            else:
                raise Refused(_not_plain(st, what, fd, name))

    def read(self, rel: str, seen: os.stat_result, max_bytes: int) -> bytes:
        """The content of the regular file ``rel`` (top level), read through its own descriptor."""
        what = f"{self.shown}/{_show(rel)}"
        try:
            fd = os.open(rel, _FILE_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR, errno.ENXIO):
                raise Refused(f"refused: {what} changed while it was read (now a link or gone)") from None
            raise
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
                raise Refused(f"refused: {what} changed while it was read (replaced by another file)")
            if not stat.S_ISREG(st.st_mode):
                raise Refused(_not_plain(st, what))
            _check_regular(st, what, max_bytes)
            chunks, size = [], 0
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise Refused(f"refused: {what} grew past the {max_bytes}-byte cap for a submitted file "
                                  f"while it was read")
            return b"".join(chunks)
        finally:
            os.close(fd)


def _check_regular(st: os.stat_result, what: str, max_bytes: int) -> None:
    if st.st_nlink > 1:
        raise Refused(f"refused: {what} is a hard link ({st.st_nlink} names for one file, which may lie outside "
                      f"the submission); hand in a copy of the file itself")
    if max_bytes and st.st_size > max_bytes:
        raise Refused(f"refused: {what} is {st.st_size} bytes, over the {max_bytes}-byte cap for a submitted file")


def _open_dir(parent: int, name: str, what: str) -> int:
    """Open the directory ``name`` in ``parent`` without following a link; refuse anything else."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        raise Refused(f"no submission: {what} does not exist") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(_not_plain(st, what, parent, name))
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise Refused(f"refused: {what} changed while it was read (now a link or gone)") from None
        raise
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise Refused(f"refused: {what} changed while it was read (replaced by another folder)")
    return fd


def _not_plain(st: os.stat_result, what: str, parent: int | None = None, name: str | None = None) -> str:
    """The reason for refusing an entry that is neither a plain folder nor a regular file."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        target = ""
        if parent is not None and name is not None:
            try:
                target = f" (to {_show(os.readlink(name, dir_fd=parent))})"
            except OSError:
                pass
        advice = "" if what.startswith("the ") else ", hand in the file itself"
        return f"refused: {what} is a symbolic link{target}; the grader follows no link in a submission{advice}"
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a regular file" if stat.S_ISREG(mode) else "a folder" if stat.S_ISDIR(mode)
            else f"a special file (mode {oct(stat.S_IFMT(mode))})")
    if what.startswith("the "):  # the student or lab folder itself
        return f"refused: {what} is {kind}, not a folder"
    return f"refused: {what} is {kind}; a submission holds only regular files and folders"


def _show(text: str, limit: int = 80) -> str:
    """A student-chosen name as it may appear in a reason: control characters escaped, cut short."""
    shown = json.dumps(text, ensure_ascii=False)[1:-1]
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _write_new(path: Path, data: bytes) -> None:
    """Write a new file of the grader's own, never through an existing name."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
