"""Reductions, arg-reductions and the softmax family."""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .helpers import axes, axis, full, ints
from .registry import op


def _identity(kind: str, dtype):
    """The value a reduction over no elements gives (ONNX's rule since opset 18)."""
    if kind in ("ReduceSum", "ReduceL1", "ReduceL2", "ReduceSumSquare"):
        return 0
    if kind == "ReduceProd":
        return 1
    if kind == "ReduceMean":
        return math.nan
    big = math.inf if dtype.is_float else None
    if kind in ("ReduceMax", "ReduceLogSum", "ReduceLogSumExp"):
        return -big if big else int(np.iinfo(dtype.np).min)
    return big if big else int(np.iinfo(dtype.np).max)


def _float_then_back(fn):
    """Integer inputs are reduced in f64 and converted back, as numpy's reference does."""
    def run(x, dims, keep):
        if x.dtype.is_float:
            return fn(x, dims, keep)
        return fn(x.to_dtype(c.f64), dims, keep).to_dtype(x.dtype)
    return run


_REDUCE = {
    "ReduceSum": lambda x, d, k: x.sum(d, k),
    "ReduceMean": lambda x, d, k: x.mean(d, k),
    "ReduceMax": lambda x, d, k: x.amax(d, k),
    "ReduceMin": lambda x, d, k: x.amin(d, k),
    "ReduceProd": lambda x, d, k: x.prod(d, k),
    "ReduceL1": lambda x, d, k: x.abs().sum(d, k),
    "ReduceL2": _float_then_back(lambda x, d, k: (x * x).sum(d, k).sqrt()),
    "ReduceSumSquare": lambda x, d, k: (x * x).sum(d, k),
    "ReduceLogSum": _float_then_back(lambda x, d, k: x.sum(d, k).log()),
    "ReduceLogSumExp": _float_then_back(lambda x, d, k: x.logsumexp(d, k)),
}


def _reduction(kind: str):
    compute = _REDUCE[kind]

    def run(node, x, axes_in=None):
        given = ints(axes_in) if axes_in is not None else node.get("axes")
        if not given:
            if node.get("noop_with_empty_axes", 0):
                return x
            given = list(range(x.rank))
        dims = sorted(set(axes(given, x.rank, node)))
        keep = bool(node.get("keepdims", 1))
        if not dims:  # a 0-d input
            return x
        if any(x.shape[d] == 0 for d in dims):
            shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape) if keep or i not in dims)
            return full(shape, _identity(kind, x.dtype), x.dtype, x.device)
        return compute(x, dims, keep)
    return run


for _kind in _REDUCE:
    op(_kind)(_reduction(_kind))


def _arg(kernel: str):
    def run(node, x):
        a = axis(node.get("axis", 0), x.rank, node)
        keep = bool(node.get("keepdims", 1))
        if node.get("select_last_index", 0):
            n = x.shape[a]
            idx = getattr(x.flip(a), kernel)(a, keep).to_dtype(c.i64)
            return (n - 1) - idx
        return getattr(x, kernel)(a, keep).to_dtype(c.i64)
    return run


op("ArgMax")(_arg("argmax"))
op("ArgMin")(_arg("argmin"))


def _softmax_like(fn):
    def legacy(node, x):
        """Before opset 13: the input is seen as 2-d at ``axis`` (default 1)."""
        a = axis(node.get("axis", 1), x.rank, node)
        if x.numel() == 0:
            return x
        return fn(x.reshape(math.prod(x.shape[:a]), -1), -1).reshape(x.shape)

    def current(node, x):
        return fn(x, axis(node.get("axis", -1), x.rank, node))
    return legacy, current


def _hardmax(x, a):
    idx = x.argmax(a, True).to_dtype(c.i64)
    positions = c.arange(0, x.shape[a], dtype=c.i64, device=x.device)
    positions = positions.reshape(tuple(-1 if d == a else 1 for d in range(x.rank)))
    return (positions == idx).to_dtype(x.dtype)


for _name, _fn in {"Softmax": lambda x, a: x.softmax(a), "LogSoftmax": lambda x, a: x.log_softmax(a),
                   "Hardmax": _hardmax}.items():
    _legacy, _current = _softmax_like(_fn)
    op(_name)(_legacy)
    op(_name, since=13)(_current)


@op("LpNormalization")
def lp_normalization(node, x):
    a = axis(node.get("axis", -1), x.rank, node)
    p = node.get("p", 2)
    norm = x.abs().sum(a, True) if p == 1 else (x * x).sum(a, True).sqrt()
    return c.where(norm == 0, 0.0, x / norm)
