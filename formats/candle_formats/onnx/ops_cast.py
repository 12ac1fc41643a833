"""Cast, CastLike and BitCast between every ONNX numeric type.

Rules (those of onnx's reference implementation, which NumPy and ml_dtypes
follow): floats become integers by truncation and then wrap into the
target's width, integers wrap into narrower ones, anything becomes bool as
``!= 0``. The small float types (float8, float6, float4, e8m0) are rounded
to their grid, half to even, with ``saturate`` deciding whether values
beyond the largest finite one clamp or become inf/NaN.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import candle_api as c

from .dtypes import BOOL, FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0, MINIFLOATS, \
    UINT64, OnnxType, onnx_type
from .helpers import const, tensor_from_array, to_numpy
from .registry import op

_SATURATING = {FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ}  # types with a `saturate` choice


def cast(x, src: OnnxType, dst: OnnxType, saturate: bool = True, round_mode: str = "up"):
    if dst.code == BOOL:
        return x != 0
    if dst.code == FLOAT8E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if dst.code in MINIFLOATS:
        return _to_minifloat(x, dst, saturate or dst.code not in _SATURATING)
    if dst.is_float:
        return x.to_dtype(dst.storage)
    if x.dtype.is_float:  # truncate; out of i64's range it saturates, then wraps like any integer
        x = x.trunc().to_dtype(c.i64)
    return wrap_int(x, dst)


def wrap_int(x, dst: OnnxType):
    """Integers converted to dst, wrapping values outside its range."""
    if dst.exact or dst.code == UINT64:  # candle-api's integer casts wrap already
        return x.to_dtype(dst.storage)
    lo, hi = dst.int_range
    return ((x.to_dtype(c.i64) - lo) % (hi - lo + 1) + lo).to_dtype(dst.storage)


def _pow2(exponents, lo: int, hi: int):
    """2 ** exponents (i64 within [lo, hi]), exactly: looked up in a table."""
    table = const([2.0 ** k for k in range(lo, hi + 1)], c.f64, exponents.device)
    return table.index_select((exponents - lo).reshape(-1), 0).reshape(exponents.shape)


def _exponent(a, lo: int, hi: int):
    """floor(log2(a)) clamped to [lo, hi], for a >= 0 in f64 (exact at powers of two)."""
    e = (a.log() * (1.0 / math.log(2.0))).floor().clamp(lo, hi).to_dtype(c.i64)
    p = _pow2(e, lo, hi)
    e = c.where(p > a, e - 1, c.where(p * 2.0 <= a, e + 1, e))
    return e.clamp(lo, hi)


def _to_minifloat(x, dst: OnnxType, saturate: bool):
    info = ml_dtypes.finfo(dst.np)
    m, emin, emax, big = info.nmant, info.minexp, info.maxexp - 1, float(info.max)
    a = x.to_dtype(c.f64).abs()
    e = _exponent(a, emin, emax + 1)              # below emin every value shares the subnormal step
    step = _pow2(e - m, emin - m, emax + 1 - m)
    r = (a / step).round() * step                  # half to even
    r = c.where(x < 0, -r, r)
    if saturate:
        r = r.clamp(-big, big)
    else:
        special = math.inf if dst.code == FLOAT8E5M2 else math.nan
        r = c.where(r.abs() > big, r * special, r)  # inf keeps the sign; NaN times anything is NaN
    return r.to_dtype(c.f32)


def _to_e8m0(x, saturate: bool, round_mode: str):
    """Powers of two 2**-127 .. 2**127 of |x| (NaN for NaN and inf), rounded as onnx's to_float8e8m0."""
    a = x.to_dtype(c.f64).abs()
    e = _exponent(a, -127, 127)
    frac = a / _pow2(e, -127, 127)
    up = {"up": frac > 1.0, "nearest": frac >= 1.5, "down": frac < 0.0}[round_mode]
    e = e + up.to_dtype(c.i64)
    if saturate:
        e = e.clamp(-127, 127)
    special = (a != a).maximum(a == math.inf).maximum(e > 127)
    value = _pow2(e.clamp(-127, 127), -127, 127)
    return c.where(special, value * math.nan, value).to_dtype(c.f32)


def _cast_node(node, x, dst: OnnxType):
    return cast(x, node.in_type(0, x), dst, bool(node.get("saturate", 1)), node.get("round_mode", "up"))


@op("Cast")
def cast_op(node, x):
    to = node["to"]
    return _cast_node(node, x, onnx_type(to if isinstance(to, int) else _type_by_name(to)))


@op("CastLike", since=15)
def cast_like(node, x, like):
    return _cast_node(node, x, node.in_type(1, like))


def _type_by_name(name: str) -> int:
    """Cast-1 names its target type as a string ("FLOAT")."""
    import onnx

    return onnx.TensorProto.DataType.Value(name.upper())


@op("BitCast", since=26)
def bit_cast(node, x):
    """The same bits read as another type of the same width: the values go
    through the host (as arrays of their ONNX types, where a bit view is a
    NumPy view) and come back as the new type's tensor."""
    src, dst = node.in_type(0, x), onnx_type(node["to"])
    if np.dtype(src.np).itemsize != np.dtype(dst.np).itemsize:
        raise node.fail(f"BitCast needs types of one width: {src.name} has {np.dtype(src.np).itemsize} bytes, "
                        f"{dst.name} {np.dtype(dst.np).itemsize}")
    bits = np.array(to_numpy(x, src), order="C").view(dst.np)  # ascontiguousarray would make 0-d 1-d
    return tensor_from_array(bits, node.device, dst)
