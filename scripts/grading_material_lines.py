"""How large the labs' grading material is: hidden checks, the shared kit, misconception catalogues.

Usage: python scripts/grading_material_lines.py [ROOT]   (ROOT: a checkout, default this one)

Counts files, lines and code lines (lines holding code: no blank, comment or docstring lines) of
each lab's hidden checks (``hidden.py`` or ``hidden/*.py``), of the code they share (``kit/``, or the
older ``_support.py``) and of each lab's ``catalogue.py``. Works on old checkouts too, so a figure can be
measured before and after a change.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

GROUPS = {
    "hidden checks": ("mlbook/labs/lab*/hidden.py", "mlbook/labs/lab*/hidden/*.py"),
    "shared by labs": ("mlbook/labs/_support.py", "mlbook/labs/kit/*.py"),
    "catalogues": ("mlbook/labs/lab*/catalogue.py",),
}
SKIPPED_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                  tokenize.ENDMARKER}


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


def main(root: Path) -> None:
    for name, patterns in GROUPS.items():
        files = sorted({f for pattern in patterns for f in root.glob(pattern)})
        sources = [f.read_text() for f in files]
        total = sum(len(s.splitlines()) for s in sources)
        code = sum(code_lines(s) for s in sources)
        print(f"{name:15s} {len(files):3d} files {total:7,d} lines {code:7,d} code lines")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
