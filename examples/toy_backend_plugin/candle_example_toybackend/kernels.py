"""The toy device's kernels: part of the contract table (candle_api/contract/
table.py), written with NumPy over the storages' bytes.

The core calls each kernel as its row's ``call`` says: ``k(out, x, lx)`` for
a unary op, ``k(out, a, la, b, lb)`` for a binary one... ``out`` is a fresh
contiguous storage, never empty; ``x, lx`` a storage and its layout (any
strides). The table is keyed by (op, dtype) and a kernel is not told the
dtype, so each one here is made for one dtype (a closure).

Arithmetic runs in float64 for float dtypes (then rounds once) and in int64
for integer dtypes (then wraps), as C kernels do. The rows left out (sin,
argmax, cumsum, indexing, convolutions...) are what a partial backend looks
like: ``candle info`` lists what is here, the optional rows left out (softmax,
sigmoid, relu...) run as their decompositions into these kernels, and the
required ones raise UnsupportedOpError, which the conformance suite reports
as skipped.
"""

from __future__ import annotations

import numpy as np

from candle_api import KernelError
from candle_api.contract import BY_NAME
from candle_api.dtype import get_dtype, u8

from .device import view, write

#: The dtypes the toy device holds (BackendSpec.dtypes).
DTYPES = ("u8", "u32", "i64", "f32", "f64")


def _load(storage, layout, dtype) -> np.ndarray:
    """The elements in the precision arithmetic runs in: float64 or int64."""
    return view(storage, layout, dtype).astype(np.float64 if dtype.is_float else np.int64)


def _div(a, b):
    """Floats divide; integers truncate toward zero (C, not NumPy's floor) and
    refuse zero. int64 wraps, so the most negative / -1 is itself."""
    if a.dtype.kind == "f":
        return a / b
    if not b.all():
        raise KernelError("integer division by zero")
    q = a // b
    return q + ((q * b != a) & ((a < 0) != (b < 0)))


def _cast_to(dst):
    """Source values (in their own dtype) to dst: floats saturate into integer
    dtypes and NaN becomes 0 (Rust's `as`, which Candle inherits); other
    conversions are NumPy's (integers wrap, floats round)."""

    def convert(x):
        if x.dtype.kind != "f" or not dst.is_int:
            return x.astype(dst.np)
        info = np.iinfo(dst.np)
        top = np.nextafter(float(info.max), 0.0) if float(info.max) > info.max else float(info.max)  # i64: 2^63 - 1024
        x = np.where(np.isnan(x), 0.0, x.astype(np.float64))
        return np.where(x > top, info.max, np.clip(x, float(info.min), top).astype(np.int64))

    return convert


UNARY = {"abs": np.abs, "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "recip": np.reciprocal,
         "tanh": np.tanh}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _div, "maximum": np.maximum,
          "minimum": np.minimum}
COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


# ---- one factory per calling convention (the row's `call`) ------------------------------------


def unary(fn, dt):
    def k(out, x, lx):
        write(out, dt, fn(_load(x, lx, dt)))
    return k


def affine(dt):
    def k(out, x, lx, p0, p1):  # x * p0 + p1
        x = _load(x, lx, dt)
        if dt.is_int and all(float(p).is_integer() and abs(p) < 2**63 for p in (p0, p1)):
            write(out, dt, x * int(p0) + int(p1))  # integers: exactly, then wrapped
        elif dt.is_int:  # a fractional or huge parameter: through float64, saturating as casts do
            write(out, dt, _cast_to(dt)(x * p0 + p1))
        else:
            write(out, dt, x * p0 + p1)
    return k


def binary(fn, dt):
    def k(out, a, la, b, lb):
        write(out, dt, fn(_load(a, la, dt), _load(b, lb, dt)))
    return k


def compare(fn, dt):
    def k(out, a, la, b, lb):  # in the dtype itself, exactly; the result is u8
        write(out, u8, fn(view(a, la, dt), view(b, lb, dt)))
    return k


def where(dt):
    def k(out, c, lc, t, lt, f, lf):
        write(out, dt, np.where(view(c, lc, u8) != 0, view(t, lt, dt), view(f, lf, dt)))
    return k


def cast(dt):
    def k(out, x, lx, dst):  # keyed by the source dtype; dst is any dtype
        write(out, dst, _cast_to(dst)(view(x, lx, dt)))
    return k


def copy(dt):
    def k(dst, ldst, src, lsrc):  # in place: dst's layout is a view into dst
        view(dst, ldst, dt)[...] = view(src, lsrc, dt)
    return k


def fill(dt):
    def k(dst, ldst, value):  # value: the element's raw bytes
        view(dst, ldst, dt)[...] = np.frombuffer(value, dt.np)[0]
    return k


def reduce(fn, dt):
    def k(out, x, lx, dims):  # dims: the reduced dims; out holds the others, in order
        write(out, dt, fn(_load(x, lx, dt), axis=dims))
    return k


def matmul(dt):
    def k(out, a, la, b, lb):  # (batch..., m, k) @ (batch..., k, n), batch dims already broadcast
        write(out, dt, np.matmul(_load(a, la, dt), _load(b, lb, dt)))
    return k


def _quiet(kernel):
    """NumPy warns on overflow, 0/0 or log(-1); the kernels' answers (inf, NaN,
    wrapped integers) are the contract's, so the warnings are noise."""
    def quiet(*args):
        with np.errstate(all="ignore"):
            return kernel(*args)
    return quiet


def build_kernels() -> dict:
    """{(op, dtype): kernel} for every row above, in the dtypes its contract row
    lists among the device's own."""
    makers = {name: (lambda dt, fn=fn: unary(fn, dt)) for name, fn in UNARY.items()}
    makers.update({name: (lambda dt, fn=fn: binary(fn, dt)) for name, fn in BINARY.items()})
    makers.update({name: (lambda dt, fn=fn: compare(fn, dt)) for name, fn in COMPARE.items()})
    makers.update({name: (lambda dt, fn=fn: reduce(fn, dt)) for name, fn in REDUCE.items()})
    makers.update(affine=affine, where=where, cast=cast, copy=copy, fill=fill, matmul=matmul)
    return {(name, d): _quiet(make(get_dtype(d)))
            for name, make in makers.items() for d in BY_NAME[name].dtypes if d in DTYPES}
