"""Elementwise kernels: unary ops, unary ops with parameters, binary ops and
comparisons, where and cast.

Unary, parameterised and binary ops (and comparisons, which share the binary
call) have one contiguous C loop per (op, dtype), looked up once by the op's
code in the library's list; other layouts go to the strided driver of their
family, which reuses the same loops."""

from __future__ import annotations

from functools import partial

from candle_api.dtype import NUMERIC_DTYPES

from .. import library
from ..library import BINARY_FN, PARAM_FN, UNARY_FN, error
from .descriptors import lay


def unary(strided, code, fn, dt):
    """k(out, x, lx)."""
    isz = dt.itemsize

    def kernel(out, x, lx):
        if lx.contiguous:
            rc = fn(lx.numel, x.ptr + lx.offset * isz, out.ptr)
        else:
            rc = strided(code, dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr)
        if rc:
            raise error()

    return kernel


def param(strided, code, fn, dt):
    """k(out, x, lx, p0, p1)."""
    isz = dt.itemsize

    def kernel(out, x, lx, p0, p1):
        if lx.contiguous:
            rc = fn(lx.numel, x.ptr + lx.offset * isz, out.ptr, p0, p1)
        else:
            rc = strided(code, dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr, p0, p1)
        if rc:
            raise error()

    return kernel


def binary(strided, code, fn, dt):
    """k(out, a, la, b, lb), binary ops and comparisons."""
    isz = dt.itemsize

    def kernel(out, a, la, b, lb):
        if la.contiguous and lb.contiguous:
            rc = fn(la.numel, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr)
        else:
            rc = strided(code, dt.code, lay(la.shape, la.strides, lb.strides),
                         a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr)
        if rc:
            raise error()

    return kernel


def where(fn, dt):
    """k(out, c, lc, t, lt, f, lf), keyed by the values' dtype."""
    isz = dt.itemsize

    def kernel(out, c, lc, t, lt, f, lf):
        if fn(dt.code, lay(lc.shape, lc.strides, lt.strides, lf.strides), c.ptr + lc.offset,
              t.ptr + lt.offset * isz, f.ptr + lf.offset * isz, out.ptr):
            raise error()

    return kernel


def cast(lib, src):
    """k(out, x, lx, dst_dtype), keyed by the source dtype: a contiguous loop per destination."""
    isz = src.itemsize
    strided = lib.cd_cast_strided
    contig = {dst: UNARY_FN(lib.cd_cast_kernel(src.code, dst.code)) for dst in NUMERIC_DTYPES}

    def kernel(out, x, lx, dst):
        if lx.contiguous:
            rc = contig[dst](lx.numel, x.ptr + lx.offset * isz, out.ptr)
        else:
            rc = strided(src.code, dst.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr)
        if rc:
            raise error()

    return kernel


def _with_loop(make, strided, code, lookup, fntype, dt):
    """make's kernel around the contiguous loop of (code, dt); None where the library has none."""
    address = lookup(code, dt.code)
    return make(strided, code, fntype(address), dt) if address else None


def makers(lib) -> dict:
    out = {}
    for family, lookup, fntype, strided, make in (
        ("unary", lib.cd_unary_kernel, UNARY_FN, lib.cd_unary_strided, unary),
        ("param", lib.cd_param_kernel, PARAM_FN, lib.cd_param_strided, param),
        ("binary", lib.cd_binary_kernel, BINARY_FN, lib.cd_binary_strided, binary),
        ("cmp", lib.cd_cmp_kernel, BINARY_FN, lib.cd_cmp_strided, binary),
    ):
        for code, name in enumerate(library.op_names(family)):
            out[name] = partial(_with_loop, make, strided, code, lookup, fntype)
    out["where"] = partial(where, lib.cd_where)
    out["cast"] = partial(cast, lib)
    return out
