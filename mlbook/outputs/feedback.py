"""``mlbook feedback``: a feedback page for every student who submitted.

Graded submissions get nbgrader's own feedback (hidden tests cleared, tracebacks reduced to
their message by the configured preprocessors). Submissions that failed as a whole get a page
that says what happened and what to do, so nobody is left without feedback. A late submission's
page opens with a box saying when it was handed in, its due date (the extension's when the
student has one), the hours late, the score before the penalty and the penalty; nbgrader's own
score line below it already counts the penalty (the gradebook's is brought up to date first).
A page whose written answers a TA has not graded yet opens with a box saying so (nbgrader shows
them as "Score: 0.0"), and ``pending_written`` lets ``mlbook feedback`` warn before anything is
handed back.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from mlbook.course import Course
from mlbook.files import write_atomic
from mlbook.nbgrader_env import api_for, failure_reason
from mlbook.grading.status import GRADED, StatusStore

_ERROR_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{lab}: feedback for {student}</title>
<style>body{{font-family:sans-serif;max-width:46em;margin:2em auto;line-height:1.5}}
.box{{border-left:4px solid #c0392b;background:#fdf2f2;padding:0.8em 1.2em}}</style></head>
<body><h1>{lab}: your submission could not be graded</h1>
<div class="box"><p><b>What happened:</b> {reason}</p></div>
<p>No test in this notebook could be scored, so it currently counts 0 points. Common causes are a
notebook file that is no longer valid JSON (edited outside Jupyter), code that ends the kernel
(<code>os._exit</code>, running out of memory), or a cell that never finishes.</p>
<p>Open your notebook, run <i>Kernel &rarr; Restart and Run All</i>, fix the first error you see,
save, and submit again. Your TA has been told about this submission.</p></body></html>
"""


def write_error_page(path: Path, lab: str, student: str, reason: str) -> None:
    write_atomic(path, _ERROR_PAGE.format(lab=html.escape(lab), student=html.escape(student),
                                          reason=html.escape(reason or "unknown error")))


_LATE_BOX = """<div style="border-left:4px solid #e67e22;background:#fdf6ec;padding:0.6em 1.2em;margin:1em auto;
max-width:60em;font-family:sans-serif" id="late-submission" data-hours-late="{hours:.2f}" data-raw="{raw:g}"
data-penalty="{penalty:g}" data-score="{score:g}"><b>Late submission.</b> Handed in {submitted}, due {due}{extended}:
{hours:.1f} hours late. Score before the penalty: {raw:g} / {max:g}; late penalty ({policy}): &minus;{penalty:g};
score: {score:g} / {max:g}.</div>
"""


_PENDING_BOX = """<div style="border-left:4px solid #2980b9;background:#eef5fb;padding:0.6em 1.2em;margin:1em auto;
max-width:60em;font-family:sans-serif" id="written-answers-pending" data-pending="{count}" data-points="{points:g}">
<b>Not final yet.</b> {count} written answer(s) worth {points:g} point(s) are still with your TA: they show as
0 below until they are graded, and your score will change then.</div>
"""


def pending_written(results) -> dict[str, tuple[int, float]]:
    """student -> (written answers not graded yet, their points), for graded results that have any."""
    pending = {}
    for r in results:
        if r.status != GRADED:
            continue
        waiting = [c for c in r.cells.values() if c.kind == "manual" and c.score is None]
        if waiting:
            pending[r.student] = (len(waiting), sum(c.max_score for c in waiting))
    return pending


def _add_box(page: Path, box: str) -> None:
    """Put ``box`` at the top of nbgrader's feedback page."""
    text = page.read_text(encoding="utf-8")
    head, sep, rest = text.partition("<body>")
    mode = page.stat().st_mode & 0o777
    write_atomic(page, head + sep + "\n" + box + rest if sep else box + text)
    # the page keeps nbgrader's mode (0644): a new file takes the grader's umask (0660 with the staff
    # group's 007), nbgrader's release copies the mode into the exchange, and the student could not read it
    os.chmod(page, mode)


def _late_box(result, policy: str) -> str:
    return _LATE_BOX.format(hours=result.hours_late, raw=result.raw_score, penalty=result.late_penalty,
                           score=result.score, max=result.max_score, policy=html.escape(policy),
                           submitted=result.submitted_at.strftime("%Y-%m-%d %H:%M UTC"),
                           due=result.due.strftime("%Y-%m-%d %H:%M UTC"),
                           extended=" (your extension)" if result.extended else "")


def generate_feedback(course: Course, lab: str, students: list[str] | None = None) -> list[Path]:
    """Write feedback for ``students`` (default: every submission); returns the pages written."""
    from mlbook.calendar.late import refresh_gradebook
    from mlbook.calendar.schedule import load_schedule
    from mlbook.outputs.results import collect

    students = students if students is not None else course.students(lab)
    store = StatusStore(course.status_file)
    schedule = load_schedule(course)
    refresh_gradebook(course, lab)
    results = collect(course, lab, students)
    late = {r.student: r for r in results if r.status == GRADED and r.late} if schedule else {}
    pending = pending_written(results)
    api, pages = None, []
    for student in students:
        attempt = store.get(lab, student)
        page = course.feedback(student, lab)
        if attempt.status == GRADED:
            api = api or api_for(course)
            result = api.generate_feedback(lab, student, force=True)
            if result.get("success") and page.is_file():
                if student in pending:
                    _add_box(page, _PENDING_BOX.format(count=pending[student][0], points=pending[student][1]))
                if student in late:
                    _add_box(page, _late_box(late[student], schedule.late.describe()))
                pages.append(page)
                continue
            reason = f"feedback could not be generated: {failure_reason(result)}"
        else:
            reason = attempt.reason or "this submission has not been graded yet"
        write_error_page(page, lab, student, reason)
        pages.append(page)
    return pages
