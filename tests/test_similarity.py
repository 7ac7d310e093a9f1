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
import symtable
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlbook.labs import _reference_answers, _repository_source
from mlbook.labs import load_catalogue
from mlbook.course import Course
from mlbook.labs import lab_module
from mlbook.authoring.notebooks import read_nb
from mlbook import similarity

ROOT = Path(__file__).resolve().parents[1]

# Own independent answers (whole answer cells), each written separately from the reference and the
# catalogue (loops vs vectorised, torch vs numpy vs scipy); test_own_answers_pass_the_labs_checks checks them.
OWN_LAB02 = {
    "own-loops": {"dot_product_std": '''def dot_product_std(d_k, n_pairs, rng):
    """Spread of q . k over n_pairs random pairs."""
    dots = np.empty(n_pairs)
    for n in range(n_pairs):
        q = rng.standard_normal(d_k)
        k = rng.standard_normal(d_k)
        dots[n] = np.dot(q, k)
    centred = dots - dots.mean()
    return float(np.sqrt(np.mean(centred ** 2)))
''', "attention_scores": '''def attention_scores(Q, K, scaled=True):
    """(..., T_q, T_k) scores."""
    raw = np.matmul(Q, np.moveaxis(K, -1, -2))
    factor = 1.0 / np.sqrt(Q.shape[-1]) if scaled else 1.0
    return raw * factor
''', "row_entropy": '''def row_entropy(weights, base):
    """One entropy per row."""
    w = np.asarray(weights, dtype=float)
    h = np.zeros(w.shape[:-1])
    for idx in np.ndindex(*w.shape[:-1]):
        for p in w[idx]:
            if p > 0:
                h[idx] -= p * math.log(p, base)
    return h
''', "softmax_jacobian": '''def softmax_jacobian(a):
    """(..., T, T) Jacobians."""
    a = np.asarray(a, dtype=float)
    T = a.shape[-1]
    J = np.empty(a.shape + (T,))
    for i in range(T):
        for j in range(T):
            J[..., i, j] = a[..., i] * ((1.0 if i == j else 0.0) - a[..., j])
    return J
''', "nadaraya_watson": '''def nadaraya_watson(x_query, x_train, y_train, bandwidth):
    """Kernel-weighted averages of y_train."""
    preds = []
    for x in x_query:
        d2 = np.sum((x_train - x) ** 2, axis=1)
        logits = -d2 / (2 * bandwidth ** 2)
        w = np.exp(logits - logits.max())
        preds.append(w @ y_train / w.sum())
    return np.array(preds)
''', "linear_attention_step": '''def linear_attention_step(state, q, k, v):
    """One causal step of linear attention."""
    S_prev, z_prev = state
    fk = elu_feature(k)
    S_new = S_prev + np.einsum("i,j->ij", fk, v)
    z_new = z_prev + fk
    fq = elu_feature(q)
    numerator = S_new.T @ fq
    denominator = float(np.dot(z_new, fq))
    return numerator / denominator, (S_new, z_new)
'''},
    "own-torch-scipy": {"dot_product_std": '''def dot_product_std(d_k, n_pairs, rng):
    """Spread of q . k over n_pairs random pairs."""
    pairs = rng.standard_normal((2, n_pairs, d_k))
    return float(np.std(np.einsum("nd,nd->n", pairs[0], pairs[1])))
''', "row_entropy": '''def row_entropy(weights, base):
    """One entropy per row."""
    import torch

    p = torch.as_tensor(np.asarray(weights), dtype=torch.float64)
    nats = torch.special.entr(p).sum(-1)
    return (nats / math.log(base)).numpy()
''', "softmax_jacobian": '''def softmax_jacobian(a):
    """(..., T, T) Jacobians."""
    return np.apply_along_axis(lambda r: np.diag(r) - np.outer(r, r), -1, np.asarray(a, dtype=float))
''', "nadaraya_watson": '''def nadaraya_watson(x_query, x_train, y_train, bandwidth):
    """Kernel-weighted averages of y_train."""
    from scipy.spatial.distance import cdist
    from scipy.special import softmax as sp_softmax

    kernel = sp_softmax(-cdist(x_query, x_train, "sqeuclidean") / (2.0 * bandwidth * bandwidth), axis=1)
    return kernel @ y_train
''', "qk_norm_scores": '''def qk_norm_scores(Q, K, gain):
    """g * cos(q_i, k_j)."""
    Q = np.asarray(Q, dtype=float)
    K = np.asarray(K, dtype=float)
    dots = np.einsum("...qd,...kd->...qk", Q, K)
    lengths = np.linalg.norm(Q, axis=-1)[..., :, None] * np.linalg.norm(K, axis=-1)[..., None, :]
    return gain * dots / lengths
'''},
}

OWN_LAB05 = {
    "own-loops": {"attention_entropy": '''def attention_entropy(attn):
    """Mean entropy in nats per head."""
    B, H, T_q, T_k = attn.shape
    totals = []
    for h in range(H):
        p = attn[:, h].reshape(-1, T_k)
        plogp = torch.zeros_like(p)
        nz = p > 0
        plogp[nz] = p[nz] * p[nz].log()
        totals.append(-plogp.sum() / p.shape[0])
    return torch.stack(totals)
''', "scale_qk_init": '''def scale_qk_init(model, factor):
    """Scale W_q and W_k in place."""
    for block in model.blocks:
        for name in ("W_q", "W_k"):
            weight = getattr(block, name)
            weight.data *= factor
    return model
''', "sink_mass": '''def sink_mass(attn, from_query=1):
    """(H,) mean weight on key 0."""
    B, H, T_q, T_k = attn.shape
    n = B * (T_q - from_query)
    return torch.stack([attn[:, h, from_query:, 0].sum() / n for h in range(H)])
''', "sliding_window_mask": '''def sliding_window_mask(T, window, n_sinks=0):
    """(T, T) bool."""
    mask = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        lo = max(0, i - window + 1)
        mask[i, lo:i + 1] = True
        mask[i, :min(n_sinks, i + 1)] = True
    return mask
''', "qk_layernorm": '''def qk_layernorm(q, k, eps=1e-5):
    """LayerNorm without gain or bias of q and k."""
    out = []
    for x in (q, k):
        centred = x - x.mean(-1, keepdim=True)
        out.append(centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps))
    return tuple(out)
'''},
    "own-einsum": {"attention_entropy": '''def attention_entropy(attn):
    """Mean entropy in nats per head."""
    logs = torch.log(attn.clamp_min(torch.finfo(attn.dtype).tiny))
    per_row = torch.einsum("bhqk,bhqk->bhq", attn, logs).neg()
    return per_row.mean(dim=2).mean(dim=0)
''', "sink_mass": '''def sink_mass(attn, from_query=1):
    """(H,) mean weight on key 0."""
    first_col = attn.narrow(-2, from_query, attn.size(-2) - from_query)[..., 0]
    return first_col.transpose(0, 1).reshape(attn.size(1), -1).mean(-1)
''', "sliding_window_mask": '''def sliding_window_mask(T, window, n_sinks=0):
    """(T, T) bool."""
    pos = torch.arange(T)
    gap = pos[:, None] - pos[None, :]
    in_window = (gap >= 0) & (gap < window)
    is_sink = (pos[None, :] < n_sinks) & (gap >= 0)
    return torch.logical_or(in_window, is_sink)
''', "qk_layernorm": '''def qk_layernorm(q, k, eps=1e-5):
    """LayerNorm without gain or bias of q and k."""
    d = q.shape[-1]
    qc = q - q.sum(-1, keepdim=True) / d
    kc = k - k.sum(-1, keepdim=True) / d
    q_hat = qc / ((qc * qc).sum(-1, keepdim=True) / d + eps) ** 0.5
    k_hat = kc / ((kc * kc).sum(-1, keepdim=True) / d + eps) ** 0.5
    return q_hat, k_hat
'''},
}

OWN = {
    "lab02_scaling": OWN_LAB02,
    "lab05_entropy_collapse": OWN_LAB05,
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


def renamable(cells: dict[str, str]) -> set[str]:
    """What a copier can rename and keep the notebook working: the names its code cells assign
    or take as parameters (Python's own symtable; imported names and attributes kept)."""
    names = set()
    for code in cells.values():
        try:
            tables = [symtable.symtable(code, "cell", "exec")]
        except SyntaxError:
            continue
        while tables:
            t = tables.pop()
            tables += t.get_children()
            names |= {s.get_name() for s in t.get_symbols()
                      if (s.is_assigned() or s.is_parameter()) and not s.is_imported()}
    return names - set(dir(builtins))


def rename(cells: dict[str, str], code_cells: set[str]) -> dict[str, str]:
    """Every renamable name of the code cells renamed the same way in all of them."""
    names = renamable({g: c for g, c in cells.items() if g in code_cells})
    out = {}
    for g, code in cells.items():
        if g not in code_cells:
            out[g] = code
            continue
        toks, prev = [], None
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            s = t.string
            if t.type == tokenize.NAME and s in names and prev != ".":
                s = f"my_{s}_2"
            toks.append((t.type, s))
            prev = t.string
        out[g] = tokenize.untokenize(toks)
    return out


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


@dataclass
class PlantedClass:
    subs: dict  # student -> grade id -> similarity.Cell
    boilerplate: dict
    planted: set  # (a, b) sorted: a planted copy and the answers it copies
    sources: dict  # student -> whose answers the notebook holds (itself, or what a copy was made from)
    answers: dict  # student -> (grade id -> answer text, cells reversed): what each notebook holds

    def labelled(self, pairs):
        """(copies, others): the planted pairs, and every pair of students with no source in common
        (two copies of one student, or the partial copier and the student whose answers it keeps,
        are neither)."""
        return ([p for p in pairs if (p.a, p.b) in self.planted],
                [p for p in pairs if not self.sources[p.a] & self.sources[p.b]])


def independent_answers(lab: str) -> tuple[dict, dict, set]:
    """(release notebook, student -> grade id -> answer text, code-cell grade ids): the whole-cell
    catalogue alternatives, this file's own answers and the reference, each written separately."""
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
    return release, {**alts, **OWN.get(lab, {}), "reference": reference}, code_cells


def build_class(lab: str) -> PlantedClass:
    """The independent answers plus four planted copies: every name renamed (of the student with the
    most answer text, the reference aside), cells reordered with comments added (of the next), one
    function (that student's largest cell) copied into a third student's own answers, and the
    reference renamed. Copies are of substantial answers: a copied one-liner is no evidence
    (similarity.MIN_TOKENS)."""
    release, independent, code_cells = independent_answers(lab)
    names = sorted((n for n in independent if n != "reference"),
                   key=lambda n: (-sum(map(len, independent[n].values())), n))
    first, second = names[0], names[1]
    donated = max(independent[second], key=lambda g: len(independent[second][g]))
    copier = names[2]
    planted = {
        "copy-renamed": (rename(independent[first], code_cells), first, False),
        "copy-reordered": ({g: commented(c) if g in code_cells else c + " I checked this."
                            for g, c in independent[second].items()}, second, True),
        "copy-partial": ({**independent[copier], donated: independent[second][donated]}, second, False),
        "copy-reference": (rename(independent["reference"], code_cells), "reference", False),
    }
    answers = {name: (cells, False) for name, cells in independent.items()}
    answers |= {name: (cells, reorder) for name, (cells, _, reorder) in planted.items()}
    subs = {name: similarity.answer_cells(notebook(release, cells, reorder)) for name, (cells, reorder) in answers.items()}
    course = Course.find(ROOT)
    sources = {n: {n} for n in independent} | {n: {s} for n, (_, s, _) in planted.items()}
    sources["copy-partial"] = {copier, second}
    for a, b in SAME_AUTHOR.get(lab, []):
        for n, src in sources.items():
            if src & {a, b}:
                sources[n] = src | {a, b}
    return PlantedClass(subs, similarity.boilerplate(course, lab),
                        {tuple(sorted((n, s))) for n, (_, s, _) in planted.items()}, sources, answers)


def precision_recall(tc: PlantedClass, pairs, threshold: float) -> tuple[float, float]:
    """Precision and recall of flagging at ``threshold``, planted pairs the positives."""
    copies, others = tc.labelled(pairs)
    tp = sum(p.score >= threshold for p in copies)
    fp = sum(p.score >= threshold for p in others)
    return (tp / (tp + fp) if tp + fp else 1.0), tp / len(copies)


# Catalogue alternatives one author wrote as variations of each other (the same lines, another dtype):
# not independent, so neither a planted copy nor an independent pair. Each must share at least
# SHARED_LINES lines verbatim (test_same_author_pairs_share_lines), so this list cannot hide a
# pair of genuinely different answers.
SAME_AUTHOR = {"lab02_scaling": [("float32-and-epsilons", "sgd-normalize-logsumexp")]}
SHARED_LINES = 3

LABS = ["lab01_hand_attention", "lab02_scaling", "lab03_masks", "lab04_transformer_block",
        "lab05_entropy_collapse", "lab06_chunked_attention"]


@pytest.mark.parametrize("lab", LABS)
def test_planted_copies_rank_above_independent_pairs(lab):
    tc = build_class(lab)
    assert sum(1 for n in tc.subs if not n.startswith("copy-")) >= 5
    pairs = similarity.compare_class(tc.subs, tc.boilerplate)
    copies, others = tc.labelled(pairs)
    assert len(copies) == len(tc.planted) == 4
    lowest = min(copies, key=lambda p: p.score)
    highest = max(others, key=lambda p: p.score)
    print(f"{lab}: lowest copy {lowest.a}/{lowest.b} {lowest.score:.2f}; "
          f"highest other {highest.a}/{highest.b} {highest.score:.2f}")
    assert lowest.score > highest.score
    assert highest.score < similarity.DEFAULT_THRESHOLD <= lowest.score
    assert precision_recall(tc, pairs, similarity.DEFAULT_THRESHOLD) == (1.0, 1.0)


def shared_lines(a: dict[str, str], b: dict[str, str]) -> int:
    """Lines (stripped, 20 characters or more) that two students' answers have in common verbatim."""
    lines = lambda cells: {l.strip() for c in cells.values() for l in c.splitlines() if len(l.strip()) >= 20}  # noqa: E731
    return len(lines(a) & lines(b))


@pytest.mark.parametrize("lab", sorted(SAME_AUTHOR))
def test_same_author_pairs_share_lines(lab):
    _, independent, _ = independent_answers(lab)
    for a, b in SAME_AUTHOR[lab]:
        assert shared_lines(independent[a], independent[b]) >= SHARED_LINES, (a, b)


@pytest.mark.parametrize("lab", sorted(OWN))
def test_own_answers_pass_the_labs_checks(lab):
    """The own answers are correct: the lab's visible and hidden checks, in-process, on 2 draws."""
    from draws import _authored, failing_draws, grade_id, is_test, solutions

    tests = [grade_id(c) for c in _authored(lab).cells if is_test(c)]
    for name, cells in OWN[lab].items():
        wanted = [t for t in tests if any(t.startswith(f"test_{g}") for g in cells)]
        failures, ran = failing_draws(lab, {**solutions(lab)["reference"], **cells}, 2, cells=wanted)
        assert ran and not failures, f"{lab} {name}: " + "; ".join(map(str, failures[:3]))


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
    assert pairs and pairs[0].score >= similarity.DEFAULT_THRESHOLD  # the pair is shown side by side
    page = Page()
    page.feed(similarity.write_html(tmp_path / "s.html", "lab", pairs, subs, 0.5, {}).read_text())
    assert not page.runnable and "script" not in page.tags
    assert page.active == ["<style {}>"]  # the page's own stylesheet only; nothing from a student


# --- a small course on disk: the real intake, the command's own files, the page in Chromium ---------------------
SMALL_LAB = "lab02_scaling"


def small_course(root: Path) -> Course:
    """A scratch lab-2 course: ``ada`` hands in the reference, ``bo`` a renamed copy of it (cells
    reordered), ``cy`` and ``dee`` this file's own answers (the other cells as released)."""
    from harness import scratch_course
    from mlbook.authoring import submissions
    from mlbook.authoring.notebooks import fill_answers, reference_answers

    course = scratch_course(SMALL_LAB, root)
    release = read_nb(course.release(SMALL_LAB))
    code_cells = {c.metadata.nbgrader.grade_id for c in release.cells
                  if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade_id")}
    reference = reference_answers(read_nb(course.source(SMALL_LAB)))
    copied = fill_answers(read_nb(course.release(SMALL_LAB)), rename(reference, code_cells))
    copied.cells = copied.cells[::-1]
    submissions.submit(course, "ada", SMALL_LAB, fill_answers(read_nb(course.release(SMALL_LAB)), reference))
    submissions.submit(course, "bo", SMALL_LAB, copied)
    for student, own in zip(("cy", "dee"), OWN_LAB02.values()):
        submissions.submit(course, student, SMALL_LAB, fill_answers(read_nb(course.release(SMALL_LAB)), own))
    return course


def test_similarity_and_grading_never_remove_each_others_private_copies(tmp_path, monkeypatch):
    """Grading reads its private copy (``autograded/.intake``) after ``take``; similarity run meanwhile
    must not replace or delete it, and grading taking and discarding a student while similarity
    reads the same student must not delete similarity's copy."""
    from mlbook.grading import intake
    from mlbook.grading.prepare import find_submission

    course = small_course(tmp_path / "course")
    graded = find_submission(course, SMALL_LAB, "ada")  # grading holds ada's copy, nbgrader not done with it
    held = graded.notebook.read_bytes(), graded.notebook.stat().st_ino
    real_take, own_folders = intake.take, set()

    def take_while_grading_runs(course_, lab, student, max_bytes, root=None):
        taken = real_take(course_, lab, student, max_bytes, root=root)
        if taken.notebook is not None:
            own_folders.add(taken.notebook.parents[2])
        if student != "ada":  # grading takes and discards the same student before similarity reads it
            find_submission(course_, lab, student)
            intake.discard(course_, student, lab)
        return taken

    monkeypatch.setattr(intake, "take", take_while_grading_runs)
    pairs = similarity.run(course, SMALL_LAB, echo=lambda *_: None)
    assert {p.a for p in pairs} | {p.b for p in pairs} == {"ada", "bo", "cy", "dee"}  # nobody refused
    assert (graded.notebook.read_bytes(), graded.notebook.stat().st_ino) == held
    assert len(own_folders) == 1 and course.root / intake.INTAKE not in own_folders
    assert not any(f.exists() for f in own_folders)  # similarity's own folder is removed after the run
    assert sorted(p.name for p in (course.root / intake.INTAKE).iterdir()) == ["ada"]


def test_the_similarity_page_shows_matched_regions_side_by_side_in_chromium(tmp_path, chromium):
    """The command's page for a class with a planted copy, in Chromium: the copied pair's cells
    side by side with matched regions highlighted, nobody else flagged, no script. With
    MLBOOK_DOCS_SCREENSHOTS=1 the screenshot is written to docs/img/similarity.png (the README's)."""
    import os

    course = small_course(tmp_path / "course")
    pairs = similarity.run(course, SMALL_LAB, echo=lambda *_: None)
    flagged = [(p.a, p.b) for p in pairs if p.score >= similarity.DEFAULT_THRESHOLD]
    assert flagged == [("ada", "bo")], [(p.a, p.b, round(p.score, 2)) for p in pairs]
    path = course.exports_dir / f"similarity-{SMALL_LAB}.html"
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    requests = []
    try:
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.resolve().as_uri(), wait_until="load")
        assert page.eval_on_selector_all("script", "els => els.length") == 0
        assert page.inner_text("h2").startswith("ada / bo")
        rows = page.eval_on_selector_all("h2 + table tr:has(td)", """rows => rows.map(r => [...r.querySelectorAll(':scope > td')]
            .map(td => ({x: td.getBoundingClientRect().left, w: td.getBoundingClientRect().width,
                         y: td.getBoundingClientRect().top, marks: td.querySelectorAll('mark').length,
                         marked: [...td.querySelectorAll('mark')].map(m => m.textContent).join('').length,
                         bg: td.querySelector('mark') ? getComputedStyle(td.querySelector('mark')).backgroundColor : ''})))""")
        shot = tmp_path / "similarity.png"
        page.screenshot(path=str(shot), full_page=False)
    finally:
        page.close()
    assert requests == [path.resolve().as_uri()]
    assert rows and all(len(r) == 2 for r in rows)
    for left, right in rows:
        assert left["y"] == right["y"] and left["x"] + left["w"] <= right["x"]  # side by side
    highlighted = [r for r in rows if r[0]["marks"] and r[1]["marks"]]
    assert len(highlighted) >= 3, rows  # the copied functions, in both students' text
    assert all(c["bg"] not in ("", "rgba(0, 0, 0, 0)") for r in highlighted for c in r)
    assert shot.stat().st_size > 10_000
    if os.environ.get("MLBOOK_DOCS_SCREENSHOTS") == "1":
        (ROOT / "docs" / "img").mkdir(exist_ok=True)
        (ROOT / "docs" / "img" / "similarity.png").write_bytes(shot.read_bytes())


def test_scores_do_not_depend_on_the_hash_seed():
    """copydetect fingerprints k-grams with ``hash()``; the document it is given is a tuple of ints
    (similarity._TokenCodes), whose hash is not salted: two processes with different
    PYTHONHASHSEEDs score the same class identically."""
    import os
    import subprocess
    import sys

    script = ("import sys; sys.path.insert(0, 'tests')\n"
              "from test_similarity import build_class\nfrom mlbook import similarity\n"
              "tc = build_class('lab02_scaling')\n"
              "for p in similarity.compare_class(tc.subs, tc.boilerplate): print(p.a, p.b, repr(p.score), repr(p.overall))\n")
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert runs[0].count("\n") > 100 and runs[0] == runs[1]
