"""The models a lab 5 check hands the student's function, and the weights read back from them.

Every model a student's function receives is built in the kernel (``students_copy``) with the
weights of a model the grader draws and keeps as its reference; what the function did to the
copy is read back as data (``state``, checked tensor by tensor against the reference's layout)
and judged in the grader.
"""

from __future__ import annotations

from typing import Any

import torch

from mlbook_helpers.copy_task import TinyDecoder

from ...kit import array, call_student, describe, fail, helper

__all__ = ["students_copy", "state", "KEEP_THE_MODEL"]

KEEP_THE_MODEL = "Change the model you are given in place; keep its modules and parameters."


def students_copy(reference: TinyDecoder, **sizes: Any) -> Any:
    """A TinyDecoder built in the student's kernel with the weights of the grader's ``reference``.

    Args:
        reference: the grader's model; it stays here, untouched by the student's code.
        sizes: the keyword arguments ``reference`` was built with (d_model, n_heads, n_layers).
    Returns:
        The kernel's copy (a remote object in a sandboxed check, a local model otherwise), whose
        weights were read back and found equal to the reference's: what the kernel built is not
        trusted to hold them.
    """
    task = helper("mlbook_helpers.copy_task:CopyTask")(n_data=reference.task.n_data, length=reference.task.length)
    model = helper("mlbook_helpers.copy_task:TinyDecoder")(task, **sizes)
    model.load_state_dict(reference.state_dict())
    what = "the model the check built for your function"
    held = state(model, reference, what)
    if not all(torch.equal(held[name], weights) for name, weights in reference.state_dict().items()):
        fail(what, "does not hold the weights it was given",
             "Leave torch and mlbook_helpers as they are: the check builds its models with them.")
    return model


def state(model: Any, reference: TinyDecoder, what: str) -> dict[str, torch.Tensor]:
    """The weights of the kernel's ``model``, read back as data and checked against the layout of
    the grader's ``reference``: every tensor of its state dict present, real, finite, of its shape.

    Returns:
        name -> float32 tensor, in the reference's order (``load_state_dict`` takes it as it is).
    """
    # A dict of tensors: data, whatever the kernel made of the model. Looking up state_dict is
    # part of the call: the student's code may have broken either.
    weights = call_student(lambda: model.state_dict(), what=what, named=lambda kind, _text: (
        f"the model's weights cannot be read back (state_dict() raised {kind})", KEEP_THE_MODEL))
    if not isinstance(weights, dict):
        fail(what, f"the model's state_dict() returned {describe(weights)}", KEEP_THE_MODEL)
    out = {}
    for name, ref in reference.state_dict().items():
        if name not in weights:
            fail(what, f"{name} is no longer a parameter of the model",
                 "Change the weights in place (`.mul_(...)` under torch.no_grad()) instead of replacing them.")
        values = array(weights[name], f"{what}: {name}", shape=tuple(ref.shape),
                       hint="The weights must stay finite real numbers of their original shape.")
        out[name] = torch.from_numpy(values).to(ref.dtype)
    return out
