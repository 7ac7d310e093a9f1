"""mlbook check's rule that a given cell never depends on a test cell (issue #44, item 3: a failing
test took the heat map of the student's own weights down with it, one mistake costing two cells)."""

import nbformat.v4 as nbf

from mlbook.lint import given_cells_need_no_test_cell


def _nb(*cells):
    made = []
    for kind, gid, source in cells:
        meta = {"grade_id": gid, "locked": True}
        if kind == "test":
            meta |= {"grade": True, "points": 1, "solution": False}
        elif kind == "answer":
            meta = {"grade_id": gid, "solution": True, "grade": False, "locked": False}
        made.append(nbf.new_code_cell(source, metadata={"nbgrader": meta}))
    return nbf.new_notebook(cells=made)


def test_a_given_cell_reading_what_only_a_test_cell_defined_is_flagged():
    nb = _nb(("answer", "attention", "def attention(q):\n    return q"),
             ("test", "test_attention", "weights = attention(1)\nassert weights == 1"),
             ("given", "heatmap", "print(weights)"))
    problems = given_cells_need_no_test_cell(None, "lab", nb)
    assert len(problems) == 1 and "'heatmap' reads 'weights'" in problems[0] and "test_attention" in problems[0]


def test_a_given_cell_that_computes_what_it_draws_is_not_flagged():
    nb = _nb(("answer", "attention", "def attention(q):\n    return q"),
             ("test", "test_attention", "weights = attention(1)\nassert weights == 1"),
             ("given", "heatmap", "weights = attention(1)  # recomputed\nprint(weights)"),
             ("given", "later", "def show():\n    return weights\nshow()"))
    assert given_cells_need_no_test_cell(None, "lab", nb) == []


def test_a_name_read_inside_a_given_function_counts_too():
    nb = _nb(("test", "test_x", "table = [1, 2]"),
             ("given", "plot", "def draw():\n    return table\ndraw()"))
    assert any("'plot' reads 'table'" in p for p in given_cells_need_no_test_cell(None, "lab", nb))
