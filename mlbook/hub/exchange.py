"""nbgrader's exchange for the course on a shared filesystem, with what plain nbgrader leaves open closed.

The exchange is nbgrader's own (``nbgrader.exchange.default``): release copies ``release/<lab>``
to ``<root>/<course>/outbound/<lab>``, a student's submit copies their folder to
``<root>/<course>/inbound/<student>+<lab>+<timestamp>+<random>``, collect copies the newest
attempt of each student to ``submitted/<student>/<lab>/``, release_feedback copies the pages to
``<root>/<course>/feedback/<hash>.html``. Measured weaknesses of the plain exchange, and what
this module does about them:

- nbgrader makes the exchange root 0777: anyone may rename or delete the course's folder.
  ``prepare_exchange`` makes it 1777 (sticky: only a folder's owner can remove it) and creates
  the course's folders before any student server starts (a student's assignment list looks the
  course up by listing ``<root>/*/outbound/*``).
- A submission folder is 0777 with 0644 files: whoever learns its name reads or changes it.
  ``ConfinedSubmit`` leaves it 2750/0640 in the staff group (``inbound`` is setgid to it).
- Submit copies with ``shutil.copytree``, following links; collect (run by the grading account)
  follows links too, so a link planted in a submission reads files as the grader. Both refuse
  a submission holding a link, a special file, a crafted name or a file over the size cap,
  with a message naming the entry (``check_tree``).
- Collect only warns when a folder's owner is not the student its name claims; here such a
  folder is refused.
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.exchange.abc.exchange import ExchangeError

from mlbook.errors import MlbookError

MAX_FILE_BYTES = 64 * 1024 * 1024  # the grader's own cap (mlbook.sandbox.limits.Limits.submission_bytes)
MAX_ENTRIES = 200
SKIPPED = (".ipynb_checkpoints", "__pycache__", "feedback")  # folders nbgrader's submit leaves out (CourseDirectory.ignore)
SAFE_NAME = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._][A-Za-z0-9._ -]{0,127}$")


def check_tree(folder: str | os.PathLike, max_file_bytes: int = MAX_FILE_BYTES) -> str:
    """Why a submission folder cannot be handed on, or "" when it can. Nothing is followed.

    Refused: any symbolic link (dangling or not), anything but plain files and folders, a hard
    link, a name outside ``SAFE_NAME`` (path separators, control characters, shell and quote
    characters, a leading dash), a file over ``max_file_bytes``, more than ``MAX_ENTRIES``
    entries. The folders nbgrader's submit leaves out (``SKIPPED``: checkpoints, fetched
    feedback, bytecode) are not looked into.
    """
    root = Path(folder)
    try:
        top = root.lstat()
    except OSError as exc:
        return f"cannot read {root}: {exc.strerror}"
    if stat.S_ISLNK(top.st_mode) or not stat.S_ISDIR(top.st_mode):
        return f"{root.name} is not a plain folder"
    count = 0
    for current, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if d not in SKIPPED]  # nbgrader's default ignore list: never handed on
        files = [f for f in files if not f.endswith(".pyc")]
        for name in sorted(dirs) + sorted(files):
            count += 1
            entry = Path(current) / name
            shown = entry.relative_to(root).as_posix()
            if count > MAX_ENTRIES:
                return f"more than {MAX_ENTRIES} files and folders"
            if not SAFE_NAME.match(name):
                return f"the name {shown!r} is not allowed (letters, digits, '.', '_', '-' and spaces only)"
            mode = entry.lstat()
            if stat.S_ISLNK(mode.st_mode):
                return f"{shown} is a link (to {os.readlink(entry)!r}); links are not handed in, copy the file instead"
            if stat.S_ISDIR(mode.st_mode):
                continue
            if not stat.S_ISREG(mode.st_mode):
                return f"{shown} is not a regular file"
            if mode.st_nlink > 1:
                return f"{shown} is a hard link to another file"
            if mode.st_size > max_file_bytes:
                return (f"{shown} is {mode.st_size / 2**20:.0f} MiB, over the {max_file_bytes / 2**20:.0f} MiB cap: "
                        "clear large outputs (Edit > Clear Outputs of All Cells), save, submit again")
    return ""


class ConfinedSubmit(ExchangeSubmit):
    """nbgrader's submit, refusing what ``check_tree`` refuses and leaving the attempt readable
    by the staff group only (2750 folders, 0640 files)."""

    def copy_files(self):
        problem = check_tree(self.src_path)
        if problem:
            self.fail(f"Not submitted: {problem}.")
        super().copy_files()
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        self.set_perms(dest, fileperms=0o640, dirperms=0o2750)

    def do_copy(self, src, dest, log=None):
        super().do_copy(src, dest, log)
        for current, _, _ in os.walk(dest):  # copytree copied the folders' modes, dropping inbound's setgid:
            os.chmod(current, os.stat(current).st_mode | stat.S_ISGID)  # later files keep the staff group


class ConfinedCollect(ExchangeCollect):
    """nbgrader's collect, refusing an attempt that holds what ``check_tree`` refuses or whose
    folder is not owned by the student it names; such attempts are listed in ``refused``."""

    def init_src(self):
        super().init_src()  # checks the course and reads the due date; its choice is made again here
        self.refused: list[tuple[str, str]] = []
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, f"{student}+{self.coursedir.assignment_id}+*")
        by_student: dict[str, list[dict]] = {}
        for path in sorted(glob.glob(pattern)):
            try:
                rec = self._path_to_record(path)
            except Exception as exc:  # a crafted name nbgrader cannot parse
                self.refused.append((os.path.basename(path).split("+")[0], f"unreadable attempt name: {exc}"))
                continue
            problem = check_tree(path)
            if not problem:
                try:
                    owner = pwd.getpwuid(os.lstat(path).st_uid).pw_name
                except KeyError:
                    owner = "an unknown user"
                if owner != rec["username"]:
                    problem = f"the folder claims to be {rec['username']}'s but belongs to {owner}"
            if problem:  # refused before the newest attempt is chosen: a planted folder hides nobody's work
                self.log.error("Refused %s: %s", rec["filename"], problem)
                self.refused.append((rec["username"], f"{rec['filename']}: {problem}"))
                continue
            by_student.setdefault(rec["username"], []).append(rec)
        chosen = []
        for records in by_student.values():
            records = self._sort_by_timestamp(records)
            if self.duedate is not None and self.before_duedate:
                on_time = [r for r in records if r["timestamp"] <= self.duedate]
                records = on_time or records
            chosen.append(records[0])
        self.src_records = chosen

    def do_copy(self, src, dest, log=None):
        shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(*SKIPPED, "*.pyc"))


@dataclass
class Exchange:
    """Where the course's exchange is and who may do what in it.

    Attributes:
        root: the exchange root (``c.Exchange.root``).
        course_id: the course's id (``c.CourseDirectory.course_id``).
        staff_group: the group of instructors and TAs (and of the grading account).
    """

    root: Path
    course_id: str
    staff_group: str

    @property
    def course(self) -> Path:
        return self.root / self.course_id

    def config_lines(self) -> str:
        """nbgrader config every server of the course uses (students' and staff's)."""
        return (f"c.Exchange.root = {str(self.root)!r}\n"
                f"c.CourseDirectory.course_id = {self.course_id!r}\n"
                "c.ExchangeFactory.submit = 'mlbook.hub.exchange.ConfinedSubmit'\n"
                "c.ExchangeFactory.collect = 'mlbook.hub.exchange.ConfinedCollect'\n")


def prepare_exchange(exchange: Exchange) -> None:
    """Create (or repair) the exchange's folders with their permissions; run as root or as the
    owner of the course folder.

    root 1777 (nbgrader's 0777 plus sticky); course, outbound 0755; inbound 2733 in the staff
    group (students may add, not list; their folders take the staff group); feedback 0711
    (a page is read by its unguessable name only).
    """
    try:
        gid = grp.getgrnam(exchange.staff_group).gr_gid
    except KeyError:
        raise MlbookError(f"no group {exchange.staff_group!r}: create it with the instructors and TAs in it") from None
    exchange.root.mkdir(parents=True, exist_ok=True)
    os.chmod(exchange.root, 0o1777)
    for path, mode in [(exchange.course, 0o755), (exchange.course / "outbound", 0o755),
                       (exchange.course / "inbound", 0o2733), (exchange.course / "feedback", 0o711)]:
        path.mkdir(exist_ok=True)
        if path.name == "inbound":
            os.chown(path, -1, gid)
        os.chmod(path, mode)


@dataclass
class Collected:
    """What one collect took in."""

    new: list[str] = field(default_factory=list)  # students with a newer attempt than last time
    unchanged: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (student, reason)


def _config(course, exchange: Exchange):
    from mlbook.nbgrader_env import load_config

    config = load_config(course)
    config.Exchange.root = str(exchange.root)
    config.CourseDirectory.course_id = exchange.course_id
    config.ExchangeReleaseAssignment.force = True  # releasing again replaces the outbound copy
    return config


def _api(course, exchange: Exchange):
    import logging

    from nbgrader.apps import NbGraderAPI

    api = NbGraderAPI(config=_config(course, exchange))
    api.log.setLevel(logging.WARNING)
    return api


def _checked(result: dict, what: str) -> dict:
    from mlbook.nbgrader_env import failure_reason

    if not result.get("success"):
        raise MlbookError(f"{what} failed: {failure_reason(result)}")
    return result


def release(course, lab: str, exchange: Exchange) -> Path:
    """Copy ``release/<lab>`` to the exchange's outbound folder; returns where it went."""
    prepare_exchange(exchange)
    _checked(_api(course, exchange).release_assignment(lab), f"releasing {lab}")
    return exchange.course / "outbound" / lab


def _timestamps(course, lab: str) -> dict[str, str]:
    found = {}
    for student in course.students(lab):
        stamp = course.submitted(student, lab) / "timestamp.txt"
        if stamp.is_file():
            found[student] = stamp.read_text().strip()
    return found


def collect(course, lab: str, exchange: Exchange) -> Collected:
    """nbgrader's collect through ``ConfinedCollect``: the newest attempt of each student whose
    attempt is newer than the one in ``submitted/`` (a submission made while collect runs is
    taken in by the next collect; nothing in the exchange is ever removed)."""
    before = _timestamps(course, lab)
    config = _config(course, exchange)
    config.CourseDirectory.assignment_id = lab
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.auth import Authenticator

    coursedir = CourseDirectory(config=config)
    collector = ConfinedCollect(coursedir=coursedir, authenticator=Authenticator(config=config), config=config)
    collector.update = True
    try:
        collector.start()
    except ExchangeError as exc:
        raise MlbookError(f"collecting {lab} failed: {exc}") from None
    after = _timestamps(course, lab)
    report = Collected(refused=list(getattr(collector, "refused", [])))
    for student, stamp in sorted(after.items()):
        (report.new if before.get(student) != stamp else report.unchanged).append(student)
    return report


def release_feedback(course, lab: str, exchange: Exchange, students: list[str] | None = None) -> int:
    """Copy ``feedback/<student>/<lab>/*.html`` to the exchange; returns the pages released."""
    students = students if students is not None else course.students(lab)
    api = _api(course, exchange)
    count = 0
    for student in students:
        page = course.feedback(student, lab)
        if page.is_file():
            # nbgrader names the released page after the attempt's secret and time, which
            # mlbook's grading does not carry into feedback/: take them from submitted/
            for name in ("timestamp.txt", "submission_secret.txt"):
                kept = course.submitted(student, lab) / name
                if kept.is_file() and not kept.is_symlink():
                    shutil.copyfile(kept, page.parent / name)
            _checked(api.release_feedback(lab, student), f"releasing feedback of {lab} for {student}")
            count += 1
    return count
