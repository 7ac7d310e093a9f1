"""``mlbook check``: the instructor's lint, fast enough to run before every commit.

Each rule is one function returning a list of problems (strings); ``check_course`` runs them
all for every lab (``RULES``), and the rules about the course as a whole (``COURSE_RULES``: the
schedule in ``course.toml``) once. No rule executes a notebook.
"""

from __future__ import annotations

import nbformat

import json
import re
from typing import Callable

from nbformat import NotebookNode

from mlbook.authoring.build import manifest
from mlbook.labs import load_catalogue
from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.labs import settings
from mlbook.authoring.notebooks import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    END_HIDDEN,
    END_SOLUTION,
    HIDDEN,
    SOLUTION,
    has_hidden_tests,
    is_answer,
    is_test,
    iter_nbgrader_cells,
    nbgrader_meta,
    read_authored,
    read_nb,
    split_blocks,
    visible_text,
)

Rule = Callable[[Course, str, NotebookNode], list[str]]


def unique_grade_ids(course: Course, lab: str, source: NotebookNode) -> list[str]:
    seen, problems = set(), []
    for gid, _ in iter_nbgrader_cells(source):
        if gid in seen:
            problems.append(f"grade_id {gid!r} is used twice")
        seen.add(gid)
    return problems


def points_are_declared(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """Every graded cell declares a positive number of points (the lab's total is their sum)."""
    problems = []
    for gid, cell in iter_nbgrader_cells(source):
        meta = nbgrader_meta(cell)
        points = meta.get("points")
        if meta.get("grade") and (isinstance(points, bool) or not isinstance(points, (int, float)) or not points > 0):
            problems.append(f"graded cell {gid!r} has points {points!r}")
    return problems


def no_outputs_in_authored(course: Course, lab: str, source: NotebookNode) -> list[str]:
    text = course.authored(lab).read_text()
    return ["notebooks/ holds outputs (execution counts or output metadata)"] if re.search(
        r'"(outputs|execution_count)"\s*:', text) else []


def answers_have_solutions(course: Course, lab: str, source: NotebookNode) -> list[str]:
    return [f"answer cell {gid!r} has no {BEGIN_SOLUTION} ... {END_SOLUTION} block"
            for gid, cell in iter_nbgrader_cells(source)
            if is_answer(cell) and not (BEGIN_SOLUTION in cell.source and END_SOLUTION in cell.source)]


def tests_are_tests(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """Every test cell is locked; hidden blocks sit only in test cells and are closed."""
    problems = []
    for gid, cell in iter_nbgrader_cells(source):
        if is_test(cell) and not nbgrader_meta(cell).get("locked"):
            problems.append(f"test cell {gid!r} is not locked")
        if BEGIN_HIDDEN in cell.source and not is_test(cell):
            problems.append(f"cell {gid!r} holds hidden tests but is not a test cell")
        if cell.source.count(BEGIN_HIDDEN) != cell.source.count(END_HIDDEN):
            problems.append(f"cell {gid!r} has an unclosed hidden-test block")
    return problems


def hidden_cells_say_what_they_check(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """A test cell never reaches students empty: text outside its hidden block says what is checked."""
    problems = []
    for gid, cell in iter_nbgrader_cells(source):
        if not has_hidden_tests(cell):
            continue
        if not visible_text(cell.source).strip():
            problems.append(f"test cell {gid!r} is all hidden: students see an empty locked cell; "
                            "add a comment above the block saying what it checks")
    return problems


def every_graded_function_has_hidden_test(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """Each answer cell that defines a function is called by a hidden test cell."""
    hidden_text = "\n".join(c.source for _, c in iter_nbgrader_cells(source) if has_hidden_tests(c))
    problems = []
    for gid, cell in iter_nbgrader_cells(source):
        if is_answer(cell) and cell.cell_type == "code":
            for name in re.findall(r"^(?:def|class) (\w+)", cell.source, flags=re.MULTILINE):
                if not re.search(rf"\b{name}\b", hidden_text):
                    problems.append(f"{name} (answer cell {gid!r}) is not exercised by any hidden test")
    return problems


def _scope_names(table) -> tuple[set[str], set[str]]:
    """(names a cell binds at its top level, global names it reads anywhere in it), from its symtable."""
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    bound |= {child.get_name() for child in table.get_children() if child.get_type() in ("function", "class")}
    read = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    todo = list(table.get_children())
    while todo:
        child = todo.pop()
        read |= {s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced()}
        todo += child.get_children()
    return bound, read


def given_cells_need_no_test_cell(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """A given cell (code the student runs but does not write) never reads a name that only a test
    cell defined: when that test fails, the given cell would die with a NameError (a heat map of the
    student's own wrong weights never drawn), one mistake costing two cells."""
    from mlbook import pyast

    problems, from_tests, from_others = [], {}, set()
    for index, cell in enumerate(source.cells):
        if cell.cell_type != "code":
            continue
        try:
            table = pyast.symtable(cell.source.replace(BEGIN_HIDDEN, "").replace(END_HIDDEN, ""), f"<cell {index}>")
        except SyntaxError:
            continue  # the build and the kernel report it
        bound, read = _scope_names(table)
        gid = nbgrader_meta(cell).get("grade_id") or f"cell {index}"
        if is_test(cell):
            from_tests.update({name: gid for name in bound if name not in from_others})
            continue
        if not is_answer(cell):
            for name in sorted(read - bound):
                if name in from_tests and name not in from_others:
                    problems.append(f"given cell {gid!r} reads {name!r}, which only test cell {from_tests[name]!r} "
                                    "defines: define it in a given cell (a failing test would leave it undefined)")
        from_others |= bound
    return problems


def release_is_clean(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """No solution text, hidden test text or delimiter reaches the release notebook."""
    path = course.release(lab)
    if not path.is_file():
        return [f"no release notebook at {path.relative_to(course.root)}; run `mlbook build {lab}`"]
    release_text = "\n".join(c.source for c in read_nb(path).cells)
    problems = [f"release contains the marker {m!r}" for m in (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN,
                                                               "BEGIN MARK SCHEME", "Rubric (TA only)")
                if m in release_text]
    given = _given_text(source)  # lines students are meant to see (outside every secret block)
    for gid, cell in iter_nbgrader_cells(source):
        for block in split_blocks(cell.source, SOLUTION)[1] + split_blocks(cell.source, HIDDEN)[1]:
            for line in block.splitlines():
                text = line.strip()
                if len(text) >= 25 and text in release_text and text not in given:
                    problems.append(f"release contains a line of {gid!r}'s solution or hidden tests: {text[:60]!r}")
    return problems


def _given_text(source: NotebookNode) -> str:
    """The source notebook's text with every solution and hidden-test block removed."""
    return "\n".join(visible_text(cell.source) for cell in source.cells)


def release_in_sync(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """source/ and release/ were built from the current notebooks/ file and not edited since."""
    path = course.build_manifest(lab)
    if not path.is_file() or not course.source(lab).is_file() or not course.release(lab).is_file():
        return [f"not built; run `mlbook build {lab}`"]
    recorded, now = json.loads(path.read_text()), manifest(course, lab)
    return [f"{name.replace('_sha256', '')} changed since the last build; run `mlbook build {lab}`"
            for name in ("authored_sha256", "source_sha256", "release_sha256") if recorded.get(name) != now[name]]


def catalogue_names_real_cells(course: Course, lab: str, source: NotebookNode) -> list[str]:
    cells = dict(iter_nbgrader_cells(source))
    try:
        catalogue, problems = load_catalogue(lab, course.source(lab)), []
    except MlbookError as exc:  # a patch that no longer applies to the reference answer
        return [str(exc)]
    if len(catalogue.alternatives) < 3:
        problems.append(f"the catalogue has {len(catalogue.alternatives)} alternative solutions; at least 3 are required")
    for entry in (*catalogue.mutants, *catalogue.alternatives):
        for gid in entry.cells:
            if gid not in cells or not is_answer(cells[gid]):
                problems.append(f"catalogue entry {entry.name!r} replaces {gid!r}, which is not an answer cell")
    for mutant in catalogue.mutants:
        for gid in mutant.must_fail:
            if gid not in cells or not is_test(cells[gid]):
                problems.append(f"mutant {mutant.name!r} must fail {gid!r}, which is not a test cell")
    return problems


def every_test_is_judged(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """Every test cell is decided by the judge: replayed, and (when visible) covered by hidden
    cells; every covering cell is a hidden test cell of this lab (mlbook.judge.plan)."""
    from mlbook.judge.plan import plan_from_text

    plan = plan_from_text(lab, nbformat.writes(source))
    declared = settings(lab).covered_by  # an explicit () says: checks answer data only
    problems = []
    for gid, cell in plan.cells.items():
        hidden = BEGIN_HIDDEN in cell.source
        if not hidden and not cell.covered_by and gid not in declared:
            problems.append(f"visible test cell {gid!r} is covered by no hidden test cell (COVERED_BY or {gid}_hidden)")
        if not cell.replayed and not cell.covered_by:
            problems.append(f"test cell {gid!r} is NOT_REPLAYED and covered by nothing: nothing would decide it")
        for other in cell.covered_by:
            if other not in plan.cells or BEGIN_HIDDEN not in plan.cells[other].source:
                problems.append(f"{gid!r} is covered by {other!r}, which is not a hidden test cell of {lab}")
    return problems


def helpers_hold_no_solutions(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """No solution line of this lab appears in what the sandbox can read: the student-facing
    helpers and the kernel side of the judge (mlbook_kernel)."""
    helpers = "\n".join(p.read_text() for pkg in ("mlbook_helpers", "mlbook_kernel")
                        for p in (course.root / pkg).rglob("*.py"))
    problems = []
    for gid, cell in iter_nbgrader_cells(source):
        for block in split_blocks(cell.source, SOLUTION)[1]:
            for line in block.splitlines():
                stripped = line.split("#")[0].strip()
                if len(stripped) >= 30 and stripped in helpers:
                    problems.append(f"mlbook_helpers contains a line of {gid!r}'s solution: {stripped[:60]!r}")
    return problems


def release_zip_is_exact(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """The LMS zip holds exactly the release notebook and what it needs (see ``mlbook.authoring.release_zip``).

    Checks ``exports/release/<lab>.zip`` when it exists (a stale or hand-edited zip is a
    problem), otherwise the zip ``mlbook release`` would write: no member outside the expected
    set, none missing or different, no grader path or import, no solution or hidden-test text.
    """
    import io
    import zipfile

    from mlbook.authoring.release_zip import GRADER, default_path, expected_files, imports_of, zip_bytes

    if not course.release(lab).is_file():
        return []  # release_is_clean already says so
    expected = expected_files(course, lab)
    path = default_path(course, lab)
    where = path.relative_to(course.root).as_posix() if path.is_file() else "the zip `mlbook release` writes"
    with zipfile.ZipFile(path if path.is_file() else io.BytesIO(zip_bytes(expected))) as archive:
        held = {name: archive.read(name) for name in archive.namelist()}
    problems = [f"{where} holds {n}, which students do not need" for n in held if n not in expected]
    problems += [f"{where} lacks {n}" for n in expected if n not in held]
    problems += [f"{where}: {n} is not the course's current copy; run `mlbook release {lab}`"
                 for n in held if n in expected and held[n] != expected[n]]
    for name, data in held.items():
        parts = name.split("/")
        if {"source", GRADER, "autograded", "submitted", "feedback"} & set(parts[:-1]):
            problems.append(f"{where} holds {name}: course or grader files never go to students")
        text = data.decode("utf-8", errors="replace")
        problems += [f"{where}: {name} contains {marker!r}" for marker in
                     (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN, "Rubric (TA only)", "mlbook.labs")
                     if marker in text]
        code = _code_in(name, text)
        if code and any(m.split(".")[0] == GRADER for m in imports_of(code)[0]):
            problems.append(f"{where}: {name} imports the grader package {GRADER!r}, which students do not have")
    return problems


def _code_in(name: str, text: str) -> str:
    """The Python code of a zip member: a module's text, or a notebook's code cells ('' otherwise)."""
    if name.endswith(".py"):
        return text
    if not name.endswith(".ipynb"):
        return ""
    try:
        cells = json.loads(text).get("cells", [])
    except ValueError:  # not a notebook: the comparison with the release already reports it
        return ""
    return "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")


def lab_is_scheduled(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """Once the course has a schedule (``course.toml``), every lab has a release and a due date
    there, due after released."""
    from mlbook.calendar.schedule import lab_problems, read_schedule

    schedule = read_schedule(course)
    if schedule is None:
        return []
    return lab_problems(schedule, lab)


def schedule_is_valid(course: Course) -> list[str]:
    """``course.toml`` reads: TOML, a known time zone, dates with a time, a known late policy."""
    from mlbook.calendar.schedule import read_schedule

    schedule = read_schedule(course)
    return schedule.problems if schedule else []


def schedule_names_real_labs(course: Course) -> list[str]:
    """Every lab ``course.toml`` schedules exists in ``notebooks/``."""
    from mlbook.calendar.schedule import SCHEDULE_NAME, read_schedule

    schedule = read_schedule(course)
    if schedule is None:
        return []
    known = set(course.labs())
    return [f"{SCHEDULE_NAME} schedules {lab!r}, which is not a lab of this course (labs: {', '.join(sorted(known))})"
            for lab in schedule.labs if lab not in known]


def sandbox_profile_exists(course: Course, lab: str, source: NotebookNode) -> list[str]:
    """The lab's ``SANDBOX_PROFILE`` names a profile the sandbox has (``mlbook.sandbox.profiles``)."""
    from mlbook.sandbox.profiles import profile

    try:
        profile(settings(lab).sandbox_profile)
    except MlbookError as exc:
        return [str(exc)]
    return []


COURSE_RULES: list[Callable[[Course], list[str]]] = [schedule_is_valid, schedule_names_real_labs]

RULES: list[Rule] = [
    unique_grade_ids,
    points_are_declared,
    no_outputs_in_authored,
    answers_have_solutions,
    tests_are_tests,
    hidden_cells_say_what_they_check,
    every_graded_function_has_hidden_test,
    every_test_is_judged,
    given_cells_need_no_test_cell,
    release_is_clean,
    release_in_sync,
    catalogue_names_real_cells,
    helpers_hold_no_solutions,
    release_zip_is_exact,
    lab_is_scheduled,
    sandbox_profile_exists,
]


def check_course(course: Course, labs: list[str]) -> dict[str, list[str]]:
    """Lab -> problems found (empty when the lab is clean)."""
    report = {}
    for lab in labs:
        try:
            source = read_authored(course.authored(lab))
        except MlbookError as exc:
            report[lab] = [str(exc)]
            continue
        problems = []
        for rule in RULES:
            try:
                problems += [f"{rule.__name__}: {p}" for p in rule(course, lab, source)]
            except MlbookError as exc:
                problems.append(f"{rule.__name__}: {exc}")
        report[lab] = problems
    course_problems = []
    for course_rule in COURSE_RULES:
        course_problems += [f"{course_rule.__name__}: {p}" for p in course_rule(course)]
    if course_problems:
        from mlbook.calendar.schedule import SCHEDULE_NAME

        report[SCHEDULE_NAME] = course_problems
    return report
