"""The sorting ops of the conformance suite (sort, argsort, topk and Candle's
sort_last_dim / arg_sort_last_dim: the sort_last and topk_last kernels) and
their NumPy reference, PyTorch's stable order: equal values keep their index
order, -0.0 equals 0.0 and NaN (of either sign) is above every number.

Short rows (3 x 9) carry ties, NaN and infinities and sort along either dim
(dim 0 reaches the kernel as a strided row); long rows (3 x 100, indices only) add -0.0,
the dtype's extremes, a constant row and an already sorted one, so a kernel's
long-row path (a radix sort, say) and its selection for a small k (a heap: a
sorted row makes every element enter it) are checked too. topk takes k = 0,
a small k, a large one and k = n. Imported by :mod:`.opinfo`, whose table
they join."""

from __future__ import annotations

import numpy as np

from ..dtype import get_dtype, u32
from ..ops.sorting import sort, topk
from .opinfo import NONSCALAR, WITH_BOOL, Sample, op, shape_for, values


def stable_order(x, dim, descending):
    """NumPy's stable order with NaN above every number, descending when asked."""
    x = np.moveaxis(np.asarray(x), dim, -1)
    if x.dtype.kind in "iub":  # exact keys (i64 beyond 2^53 too); ~ reverses an integer order without overflow
        nan, key = np.zeros(x.shape, bool), x.astype(np.uint8) if x.dtype.kind == "b" else x
        key = ~key if descending else key
    else:
        with np.errstate(invalid="ignore"):  # ml_dtypes warns casting a bf16 NaN
            x = x.astype(np.float64)
        nan = np.isnan(x)
        key = np.where(nan, 0.0, -x if descending else x)
    idx = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    order = np.lexsort((idx, key, ~nan if descending else nan), axis=-1) if x.size else idx
    return np.moveaxis(order, -1, dim)


def tied_values(rng, dtype, layout, base=(3, 9)):
    """Values from a small pool (ties), NaN among the floats."""
    dt = get_dtype(dtype)
    pool = np.array([-1.5, 0.0, 2.0, np.nan, np.inf, -np.inf] if dt.is_float else [0, 1, 2, 7]).astype(dt.np)
    return rng.choice(pool, size=shape_for(layout, base))


def _long_rows(rng, dtype, n=100):
    """Three rows of n: a mix of ties, signed zeros, NaNs of both signs, the
    dtype's extremes and spread values; a constant row; the first row sorted."""
    dt = get_dtype(dtype)
    if dt.is_float:
        special = np.array([0.0, -0.0, np.nan, np.copysign(np.nan, -1.0), np.inf, -np.inf, 1.0, -1.0, 1e-30])
        spread = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    elif dt.is_bool:
        special, spread = np.array([0, 1]), rng.integers(0, 2, n)
    else:
        info = np.iinfo(dt.np)
        special = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=np.int64)
        spread = rng.integers(int(info.min), int(info.max), n, endpoint=True, dtype=np.int64)
    first = np.where(rng.random(n) < 0.5, rng.choice(special, n), spread).astype(dt.np)
    constant = np.full(n, first[0])
    in_order = first[stable_order(first, -1, False)]
    return np.stack([first, constant, in_order])


def _sort_samples(with_ties, long=False):
    def gen(rng, dtype, layout):
        if long:
            x = _long_rows(rng, dtype)
        elif with_ties:
            x = tied_values(rng, dtype, layout)
        else:  # distinct values: a gradient at a tie has no single answer
            x = values(rng, dtype, shape_for(layout, (3, 9)))
        dims = (-1,) if layout == "scalar" or not with_ties else (-1, 0)
        return [Sample([x], {"dim": d, "descending": desc}) for d in dims for desc in (False, True)]

    return gen


def _last_dim(gen):
    return lambda rng, dt, lay: [s for s in gen(rng, dt, lay) if s.kwargs["dim"] == -1]


def _sorted_ref(x, dim, descending):
    return x if x.ndim == 0 else np.take_along_axis(x, stable_order(x, dim, descending), dim)


def _order_ref(x, dim, descending):
    return np.zeros((), np.uint32) if x.ndim == 0 else stable_order(x, dim, descending)


def _topk_samples(long=False):
    def gen(rng, dtype, layout):
        if long:
            x = _long_rows(rng, dtype)
        elif dtype == "f64":  # the gradient case: distinct values
            x = values(rng, dtype, shape_for(layout, (3, 9)))
        else:
            x = tied_values(rng, dtype, layout)
        out = []
        for dim in ((-1,) if x.ndim == 0 else (-1, 0)):
            size = x.shape[dim] if x.ndim else 1
            for k in sorted({0, min(2, size), size // 2 if long else 0, size}):
                out += [Sample([x], {"k": k, "dim": dim, "largest": largest}) for largest in (True, False)]
        return out

    return gen


def _topk_ref(part):
    def ref(x, k, dim, largest):
        if x.ndim == 0:
            return x if part == 0 else np.zeros((), np.uint32)
        order = np.take(stable_order(x, dim, largest), np.arange(k), dim)
        return np.take_along_axis(x, order, dim) if part == 0 else order

    return ref


def _u32(_):
    return u32


SORT = dict(kernel="sort_last")
TOPK = dict(kernel="topk_last")
INDICES = dict(out_dtype=_u32, grad=False)
LONG = ("contiguous", "transposed", "sliced")  # the layouts of a row (short rows take the others)

op("sort", lambda x, **k: x.sort(**k).values, _sorted_ref, WITH_BOOL, _sort_samples(False), **SORT)
op("sort_ties", lambda x, **k: sort(x, **k)[0], _sorted_ref, WITH_BOOL, _sort_samples(True), grad=False, **SORT)
op("sort_indices", lambda x, **k: x.sort(**k).indices, _order_ref, WITH_BOOL, _sort_samples(True), **INDICES,
   **SORT)
op("argsort_long", lambda x, **k: x.argsort(**k, stable=True), _order_ref, WITH_BOOL, _sort_samples(True, True),
   LONG, **INDICES, **SORT)
op("sort_last_dim", lambda x, dim, descending: x.sort_last_dim(not descending)[0], _sorted_ref, WITH_BOOL,
   _last_dim(_sort_samples(True)), NONSCALAR, grad=False, **SORT)
op("arg_sort_last_dim", lambda x, dim, descending: x.arg_sort_last_dim(asc=not descending), _order_ref, WITH_BOOL,
   _last_dim(_sort_samples(True)), NONSCALAR, **INDICES, **SORT)
op("topk", lambda x, **k: x.topk(**k).values, _topk_ref(0), WITH_BOOL, _topk_samples(), **TOPK)
op("topk_indices", lambda x, **k: topk(x, **k).indices, _topk_ref(1), WITH_BOOL, _topk_samples(), **INDICES,
   **TOPK)
op("topk_long_indices", lambda x, **k: x.topk(**k).indices, _topk_ref(1), WITH_BOOL, _topk_samples(True), LONG,
   **INDICES, **TOPK)
