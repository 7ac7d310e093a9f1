"""`mlbook similarity`: planted copies rank above every independent pair (issue 41).

The class is built from each lab's catalogue alternatives (independently written correct
answers), the reference solution and answers written here, plus planted copies: renamed
variables, cells reordered with comments added, a partial copy of one function, and a copy
of the reference. The engine and boilerplate are the real ones (copydetect, the release
notebook and mlbook_helpers of this repository)."""

from __future__ import annotations

import builtins
import copy
import io
import keyword
import tokenize
from pathlib import Path

import pytest

from mlbook.authoring.catalogue import load_catalogue, _reference_answers, _repository_source
from mlbook.course import Course
from mlbook.labs import lab_module
from mlbook.authoring.notebooks import read_nb
from mlbook import similarity

ROOT = Path(__file__).resolve().parents[1]

# Own independent answers (full answer cells), each written separately from the reference.
OWN = {
    "lab01_hand_attention": {
        "own-a": {"softmax_rows": '''def softmax_rows(S):
    S = np.asarray(S, dtype=float)
    top = np.max(S, axis=-1, keepdims=True)  # (..., 1)
    e = np.exp(S - top)  # (..., T_k)
    return e / np.sum(e, axis=-1, keepdims=True)  # (..., T_k)
'''},
        "own-b": {"attention": '''def attention(Q, K, V, mask=None):
    Q, K, V = (np.asarray(a, dtype=float) for a in (Q, K, V))
    logits = np.matmul(Q, np.swapaxes(K, -1, -2)) * (1.0 / np.sqrt(K.shape[-1]))  # (T_q, T_k)
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    logits -= logits.max(-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(-1, keepdims=True)  # (T_q, T_k)
    return p @ V, p  # (T_q, d_v), (T_q, T_k)
'''},
    },
    "lab03_masks": {
        "own-a": {"causal_mask": '''def causal_mask(T):
    i = torch.arange(T).view(T, 1)  # (T, 1)
    j = torch.arange(T).view(1, T)  # (1, T)
    return (j <= i).reshape(1, 1, T, T)  # (1, 1, T, T)
''', "padding_mask": '''def padding_mask(is_pad):
    return is_pad.logical_not().unsqueeze(1).unsqueeze(1)  # (B, 1, 1, T_k)
'''},
        "own-b": {"combine_masks": '''def combine_masks(*masks):
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for extra in present[1:]:
        out = torch.logical_and(out, extra)  # broadcast AND
    return out
''', "apply_mask": '''def apply_mask(scores, mask):
    if mask is None:
        return scores
    floor = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype)
    return torch.where(mask, scores, floor)  # (B, H, T_q, T_k)
'''},
        "own-c": {"causal_mask_with_cache": '''def causal_mask_with_cache(T_new, T_total):
    offset = T_total - T_new
    full = torch.ones(T_new, T_total, dtype=torch.bool).tril(diagonal=offset)  # (T_new, T_total)
    return full.unsqueeze(0).unsqueeze(0)  # (1, 1, T_new, T_total)
'''},
        "own-d": {"mask_after_softmax": '''def mask_after_softmax(q, k, v, mask):
    d = q.size(-1)
    w = torch.einsum("bhqd,bhkd->bhqk", q, k).div(d ** 0.5).softmax(-1)  # (B, H, T_q, T_k)
    w = torch.where(mask, w, torch.zeros_like(w))  # zeroed after the softmax
    return torch.einsum("bhqk,bhkd->bhqd", w, v), w  # (B, H, T_q, d_v), (B, H, T_q, T_k)
'''},
    },
}

KEEP = set(dir(builtins)) | {"np", "torch", "math", "F", "nn", "scipy", "self"}


def rename(code: str) -> str:
    """Every local name renamed (attributes, modules and builtins kept)."""
    out, prev = [], None
    for t in tokenize.generate_tokens(io.StringIO(code).readline):
        s = t.string
        if t.type == tokenize.NAME and not keyword.iskeyword(s) and s not in KEEP and prev != ".":
            s = f"my_{s}_2"
        out.append((t.type, s))
        prev = t.string
    return tokenize.untokenize(out)


def commented(code: str) -> str:
    return "\n".join(line + ("  # my step" if line.strip() and not line.rstrip().endswith(("\\", ",")) and '"""' not in line and "'''" not in line else "") + ("\n# checked this by hand" if i % 3 == 0 else "")
                     for i, line in enumerate(code.splitlines())) + "\n"


def notebook(release: dict, cells: dict[str, str], reorder: bool = False) -> dict:
    nb = copy.deepcopy(release)
    for c in nb["cells"]:
        gid = (c.get("metadata") or {}).get("nbgrader", {}).get("grade_id")
        if gid in cells:
            c["source"] = cells[gid]
    if reorder:
        nb["cells"] = nb["cells"][::-1]
    return nb


def build_class(lab: str):
    release = read_nb(ROOT / "release" / lab / f"{lab}.ipynb")
    release = {"cells": [dict(c, source="".join(c["source"]) if isinstance(c["source"], list) else c["source"])
                         for c in release["cells"]]}
    reference = _reference_answers(_repository_source(lab))
    # Only whole cells written out are independent; patch(...) edits are near-copies of the reference.
    raw = {a.name: a.cells for a in lab_module(lab, "catalogue").ALTERNATIVES}
    alts = {a.name: {g: c for g, c in a.cells.items() if isinstance(raw[a.name][g], str)}
            for a in load_catalogue(lab).alternatives}
    alts = {n: c for n, c in alts.items() if c}
    code_cells = {c["metadata"]["nbgrader"]["grade_id"] for c in release["cells"]
                  if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}
    independent = {**alts, **OWN[lab], "reference": reference}
    first, second = sorted(alts)[0], sorted(alts)[-1]
    some = sorted(reference)[0]
    donor = next(n for n in sorted(independent) if n != "reference" and some in independent[n]) if any(
        some in v for k, v in independent.items() if k != "reference") else "reference"
    partial_gid = next(iter(independent[second]))
    planted = {
        "copy-renamed": ({g: rename(c) for g, c in independent[first].items()}, first, False),
        "copy-reordered": ({g: commented(c) for g, c in independent[second].items()}, second, True),
        "copy-partial": ({partial_gid: independent[second][partial_gid]}, second, False),
        "copy-reference": ({g: rename(c) if g in code_cells else c for g, c in reference.items()}, "reference", False),
    }
    subs = {name: similarity.answer_cells(notebook(release, cells)) for name, cells in independent.items()}
    for name, (cells, _, reorder) in planted.items():
        subs[name] = similarity.answer_cells(notebook(release, cells, reorder))
    course = Course.find(ROOT)
    return subs, similarity.boilerplate(course, lab), {(min(n, s), max(n, s)) for n, (_, s, _) in planted.items()}


@pytest.mark.parametrize("lab", sorted(OWN))
def test_planted_copies_rank_above_independent_pairs(lab):
    subs, bp, copies = build_class(lab)
    assert sum(1 for n in subs if not n.startswith("copy-")) >= 5
    pairs = similarity.compare_class(subs, bp)
    copied = [p for p in pairs if (p.a, p.b) in copies]
    independent = [p for p in pairs if not (p.a.startswith("copy-") or p.b.startswith("copy-"))]
    assert len(copied) == len(copies)
    lowest_copy = min(p.overall for p in copied)
    highest_independent = max(independent, key=lambda p: p.overall)
    print(f"{lab}: copies {[(p.a, p.b, round(p.overall, 2)) for p in copied]}; "
          f"highest independent {highest_independent.a}/{highest_independent.b} {highest_independent.overall:.2f}")
    assert lowest_copy > highest_independent.overall
    assert highest_independent.overall < similarity.DEFAULT_THRESHOLD
    assert lowest_copy >= similarity.DEFAULT_THRESHOLD


def test_html_escapes_student_text(tmp_path):
    cell = similarity.Cell("x", "<script>alert(1)</script>")
    cell.norm, cell.spans = similarity.normalise_code(cell.text)
    pair = similarity.Pair("a<b>", "c", 1.0, {"x": (1.0, ([0], [5]), ([0], [5]))})
    page = similarity.write_html(tmp_path / "s.html", "lab", [pair], {"a<b>": {"x": cell}, "c": {"x": cell}},
                                 0.5, {}).read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&lt;b&gt;" in page


def test_the_similarity_page_is_inert_for_hostile_answers(tmp_path):
    from test_inert_html import ANSWER, Page

    code = similarity.Cell("c", "x = 1  # </pre><script>window.PWNED = 1</script>\n" * 4)
    code.norm, code.spans = similarity.normalise_code(code.text)
    words = similarity.Cell("w", ANSWER)
    words.norm, words.spans = similarity.normalise_words(words.text)
    subs = {"<img src=x onerror=alert(1)>": {"c": code, "w": words}, "b": {"c": code, "w": words}}
    pairs = similarity.compare_class(subs, {"*": []})
    assert pairs and pairs[0].overall >= similarity.DEFAULT_THRESHOLD  # the pair is shown side by side
    page = Page()
    page.feed(similarity.write_html(tmp_path / "s.html", "lab", pairs, subs, 0.5, {}).read_text())
    assert not page.runnable and "script" not in page.tags
    assert page.active == ["<style {}>"]  # the page's own stylesheet only; nothing from a student
