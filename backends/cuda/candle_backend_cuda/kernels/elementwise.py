"""Elementwise kernels (csrc/elementwise.cu): unary, with parameters,
binary, comparisons, where and cast. One CUDA kernel per (family, dtype);
the op is a code (csrc/ops.cuh). Integer division, remainder, fmod and
power check their divisors and exponents on the device and raise through
the error word (errors.py)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from ..launch import address
from .codes import codes
from .common import THREADS, grid, per_thread, views

MODULE = "elementwise"
CHECKED = {"div", "rem", "fmod", "pow"}  # integer ops that may fail


def unary(op: str, dtype):
    """k(out, x, lx)."""
    if not dtype.is_float and op not in ("abs", "neg", "sign", "ceil", "floor", "round", "trunc", "sqr", "relu"):
        return None
    code, isz, name = codes("UNARY")[op], dtype.itemsize, f"unary_{dtype}"

    def kernel(out, x, lx):
        dev = out.device
        fn = dev.function(MODULE, name)
        base = address(x, lx, isz)
        for offs, start, n, lay in views([lx]):
            po, px = out.ptr + start * isz, base + offs[0] * isz
            fn.launch(grid(dev, n, per_thread(lay, isz, po, px)), THREADS, po, px, n, code, *lay)

    return kernel


def _whole(v: float) -> bool:
    return v == v and abs(v) < 9.2e18 and v == int(v)


def _wrap64(v: int) -> int:
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def _saturate(v: float, dtype) -> int:
    """A float into dtype's range as casts do it: NaN 0, else clamped (v already whole or infinite)."""
    info = np.iinfo(dtype.np)
    if v != v:
        return 0
    return int(min(max(v, info.min), info.max)) if math.isfinite(v) else (info.max if v > 0 else info.min)


def integer_params(op: str, dtype, p0: float, p1: float) -> tuple[int, int, int]:
    """(q0, q1, whole) of an integer parameter op: affine's whole parameters wrapped into i64, or
    clamp's integer bounds inside [p0, p1] saturated into the dtype (lo <= hi)."""
    if op == "affine":
        whole = _whole(p0) and _whole(p1)
        return (_wrap64(int(p0)), _wrap64(int(p1)), 1) if whole else (0, 0, 0)
    hi = _saturate(math.floor(p1) if math.isfinite(p1) else p1, dtype)
    lo = min(_saturate(math.ceil(p0) if math.isfinite(p0) else p0, dtype), hi)
    return lo, hi, 0


def param(op: str, dtype):
    """k(out, x, lx, p0, p1)."""
    if not dtype.is_float and op not in ("affine", "clamp"):
        return None
    code, isz, name = codes("PARAM")[op], dtype.itemsize, f"param_{dtype}"

    def kernel(out, x, lx, p0, p1):
        dev = out.device
        fn = dev.function(MODULE, name)
        q0, q1, whole = (0, 0, 0) if dtype.is_float else integer_params(op, dtype, p0, p1)
        base = address(x, lx, isz)
        for offs, start, n, lay in views([lx]):
            po, px = out.ptr + start * isz, base + offs[0] * isz
            fn.launch(grid(dev, n, per_thread(lay, isz, po, px)), THREADS, po, px, n, code, float(p0), float(p1), q0,
                      q1, whole, *lay)

    return kernel


def _two_inputs(fn, dev, out_ptr, out_isz, a, la, b, lb, isz, code, *tail):
    """Launches fn over two inputs of one shape: (out, a, b, n, code, *tail, layout)."""
    pa, pb = address(a, la, isz), address(b, lb, isz)
    for offs, start, n, lay in views([la, lb]):
        ptrs = (out_ptr + start * out_isz, pa + offs[0] * isz, pb + offs[1] * isz)
        fn.launch(grid(dev, n, per_thread(lay, max(isz, out_isz), *ptrs)), THREADS, *ptrs, n, code, *tail, *lay)


def binary(op: str, dtype):
    """k(out, a, la, b, lb)."""
    code, isz, name = codes("BINARY")[op], dtype.itemsize, f"binary_{dtype}"
    checked = dtype.is_int and op in CHECKED

    def kernel(out, a, la, b, lb):
        dev = out.device
        fn = dev.function(MODULE, name)
        if checked:
            dev.errors.run(lambda err: _two_inputs(fn, dev, out.ptr, isz, a, la, b, lb, isz, code, err))
        else:
            _two_inputs(fn, dev, out.ptr, isz, a, la, b, lb, isz, code, dev.errors.ptr)

    return kernel


def compare(op: str, dtype):
    """k(out, a, la, b, lb), out u8."""
    code, isz, name = codes("CMP")[op], dtype.itemsize, f"compare_{dtype}"

    def kernel(out, a, la, b, lb):
        dev = out.device
        _two_inputs(dev.function(MODULE, name), dev, out.ptr, 1, a, la, b, lb, isz, code)

    return kernel


def where(dtype):
    """k(out, c, lc, t, lt, f, lf), keyed by the values' dtype; c u8. Moves bits: a kernel per width."""
    isz = dtype.itemsize
    name = f"where_{8 * isz}"

    def kernel(out, c, lc, t, lt, f, lf):
        dev = out.device
        fn = dev.function(MODULE, name)
        pc, pt, pf = address(c, lc, 1), address(t, lt, isz), address(f, lf, isz)
        for offs, start, n, lay in views([lc, lt, lf]):
            ptrs = (out.ptr + start * isz, pc + offs[0], pt + offs[1] * isz, pf + offs[2] * isz)
            fn.launch(grid(dev, n, per_thread(lay, isz, *ptrs)), THREADS, *ptrs, n, *lay)

    return kernel


def cast(dtype):
    """k(out, x, lx, dst_dtype), keyed by the source dtype."""
    isz, name = dtype.itemsize, f"cast_{dtype}"

    def kernel(out, x, lx, dst):
        dev = out.device
        fn = dev.function(MODULE, name)
        base = address(x, lx, isz)
        for offs, start, n, lay in views([lx]):
            po, px = out.ptr + start * dst.itemsize, base + offs[0] * isz
            fn.launch(grid(dev, n, per_thread(lay, max(isz, dst.itemsize), po, px)), THREADS, po, px, n, dst.code,
                      *lay)

    return kernel


KERNELS = {
    **{op: partial(unary, op) for op in codes("UNARY")},
    **{op: partial(param, op) for op in codes("PARAM")},
    **{op: partial(binary, op) for op in codes("BINARY")},
    **{op: partial(compare, op) for op in codes("CMP")},
    "where": where,
    "cast": cast,
}
