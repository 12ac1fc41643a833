"""Errors every backend must raise the same way: bad indices name the index,
integer division by zero is an error, and nothing crashes."""

import numpy as np
import pytest

from candle_api.device import get_device
from candle_api.dtype import get_dtype
from candle_api.errors import IndexOutOfRangeError, KernelError
from candle_api.ops.creation import from_array

INDEX_DTYPES = ["u8", "u32", "i16", "i32", "i64"]


def _t(device, values, dtype):
    return from_array(np.asarray(values), dtype, device)


@pytest.mark.parametrize("id_dtype", INDEX_DTYPES)
def test_index_select_out_of_range(candle_device, id_dtype):
    dev = get_device(candle_device)
    x = _t(dev, np.arange(12.0).reshape(4, 3), "f32")
    with pytest.raises(IndexOutOfRangeError, match="index 7 .*position 1.* size 4"):
        x.index_select(_t(dev, [1, 7, 2], id_dtype), 0)


@pytest.mark.parametrize("id_dtype", INDEX_DTYPES)
def test_gather_out_of_range(candle_device, id_dtype):
    dev = get_device(candle_device)
    x = _t(dev, np.arange(12.0).reshape(4, 3), "f32")
    with pytest.raises(IndexOutOfRangeError, match="index 3 "):
        x.gather(_t(dev, [[0, 1], [3, 0]], id_dtype), 1)


@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
def test_scatter_out_of_range(candle_device, op):
    dev = get_device(candle_device)
    x = _t(dev, np.zeros((2, 3)), "f32")
    with pytest.raises(IndexOutOfRangeError, match="index 5 "):
        getattr(x, op)(_t(dev, [[0, 5]], "i64"), _t(dev, np.ones((1, 2)), "f32"), 1)


def test_negative_index_is_out_of_range(candle_device):
    dev = get_device(candle_device)
    x = _t(dev, np.arange(4.0), "f32")
    with pytest.raises(IndexOutOfRangeError, match="index -1 "):
        x.index_select(_t(dev, [0, -1], "i64"), 0)
    with pytest.raises(IndexOutOfRangeError):
        x.index_add(_t(dev, [9], "i64"), _t(dev, [1.0], "f32"), 0)


def test_embedding_out_of_range(candle_device):
    dev = get_device(candle_device)
    table = _t(dev, np.ones((5, 2)), "f32")
    with pytest.raises(IndexOutOfRangeError, match="index 5 "):
        table.embedding(_t(dev, [[0, 5]], "u32"))


@pytest.mark.parametrize("dtype", ["u8", "u32", "i16", "i32", "i64"])
@pytest.mark.parametrize("op", ["div", "rem", "fmod"])
def test_integer_division_by_zero(candle_device, dtype, op):
    dev = get_device(candle_device)
    a, b = _t(dev, [4, 5, 6], dtype), _t(dev, [1, 0, 2], dtype)
    with pytest.raises(KernelError, match="division by zero"):
        {"div": lambda: a / b, "rem": lambda: a % b, "fmod": lambda: a.fmod(b)}[op]()


@pytest.mark.parametrize("dtype", ["i16", "i32", "i64"])
def test_most_negative_divided_by_minus_one_wraps(candle_device, dtype):
    dev = get_device(candle_device)
    lo = int(np.iinfo(get_dtype(dtype).np).min)
    got = (_t(dev, [lo], dtype) / _t(dev, [-1], dtype)).values()
    assert got == [lo]


def test_negative_integer_power_is_an_error(candle_device):
    dev = get_device(candle_device)
    with pytest.raises(KernelError, match="negative integer powers"):
        _t(dev, [2, 3], "i32").pow(_t(dev, [1, -1], "i32"))
