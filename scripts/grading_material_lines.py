"""How large the labs' grading material is: hidden checks, the shared kit, misconception catalogues.

Usage:
    python scripts/grading_material_lines.py [ROOT]            sizes of a checkout (default: this one)
    python scripts/grading_material_lines.py --since REV       the same checks and catalogue entries,
                                                               at REV and now (run inside the checkout)

The first form counts files, lines and code lines (lines holding code: no blank, comment or
docstring lines) of each lab's hidden checks (``hidden.py`` or ``hidden/*.py``), of the code they
share (``kit/``, or the older ``_support.py``) and of each lab's ``catalogue.py``. It works on old
checkouts too, so a figure can be measured before and after a change.

Totals grow with a lab's content (a new graded function brings its check and its mutants), so
``--since`` compares like with like:
- for each ``check_*`` function present at both revisions, the lines of the lab's own top-level
  definitions it reaches (itself, the helpers it calls, the tables it reads; shared code is not
  counted: ``_support.py`` then, ``kit/`` now);
- for each mutant and alternative present at both revisions (by name), the lines of its entry
  (a ``Mutant(...)``/``Alternative(...)`` call, or a row of ``mutants_of``), and how many lines of the
  catalogue stand outside every entry (shared templates, signatures, comments).
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from collections import defaultdict
from pathlib import Path

GROUPS = {
    "hidden checks": ("mlbook/labs/lab*/hidden.py", "mlbook/labs/lab*/hidden/*.py"),
    "shared by labs": ("mlbook/labs/_support.py", "mlbook/labs/kit/*.py"),
    "catalogues": ("mlbook/labs/lab*/catalogue.py",),
}
SKIPPED_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                  tokenize.ENDMARKER}
LABS = "mlbook/labs"


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers of every module, class and function docstring."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """Lines that hold at least one token of code outside docstrings."""
    docs = docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in SKIPPED_TOKENS:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return len(lines)


def sizes(root: Path) -> None:
    for name, patterns in GROUPS.items():
        files = sorted({f for pattern in patterns for f in root.glob(pattern)})
        sources = [f.read_text() for f in files]
        total = sum(len(s.splitlines()) for s in sources)
        code = sum(code_lines(s) for s in sources)
        print(f"{name:15s} {len(files):3d} files {total:7,d} lines {code:7,d} code lines")


# --- like for like ------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False).stdout


def _labs(rev: str | None) -> list[str]:
    if rev is None:
        return sorted(p.name for p in Path(LABS).glob("lab0*") if p.is_dir())
    return sorted({line.split("/")[2] for line in _git("ls-tree", "-r", "--name-only", rev, LABS + "/").split()
                   if line.split("/")[2].startswith("lab0")})


def _read(rev: str | None, path: str) -> str | None:
    if rev is None:
        return Path(path).read_text() if Path(path).is_file() else None
    out = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=False)
    return out.stdout if out.returncode == 0 else None


def _hidden_sources(rev: str | None, lab: str) -> list[str]:
    """The lab's hidden checks at ``rev`` (None: the working tree): hidden.py or hidden/*.py."""
    single = _read(rev, f"{LABS}/{lab}/hidden.py")
    if single is not None:
        return [single]
    if rev is None:
        paths = sorted(str(p) for p in Path(LABS, lab, "hidden").glob("*.py"))
    else:
        paths = [p for p in _git("ls-tree", "--name-only", rev, f"{LABS}/{lab}/hidden/").split() if p.endswith(".py")]
    return [s for s in (_read(rev, p) for p in paths) if s is not None]


def _definitions(sources: list[str]) -> dict[str, tuple[int, set[str]]]:
    """Top-level name -> (its lines, the names it mentions), over every module of a lab's checks."""
    table: dict[str, list] = defaultdict(lambda: [0, set()])
    for source in sources:
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            mentioned = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            mentioned |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            for name in names:
                table[name][0] += node.end_lineno - first + 1
                table[name][1] |= mentioned
    return {name: (lines, refs) for name, (lines, refs) in table.items()}


def _reached_lines(table: dict[str, tuple[int, set[str]]], roots: list[str]) -> int:
    """Lines of every definition reachable from ``roots`` through the names each mentions."""
    seen: set[str] = set()
    todo = [r for r in roots if r in table]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(m for m in table[name][1] if m in table and m not in seen)
    return sum(table[name][0] for name in seen)


def _entries(source: str) -> dict[tuple[str, str], int]:
    """(kind, name) -> lines of each catalogue entry: a Mutant/Alternative call or a row of mutants_of."""
    found: dict[tuple[str, str], int] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if func in ("Mutant", "Alternative"):
            name = next((k.value.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)),
                        None)
            if isinstance(name, str):
                found[(func, name)] = node.end_lineno - node.lineno + 1
        elif func == "mutants_of" and len(node.args) >= 3 and isinstance(node.args[2], ast.List):
            for row in node.args[2].elts:
                if isinstance(row, ast.Tuple) and row.elts and isinstance(row.elts[0], ast.Constant):
                    found[("Mutant", row.elts[0].value)] = row.end_lineno - row.lineno + 1
    return found


def like_for_like(rev: str) -> None:
    print(f"checks present at {rev} and now: lines of the lab's own definitions each reaches")
    then_total = now_total = count = 0
    for lab in _labs(None):
        then, now = _definitions(_hidden_sources(rev, lab)), _definitions(_hidden_sources(None, lab))
        common = sorted(n for n in then if n.startswith("check_") and n in now)
        a, b = _reached_lines(then, common), _reached_lines(now, common)
        then_total, now_total, count = then_total + a, now_total + b, count + len(common)
        print(f"  {lab:26s} {len(common):3d} checks {a:6,d} -> {b:6,d} lines")
    print(f"  {'all labs':26s} {count:3d} checks {then_total:6,d} -> {now_total:6,d} lines")

    print(f"catalogue entries present at {rev} and now: lines of their entries")
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    outside = [0, 0]
    for lab in _labs(None):
        sources = (_read(rev, f"{LABS}/{lab}/catalogue.py") or "", _read(None, f"{LABS}/{lab}/catalogue.py") or "")
        then, now = (_entries(s) for s in sources)
        for side, (source, entries) in enumerate(zip(sources, (then, now))):
            outside[side] += len(source.splitlines()) - sum(entries.values())
        for key in set(then) & set(now):
            kinds[key[0]][0] += 1
            kinds[key[0]][1] += then[key]
            kinds[key[0]][2] += now[key]
    for kind, (n, a, b) in sorted(kinds.items()):
        print(f"  {kind + 's':26s} {n:3d} entries {a:5,d} -> {b:5,d} lines ({a / n:.1f} -> {b / n:.1f} per entry)")
    print(f"  {'outside every entry':26s}             {outside[0]:5,d} -> {outside[1]:5,d} lines (all entries' files)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--since":
        like_for_like(sys.argv[2])
    elif len(sys.argv) <= 2 and not (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sizes(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
    else:
        sys.exit(__doc__)
