"""The Tensor API against NumPy (differential): random shapes (0-d and empty
dims included), every dtype, inputs that are views (transposed, stepped,
offset, broadcast, permuted) and values that include NaN, infinities, signed
zeros and the integer extremes. Each case is one call; its result must equal
the reference of ``reference.py`` (within the dtype's tolerance for floats),
and where the reference expects an error (mismatched shapes or dtypes, an
index out of range, a division by zero, a scalar the dtype cannot hold) the
call must raise that candle error. Case ``index`` is of generator
``CYCLE[index % len(CYCLE)]``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import candle_api as c
from candle_api.errors import CandleError
from candle_api.testing import reference as R
from candle_api.testing.opinfo import UNARY

from ..case import Case, pick
from ..files import random_shape
from ..reference import (FLOATS, INTS, Raises, arg_reduce, cast, check, exact, int_binary, scalar_operand, trunc_div,
                         wrap)
from ..tensors import SHAPE_ERROR, broadcast_partner, mismatch, tensor

DTYPES = FLOATS + INTS


@dataclass
class Trial:
    """One call and what it must give: an array (compared in ``dtype``), a list
    of arrays (for calls returning several tensors), or Raises."""
    what: str
    call: Callable
    want: object
    dtype: str = ""
    bound: object = None        # the magnitude an accumulation's rounding scales with
    rtol: float | None = None   # a documented tolerance of its own


# ---- generators ------------------------------------------------------------------------------------------
UNARY_REFS = {name: (ref, ints) for name, ref, _, ints in UNARY}
#: documented tolerances of their own (test_vector_math: gelu's f32 tail below -3)
UNARY_RTOL = {("gelu", "f32"): 1e-5}


def unary(rng) -> Trial:
    dtype = pick(rng, DTYPES)
    names = [n for n, (_, ints) in UNARY_REFS.items() if ints or dtype in FLOATS]
    name = pick(rng, names)
    x, ref, layout = tensor(rng, dtype, random_shape(rng, 4), special=True, extreme=rng.random() < 0.3)
    if dtype in INTS:  # rounding is the identity on integers; the rest wraps as NumPy's integer ops do
        want = ref if name in ("ceil", "floor", "round", "trunc") else np.asarray(UNARY_REFS[name][0](ref), ref.dtype)
    else:
        with np.errstate(all="ignore"):
            want = UNARY_REFS[name][0](ref)
    return Trial(f"{name} of {dtype}{list(ref.shape)} {layout}", lambda: getattr(x, name)(), want, dtype,
                 rtol=UNARY_RTOL.get((name, dtype)))


FLOAT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
                "minimum": np.minimum, "pow": np.power, "rem": np.remainder, "fmod": np.fmod}
CALLS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
         "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b), "pow": lambda a, b: a ** b,
         "rem": lambda a, b: a % b, "fmod": lambda a, b: a.fmod(b), "eq": lambda a, b: a == b,
         "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
         "ge": lambda a, b: a >= b}
COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}
SCALARS = [0, 1, 2, -1, 3, 255, 256, -129, 2**31, 2**40, 2**63, 0.5, 2.0, -3.0, 1e10, math.nan, math.inf, True]
REFLECTED = ("add", "sub", "mul", "div", "pow")


def _binary_ref(name: str, a: np.ndarray, b, dtype: str):
    if name in COMPARE:
        return COMPARE[name](a, b).astype(np.uint8)
    if dtype in FLOATS:
        with np.errstate(all="ignore"):
            return FLOAT_BINARY[name](a, b)
    if name in ("div", "rem", "fmod", "pow"):
        return int_binary(name, a, b, dtype)
    return wrap(FLOAT_BINARY[name](exact(a), exact(b)), dtype)


def binary(rng) -> Trial:
    """Two tensors (same, broadcast or clashing shapes; rarely two dtypes), or a tensor and a Python scalar."""
    dtype, name = pick(rng, DTYPES), pick(rng, list(CALLS))
    shape = random_shape(rng, 4)
    special = rng.random() < 0.5
    a, ra, layout = tensor(rng, dtype, shape, special=special, extreme=rng.random() < 0.2)
    out_dtype = "u8" if name in COMPARE else dtype
    if rng.random() < 0.3 and name not in ("maximum", "minimum", "fmod"):
        s = pick(rng, SCALARS)
        operand = scalar_operand(s, dtype)
        if name in REFLECTED and rng.random() < 0.5:  # the scalar on the left: radd, rsub, rtruediv, rpow
            want = operand if isinstance(operand, Raises) else _binary_ref(name, np.asarray(operand), ra, dtype)
            return Trial(f"{s!r} {name} {dtype}{list(shape)} {layout}", lambda: CALLS[name](s, a), want, out_dtype)
        want = operand if isinstance(operand, Raises) else _binary_ref(name, ra, operand, dtype)
        return Trial(f"{dtype}{list(shape)} {layout} {name} {s!r}", lambda: CALLS[name](a, s), want, out_dtype)
    other = dtype if rng.random() < 0.95 else pick(rng, DTYPES)
    partner = broadcast_partner(rng, shape)
    b, rb, _ = tensor(rng, other, partner, special=special)
    want = mismatch([dtype, other], [shape, partner]) or _binary_ref(name, ra, rb, dtype)
    what = f"{dtype}{list(shape)} {layout} {name} {other}{list(partner)}"
    return Trial(what, lambda: CALLS[name](a, b), want, out_dtype)


def _axes(rng, rank: int, single: bool):
    """A dim argument: None, an int (maybe negative, maybe out of range) or a list (maybe repeating a dim)."""
    roll = rng.random()
    if roll < 0.2 or rank == 0:
        return None
    if roll < 0.7 or single:
        return int(rng.integers(-rank - (rng.random() < 0.05), rank))
    dims = [int(d) for d in rng.permutation(rank)[:int(rng.integers(1, rank + 1))]]
    return dims + [dims[0]] if rng.random() < 0.05 else dims


def _normalized(dim, rank: int):
    """The reduced axes as a tuple, or None when the dim argument is invalid."""
    dims = range(rank) if dim is None else [dim] if isinstance(dim, int) else dim
    if any(not -rank <= d < rank for d in dims) or len({d % rank for d in dims}) != len(list(dims)):
        return None
    return tuple(sorted(d % rank for d in dims))


def _reduce_ref(name: str, x: np.ndarray, axes: tuple, keep: bool, dtype: str):
    """(values, accumulation bound) of a reduction over axes."""
    n = math.prod(x.shape[a] for a in axes)
    if name in ("max", "min", "argmax", "argmin") and n == 0:
        return Raises(c.ShapeError, "an empty dim has no maximum"), None
    with np.errstate(all="ignore"):
        if name in ("argmax", "argmin"):
            flat = x.reshape(-1) if len(axes) > 1 or x.ndim == 0 else x
            out = arg_reduce(flat, 0 if flat is not x else axes[0], name)
            return (np.expand_dims(out, axes) if keep and x.ndim else out), None
        if dtype in INTS:
            e = exact(x)
            total = np.sum(e, axis=axes, keepdims=keep)
            if name == "mean":  # the exact mean, truncated
                return wrap(np.frompyfunc(lambda s: trunc_div(s, n), 1, 1)(total), dtype), None
            fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[name]
            return wrap(np.asarray(fn(e, axis=axes, keepdims=keep)), dtype), None
        fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}[name]
        want = fn(x, axis=axes, keepdims=keep)
        bound = {"sum": np.sum(np.abs(x), axis=axes, keepdims=keep),
                 "mean": np.mean(np.abs(x), axis=axes, keepdims=keep) if n else None,
                 "prod": np.abs(want) * max(1, n / 4)}.get(name)
        return want, bound


def reduce(rng) -> Trial:
    dtype = pick(rng, DTYPES)
    name = pick(rng, ["sum", "mean", "max", "min", "prod", "argmax", "argmin"])
    x, ref, layout = tensor(rng, dtype, random_shape(rng, 4), special=rng.random() < 0.5)
    dim, keep = _axes(rng, ref.ndim, name.startswith("arg")), bool(rng.random() < 0.5)
    axes = _normalized(dim, ref.ndim)
    what = f"{name}({dim}, keepdim={keep}) of {dtype}{list(ref.shape)} {layout}"
    method = {"max": "amax", "min": "amin"}.get(name, name)  # max(dim) gives values and indices: amax the values
    call = (lambda: getattr(x, method)(dim, keepdim=keep))
    if axes is None:
        return Trial(what, call, Raises(c.ShapeError, "bad dims"))
    if name == "mean" and dtype in INTS and 0 in ref.shape:
        dtype = "f32"  # the mean of no integers is undocumented: checked on floats only
        x, ref = x.to_dtype("f32"), ref.astype(np.float64)
    want, bound = _reduce_ref(name, ref, axes, keep, dtype)
    return Trial(what, call, want, "u32" if name.startswith("arg") else dtype, bound)


def along_dim(rng) -> Trial:
    """Float ops along one dim: softmax, log_softmax, logsumexp, cumsum, var, std."""
    name = pick(rng, ["softmax", "log_softmax", "logsumexp", "cumsum", "var", "std"])
    dtype = pick(rng, FLOATS if name != "cumsum" else DTYPES)
    x, ref, layout = tensor(rng, dtype, random_shape(rng, 4) or (3,), special=rng.random() < 0.3)
    dim = int(rng.integers(-ref.ndim, ref.ndim))
    what = f"{name}({dim}) of {dtype}{list(ref.shape)} {layout}"
    d, n = dim % ref.ndim, ref.shape[dim]
    with np.errstate(all="ignore"):
        if name == "cumsum":
            want = wrap(np.cumsum(exact(ref), axis=d), dtype) if dtype in INTS else np.cumsum(ref, axis=d)
            bound = None if dtype in INTS else np.cumsum(np.abs(ref), axis=d)
        elif name in ("var", "std"):
            want = np.var(ref, axis=d, ddof=1) if n > 1 else np.full(np.delete(ref.shape, d), math.nan)
            bound = np.sum(ref ** 2, axis=d) / max(n - 1, 1)  # the rounding of the mean scales with the values
            want, bound = (np.sqrt(want), np.sqrt(bound)) if name == "std" else (want, bound)
        elif name == "logsumexp":
            want = np.logaddexp.reduce(ref, axis=d) if n else np.full(np.delete(ref.shape, d), -math.inf)
            bound = np.max(np.abs(ref), axis=d, initial=0.0)
        else:
            want = (R.softmax if name == "softmax" else R.log_softmax)(ref, axis=d) if n else ref
            bound = 1.0 if name == "softmax" else np.abs(ref).max(axis=d, keepdims=True, initial=0.0) + np.abs(want)
    return Trial(what, lambda: getattr(x, name)(dim), want, dtype, bound)


def matmul(rng) -> Trial:
    dtype = pick(rng, DTYPES)
    m, k, n = (int(v) for v in rng.integers(0, 6, size=3))
    batch = random_shape(rng, 2, 3)
    a_shape, b_shape = batch + (m, k), broadcast_partner(rng, batch) + (k, n)
    if rng.random() < 0.15:
        a_shape, b_shape = pick(rng, [((k,), b_shape), (a_shape, (k,)), ((), b_shape)])
    if rng.random() < 0.1:
        b_shape = b_shape[:-2] + (k + 1,) + b_shape[-1:] if len(b_shape) >= 2 else (k + 1,)
    a, ra, layout = tensor(rng, dtype, a_shape, special=rng.random() < 0.2)
    b, rb, _ = tensor(rng, dtype, b_shape)
    what = f"{dtype}{list(a_shape)} {layout} @ {list(b_shape)}"
    try:
        with np.errstate(all="ignore"):
            want = np.matmul(exact(ra), exact(rb)) if dtype in INTS else np.matmul(ra, rb)
    except ValueError:  # NumPy refuses 0-d operands and clashing dims
        return Trial(what, lambda: a @ b, SHAPE_ERROR)
    if dtype in INTS:
        return Trial(what, lambda: a @ b, wrap(np.asarray(want), dtype), dtype)
    return Trial(what, lambda: a @ b, want, dtype, np.matmul(np.abs(ra), np.abs(rb)))


def _ids(rng, size: int, count: int) -> np.ndarray:
    """Indices into a dim of ``size``, one of them out of range now and then."""
    ids = rng.integers(0, max(size, 1), size=count)
    if count and (rng.random() < 0.1 or size == 0):
        ids[int(rng.integers(count))] = pick(rng, [size, size + 7, -1, 2**31])
    return ids


def index(rng) -> Trial:
    """Indexing, index_select, gather, index_add, scatter_add, embedding."""
    dtype = pick(rng, DTYPES)
    name = pick(rng, ["getitem", "getitem", "index_select", "gather", "index_add", "scatter_add", "embedding"])
    shape = random_shape(rng, 3) or (4,)
    if name == "embedding":
        shape = shape[:2] if len(shape) >= 2 else shape + (3,)
    x, ref, layout = tensor(rng, dtype, shape)
    d = int(rng.integers(len(shape)))
    ids_dtype = pick(rng, ["u32", "i64"])
    what = f"{name} of {dtype}{list(shape)} {layout}"
    out_of_range = Raises(c.IndexOutOfRangeError, "an index out of range")
    if name == "getitem":
        key = _getitem_key(rng, shape)
        try:
            want = ref[key.astype(bool) if isinstance(key, np.ndarray) else key]  # a u8 mask is a boolean mask
        except IndexError:
            want = out_of_range
        return Trial(f"{what} [{key!r}]"[:200], lambda: x[_candle_key(key)], want, dtype)
    if name in ("index_select", "embedding", "index_add"):
        ids = _ids(rng, shape[0 if name == "embedding" else d], int(rng.integers(0, 5)))
        bad = ((ids < 0) | (ids >= shape[0 if name == "embedding" else d])).any()
        ids_t = c.from_numpy(ids.astype(np.int64)).to_dtype("i64" if (ids < 0).any() else ids_dtype)
        if name == "index_select":
            return Trial(f"{what} dim {d} ids {ids.tolist()}", lambda: x.index_select(ids_t, d),
                         out_of_range if bad else np.take(ref, ids, axis=d), dtype)
        if name == "embedding":
            return Trial(f"{what} ids {ids.tolist()}", lambda: x.embedding(ids_t),
                         out_of_range if bad else np.take(ref, ids, axis=0), dtype)
        src, rsrc, _ = tensor(rng, dtype, shape[:d] + (len(ids),) + shape[d + 1:])
        return Trial(f"{what} dim {d} ids {ids.tolist()}", lambda: x.index_add(ids_t, src, d),
                     out_of_range if bad else _accumulate(ref, rsrc, ids, d, dtype), dtype,
                     None if bad or dtype in INTS else _accumulate(np.abs(ref), np.abs(rsrc), ids, d, dtype))
    ids_shape = shape[:d] + (int(rng.integers(0, shape[d] + 2)),) + shape[d + 1:]
    if name == "gather":
        ids = _ids(rng, shape[d], math.prod(ids_shape)).reshape(ids_shape)
        bad = ((ids < 0) | (ids >= shape[d])).any()
        ids_t = c.from_numpy(ids.astype(np.int64))
        want = out_of_range if bad else np.take_along_axis(ref, ids, axis=d)
        return Trial(f"{what} dim {d} ids shape {list(ids_shape)}", lambda: x.gather(ids_t, d), want, dtype)
    ids_shape = shape[:d] + (min(ids_shape[d], shape[d]),) + shape[d + 1:]
    ids = _ids(rng, shape[d], math.prod(ids_shape)).reshape(ids_shape)
    bad = ((ids < 0) | (ids >= shape[d])).any()
    src, rsrc, _ = tensor(rng, dtype, ids_shape)
    ids_t = c.from_numpy(ids.astype(np.int64))
    return Trial(f"{what} dim {d} ids shape {list(ids_shape)}", lambda: x.scatter_add(ids_t, src, d),
                 out_of_range if bad else _scatter_add(ref, rsrc, ids, d, dtype), dtype,
                 None if bad or dtype in INTS else _scatter_add(np.abs(ref), np.abs(rsrc), ids, d, dtype))


def _accumulate(ref, src, ids, d, dtype):
    out = exact(ref) if dtype in INTS else ref.copy()
    np.add.at(out, (slice(None),) * d + (ids,), exact(src) if dtype in INTS else src)
    return wrap(out, dtype) if dtype in INTS else out


def _scatter_add(ref, src, ids, d, dtype):
    out = exact(ref) if dtype in INTS else ref.copy()
    for pos in np.ndindex(*ids.shape):
        target = pos[:d] + (int(ids[pos]),) + pos[d + 1:]
        out[target] += exact(src)[pos] if dtype in INTS else src[pos]
    return wrap(out, dtype) if dtype in INTS else out


def _getitem_key(rng, shape: tuple):
    """An index: ints (maybe out of range), slices with steps (maybe negative), None,
    an Ellipsis, or a u8 mask of the whole shape; or one list of ints among slices
    (with ints too, NumPy moves the list's dim first where PyTorch does not: undocumented)."""
    if rng.random() < 0.1:
        return np.asarray(rng.integers(0, 2, size=shape), dtype=np.uint8)
    count = int(rng.integers(1, len(shape) + 1))
    listed = int(rng.integers(count)) if rng.random() < 0.3 else None
    parts = []
    for i, n in enumerate(shape[:count]):
        kind = "list" if i == listed else pick(rng, ["slice", "slice", "None", "full"] + ["int"] * (listed is None))
        if kind == "int":
            parts.append(int(rng.integers(-n - 1, n + 1)) if n else 0)
        elif kind == "slice":
            step = int(pick(rng, [1, 2, 3, -1, -2]))
            parts.append(slice(*(int(rng.integers(-n - 2, n + 3)) if rng.random() < 0.6 else None for _ in range(2)),
                               step))
        elif kind == "list":
            parts.append([int(i) for i in rng.integers(-n, max(n, 1), size=int(rng.integers(0, 4)))])
        elif kind == "None":
            parts.append(None)
        else:
            parts.append(slice(None))
    if rng.random() < 0.1:
        parts.insert(int(rng.integers(len(parts) + 1)), Ellipsis)
    return tuple(parts)


def _candle_key(key):
    """The same index for a tensor: a mask becomes a u8 tensor."""
    return c.from_numpy(key) if isinstance(key, np.ndarray) else key


def join(rng) -> Trial:
    """cat and stack of 0 to 3 tensors: matching, clashing shapes or dtypes."""
    name, dtype = pick(rng, ["cat", "stack"]), pick(rng, DTYPES)
    shape = random_shape(rng, 3) or (2,)
    rank = len(shape) + (name == "stack")
    dim = int(rng.integers(-rank, rank))
    tensors, refs = [], []
    for i in range(int(rng.integers(0, 4))):
        s = list(shape)
        if name == "cat":
            s[dim % len(shape)] = int(rng.integers(0, 4))
        if rng.random() < 0.08:
            s[int(rng.integers(len(s)))] += 1
        t, r, _ = tensor(rng, dtype if rng.random() < 0.95 else pick(rng, DTYPES), tuple(s))
        tensors.append(t)
        refs.append(r)
    dtypes = sorted({t.dtype.name for t in tensors})
    what = f"{name} of {[list(r.shape) for r in refs]} {dtypes} dim {dim}"
    try:
        want = (np.concatenate if name == "cat" else np.stack)(refs, axis=dim)
        want = Raises(c.DTypeError, "dtypes differ") if len(dtypes) > 1 else want
    except ValueError:  # no tensors, or shapes that clash
        want = SHAPE_ERROR if len(dtypes) <= 1 else Raises((c.DTypeError, c.ShapeError), "dtypes and shapes clash")
    return Trial(what, lambda: getattr(c, name)(tensors, dim), want, tensors[0].dtype.name if tensors else dtype)


def where(rng) -> Trial:
    dtype, cond_dtype = pick(rng, DTYPES), pick(rng, ["u8"] * 4 + list(DTYPES))
    shape = random_shape(rng, 3)
    shapes = [broadcast_partner(rng, shape) for _ in range(3)]
    cond, rc, layout = tensor(rng, cond_dtype, shapes[0])
    a, ra, _ = tensor(rng, dtype, shapes[1], special=True)
    b, rb, _ = tensor(rng, dtype if rng.random() < 0.95 else pick(rng, DTYPES), shapes[2], special=True)
    what = f"where({cond_dtype}{list(shapes[0])} {layout}, {dtype}{list(shapes[1])}, {b.dtype.name}{list(shapes[2])})"
    want = mismatch([dtype, b.dtype.name], shapes) or np.where(rc != 0, ra, rb)
    return Trial(what, lambda: c.where(cond, a, b), want, dtype)


def to_dtype(rng) -> Trial:
    src, dst = pick(rng, DTYPES), pick(rng, DTYPES)
    x, _, layout = tensor(rng, src, random_shape(rng, 3), extreme=True)
    held = x.numpy()
    return Trial(f"{src}{list(held.shape)} {layout} to {dst}", lambda: x.to_dtype(dst), cast(held, dst), dst)


def clamp(rng) -> Trial:
    dtype = pick(rng, DTYPES)
    x, ref, layout = tensor(rng, dtype, random_shape(rng, 3), special=True)
    bounds = [None if rng.random() < 0.2 else pick(rng, [-2, 0, 1, 5, 300, -1.5, 2.5, 0.25, 1e10]) for _ in range(2)]
    what = f"clamp{tuple(bounds)} of {dtype}{list(ref.shape)} {layout}"
    call = (lambda: x.clamp(*bounds))
    if bounds == [None, None]:
        return Trial(what, call, ref, dtype)
    operands = [None if b is None else scalar_operand(b, dtype) for b in bounds]
    refused = [o for o in operands if isinstance(o, Raises)]
    if refused:
        return Trial(what, call, refused[0])
    lo, hi = operands
    with np.errstate(invalid="ignore"):
        want = ref if lo is None else np.maximum(ref, lo)
        want = want if hi is None else np.minimum(want, hi)
    return Trial(what, call, want, dtype)


VIEW_OPS = ["transpose", "permute", "reshape", "narrow", "unsqueeze", "squeeze", "flatten", "flip", "repeat",
            "broadcast_as", "pad_with_zeros", "chunk", "split", "contiguous"]
RANK_0_VIEW_OPS = ["reshape", "unsqueeze", "broadcast_as", "contiguous"]  # what 0-d tensors document


def _view_step(rng, name: str, ref: np.ndarray):
    """(args, the NumPy result or None when the args are invalid) of one view op."""
    r, shape = ref.ndim, ref.shape
    dim = int(rng.integers(-r - 1, r + 1)) if r else 0
    ok = -r <= dim < r
    if name == "transpose":
        other = int(rng.integers(-r, r)) if r else 0
        return (dim, other), np.swapaxes(ref, dim, other) if ok and r else None
    if name == "permute":
        perm = [int(p) for p in rng.permutation(r)]
        if r > 1 and rng.random() < 0.1:
            perm[0] = perm[1]
        return tuple(perm), ref.transpose(perm) if len(set(perm)) == r else None
    if name == "reshape":
        target = list(rng.permutation(shape)) if r else []
        if target and rng.random() < 0.3:
            target[int(rng.integers(len(target)))] = -1
        if rng.random() < 0.1:
            target.append(2)
        target = tuple(int(t) for t in target)
        try:
            return target, ref.reshape(target)
        except ValueError:
            return target, None
    if name == "narrow":
        start, length = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        return (dim, start, length), (np.take(ref, range(start, start + length), axis=dim)
                                      if ok and r and start + length <= shape[dim] else None)
    if name == "unsqueeze":
        return (dim,), np.expand_dims(ref, dim)
    if name == "squeeze":
        ones = [i for i, n in enumerate(shape) if n == 1]
        d = pick(rng, ones) if ones else None
        return ((d,), np.squeeze(ref, d)) if d is not None else ((), np.squeeze(ref))
    if name == "flatten":
        start, end = (int(rng.integers(-r, r)) for _ in range(2))
        s, e = start % r, end % r
        return (start, end), ref.reshape(shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]) if s <= e else None
    if name == "flip":
        dims = [int(d) for d in rng.permutation(r)[:int(rng.integers(1, r + 1))]]
        return (dims,), np.flip(ref, dims)
    if name == "repeat":
        reps = tuple(int(v) for v in rng.integers(0, 3, size=r + int(rng.integers(0, 2))))
        return reps, np.tile(ref, reps)
    if name == "broadcast_as":
        target = tuple(int(rng.integers(1, 3)) for _ in range(int(rng.integers(0, 2)))) + tuple(
            int(rng.integers(1, 4)) if n == 1 else n for n in shape)
        return target, np.broadcast_to(ref, target)
    if name == "pad_with_zeros":
        left, right = (int(v) for v in rng.integers(0, 3, size=2))
        widths = [(0, 0)] * r
        if ok and r:
            widths[dim] = (left, right)
        return (dim, left, right), np.pad(ref, widths) if ok and r else None
    if name in ("chunk", "split"):
        count = int(rng.integers(1, 4))
        if not ok:
            return (count, dim), None
        n = shape[dim]
        if n == 0:  # undocumented (chunk gives one empty piece, split none): not checked
            return None, ref
        size = -(-n // count) if name == "chunk" else count
        return (count, dim), [np.take(ref, range(i, min(i + size, n)), axis=dim) for i in range(0, n, size)]
    return (), ref


def views(rng) -> Trial:
    """A chain of one to three view ops, then the values (views copy nothing, so they must be exact)."""
    dtype = pick(rng, DTYPES)
    x, ref, layout = tensor(rng, dtype, random_shape(rng, 4))
    steps, want = [], ref
    for _ in range(int(rng.integers(1, 4))):
        name = pick(rng, VIEW_OPS if want.ndim else RANK_0_VIEW_OPS)
        args, result = _view_step(rng, name, want)
        if args is None:  # an undocumented corner: this step is left out
            continue
        steps.append((name, args))
        if result is None:
            want = SHAPE_ERROR
            break
        want = result
        if isinstance(result, list):
            break

    def call():
        out = x
        for name, args in steps:
            out = getattr(out, name)(*args)
        return out

    return Trial(f"{dtype}{list(ref.shape)} {layout}: " + ".".join(f"{n}{a}" for n, a in steps), call, want, dtype)


def creation(rng) -> Trial:
    """tensor(), full() and arange() by the documented dtype and cast rules."""
    kind = pick(rng, ["tensor", "full", "arange"])
    dtype = pick(rng, [None] + list(DTYPES))
    if kind == "arange":
        start, step = pick(rng, [0, 3, -5, 0.5, -2.25]), pick(rng, [1, 2, -1, -3, 0.5, 0.25, 0])
        end = start + step * int(rng.integers(-2, 12)) + pick(rng, [0, 0.5, 1])
        if any(isinstance(v, float) for v in (start, end, step)) and dtype in INTS:
            dtype = None  # float bounds into an integer dtype: undocumented
        what = f"arange({start}, {end}, {step}, dtype={dtype})"
        if step == 0:
            return Trial(what, lambda: c.arange(start, end, step, dtype=dtype), Raises(CandleError, "zero step"))
        floats = any(isinstance(v, float) for v in (start, end, step))
        want_dtype = dtype or ("f32" if floats else "i64")
        want = cast(np.arange(start, end, step, dtype=np.float64 if floats else np.int64), want_dtype)
        return Trial(what, lambda: c.arange(start, end, step, dtype=dtype), want, want_dtype)
    data = [pick(rng, [0, 1, 7, 300, -1, -129, 2**31, 2**33, 2**63, 1.5, -2.7, 1e30, math.nan, -math.inf, True])
            for _ in range(int(rng.integers(0, 6)))]
    if rng.random() < 0.5:  # one kind of value only, the common case
        data = [v for v in data if type(v) is type(data[0])] if data else data
    if kind == "full":
        data = data[:1] or [2]
        shape = random_shape(rng, 2)
        call = (lambda: c.full(shape, data[0], dtype=dtype))
    else:
        shape = (len(data),)
        call = (lambda: c.tensor(data, dtype=dtype))
    what = f"{kind}({data}, dtype={dtype})"
    want_dtype = dtype or _inferred(data)
    if want_dtype is None:
        return Trial(what, call, Raises(CandleError, "integers beyond i64"))
    if any(isinstance(v, int) and not isinstance(v, bool) and want_dtype in INTS
           and isinstance(scalar_operand(v, want_dtype), Raises) for v in data):
        return Trial(what, call, Raises(c.DTypeError, "an integer that does not fit"))
    floats = any(isinstance(v, float) for v in data)
    want = cast(np.asarray(data, dtype=np.float64 if floats or not data else object), want_dtype)
    return Trial(what, call, np.broadcast_to(want.reshape(()), shape) if kind == "full" else want, want_dtype)


def _inferred(data: list):
    """Tensor(data)'s dtype: floats f32; ints u32 when they fit, else i64; bools bool."""
    if any(isinstance(v, float) for v in data) or not data:
        return "f32"
    if all(isinstance(v, bool) for v in data):
        return "bool"
    if all(0 <= v < 2**32 for v in data):
        return "u32"
    return "i64" if all(-(2**63) <= v < 2**63 for v in data) else None


GENERATORS = {"unary": unary, "binary": binary, "reduce": reduce, "along a dim": along_dim, "matmul": matmul,
              "index": index, "cat/stack": join, "where": where, "to_dtype": to_dtype, "clamp": clamp,
              "views": views, "creation": creation}
#: case index -> generator, weighted toward the largest surfaces
CYCLE = ["unary", "binary", "binary", "reduce", "along a dim", "matmul", "index", "index", "cat/stack", "where",
         "to_dtype", "clamp", "views", "views", "creation"]


def run_trial(trial: Trial) -> str:
    if isinstance(trial.want, Raises):
        try:
            trial.call()
        except trial.want.error:
            return f"raised {trial.want.name}"
        except CandleError as exc:
            raise AssertionError(f"expected {trial.want.name} ({trial.want.why}), got {type(exc).__name__}: "
                                 f"{exc}") from None
        raise AssertionError(f"expected {trial.want.name} ({trial.want.why}), got a result")
    got = trial.call()
    if isinstance(trial.want, list):
        assert len(got) == len(trial.want), f"{len(got)} pieces, expected {len(trial.want)}"
        for g, w in zip(got, trial.want):
            check(g, w, trial.dtype)
    else:
        check(got, trial.want, trial.dtype, trial.bound, trial.rtol)
    return "equal"


def make(rng, index, tmp) -> Case:
    name = CYCLE[index % len(CYCLE)]
    trial = GENERATORS[name](rng)
    return Case(f"{name}: {trial.what}", lambda: run_trial(trial), ())
