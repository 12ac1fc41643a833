"""The reference the Tensor API is checked against: NumPy, in float64 for
floats, with the rules of docs/semantics.md where they differ from NumPy's
(integer division truncates and raises on zero, casts saturate and send NaN
to 0, argmax/argmin pick a NaN first, scalars take the tensor's dtype
or are refused), and the tolerance check of candle_api.contract.TOLERANCES."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

import candle_api as c
from candle_api.contract.table import TOLERANCES

FLOATS = ("bf16", "f16", "f32", "f64")
INTS = ("u8", "u32", "i16", "i32", "i64")


class Raises(NamedTuple):
    """The outcome the reference expects instead of a result (an error class,
    or a tuple of them where the input is wrong in several ways at once)."""
    error: type | tuple
    why: str

    @property
    def name(self) -> str:
        errors = self.error if isinstance(self.error, tuple) else (self.error,)
        return " or ".join(e.__name__ for e in errors)


def np_dtype(name: str) -> np.dtype:
    return np.dtype(c.get_dtype(name).np)


def exact(a: np.ndarray) -> np.ndarray:
    """An integer array as Python ints (object dtype): arithmetic that cannot overflow."""
    return np.asarray(a).astype(object)


def wrap(values, dtype: str) -> np.ndarray:
    """Python ints wrapped into an integer dtype, as its arithmetic wraps."""
    info = np.iinfo(np_dtype(dtype))
    span = int(info.max) - int(info.min) + 1
    wrapped = np.vectorize(lambda v: (int(v) - int(info.min)) % span + int(info.min), otypes=[object])(values)
    return np.asarray(wrapped, dtype=object).astype(np_dtype(dtype))


def trunc_div(a: int, b: int) -> int:
    """Integer division toward zero (C, Rust, candle), exact."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INT_BINARY = {  # exact rules on Python ints; a zero divisor is refused before these run
    "div": trunc_div,
    "rem": lambda a, b: a % b,                         # the divisor's sign (Python)
    "fmod": lambda a, b: a - trunc_div(a, b) * b,      # the dividend's sign
    "pow": lambda a, b: a ** b,
}


def int_binary(op: str, a: np.ndarray, b: np.ndarray, dtype: str):
    a, b = np.broadcast_arrays(exact(a), exact(b))
    if a.size and op in ("div", "rem", "fmod") and (b == 0).any():
        return Raises(c.KernelError, "integer division by zero")
    if a.size and op == "pow" and (b < 0).any():
        return Raises(c.KernelError, "integers to negative integer powers")
    bits = np_dtype(dtype).itemsize * 8
    fn = INT_BINARY[op] if op != "pow" else (lambda x, y: pow(x, y, 1 << bits))
    return wrap(np.frompyfunc(fn, 2, 1)(a, b), dtype)


def cast(x: np.ndarray, to: str) -> np.ndarray:
    """x (values of its own dtype) converted as to_dtype converts."""
    if to == "bool":  # nonzero (NaN too) is True
        return np.asarray(x != 0, dtype=np.bool_)
    if to in FLOATS:
        with np.errstate(all="ignore"):  # through float64: within a rounding of a direct conversion
            return x.astype(np.float64).astype(np_dtype(to))
    if x.dtype.kind in "iubO":
        return wrap(exact(x), to)
    info = np.iinfo(np_dtype(to))

    def saturate(v: float) -> int:  # Rust's `as`: toward zero, clamped, NaN to 0
        return 0 if math.isnan(v) else int(min(max(math.trunc(v) if math.isfinite(v) else v, info.min), info.max))

    return np.vectorize(saturate, otypes=[object])(x.astype(np.float64)).astype(np_dtype(to))


def scalar_operand(value, dtype: str):
    """The value a Python scalar takes in an op with a tensor of dtype, or Raises."""
    if dtype in FLOATS:
        with np.errstate(over="ignore"):
            return np.asarray(float(value)).astype(np_dtype(dtype)).astype(np.float64)
    info = np.iinfo(np_dtype(dtype))
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        return Raises(c.DTypeError, f"{value} is not an integer")
    if not info.min <= int(value) <= info.max:
        return Raises(c.DTypeError, f"{value} does not fit in {dtype}")
    return int(value)


def arg_reduce(x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """argmax/argmin along axis: the first occurrence of the extreme; a NaN wins over
    every number for both (it propagates, as in max and min)."""
    moved = np.moveaxis(x.astype(np.float64) if x.dtype.kind in "fV" else exact(x), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    sign = 1 if kind == "argmax" else -1

    def key(v):  # NaN first, then the largest (argmax) or smallest (argmin) number
        return (1, 0.0) if isinstance(v, float) and math.isnan(v) else (0, sign * v)

    out = [max(range(len(row)), key=lambda i, row=row: (key(row[i]), -i)) for row in rows]
    return np.asarray(out, dtype=np.uint32).reshape(moved.shape[:-1])


def check(got, want: np.ndarray, dtype: str, bound=None, rtol: float | None = None) -> None:
    """got (a Tensor) equals want (exactly for integers; for floats within the
    dtype's tolerance of max(|want|, bound), where bound is the magnitude an
    accumulation's rounding scales with), NaN where want is NaN."""
    assert got.dtype.name == dtype, f"dtype {got.dtype.name}, expected {dtype}"
    assert tuple(got.shape) == tuple(np.shape(want)), f"shape {tuple(got.shape)}, expected {np.shape(want)}"
    host = got.numpy()
    if dtype not in FLOATS:
        want = np.asarray(want).astype(np_dtype(dtype))
        bad = host != want
    else:
        default_rtol, atol = TOLERANCES[dtype]
        with np.errstate(all="ignore"):
            w = np.asarray(want, np.float64).astype(np_dtype(dtype)).astype(np.float64)
            g = host.astype(np.float64)
            scale = np.abs(w) if bound is None else np.maximum(np.abs(w), np.asarray(bound, np.float64))
            close = np.abs(g - w) <= atol + (rtol or default_rtol) * scale
        bad = ~((g == w) | (np.isnan(g) & np.isnan(w)) | (close & np.isfinite(w)))
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{int(bad.sum())} of {bad.size} values differ; at {at}: got {host[at]!r}, "
                             f"expected {np.asarray(want)[at]!r}")
