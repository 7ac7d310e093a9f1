"""Mutation analysis of the labs' reference answers (``mlbook mutate``).

- ``inprocess``: a lab's test cells decided in this process as grading decides them (the kernel runs
  a cell's visible part, the judge its trusted source over the wire); shared with ``tests/draws.py``.
- ``operators``: first-order mutants of a reference answer's solution region, made with mutmut's
  operators (plus four labelled additions the analysis needs and mutmut lacks).
- ``engine``: each mutant graded in a forked child with a time limit, then classified as killed,
  equivalent or survived by differential testing against the reference.
"""
