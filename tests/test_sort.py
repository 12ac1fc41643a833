"""Sorting on whole value ranges and long rows, beyond the conformance
suite's small cases: every f16 and bf16 bit pattern (NaN payloads of both
signs, -0.0, subnormals) in PyTorch's order, long rows of every dtype against
NumPy's stable sort, and topk on both sides of the kernel's switch from a
heap selection to a full sort."""

import numpy as np
import pytest

import candle_api as c
from candle_api.testing.opinfo_sort import stable_order

DTYPES = ("u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "bool")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("descending", [False, True])
def test_every_half_precision_bit_pattern(dtype, descending):
    bits = np.arange(1 << 16, dtype=np.uint16)
    x = c.from_numpy(bits.view(c.get_dtype(dtype).np))
    values, indices = x.sort(descending=descending)
    want = stable_order(bits.view(c.get_dtype(dtype).np), -1, descending)
    np.testing.assert_array_equal(indices.numpy(), want)
    np.testing.assert_array_equal(values.numpy().view(np.uint16), bits[want])  # bit for bit: -0.0, NaN payloads


def _long(dtype, rng, shape):
    dt = c.get_dtype(dtype)
    if dt.is_float:
        with np.errstate(over="ignore"):  # f16 overflows to inf: one more value to order
            return (rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 6, shape)).astype(dt.np)
    if dt.is_bool:
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dt.np)
    return rng.integers(int(info.min), int(info.max), shape, endpoint=True, dtype=np.int64).astype(dt.np)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_against_numpy(dtype):
    rng = np.random.default_rng(7)
    x = _long(dtype, rng, (3, 40000))
    x[1] = x[0][rng.integers(0, 50, 40000)]  # many ties
    t = c.from_numpy(x)
    for descending in (False, True):
        values, indices = t.sort(descending=descending)
        want = stable_order(x, -1, descending)
        np.testing.assert_array_equal(indices.numpy(), want)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, -1))


@pytest.mark.parametrize("dtype", ["f32", "i64", "u8"])
@pytest.mark.parametrize("k", [1, 62, 63, 64, 65, 500, 999, 1000])
def test_topk_around_the_selection_switch(dtype, k):
    """k * 16 <= n selects with a heap, larger k sorts: both give the stable order's head,
    also on a sorted row (every element enters the heap) and a reversed one."""
    rng = np.random.default_rng(k)
    row = _long(dtype, rng, (1000,))
    rows = np.stack([row, np.sort(row, kind="stable"), np.sort(row, kind="stable")[::-1]])
    for largest in (True, False):
        got = c.from_numpy(rows).topk(k, largest=largest).indices.numpy()
        np.testing.assert_array_equal(got, stable_order(rows, -1, largest)[:, :k])
