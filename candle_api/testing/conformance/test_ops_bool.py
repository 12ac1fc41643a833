"""bool as an input: masks (masked_fill, masked_select, nonzero, any/all,
attention), logical and bitwise ops, counting reductions, against NumPy on
every layout, with gradients through the masked ops. The kernel rows that
list bool (comparisons, where, casts, copies, max/min, index ops) are in the
main op table (candle_api.testing.opinfo)."""

from __future__ import annotations

import numpy as np
import pytest

import candle_api as c
from candle_api import functional as F
from candle_api.device import get_device
from candle_api.dtype import bool_, i64
from candle_api.errors import DTypeError
from candle_api.ops.creation import from_array
from candle_api.testing.conformance import table_tests
from candle_api.testing.opinfo import (
    INTS, WITH_BOOL, OpInfo, Sample, shape_for, simple, values,
)


def _bool(_):
    return bool_


def _bool_mask_samples(rng, dtype, layout):
    """x with a full bool mask and a bool row mask (broadcast)."""
    x = values(rng, dtype, shape_for(layout, (3, 5)))
    full = rng.random(x.shape) > 0.5
    full.reshape(-1)[:1] = True  # something selected, also from a 0-d x
    return [Sample([x, full]), Sample([x, rng.random(x.shape[-1:]) > 0.5])]


def _bools(n, base=(3, 5)):
    """n bool inputs (NumPy-broadcast ones too, for two)."""
    return simple(n, base=base)


def _mixed_truth_samples(rng, dtype, layout):
    """A dtype's values against a bool mask: logical ops take any dtypes."""
    shape = shape_for(layout)
    x = values(rng, dtype, shape, -2, 2)
    x = np.where(rng.random(shape) < 0.4, 0, x).astype(x.dtype)
    return [Sample([x, values(rng, "bool", shape)])]


def _truth_samples(rng, dtype, layout):
    if layout == "scalar":
        return [Sample([values(rng, dtype, ())], {"dim": None})]
    x = values(rng, dtype, (0, 4, 5) if layout == "empty" else (3, 4, 5))
    return [Sample([x], {"dim": d, "keepdim": k}) for d in (None, 0, (0, 2), -1) for k in (False, True)]


def _np_truth(fn):
    return lambda x, dim, keepdim=False: fn(x, axis=dim, keepdims=keepdim)


def _bitwise_samples(rng, dtype, layout):
    """Integers over the dtype's whole range (sign bits included); bools."""
    dt = c.get_dtype(dtype)
    shape = shape_for(layout)
    if dt.is_bool:
        return simple(2)(rng, dtype, layout)
    info = np.iinfo(dt.np)
    lo, hi = max(int(info.min), -(2**40)), min(int(info.max), 2**40)
    return [Sample([rng.integers(lo, hi, size=shape, endpoint=True).astype(dt.np) for _ in range(2)])]


OPS = [
    OpInfo("masked_fill_bool", lambda x, m: x.masked_fill(m, 2), lambda x, m: np.where(m, 2, x).astype(x.dtype),
           WITH_BOOL, _bool_mask_samples),
    OpInfo("masked_select_bool", lambda x, m: c.masked_select(x, m),
           lambda x, m: x[np.broadcast_to(m, np.broadcast_shapes(x.shape, m.shape))], WITH_BOOL, _bool_mask_samples),
    OpInfo("where_bool_values", lambda m, a, b: c.where(m, a, b), np.where, ("bool",), simple(3)),
    OpInfo("nonzero_of_bool", lambda x: x.nonzero(), lambda x: np.argwhere(x.reshape(-1) if x.ndim == 0 else x)
           [:, x.ndim == 0:], ("bool",), simple(1), out_dtype=lambda _: c.u32),
    OpInfo("any_of_bool", lambda x, **k: x.any(**k), _np_truth(np.any), ("bool",), _truth_samples, out_dtype=_bool),
    OpInfo("all_of_bool", lambda x, **k: c.all(x, **k), _np_truth(np.all), ("bool",), _truth_samples,
           out_dtype=_bool),
    OpInfo("sum_of_bool", lambda x, **k: x.sum(**k), lambda x, dim, keepdim=False: np.sum(x, dim, np.int64, None, keepdim),
           ("bool",), _truth_samples, out_dtype=lambda _: i64),
    OpInfo("cumsum_of_bool", lambda x: x.cumsum(-1), lambda x: np.cumsum(x, -1, np.int64), ("bool",), simple(1),
           ("contiguous", "transposed", "sliced", "broadcast", "empty"), out_dtype=lambda _: i64),
    OpInfo("logical_and", lambda a, b: a.logical_and(b), np.logical_and, WITH_BOOL, _mixed_truth_samples,
           out_dtype=_bool),
    OpInfo("logical_or", lambda a, b: c.logical_or(a, b), np.logical_or, WITH_BOOL, _mixed_truth_samples,
           out_dtype=_bool),
    OpInfo("logical_xor", lambda a, b: b.logical_xor(a), lambda a, b: np.logical_xor(b, a), WITH_BOOL,
           _mixed_truth_samples, out_dtype=_bool),
    OpInfo("logical_not", lambda x: c.logical_not(x), np.logical_not, WITH_BOOL, simple(1, -1, 1, (0, 2)),
           out_dtype=_bool),
    OpInfo("and", lambda a, b: a & b, np.bitwise_and, INTS + ("bool",), _bitwise_samples),
    OpInfo("or", lambda a, b: a | b, np.bitwise_or, INTS + ("bool",), _bitwise_samples),
    OpInfo("xor", lambda a, b: a ^ b, np.bitwise_xor, INTS + ("bool",), _bitwise_samples),
    OpInfo("invert", lambda a, b: ~a, lambda a, b: np.invert(a), INTS + ("bool",), _bitwise_samples),
    OpInfo("isclose_bool", lambda a, b: a.isclose(b), np.equal, ("bool",), simple(2), out_dtype=lambda _: c.u8),
    OpInfo("roll_bool", lambda x: x.roll(1, 0), lambda x: np.roll(x, 1, 0), ("bool",), simple(1),
           ("contiguous", "transposed", "sliced", "broadcast", "empty")),
    OpInfo("tril_bool", lambda x: x.tril(), np.tril, ("bool",), simple(1),
           ("contiguous", "transposed", "sliced", "broadcast", "empty")),
]


test_op, test_gradient = table_tests(OPS)


# ---- what the table does not cover -----------------------------------------------------------------------


def test_numpy_and_python_bools_make_bool_tensors(candle_device):
    dev = get_device(candle_device)
    assert c.Tensor([True, False], device=dev).dtype is bool_
    t = c.tensor(np.array([[True], [False]]), device=dev)
    assert t.dtype is bool_ and t.numpy().dtype == np.bool_ and t.values() == [[True], [False]]
    assert c.zeros(2, dtype="bool", device=dev).values() == [False, False]
    assert c.full((2,), 3, dtype=bool, device=dev).values() == [True, True]


def test_bool_masks_equal_u8_masks_in_attention(candle_device):
    rng = np.random.default_rng(0)
    q, k, v = (from_array(rng.standard_normal((2, 3, 4, 8)), "f32", get_device(candle_device)) for _ in range(3))
    keep = rng.random((4, 4)) > 0.3
    as_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=from_array(keep, None, get_device(candle_device)))
    as_u8 = F.scaled_dot_product_attention(q, k, v, attn_mask=from_array(keep.astype(np.uint8), None,
                                                                              get_device(candle_device)))
    np.testing.assert_array_equal(as_bool.numpy(), as_u8.numpy())


def test_arithmetic_on_bool_is_refused_by_name(candle_device):
    t = c.Tensor([True, False], device=get_device(candle_device))
    for call in (lambda: t + t, lambda: -t, lambda: t.mean(), lambda: t.argmax(), lambda: t.requires_grad_(),
                 lambda: t & c.Tensor([1, 0], dtype="u8", device=t.device), lambda: c.Tensor([1.0]) & 1):
        with pytest.raises(DTypeError):
            call()


def test_dlpack_round_trip(candle_device):
    if get_device(candle_device).backend.dlpack_device()[0] != 1:
        pytest.skip("host memory only")
    t = c.Tensor([[True, False], [False, True]], device=get_device(candle_device)).t()
    host = np.from_dlpack(t)
    assert host.dtype == np.bool_ and host.tolist() == [[True, False], [False, True]]
    back = c.from_dlpack(np.array([False, True]))
    assert back.dtype is bool_ and back.values() == [False, True]
