"""Test helpers (candle-pyo3's ``candle.testing``) and the conformance suite.

The conformance suite is a pytest plugin: ``pytest --pyargs candle_api.testing.conformance``
runs every op on every available device; ``--candle-device cuda:0`` picks one.
"""

from __future__ import annotations

import numpy as np

from ..tensor import Tensor


def _check_metadata(actual: Tensor, expected: Tensor, check_device, check_dtype, check_layout, check_stride):
    if check_device:
        assert actual.device == expected.device, f"device mismatch: {actual.device} != {expected.device}"
    if check_dtype:
        assert actual.dtype == expected.dtype, f"dtype mismatch: {actual.dtype} != {expected.dtype}"
    if check_layout:
        assert actual.shape == expected.shape, f"shape mismatch: {actual.shape} != {expected.shape}"
    if check_stride:
        assert actual.stride == expected.stride, f"stride mismatch: {actual.stride} != {expected.stride}"


def _host(t: Tensor) -> np.ndarray:
    arr = t.numpy()
    return arr.astype(np.float64) if t.dtype.is_float else arr.astype(np.int64) if t.dtype.is_int else arr


def assert_equal(actual: Tensor, expected: Tensor, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False) -> None:
    """Asserts two tensors are exactly equal (shape, dtype, device and values)."""
    _check_metadata(actual, expected, check_device, check_dtype, check_layout, check_stride)
    np.testing.assert_array_equal(_host(actual), _host(expected), err_msg="tensors differ")


def assert_almost_equal(actual: Tensor, expected: Tensor, rtol=1e-05, atol=1e-08, check_device=True,
                        check_dtype=True, check_layout=True, check_stride=False) -> None:
    """Asserts ``|actual - expected| <= atol + rtol * |expected|`` elementwise."""
    _check_metadata(actual, expected, check_device, check_dtype, check_layout, check_stride)
    np.testing.assert_allclose(_host(actual), _host(expected), rtol=rtol, atol=atol, err_msg="tensors differ")
