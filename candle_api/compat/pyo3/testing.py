"""candle-pyo3's test assertions (``candle.testing``): metadata first, then
values, exactly or within ``|actual - expected| <= atol + rtol * |expected|``."""

from __future__ import annotations

import numpy as np

from ...tensor import Tensor


def _same_metadata(actual: Tensor, expected: Tensor, check_device: bool, check_dtype: bool, check_layout: bool,
                   check_stride: bool) -> None:
    for wanted, what, a, e in ((check_device, "device", actual.device, expected.device),
                               (check_dtype, "dtype", actual.dtype, expected.dtype),
                               (check_layout, "shape", actual.shape, expected.shape),
                               (check_stride, "stride", actual.stride, expected.stride)):
        assert not wanted or a == e, f"{what} differs: {a} != {e}"


def _host(t: Tensor) -> np.ndarray:
    """The values where nothing wraps or rounds: float64 for floats, Python ints otherwise."""
    arr = t.numpy()
    return arr.astype(np.float64) if t.dtype.is_float else arr.astype(object)


def assert_equal(actual: Tensor, expected: Tensor, check_device: bool = True, check_dtype: bool = True,
                 check_layout: bool = True, check_stride: bool = False) -> None:
    """The same metadata (as asked) and exactly the same values."""
    _same_metadata(actual, expected, check_device, check_dtype, check_layout, check_stride)
    a, e = _host(actual), _host(expected)
    assert np.array_equal(a, e), f"tensors differ: {actual} != {expected}"


def assert_almost_equal(actual: Tensor, expected: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
                        check_device: bool = True, check_dtype: bool = True, check_layout: bool = True,
                        check_stride: bool = False) -> None:
    """The same metadata (as asked) and values within atol + rtol * |expected|."""
    _same_metadata(actual, expected, check_device, check_dtype, check_layout, check_stride)
    a, e = _host(actual).astype(np.float64), _host(expected).astype(np.float64)
    bound = atol + rtol * np.abs(e)
    far = ~(np.abs(a - e) <= bound)
    assert not far.any(), (f"{int(far.sum())} of {far.size} values differ by more than atol + rtol * |expected| "
                           f"(atol {atol}, rtol {rtol})")
