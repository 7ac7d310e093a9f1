"""What a student's function returns reaches the judge as it was returned (``mlbook_kernel.wire``).

In grading a check calls the student's function in the kernel and gets the result back over the
wire; in the seeded-draw tests the same check gets the result directly. Whatever the wire
changes (a shape, a dtype, a scalar becoming an array) is a difference between the two that
fails a correct student in grading only. Each value below goes through the kernel's encoder and
the grader's decoder and must come back with its type, shape, dtype and values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbook_kernel import wire


def round_trip(value):
    """``value`` as the grader receives it from the kernel."""
    blobs: list[bytes] = []
    tree = wire.encode(value, blobs, to_handle=lambda obj: pytest.fail(f"{obj!r} is data, not an object"))
    return wire.decode(tree, blobs, from_handle=lambda hid: pytest.fail("no handles here"))


SCALARS = [np.float32(0.25), np.float16(1.5), np.int64(7), np.int32(-3), np.uint8(200), np.bool_(True),
           np.complex64(1 + 2j)]
ZERO_D = [np.array(2.5), np.array(3, dtype=np.int64), np.array(False)]
TENSORS_0D = [torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64), torch.tensor(4), torch.tensor(True),
              torch.tensor(1.25, dtype=torch.float16)]


@pytest.mark.parametrize("value", SCALARS, ids=lambda v: type(v).__name__)
def test_a_numpy_scalar_stays_a_scalar_of_its_type(value):
    got = round_trip(value)
    assert type(got) is type(value) and got == value


@pytest.mark.parametrize("value", ZERO_D, ids=lambda v: str(v.dtype))
def test_a_zero_dimensional_array_keeps_shape_empty(value):
    got = round_trip(value)
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == value.dtype and got == value


@pytest.mark.parametrize("value", TENSORS_0D, ids=lambda t: str(t.dtype))
def test_a_zero_dimensional_tensor_keeps_shape_empty(value):
    got = round_trip(value)
    assert isinstance(got, torch.Tensor) and got.shape == () and got.dtype == value.dtype and got.item() == value.item()


@pytest.mark.parametrize("make", [lambda: np.arange(12.0).reshape(3, 4).T, lambda: np.arange(20.0)[::3],
                                  lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                                  lambda: torch.arange(12.0).reshape(3, 4).T, lambda: torch.arange(8.0)[1::2]],
                         ids=["transposed", "strided", "fortran", "tensor-transposed", "tensor-strided"])
def test_a_non_contiguous_array_keeps_its_shape_and_values(make):
    value = make()
    got = round_trip(value)
    assert type(got) is type(value) and tuple(got.shape) == tuple(value.shape)
    assert np.array_equal(np.asarray(got), np.asarray(value))


def test_containers_keep_their_kind_and_what_they_hold():
    value = (np.float32(1.0), [torch.tensor(2.0), {"a": np.array(3.0)}], 4, 5.5, None, "x")
    got = round_trip(value)
    assert isinstance(got, tuple) and isinstance(got[1], list) and isinstance(got[1][1], dict)
    assert type(got[0]) is np.float32 and got[1][0].shape == () and got[1][1]["a"].shape == ()
    assert got[2:] == (4, 5.5, None, "x")
