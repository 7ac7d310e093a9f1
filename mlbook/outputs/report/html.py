"""The report page: one HTML file, readable offline, with no script and no URL.

Conventions:
- Every value shown comes from ``LabData`` and the diagnosis; every piece of text from a
  notebook, a student id or a failure message is escaped.
- Tables carry their numbers as ``data-*`` attributes too: each row names its table in
  ``data-row`` (summary, scores, pass-rate, misconception, unexplained, error, timing, written,
  late) and its values in ``data-<key>``; a score cell carries ``data-score`` and ``data-max``
  (and, when late, ``data-raw``, ``data-penalty`` and ``data-hours-late``). The
  tests compare them with the gradebook without parsing prose.
"""

from __future__ import annotations

import statistics
import time
from html import escape

from mlbook.outputs.results import SubmissionResult
from mlbook.grading.status import ERROR, GRADED
from mlbook.outputs.report.data import LabData
from mlbook.outputs.report.figures import pass_rate, short
from mlbook.outputs.report.misconceptions import Diagnosis, Finding, Unexplained

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:78em;padding:0 1em;
     color:#222;line-height:1.4}
h1{margin-bottom:0.2em} h2{border-bottom:2px solid #3b528b;padding-bottom:0.2em;margin-top:2em}
nav a{margin-right:1em} .muted{color:#666} figure{margin:1em 0} svg.figure{max-width:100%;height:auto}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.92em} th,td{border:1px solid #ccc;padding:0.3em 0.6em;
     text-align:left;vertical-align:top} th{background:#eef1f8} td.num{text-align:right}
td.error{background:#fdf2f2;color:#c0392b;font-weight:600} td.missing{color:#888}
details{margin:0.5em 0} code{font-size:0.95em}
"""
SECTIONS = [("summary", "Summary"), ("scores", "Scores"), ("test-cells", "Test cells"),
            ("misconceptions", "Misconceptions"), ("errors", "Errored submissions"), ("late", "Late work"),
            ("flags", "Flagged"),
            ("timing", "Grading time"), ("written", "Written answers")]


def _num(value: float) -> str:
    return f"{value:g}"


def _table(header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _row(kind: str, data: dict[str, object], cells: list[str]) -> str:
    """A table row: ``data-row="<kind>"`` plus ``data-<key>`` for each value; ``cells`` are HTML."""
    attrs = "".join(f' data-{key}="{escape(str(value))}"' for key, value in data.items())
    return f'<tr data-row="{kind}"{attrs}>{"".join(cells)}</tr>'


def _td(text: object, css: str = "") -> str:
    """A cell holding ``text`` (escaped); numbers get ``css="num"``."""
    return f'<td class="{css}">{escape(str(text))}</td>' if css else f"<td>{escape(str(text))}</td>"


def _figure(name: str, svg: str | None, caption: str) -> str:
    if svg is None:
        return f'<p class="muted">No data for this figure yet: {escape(caption)}</p>'
    return f'<figure data-figure="{escape(name)}">{svg}<figcaption>{escape(caption)}</figcaption></figure>'


def _who(names: list[str]) -> str:
    return _td(", ".join(names)) if names else '<td class="muted">none</td>'


def summary(labs: list[LabData]) -> str:
    rows = []
    for d in labs:
        scores = [r.score for r in d.graded]
        median = f"{_num(statistics.median(scores))} / {_num(d.max_score)}" if scores else "-"
        counts = [len(d.results), len(d.graded), len(d.errors), len(d.not_graded)]
        pending = sum(len(w.pending) for w in d.written)
        rows.append(_row("summary", {"lab": d.lab}, [_td(d.lab)] + [_td(n, "num") for n in counts]
                         + [_td(median, "num"), _td(pending, "num")]))
    header = ["lab", "submitted", "graded", "errors", "not graded yet", "median score", "written answers to grade"]
    return _table(header, rows)


def _score_cell(lab: str, student: str, r: SubmissionResult | None) -> str:
    if r is None:
        return '<td class="missing">no submission</td>'
    data = f'data-lab="{escape(lab)}" data-student="{escape(student)}" data-status="{r.status}"'
    if r.status == GRADED and r.late:
        return (f'<td class="num" {data} data-score="{_num(r.score)}" data-max="{_num(r.max_score)}" '
                f'data-raw="{_num(r.raw_score)}" data-penalty="{_num(r.late_penalty)}" '
                f'data-hours-late="{r.hours_late:.2f}">{_num(r.score)} / {_num(r.max_score)} '
                f'<span class="muted">(late {r.hours_late:.1f} h: {_num(r.raw_score)} - {_num(r.late_penalty)})</span></td>')
    if r.status == GRADED:
        return (f'<td class="num" {data} data-score="{_num(r.score)}" data-max="{_num(r.max_score)}">'
                f'{_num(r.score)} / {_num(r.max_score)}</td>')
    return f'<td class="{r.status}" {data}>{"ERROR" if r.status == ERROR else "not graded"}</td>'


def score_table(labs: list[LabData]) -> str:
    """Student x lab scores; an error is shown as an error, never as 0."""
    by_lab = {d.lab: {r.student: r for r in d.results} for d in labs}
    students = sorted({r.student for d in labs for r in d.results})
    rows = [_row("scores", {"student": s}, [_td(s)] + [_score_cell(d.lab, s, by_lab[d.lab].get(s)) for d in labs])
            for s in students]
    return _table(["student"] + [short(d.lab) for d in labs], rows)


def late_table(labs: list[LabData]) -> str:
    """Every graded submission handed in after its due date: when, how late, raw score, penalty."""
    rows = []
    for d in labs:
        for r in sorted((r for r in d.graded if r.late), key=lambda r: -r.hours_late):
            data = {"lab": d.lab, "student": r.student, "hours-late": f"{r.hours_late:.2f}", "raw": _num(r.raw_score),
                    "penalty": _num(r.late_penalty), "score": _num(r.score), "extended": int(r.extended)}
            rows.append(_row("late", data, [_td(short(d.lab)), _td(r.student),
                                            _td(r.submitted_at.strftime("%Y-%m-%d %H:%M UTC") if r.submitted_at else "-"),
                                            _td(r.due.strftime("%Y-%m-%d %H:%M UTC") + (" (extended)" if r.extended else "")
                                                if r.due else "-"),
                                            _td(f"{r.hours_late:.1f}", "num"), _td(_num(r.raw_score), "num"),
                                            _td(_num(r.late_penalty), "num"), _td(_num(r.score), "num")]))
    if not rows:
        return '<p class="muted">No graded submission was late.</p>'
    return _table(["lab", "student", "submitted", "due", "hours late", "raw score", "late penalty", "score"], rows)


def pass_rate_table(labs: list[LabData]) -> str:
    rows = []
    for d in (d for d in labs if d.graded):
        for cell in d.test_cells:
            passed, graded = pass_rate(d, cell)
            rows.append(_row("pass-rate", {"lab": d.lab, "cell": cell, "passed": passed, "graded": graded},
                             [_td(short(d.lab)), f"<td><code>{escape(cell)}</code></td>",
                              _td(f"{passed} / {graded}", "num")]))
    table = _table(["lab", "test cell", "passed (full points) / graded"], rows)
    return f"<details><summary>The numbers behind the heat map</summary>{table}</details>"


def findings_table(findings: list[Finding]) -> str:
    if not findings:
        return '<p class="muted">No graded submission shows a misconception from the catalogues.</p>'
    rows = [_row("misconception", {"lab": f.lab, "mutant": f.mutant.name, "count": len(f.students),
                                   "students": ",".join(f.students)},
                 [_td(len(f.students), "num"), _td(short(f.lab)), _td(f.mutant.misconception),
                  _td(", ".join(sorted(f.cells))), _who(f.students)]) for f in findings]
    return _table(["students", "lab", "misconception", "failing cells that show it", "who"], rows)


def unexplained_table(rest: list[Unexplained]) -> str:
    if not rest:
        return '<p class="muted">Every failing test is explained by a known misconception.</p>'
    rows = []
    for u in rest:
        messages = "<br>".join(escape(m[:220]) for m in u.messages[:3]) or '<span class="muted">(no message)</span>'
        rows.append(_row("unexplained", {"lab": u.lab, "cell": u.cell, "count": len(u.students),
                                         "students": ",".join(u.students)},
                         [_td(short(u.lab)), f"<td><code>{escape(u.cell)}</code></td>", _td(len(u.students), "num"),
                          _who(u.students), f"<td>{messages}</td>"]))
    return _table(["lab", "test cell", "students", "who", "messages (first 3)"], rows)


def not_attempted_list(diagnoses: dict[str, Diagnosis]) -> str:
    items = [f"<li>{escape(short(lab))} {escape(student)}: {len(cells)} test cell(s)</li>"
             for lab, d in diagnoses.items() for student, cells in sorted(d.not_attempted.items())]
    if not items:
        return ""
    return ("<p>Left nbgrader's <code>raise NotImplementedError()</code> stub in place (not attempted; not "
            f"itemised above):</p><ul>{''.join(items)}</ul>")


def errors_table(labs: list[LabData]) -> str:
    rows = [_row("error", {"lab": d.lab, "student": r.student, "seconds": f"{r.seconds:.1f}"},
                 [_td(r.student), _td(d.lab), _td(r.reason or "no reason recorded"), _td(f"{r.seconds:.1f}", "num")])
            for d in labs for r in d.errors]
    if not rows:
        return '<p class="muted">Every submission could be graded.</p>'
    return _table(["student", "lab", "reason", "seconds"], rows)


def flags_table(labs: list[LabData]) -> str:
    rows = [_row("flag", {"lab": d.lab, "student": r.student}, [_td(r.student), _td(d.lab), _td(r.warning)])
            for d in labs for r in d.results if r.warning]
    if not rows:
        return '<p class="muted">Nothing to check by hand.</p>'
    return _table(["student", "lab", "what to check"], rows)


def timing_table(labs: list[LabData]) -> str:
    rows = []
    for d in labs:
        timed = sorted((r.seconds, r.student) for r in d.graded + d.errors)
        if not timed:
            continue
        values = [seconds for seconds, _ in timed]
        rows.append(_row("timing", {"lab": d.lab, "count": len(values), "total": f"{sum(values):.1f}"},
                         [_td(d.lab), _td(len(values), "num"), _td(f"{statistics.median(values):.1f}", "num"),
                          _td(f"{sum(values):.0f}", "num"), _td(f"{timed[-1][1]} ({timed[-1][0]:.1f} s)")]))
    return _table(["lab", "submissions", "median s", "total s", "slowest"], rows)


def written_table(labs: list[LabData]) -> str:
    rows = [_row("written", {"lab": d.lab, "cell": w.grade_id, "pending": len(w.pending)},
                 [_td(short(d.lab)), f"<td><code>{escape(w.grade_id)}</code></td>", _td(_num(w.points), "num"),
                  _td(len(w.pending), "num"), _td(w.rubric or "no rubric in the source notebook")])
            for d in labs for w in d.written]
    if not rows:
        return '<p class="muted">These labs have no written answers.</p>'
    header = ["lab", "answer cell", "points", "awaiting a TA", "rubric (from the source notebook, TA only)"]
    return _table(header, rows)


def page(title: str, labs: list[LabData], figures: dict[str, str | None], diagnoses: dict[str, Diagnosis],
         source: str) -> str:
    """The whole HTML page.

    Args:
        title: the page title.
        labs: the labs, in order.
        figures: figure name -> SVG (None: nothing to draw).
        diagnoses: lab -> its misconception diagnosis.
        source: where the data came from (one line).
    Returns:
        The HTML text.
    """
    findings = sorted((f for d in diagnoses.values() for f in d.findings), key=lambda f: -len(f.students))
    rest = [u for d in diagnoses.values() for u in d.unexplained]
    nav = "".join(f'<a href="#{key}">{escape(name)}</a>' for key, name in SECTIONS)
    per_lab = "".join(_figure(f"students-{d.lab}", figures.get(f"students-{d.lab}"),
                              f"{d.lab}: each student's share of each test cell's points") for d in labs if d.results)
    empty = [d.lab for d in labs if not d.results]
    no_subs = f'<p class="muted">No submissions yet: {escape(", ".join(empty))}</p>' if empty else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}</h1>
<p class="muted">Generated {time.strftime("%Y-%m-%d %H:%M")} by <code>mlbook report</code> from {escape(source)}.
Scores are nbgrader's (written answers count 0 until a TA grades them); a submission that could not be graded
is shown as an error, never as 0.</p>
<nav>{nav}</nav>
<section id="summary"><h2>Summary</h2>{summary(labs)}{no_subs}</section>
<section id="scores"><h2>Scores</h2>
{_figure("scores", figures.get("scores"), "Score distribution per lab (graded submissions)")}
{score_table(labs)}</section>
<section id="test-cells"><h2>Test cells</h2>
{_figure("pass-rates", figures.get("pass-rates"), "Pass rate of each test cell (full points), per lab")}
{pass_rate_table(labs)}{per_lab}</section>
<section id="misconceptions"><h2>Most frequent misconceptions</h2>
<p>A submission shows a misconception when every test cell that the catalogue's mutant must fail failed, each
with the message the mutant is known to produce.</p>
{findings_table(findings)}
<h3>Failures no catalogue entry explains</h3>{unexplained_table(rest)}{not_attempted_list(diagnoses)}</section>
<section id="errors"><h2>Submissions that could not be graded</h2>{errors_table(labs)}</section>
<section id="late"><h2>Late work</h2>
<p>Scores above are after the late penalty of the course's policy (<code>course.toml</code>); a student with an
extension (<code>mlbook extend</code>) is late only after it.</p>
{late_table(labs)}</section>
<section id="flags"><h2>Flagged for a TA</h2>
<p>Graded as usual, with something a TA should look at: a renamed notebook matched by its cells, or a library
function the task forbids (scores are not changed for it; see the lab's rule).</p>
{flags_table(labs)}
{"".join(f'<p>Similar answers: <a href="similarity-{escape(d.lab)}.html">similarity-{escape(d.lab)}.html</a> '
         f'(written beside this page by <code>mlbook similarity {escape(d.lab)}</code>; never changes a grade)</p>'
         for d in labs)}</section>
<section id="timing"><h2>Grading time</h2>
{_figure("grading-time", figures.get("grading-time"), "Seconds to grade each submission")}
{timing_table(labs)}</section>
<section id="written"><h2>Written answers awaiting a TA</h2>
<p>Graded by hand in nbgrader's formgrader; the rubric is shown here because formgrader shows only the
student's answer.</p>
{written_table(labs)}</section>
</body></html>
"""
