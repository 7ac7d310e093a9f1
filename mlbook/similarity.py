"""Similarity of students' answer cells, for a TA to review (issue 41). Never changes a grade.

Engine: copydetect 0.5.0 (winnowing, Schleimer et al. 2003) through its Python API
(``CodeFingerprint`` with ``fp=``, ``compare_files``). compare50 is CLI-first and writes its
own report; copydetect lets us feed normalised text per cell and drop the hashes of the release
notebook's given code and ``mlbook_helpers`` (boilerplate). We write no fingerprinting ourselves:
only the normalisation below (Python ``tokenize``: names the student binds to one placeholder,
comments/whitespace dropped, keywords, other names, operators and numbers kept; written answers
lowercased to words), handed to copydetect as a tuple of ints so that its ``hash()`` of each
k-gram is not salted per process: scores do not depend on PYTHONHASHSEED. Submissions are read through ``grading.intake.take``,
the same hostile-input intake as grading; a refused folder is reported with its reason. The
private copies go under a fresh temporary folder per run, never grading's ``autograded/.intake``:
similarity may run while ``mlbook autograde`` grades the same lab.
"""

from __future__ import annotations

import ast
import csv
import html
import io
import itertools
import json
import keyword
import re
import tempfile
import tokenize
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from copydetect import CodeFingerprint, compare_files

from mlbook.course import Course
from mlbook.grading import intake
from mlbook.labs import settings

K = 12  # k-gram length in tokens (one normalised character per token)
WIN = 4
DEFAULT_THRESHOLD = 0.8  # on Pair.score; see docs/similarity.md for the measured margins
# A cell counts toward a pair's overall score only if both answers have at least this many tokens
# beyond the given code: a one-line answer (``-(attn * torch.log(attn + 1e-8)).sum(-1).mean((0, 2))``)
# is written alike by students who never met, so its match is no evidence. Such cells are still
# compared and shown, marked "short".
MIN_TOKENS = 40
MAX_BYTES = 5_000_000


@dataclass
class Cell:
    grade_id: str
    text: str  # the student's original cell text
    norm: str = ""
    spans: list = field(default_factory=list)  # norm char index -> (start, end) in text


def bound_names(texts) -> set[str]:
    """Names the student's own code binds: parameters, assignment/loop/with/except targets,
    def/class names, ``import ... as`` aliases, and attributes assigned (``self.w = ...``, kept as
    ``".w"``: ``np.eye`` stays ``eye`` where the student also binds a variable ``eye``).

    Only these are the student's to choose, so only these are normalised: a copier who renames
    them changes nothing, while API names (``torch.special.entr``, ``np.where``, ``dim=``) and the
    given cells' names stay, and tell independent answers apart. Cells that do not parse
    (IPython magics are blanked first) bind nothing."""
    names = set()
    for text in texts:
        src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines())
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add("." + node.attr)  # normalised only after a dot
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
    return names


def _glyph(token: str) -> str:
    """One character per token (CJK block, by CRC), so that K counts tokens whatever their length."""
    return chr(0x4E00 + zlib.crc32(token.encode()) % 20000)


def normalise_code(text: str, bound: set[str] | None = None) -> tuple[str, list]:
    """Python tokens of ``text``: names in ``bound`` -> ``v``, strings -> ``s``, comments and
    whitespace dropped; keywords, other names, operators and numbers kept. ``bound=None``: the
    names ``text`` itself binds. Returns the normalised text and, per character, its (start, end)
    in ``text`` (for highlighting)."""
    bound = bound_names([text]) if bound is None else bound
    out, spans = [], []
    lines = text.splitlines(keepends=True)
    starts = list(itertools.accumulate([0] + [len(l) for l in lines]))
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return normalise_words(text)
    prev = None
    for t in toks:
        if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                      tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if t.type == tokenize.NAME:
            name = "." + t.string if prev == "." else t.string
            s = "v" if name in bound and not keyword.iskeyword(t.string) else _glyph(t.string)
        elif t.type == tokenize.STRING:
            s = "s"
        else:
            s = _glyph(t.string)
        a = starts[t.start[0] - 1] + t.start[1] if t.start[0] - 1 < len(starts) else len(text)
        b = starts[t.end[0] - 1] + t.end[1] if t.end[0] - 1 < len(starts) else len(text)
        out.append(s)
        spans.append((a, b))
        prev = t.string
    return "".join(out), spans


def normalise_words(text: str) -> tuple[str, list]:
    """Written answers (and code that does not tokenize): one character per lowercased word,
    punctuation and whitespace dropped. Returns the text and each character's (start, end)."""
    out, spans = [], []
    for m in re.finditer(r"\w+", text):
        out.append(_glyph(m.group().lower()))
        spans.append((m.start(), m.end()))
    return "".join(out), spans


class _TokenCodes:
    """What copydetect reads as the document (its ``fp=``): the normalised text as a tuple of code
    points, one int per token. copydetect k-grams the document by slicing and fingerprints each
    k-gram with Python's ``hash()``; a str's ``hash()`` is salted per process (PYTHONHASHSEED),
    a tuple of ints' is not, so the same class scores the same in every run."""

    def __init__(self, norm: str):
        self.norm = norm

    def read(self) -> tuple[int, ...]:
        return tuple(map(ord, self.norm))


def _fingerprint(norm: str, boilerplate=None) -> CodeFingerprint:
    """copydetect's fingerprint of normalised text, boilerplate hashes removed.

    Boilerplate is removed here, not through ``boilerplate=``: copydetect 0.5.0 passes
    ``assume_unique=True`` to ``np.intersect1d`` on hashes that repeat, which raises
    IndexError or drops the wrong ones."""
    fp = CodeFingerprint("cell.txt", K, WIN, filter=False, fp=_TokenCodes(norm))
    drop = set(boilerplate or ()) & set(fp.hashes)
    fp.hashes = set(fp.hashes) - drop
    for h in drop:
        fp.hash_idx.pop(h, None)
    covered = set()
    for idxs in fp.hash_idx.values():
        for i in idxs:
            covered.update(range(int(i), int(i) + K))
    fp.token_coverage = len(covered)
    return fp


def answer_cells(nb: dict) -> dict[str, Cell]:
    """The notebook's answer cells (nbgrader ``solution``) by grade id, normalised. Code cells
    share one set of bound names (a helper renamed in one cell is renamed where it is used)."""
    cells, code = {}, []
    for c in nb.get("cells", []):
        meta = (c.get("metadata") or {}).get("nbgrader") or {}
        if meta.get("solution") and meta.get("grade_id"):
            src = c.get("source", "")
            text = "".join(src) if isinstance(src, list) else str(src)
            cells[str(meta["grade_id"])] = Cell(str(meta["grade_id"]), text)
            if c.get("cell_type") == "code":
                code.append(str(meta["grade_id"]))
    bound = bound_names(cells[g].text for g in code)
    for g, cell in cells.items():
        cell.norm, cell.spans = normalise_code(cell.text, bound) if g in code else normalise_words(cell.text)
    return cells


def boilerplate(course: Course, lab: str) -> dict[str, list]:
    """Per grade id, the hashes of the release notebook's given text plus mlbook_helpers code."""
    common = []
    helpers = course.root / "mlbook_helpers"
    for py in sorted(helpers.rglob("*.py")) if helpers.is_dir() else []:
        common += list(_fingerprint(normalise_code(py.read_text(errors="replace"))[0]).hashes)
    release = json.loads(course.release(lab).read_text())
    out = {}
    for gid, cell in answer_cells(release).items():
        out[gid] = common + list(_fingerprint(cell.norm).hashes)
    out["*"] = common
    out["given-tokens"] = {gid: len(cell.norm) for gid, cell in answer_cells(release).items()}
    return out


@dataclass
class Pair:
    a: str
    b: str
    overall: float
    cells: dict  # grade_id -> (score, slices_a, slices_b)
    short: set = field(default_factory=set)  # grade ids compared but too short to count (MIN_TOKENS)
    best: float = 0.0  # the highest symmetric score of one counted cell (a whole function copied)

    @property
    def score(self) -> float:
        """What pairs are ranked and flagged by: the overall score, or one counted cell's if higher
        (one copied function among a student's own answers dilutes the overall score)."""
        return max(self.overall, self.best)


def compare_class(subs: dict[str, dict[str, Cell]], bp: dict[str, list]) -> list[Pair]:
    fps = {s: {g: _fingerprint(c.norm, bp.get(g, bp.get("*"))) for g, c in cells.items() if len(c.norm) >= K + WIN}
           for s, cells in subs.items()}
    given = bp.get("given-tokens", {})
    for s_, cells in fps.items():  # tokens beyond the given code (deterministic, unlike winnowing's coverage)
        for g, fp in cells.items():
            fp.tokens = len(subs[s_][g].norm) - given.get(g, 0)
    pairs = []
    for a, b in itertools.combinations(sorted(subs), 2):
        per, short, num, den, best = {}, set(), 0.0, 0.0, 0.0
        for g in sorted(set(fps[a]) & set(fps[b])):
            fa, fb = fps[a][g], fps[b][g]
            if not fa.hashes or not fb.hashes:
                continue
            overlap, (sa, sb), (la, lb) = compare_files(fa, fb)
            per[g] = (max(sa, sb), la, lb)  # max: a partial copy of one function scores high
            if min(fa.tokens, fb.tokens) < MIN_TOKENS:
                short.add(g)
                continue
            mean = (fa.token_coverage + fb.token_coverage) / 2 or 1  # symmetric: a shared prefix is not a copy
            num += overlap
            den += mean
            best = max(best, overlap / mean)
        pairs.append(Pair(a, b, num / den if den else 0.0, per, short, best))
    pairs.sort(key=lambda p: (-p.score, p.a, p.b))
    return pairs


def read_class(course: Course, lab: str) -> tuple[dict[str, dict[str, Cell]], dict[str, str]]:
    """Every submission of ``lab``, through the grading intake into this run's own private folder.

    Returns:
        (student -> grade id -> Cell, student -> why the submission was refused)."""
    with tempfile.TemporaryDirectory(prefix="mlbook-similarity-") as own:
        return _read_class(course, lab, Path(own))


def _read_class(course: Course, lab: str, own: Path) -> tuple[dict[str, dict[str, Cell]], dict[str, str]]:
    subs, refused = {}, {}
    for student in course.students(lab):
        if not course.has_submission(student, lab):
            continue
        taken = intake.take(course, lab, student, MAX_BYTES, root=own)
        try:
            if taken.notebook is None:
                refused[student] = taken.error
                continue
            try:
                subs[student] = answer_cells(json.loads(taken.notebook.read_text()))
            except (ValueError, UnicodeDecodeError) as exc:
                refused[student] = f"not a notebook: {exc}"
        finally:
            intake.discard(course, student, lab, root=own)
    return subs, refused


def _mark(text: str, cell: Cell, slices) -> str:
    marked = [False] * len(text)
    for s, e in zip(*slices) if len(slices) == 2 else []:
        for i in range(int(s), min(int(e), len(cell.spans))):
            a, b = cell.spans[i]
            for j in range(a, min(b, len(text))):
                marked[j] = True
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and marked[j] == marked[i]:
            j += 1
        chunk = html.escape(text[i:j])
        out.append(f"<mark>{chunk}</mark>" if marked[i] else chunk)
        i = j
    return "".join(out)


def write_html(path: Path, lab: str, pairs: list[Pair], subs, threshold: float, refused: dict) -> Path:
    rows = ["<!doctype html><html><head><meta charset='utf-8'><title>Similarity " + html.escape(lab) +
            "</title><style>pre{white-space:pre-wrap;background:#f6f6f6;padding:4px;margin:0}"
            "td{vertical-align:top}table.summary td:first-child{white-space:nowrap}table.pair{width:100%;table-layout:fixed}table.pair td{width:50%}"
            "mark{background:#ffd54f}</style></head><body>",
            f"<h1>Similarity: {html.escape(lab)}</h1><p>For TA review only; scores never change grades. "
            f"Threshold {threshold:g}.</p>"]
    for who, why in sorted(refused.items()):
        rows.append(f"<p>refused {html.escape(who)}: {html.escape(why)}</p>")
    rows.append("<table class=summary border=1><tr><th>pair</th><th>score</th><th>overall</th><th>matching cells</th></tr>")
    for p in pairs:
        rows.append(f"<tr><td>{html.escape(p.a)} / {html.escape(p.b)}</td><td>{p.score:.2f}</td>"
                    f"<td>{p.overall:.2f}</td><td>{html.escape(_matching(p, threshold))}</td></tr>")
    rows.append("</table>")
    for p in [p for p in pairs if p.score >= threshold]:
        rows.append(f"<h2>{html.escape(p.a)} / {html.escape(p.b)}: {p.score:.2f}</h2><table class=pair>")
        for g, (s, la, lb) in p.cells.items():
            ca, cb = subs[p.a][g], subs[p.b][g]
            note = " (short: not counted)" if g in p.short else ""
            rows.append(f"<tr><th colspan=2>{html.escape(g)} {s:.2f}{note}</th></tr><tr><td><pre>{_mark(ca.text, ca, la)}"
                        f"</pre></td><td><pre>{_mark(cb.text, cb, lb)}</pre></td></tr>")
        rows.append("</table>")
    rows.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows), encoding="utf-8")
    return path


def _matching(p: Pair, threshold: float) -> str:
    return ", ".join(f"{g} {s:.2f}" + (" short" if g in p.short else "")
                     for g, (s, _, _) in p.cells.items() if s >= threshold)


def write_csv(path: Path, pairs: list[Pair]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_a", "student_b", "score", "overall", "cells"])
        for p in pairs:
            w.writerow([p.a, p.b, f"{p.score:.3f}", f"{p.overall:.3f}",
                        ";".join(f"{g}={s:.3f}" + ("(short)" if g in p.short else "") for g, (s, _, _) in p.cells.items())])
    return path


def run(course: Course, lab: str, threshold: float = DEFAULT_THRESHOLD, csv_path: Path | None = None,
        html_path: Path | None = None, echo=print) -> list[Pair]:
    subs, refused = read_class(course, lab)
    pairs = compare_class(subs, boilerplate(course, lab))
    html_path = html_path or course.exports_dir / f"similarity-{lab}.html"
    csv_path = csv_path or course.exports_dir / f"similarity-{lab}.csv"
    echo(f"{'pair':40} {'score':>7} {'overall':>7}  matching cells")
    for p in pairs:
        flag = "FLAG " if p.score >= threshold else "     "
        echo(f"{flag}{p.a + ' / ' + p.b:35} {p.score:7.2f} {p.overall:7.2f}  {_matching(p, threshold)}")
    for who, why in sorted(refused.items()):
        echo(f"refused {who}: {why}")
    echo(f"wrote {write_html(html_path, lab, pairs, subs, threshold, refused)}")
    echo(f"wrote {write_csv(csv_path, pairs)}")
    return pairs
