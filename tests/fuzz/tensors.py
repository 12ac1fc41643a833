"""Random tensors for the differential cases: values across a dtype's range
(NaN, infinities, signed zeros, integer extremes), held by views of every kind
(transposed, stepped, offset, broadcast, permuted, NumPy-strided), and
operand shapes that broadcast or clash."""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .case import pick
from .reference import FLOATS, INTS, Raises, np_dtype

SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 88.0, -88.0, 1000.0]
SHAPE_ERROR = Raises(c.ShapeError, "shapes that do not fit")


def values(rng, dtype: str, shape: tuple, special: bool = False, extreme: bool = False) -> np.ndarray:
    """Random values of dtype: plain ones, with NaN/infinities/signed zeros when
    ``special``, with the dtype's extremes when ``extreme``."""
    n = math.prod(shape)
    if dtype in INTS:
        info = np.iinfo(np_dtype(dtype))
        if extreme:
            out = rng.integers(info.min, info.max, size=n, dtype=np_dtype(dtype), endpoint=True)
            out[rng.random(n) < 0.2] = pick(rng, [info.min, info.max, 0, 1])
        else:
            out = rng.integers(max(int(info.min), -20), 21, size=n).astype(np_dtype(dtype))
        return out.reshape(shape)
    out = rng.standard_normal(n) * (10.0 if dtype in ("f16", "bf16") else pick(rng, [1.0, 100.0]))
    if special or extreme:
        mask = rng.random(n) < 0.2
        out[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
    if extreme:
        finfo = np.finfo(np.float32 if dtype == "bf16" else np_dtype(dtype))
        out[rng.random(n) < 0.1] = float(finfo.max) * pick(rng, [1.0, -1.0, 0.9])
    with np.errstate(over="ignore"):
        return out.astype(np_dtype(dtype)).reshape(shape)


def build(rng, a: np.ndarray):
    """(a tensor holding a's values as a view of some kind, the values it holds, the kind)."""
    kinds = ["contiguous"] + (["stepped", "offset", "numpy strided"] if a.ndim else [])
    kinds += ["transposed"] * (a.ndim >= 2) + ["permuted"] * (a.ndim >= 3)
    kinds += ["broadcast"] * (max(a.shape, default=0) > 1)
    kind = pick(rng, kinds)
    if kind == "transposed":
        return c.from_numpy(np.ascontiguousarray(np.swapaxes(a, -1, -2))).transpose(-1, -2), a, kind
    if kind == "permuted":
        perm = [int(p) for p in rng.permutation(a.ndim)]
        return c.from_numpy(np.ascontiguousarray(a.transpose(np.argsort(perm)))).permute(*perm), a, kind
    if kind in ("stepped", "numpy strided"):
        d = int(rng.integers(a.ndim))
        big = np.zeros(a.shape[:d] + (2 * a.shape[d] + 1,) + a.shape[d + 1:], a.dtype)
        index = (slice(None),) * d + (slice(1, None, 2),)
        big[index] = a
        return (c.from_numpy(big)[index] if kind == "stepped" else c.from_numpy(big[index])), a, kind
    if kind == "offset":
        k = int(rng.integers(1, 3))
        big = np.concatenate([np.zeros((k,) + a.shape[1:], a.dtype), a])
        return c.from_numpy(big).narrow(0, k, a.shape[0]), a, kind
    if kind == "broadcast":
        d = pick(rng, [i for i, n in enumerate(a.shape) if n > 1])
        base = np.ascontiguousarray(a.take([0], axis=d))
        return c.from_numpy(base).broadcast_as(a.shape), np.broadcast_to(base, a.shape), kind
    return c.from_numpy(a.copy()), a, kind


def tensor(rng, dtype: str, shape: tuple, **kind):
    """(tensor, values as the reference computes on them, layout kind)."""
    t, held, layout = build(rng, values(rng, dtype, shape, **kind))
    return t, held.astype(np.float64) if dtype in FLOATS else held, layout


def broadcast_partner(rng, shape: tuple) -> tuple:
    """A shape that broadcasts with ``shape`` (often), or one that does not."""
    roll = rng.random()
    if roll < 0.4 or not shape:
        return shape
    if roll < 0.9:
        partner = tuple(1 if rng.random() < 0.4 else n for n in shape)
        return partner[int(rng.integers(len(partner) + 1)):]
    d = int(rng.integers(len(shape)))
    return shape[:d] + (shape[d] + int(rng.integers(2, 4)),) + shape[d + 1:]


def mismatch(dtypes: list, shapes: list) -> Raises | None:
    """The error for operands of several dtypes or shapes that do not broadcast
    (either error where both are wrong), None when they fit."""
    try:
        np.broadcast_shapes(*shapes)
        clash = False
    except ValueError:
        clash = True
    several = len(set(dtypes)) > 1
    if several and clash:
        return Raises((c.DTypeError, c.ShapeError), "dtypes and shapes clash")
    if several:
        return Raises(c.DTypeError, f"dtypes {sorted(set(dtypes))}")
    return SHAPE_ERROR if clash else None
