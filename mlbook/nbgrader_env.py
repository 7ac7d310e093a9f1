"""The one place mlbook talks to nbgrader's application layer.

Convention: the course root is always passed, never taken from the working directory. The
course's ``nbgrader_config.py`` is loaded by ``load_config`` with ``CourseDirectory.root``, the
gradebook URL and every course-relative path made absolute; nbgrader's converters (generate
assignment, autograde, generate feedback) run through ``CourseAPI``, which is nbgrader's API
without the ``os.chdir(root)`` its converters make around each conversion. So mlbook never
changes the process's working directory, which every thread of a grader shares, and two
courses can be graded by threads of one process. Every gradebook is opened by ``gradebook``.
Each entry point first calls ``install``: what mlbook changes in nbgrader's process-wide
state, done once, on purpose, not as a side effect of an import (the environment's programs on
PATH, a warning filter, two measured speed-ups of nbgrader's recording).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import warnings
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from mlbook.course import CONFIG_NAME, Course
from mlbook.errors import MlbookError

_installed = False


def install() -> None:
    """Prepare this process for nbgrader (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    # nbgrader starts helper programs (alembic, for gradebook migrations) by name: the
    # environment mlbook runs from must be on PATH even when it was not activated.
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    # nbgrader 0.9.6 reads gradebook relationships outside its session; sqlalchemy warns on
    # every submission. The warning is about nbgrader's code, not the course.
    warnings.filterwarnings("ignore", message=r".*not in session, add operation along", module=r"nbgrader\.")
    _check_nbgrader_schema_once()
    _one_engine_per_database()


def gradebook(course: Course):
    """nbgrader's ``Gradebook`` of the course (a context manager, as nbgrader's own)."""
    install()
    from nbgrader.api import Gradebook

    return Gradebook(course.db_url)


def _check_nbgrader_schema_once() -> None:
    """nbgrader validates every cell's metadata with ``jsonschema.validate``, which checks the
    schema itself against its metaschema on every call: about 5 ms per cell, half of recording
    one graded notebook. The schema is nbgrader's own file; check it the
    first time it is seen and keep its validator. Same errors, same messages."""
    import json
    import types

    import jsonschema
    from nbgrader.nbgraderformat import common

    validators: dict[str, object] = {}

    def validate(instance, schema) -> None:
        key = json.dumps(schema, sort_keys=True)
        validator = validators.get(key)
        if validator is None:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = validators[key] = cls(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error

    common.jsonschema = types.SimpleNamespace(validate=validate, ValidationError=jsonschema.ValidationError)


def _one_engine_per_database() -> None:
    """nbgrader opens a new ``Gradebook``, and with it a new SQLAlchemy engine, several times per
    notebook it records, so no query is ever served from an engine's compiled-statement cache:
    each of the ~150 lookups per notebook is compiled afresh (a third of recording). Keep one engine per database URL; ``Gradebook.close`` still disposes of its
    connections, and sessions stay per ``Gradebook``."""
    import nbgrader.api

    engines: dict = {}
    create = nbgrader.api.create_engine

    def create_engine(url, **options):
        _create_sqlite_file(str(url))
        key = (str(url), tuple(sorted(options.items())))
        if key not in engines:
            engines[key] = create(url, **options)
        return engines[key]

    nbgrader.api.create_engine = create_engine


def _create_sqlite_file(url: str) -> None:
    """Create a SQLite gradebook's file, empty, with this process's umask, before SQLite does.

    SQLite creates a database 0644 less the umask, never group-writable: in a course folder
    shared with the staff group (the grading account's umask 007) the TAs could read the
    gradebook but not write it, and the formgrader's manual grades failed with "attempt to
    write a readonly database". An empty file is an empty database to SQLite; its journal
    takes the database's mode.
    """
    if not url.startswith("sqlite:///"):
        return
    path = url[len("sqlite:///"):]
    if not path or path == ":memory:" or os.path.lexists(path):
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
    except FileExistsError:
        pass


def load_config(course: Course) -> Config:
    """The course's ``nbgrader_config.py`` with the root pinned to the course folder, the
    gradebook's URL absolute, and the header and footer notebooks (which nbgrader opens relative
    to the working directory) taken relative to the root, as nbgrader's documentation states."""
    install()
    try:
        config = PyFileConfigLoader(CONFIG_NAME, path=str(course.root)).load_config()
    except Exception as exc:
        raise MlbookError(f"cannot load {course.config}: {type(exc).__name__}: {exc}") from None
    config.CourseDirectory.root = str(course.root)
    config.CourseDirectory.db_url = course.db_url
    for name in ("header", "footer"):
        path = config.get("IncludeHeaderFooter", {}).get(name)
        if path and not os.path.isabs(path):
            config.IncludeHeaderFooter[name] = str(course.root / path)
    return config


def api_for(course: Course, quiet: bool = True):
    """A ``CourseAPI`` for the course. nbgrader's own log goes to the call's result dict."""
    return api_with(load_config(course), quiet)


def api_with(config: Config, quiet: bool = True):
    """A ``CourseAPI`` on ``config`` (``load_config``'s, changed by the caller); ``quiet``: nbgrader's
    own log goes to the call's result dict only."""
    install()
    api = _course_api_class()(config=config)
    if quiet:
        api.log.setLevel(logging.WARNING)
        for handler in list(api.log.handlers):
            handler.setLevel(logging.CRITICAL)
    return api


def _in_place(converter: type) -> type:
    """nbgrader's ``converter``, converting where it is instead of after ``os.chdir(root)``.

    ``BaseConverter.start`` moves the whole process into the course root around each conversion,
    for the relative paths of a kernel it may start and of the header and footer notebooks.
    mlbook starts no kernel in nbgrader (the sandbox ran the notebook) and ``load_config`` makes
    those paths absolute, so the move would only race the grader's other threads. The class made
    here puts a ``start`` without it between ``converter`` and ``BaseConverter`` in the method
    order, so ``converter``'s own ``start`` (``GenerateAssignment``'s checks) still runs first:
    nbgrader's steps, in nbgrader's order.
    """
    from nbconvert.writers import FilesWriter
    from nbgrader.converters.base import BaseConverter

    class InPlace(BaseConverter):
        def start(self) -> None:
            self.init_notebooks()
            self.writer = FilesWriter(parent=self, config=self.config)
            self.exporter = self.exporter_class(parent=self, config=self.config)
            for preprocessor in self.preprocessors:
                self.exporter.register_preprocessor(preprocessor)
            self.convert_notebooks()

    return type(converter.__name__, (converter, InPlace), {})


# nbgrader's converters also set and delete ``os.environ["NBGRADER_EXECUTION"]`` around each
# notebook (``nbgrader.utils.setenv``), which is the process's: two at once in one process (two
# courses graded by threads of one grader) fail with KeyError. So one converts at a time.
_CONVERTING = threading.Lock()


@functools.cache
def _course_api_class() -> type:
    """``CourseAPI``: nbgrader's API whose three converters keep the working directory and run one
    at a time in the process (``_CONVERTING``).

    Built on first use (importing nbgrader's apps costs about a second). Each method's body is
    ``NbGraderAPI``'s own, for one assignment (and one student), with the ``_in_place`` converter.
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.converters import Autograde, GenerateAssignment, GenerateFeedback
    from nbgrader.utils import capture_log, temp_attrs

    generate_assignment, autograde, generate_feedback = map(_in_place, (GenerateAssignment, Autograde,
                                                                       GenerateFeedback))

    class CourseAPI(NbGraderAPI):
        def generate_assignment(self, assignment_id, force=True, create=True):
            with temp_attrs(self.coursedir, assignment_id=assignment_id):
                app = generate_assignment(coursedir=self.coursedir, parent=self)
                app.force, app.create_assignment = force, create
                with _CONVERTING:
                    return capture_log(app)

        def autograde(self, assignment_id, student_id, force=True, create=True):
            with temp_attrs(self.coursedir, assignment_id=assignment_id, student_id=student_id):
                app = autograde(coursedir=self.coursedir, parent=self)
                app.force, app.create_student = force, create
                with _CONVERTING:
                    return capture_log(app)

        def generate_feedback(self, assignment_id, student_id, force=True):
            feedback = Config()
            feedback.HTMLExporter.template_name = "feedback"  # as nbgrader's own method sets it
            with temp_attrs(self.coursedir, assignment_id=assignment_id, student_id=student_id):
                app = generate_feedback(coursedir=self.coursedir, parent=self)
                app.update_config(feedback)
                app.force = force
                with _CONVERTING:
                    return capture_log(app)

    return CourseAPI


def failure_reason(result: dict) -> str:
    """One line saying why an nbgrader API call failed, from its captured log and traceback."""
    text = result.get("log", "") + "\n" + result.get("error", "")
    if "NotJSONError" in text or "JSONDecodeError" in text:
        return "the notebook file is not valid JSON (truncated or edited outside Jupyter)"
    lines = text.splitlines()
    keys = ("Kernel died", "DeadKernel", "CellTimeoutError", "timed out", "NotJSONError", "JSONDecodeError",
            "not valid", "Unreadable", "does not exist", "Error", "ERROR")
    for key in keys:
        for line in reversed(lines):
            if key in line and line.strip():
                return line.replace("[ERROR]", "").strip()[:300]
    return "nbgrader failed without a message"
