"""The lab kit: everything a lab's hidden checks and catalogue import, stated once.

A lab's grading files (``mlbook/labs/<lab>/hidden*.py``, ``catalogue.py``) import from here and
from ``mlbook_helpers`` (the given code the notebook also sees), never from the grader's other
packages: the kit is the one seam between a lab and the pipeline that runs it.

Modules, in the order a check uses them:
- ``inputs``     fresh random inputs per grading run (``MLBOOK_SEED`` pins them), torch generators,
                 random masks;
- ``calls``      calling the student's code: in the kernel through the judge's data-only channel
                 (``helper``, ``lend``), a crash turned into a message that names the call;
- ``results``    reading what came back, failing closed (``number``, ``boolean``, ``array``,
                 ``items``);
- ``reference``  the grader's own maths: softmax, entropy, attention (masks, scale, bias) and its
                 gradients by autograd, in float64;
- ``tolerance``  how close a correct answer of each dtype must come, and ``close``, the one
                 comparison (failing closed) that checks and diagnoses make;
- ``messages``   failures a student can act on: ``fail``, ``diagnose`` (which known mistake the
                 answer matches), where an array first goes wrong;
- ``checks``     whole steps of a check, written once: ``compare`` (close, else shape, non-finite,
                 diagnosis, first wrong entry) and ``reproducible`` (same seed, same result).

The usual check: ``got = ask_array(f, x, what=...)`` (``calls``: quiet, call, read), then
``compare(got, want, what, hint, mistakes={...})``.

And for catalogues: ``Mutant``, ``Alternative`` and ``patch`` (``mlbook.authoring.catalogue``), and
``mutants_of`` (``catalogue``: the mutants of one answer cell, one row each).

Convention, for the whole kit: a mask is True where attention is allowed.
"""

from mlbook_helpers.checks import Misconception, data_array, describe

from mlbook.authoring.catalogue import Alternative, Mutant, patch
# Up a stage, one of the two (scripts/import_graph.py): lab 6's checks read the kernel's memory from
# outside it, which only the sandbox that holds the kernel's processes can.
from mlbook.sandbox import procmem
from mlbook.labs.kit.calls import (Handle, RemoteError, RemoteObject, WireError, ask_array, ask_boolean, ask_items,
                                   ask_number, call_seeing_args, call_student, given, helper, lend, like, quiet, reraise, session,
                                   student_error)
from mlbook.labs.kit.catalogue import mutants_of
from mlbook.labs.kit.checks import compare, reproducible
from mlbook.labs.kit.inputs import fresh_rng, random_mask, seed, torch_generator
from mlbook.labs.kit.messages import diagnose, fail, first_bad, sentence
from mlbook.labs.kit.reference import attention, attention_grads, causal_allowed, entropy, softmax
from mlbook.labs.kit.results import array, boolean, items, number
from mlbook.labs.kit.tolerance import TORCH_ATOL, close, dtype_name, float_tolerance, weight_tolerance

__all__ = [
    "Misconception", "data_array", "describe",
    "Alternative", "Mutant", "patch", "mutants_of", "procmem",
    "Handle", "RemoteError", "RemoteObject", "WireError", "ask_array", "ask_boolean", "ask_items", "ask_number",
    "call_student", "call_seeing_args", "given", "like",
    "helper", "lend", "quiet", "reraise", "session", "student_error",
    "compare", "reproducible",
    "fresh_rng", "random_mask", "seed", "torch_generator",
    "diagnose", "fail", "first_bad", "sentence",
    "attention", "attention_grads", "causal_allowed", "entropy", "softmax",
    "array", "boolean", "close", "items", "number",
    "TORCH_ATOL", "dtype_name", "float_tolerance", "weight_tolerance",
]
