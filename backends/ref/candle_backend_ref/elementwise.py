"""Elementwise kernels: unary, with parameters (affine, powf, elu), binary,
comparisons, where and cast.

Each kernel loads its inputs from any layout (float64 or int64, see
strided.py), computes with NumPy and stores the contiguous output, rounded
once or wrapped. Integer arithmetic is modulo 2^64 in int64, which wraps into
every narrower integer dtype exactly as that dtype's own arithmetic would.
"""

from __future__ import annotations

import math

import numpy as np

from candle_api.dtype import u8
from candle_api.errors import KernelError

from .strided import load, saturated, store, view

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _unchanged(x):
    """ceil, floor, round and trunc of an integer."""
    return x


# ---- integer division ---------------------------------------------------------------------


def _nonzero(b: np.ndarray) -> np.ndarray:
    if not b.all():
        raise KernelError("integer division by zero")
    return b


def _int_div(a, b):
    """Truncating division, from numpy's flooring one (the most negative value
    divided by -1 wraps to itself)."""
    q = a // _nonzero(b)
    return q + ((a % b != 0) & ((a < 0) != (b < 0)))


def _int_fmod(a, b):
    """The remainder of truncating division: the sign of a."""
    return a - _int_div(a, b) * b


def _int_rem(a, b):
    """Python's remainder: the sign of b."""
    r = _int_fmod(a, b)
    return np.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


def _int_pow(a, b):
    if (b < 0).any():
        raise KernelError("integers to negative integer powers are not allowed")
    return np.power(a, b)


# ---- tables: op -> (float function, integer function or None) ---------------------------------

UNARY = {
    "abs": (np.abs, np.abs),
    "neg": (np.negative, np.negative),
    "sign": (np.sign, np.sign),
    "ceil": (np.ceil, _unchanged),
    "floor": (np.floor, _unchanged),
    "round": (np.rint, _unchanged),  # half to even, as numpy and PyTorch
    "trunc": (np.trunc, _unchanged),
    "recip": (np.reciprocal, None),
    "sqrt": (np.sqrt, None),
    "exp": (np.exp, None),
    "expm1": (np.expm1, None),
    "log": (np.log, None),
    "log1p": (np.log1p, None),
    "sin": (np.sin, None),
    "cos": (np.cos, None),
    "tan": (np.tan, None),
    "asin": (np.arcsin, None),
    "acos": (np.arccos, None),
    "atan": (np.arctan, None),
    "sinh": (np.sinh, None),
    "cosh": (np.cosh, None),
    "tanh": (np.tanh, None),
    "asinh": (np.arcsinh, None),
    "acosh": (np.arccosh, None),
    "atanh": (np.arctanh, None),
    "erf": (_erf, None),
    # x / 2 * (1 + tanh(y)) = x / (1 + exp(-2y)), without the cancellation of 1 + tanh(y) for x < 0
    "gelu": (lambda x: x / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), None),
    "gelu_erf": (lambda x: x / 2 * _erfc(-x / math.sqrt(2)), None),
}

BINARY = {
    "add": (np.add, np.add),
    "sub": (np.subtract, np.subtract),
    "mul": (np.multiply, np.multiply),
    "div": (np.divide, _int_div),
    "maximum": (np.maximum, np.maximum),  # NaN propagates
    "minimum": (np.minimum, np.minimum),
    "pow": (np.power, _int_pow),
    "rem": (np.remainder, _int_rem),
    "fmod": (np.fmod, _int_fmod),
}

PARAM = {  # float ops of x and two parameters
    "powf": lambda x, p0, p1: np.power(x, p0),
    "elu": lambda x, p0, p1: np.where(x > 0, x, p0 * np.expm1(x)),
}

COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}


# ---- kernel makers: op -> maker(dtype) -> kernel ------------------------------------------------


def _elementwise(fns, result_dtype=None):
    """The maker of k(out, x, lx) or k(out, a, la, b, lb): fns[0] (float dtypes)
    or fns[1] (integer dtypes) of the inputs' values, stored in result_dtype
    (default: the inputs' dtype)."""

    def make(dtype):
        fn = fns[0] if dtype.is_float else fns[1]

        def kernel(out, *inputs):  # (storage, layout) pairs
            values = [load(storage, layout, dtype) for storage, layout in zip(inputs[::2], inputs[1::2])]
            store(out, result_dtype or dtype, fn(*values))

        return kernel

    return make


def _param(fn):
    def make(dtype):
        def kernel(out, x, lx, p0, p1):
            store(out, dtype, fn(load(x, lx, dtype), p0, p1))

        return kernel

    return make


def _affine(dtype):
    def kernel(out, x, lx, mul, add):
        values = load(x, lx, dtype)
        if dtype.is_float:
            store(out, dtype, values * mul + add)
        elif float(mul).is_integer() and float(add).is_integer():
            # exact modulo 2^64: the parameters wrapped into int64 first
            m, a = (np.array(int(p) % 2**64, np.uint64).astype(np.int64) for p in (mul, add))
            store(out, dtype, values * m + a)
        else:  # a fractional (or infinite) parameter: through float64, saturating as casts do
            store(out, dtype, saturated(values * mul + add, dtype))

    return kernel


def _where(dtype):
    def kernel(out, c, lc, t, lt, f, lf):
        store(out, dtype, np.where(view(c, lc, u8) != 0, view(t, lt, dtype), view(f, lf, dtype)))

    return kernel


def _cast(src):
    def kernel(out, x, lx, dst):
        values = load(x, lx, src)
        store(out, dst, saturated(values, dst) if src.is_float and dst.is_int else values)

    return kernel


KERNELS = {
    **{op: _elementwise(fns) for op, fns in {**UNARY, **BINARY}.items()},
    **{op: _elementwise((fn, fn), u8) for op, fn in COMPARE.items()},  # 0 or 1
    **{op: _param(fn) for op, fn in PARAM.items()},
    "affine": _affine,
    "where": _where,
    "cast": _cast,
}
