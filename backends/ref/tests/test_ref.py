"""What the conformance suite does not check about the ref backend: its kernel
table against the contract, and the device object's own duties."""

import numpy as np
import pytest

import candle_api as c
from candle_api.contract import ROWS
from candle_api.device import get_device
from candle_api.layout import Layout


def test_the_kernels_are_the_required_rows_and_nothing_more():
    required = {(row.name, dtype) for row in ROWS if row.required for dtype in row.dtypes}
    assert {(op, str(dtype)) for op, dtype in get_device("ref").kernels} == required


@pytest.mark.parametrize("nbytes", [2**62, 2**70])
def test_absurd_allocations_raise_memory_error(nbytes):
    with pytest.raises(MemoryError):
        get_device("ref").backend.alloc(nbytes)


def test_to_numpy_cannot_change_the_storage():
    x = c.Tensor([1.0, 2.0], device="ref")
    host = x.numpy()
    host[0] = 7.0
    assert x.values() == [1.0, 2.0]


def test_wrap_shares_foreign_memory_and_dlpack_exports_it():
    backend = get_device("ref").backend
    host = np.arange(4, dtype=np.float32)
    storage = backend.wrap(host.ctypes.data, host.nbytes, host)
    host[1] = 9.0
    assert backend.to_numpy(storage, Layout.contig((4,)), c.f32).tolist() == [0.0, 9.0, 2.0, 3.0]
    t = c.Tensor([[1.0, 2.0], [3.0, 4.0]], device="ref").t()
    assert np.from_dlpack(t).tolist() == [[1.0, 3.0], [2.0, 4.0]]


def test_a_draw_split_in_two_gives_the_same_values():
    c.manual_seed(3)
    parts = [c.randn(5, device="ref").numpy(), c.randn(7, device="ref").numpy()]
    c.manual_seed(3)
    np.testing.assert_array_equal(np.concatenate(parts), c.randn(12, device="ref").numpy())


def test_f64_to_bf16_rounds_once():
    # just above the midpoint between 1 and the next bf16: rounding through f32 would give 1
    x = c.Tensor(np.array([1 + 2.0**-8 + 2.0**-40]), dtype="f64", device="ref")
    assert x.to_dtype("bf16").values() == [1 + 2.0**-7]


def test_f64_to_i64_saturates_at_the_top():
    x = c.Tensor(np.array([2.0**63, 2.0**63 - 1024, -(2.0**63), np.nan]), dtype="f64", device="ref")
    assert x.to_dtype("i64").values() == [2**63 - 1, 2**63 - 1024, -(2**63), 0]
