"""A library shortcut the task forbids is flagged for a TA, by name, and changes no score."""

from __future__ import annotations

import pytest

from harness import REPO, scratch_course
from mlbook.authoring import submissions
from mlbook.grading import autograde
from mlbook.grading.policy import forbidden_calls, shortcuts
from mlbook.authoring.notebooks import fill_answers, read_nb, reference_answers
from mlbook.outputs.results import collect
from mlbook.grading.status import GRADED

LAB = "lab04_transformer_block"

# MultiHeadAttention.forward handed whole to torch (its weights laid out as torch's own layer wants).
DELEGATING = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x_q, x_kv, mask=None):
        B, T_q, d = x_q.shape
        in_w = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
        in_b = None if self.W_q.bias is None else torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias])
        allowed = None if mask is None else mask.expand(B, self.n_heads, T_q, x_kv.shape[1])
        out, attn = F.multi_head_attention_forward(
            x_q.transpose(0, 1), x_kv.transpose(0, 1), x_kv.transpose(0, 1), d, self.n_heads, in_w, in_b,
            None, None, False, 0.0, self.W_o.weight, self.W_o.bias, training=False, need_weights=True,
            attn_mask=None if allowed is None else ~allowed.reshape(B * self.n_heads, T_q, -1),
            average_attn_weights=False)
        return out.transpose(0, 1), attn
'''


def _with(cells):
    source = read_nb(REPO.source(LAB))
    return fill_answers(read_nb(REPO.release(LAB)), {**reference_answers(source), **cells})


def test_the_reference_and_every_alternative_use_no_forbidden_name():
    from mlbook.labs import load_catalogue

    assert forbidden_calls(LAB), "lab 4 declares no rule"
    assert shortcuts(LAB, _with({})) == ""
    for alternative in load_catalogue(LAB).alternatives:
        assert shortcuts(LAB, _with(alternative.cells)) == "", alternative.name


def test_a_forbidden_call_is_named_in_the_warning():
    warning = shortcuts(LAB, _with({"MultiHeadAttention": DELEGATING}))
    assert "MultiHeadAttention uses multi_head_attention_forward" in warning and "check by hand" in warning


def test_a_name_hidden_in_a_string_is_still_found():
    hidden = DELEGATING.replace("F.multi_head_attention_forward(", 'getattr(F, "multi_head_attention_forward")(')
    assert "multi_head_attention_forward" in shortcuts(LAB, _with({"MultiHeadAttention": hidden}))


@pytest.mark.slow
@pytest.mark.xdist_group("policy")
def test_graded_as_usual_and_flagged_in_the_status_and_the_report(tmp_path):
    from mlbook.outputs.report import write_report

    course = scratch_course(LAB, tmp_path / "course")
    submissions.submit(course, "delegates", LAB, submissions.reference(course, LAB, {"MultiHeadAttention": DELEGATING}))
    run = autograde(course, LAB, progress=False)
    (attempt,) = run.attempts
    assert attempt.status == GRADED and "multi_head_attention_forward" in attempt.warning
    (result,) = collect(course, LAB)
    assert "multi_head_attention_forward" in result.warning
    page = write_report(course, [LAB]).read_text()
    assert "Flagged for a TA" in page and "multi_head_attention_forward" in page


def _with_cell_before(answer_cells, extra_source):
    """The reference notebook with ``answer_cells`` filled in and a student's own code cell,
    holding ``extra_source``, inserted just before the MultiHeadAttention answer cell."""
    import nbformat

    from mlbook.authoring.notebooks import grade_id

    nb = _with(answer_cells)
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and grade_id(c) == "MultiHeadAttention")
    nb.cells.insert(at, nbformat.v4.new_code_cell(extra_source))
    return nb


# forward() hands the attention itself to a name defined elsewhere; each case below defines it differently.
CALLS_HELPER = DELEGATING.replace("F.multi_head_attention_forward(", "attend(")


def test_a_helper_defined_in_another_cell_is_followed():
    helper = "def attend(*args, **kwargs):\n    return F.multi_head_attention_forward(*args, **kwargs)\n"
    warning = shortcuts(LAB, _with_cell_before({"MultiHeadAttention": CALLS_HELPER}, helper))
    assert "MultiHeadAttention uses multi_head_attention_forward" in warning


def test_an_alias_and_an_import_alias_are_followed():
    alias = "attend = F.multi_head_attention_forward\n"
    assert "multi_head_attention_forward" in shortcuts(LAB, _with_cell_before({"MultiHeadAttention": CALLS_HELPER}, alias))
    imported = "import torch.nn.functional as G\nattend = getattr(G, 'multi_head_' + 'attention_forward')\n"
    assert "multi_head_attention_forward" in shortcuts(LAB, _with_cell_before({"MultiHeadAttention": CALLS_HELPER}, imported))
    lam = "attend = lambda *a, **k: G.multi_head_attention_forward(*a, **k)\nimport torch.nn.functional as G\n"
    assert "multi_head_attention_forward" in shortcuts(LAB, _with_cell_before({"MultiHeadAttention": CALLS_HELPER}, lam))


def test_a_nested_helper_two_cells_away_is_followed():
    nb = _with_cell_before({"MultiHeadAttention": CALLS_HELPER}, "def attend(*a, **k):\n    return _inner(*a, **k)\n")
    import nbformat

    nb.cells.insert(1, nbformat.v4.new_code_cell(
        "class _Impl:\n    @staticmethod\n    def go(*a, **k):\n        return F.scaled_dot_product_attention(*a, **k)\n"
        "_inner = _Impl.go\n"))
    assert "MultiHeadAttention uses scaled_dot_product_attention" in shortcuts(LAB, nb)


def test_a_legitimate_answer_beside_cells_that_use_the_library_is_not_flagged():
    # A scratch cell compares with torch's layer under names the answer also uses as locals
    # (mask, out, attn, F itself is imported there again): none of it is reached from the answer.
    scratch = ("import torch.nn.functional as F\n"
               "mask = None\n"
               "ref = nn.MultiheadAttention(8, 2, batch_first=True)\n"
               "out, attn = ref(torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8))\n"
               "def compare(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n")
    nb = _with_cell_before({}, scratch)
    assert shortcuts(LAB, nb) == ""
    # The same scratch cell, when the answer does call compare(), is reached.
    source = read_nb(REPO.source(LAB))
    answer = reference_answers(source)["MultiHeadAttention"]
    assert "def forward" in answer
    calling = answer.replace("def forward(", "def _unused(self):\n        return compare(1, 2, 3)\n\n    def forward(", 1)
    assert "scaled_dot_product_attention" in shortcuts(LAB, _with_cell_before({"MultiHeadAttention": calling}, scratch))
