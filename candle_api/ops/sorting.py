"""Sorting: sort, argsort, topk and Candle's sort_last_dim / arg_sort_last_dim.

Each runs as one op along the last dim (the sorted dim is moved there as a
view): ``sort_last`` and ``topk_last``, contract rows with two outputs, the
values and their u32 indices (Candle's index dtype, as argmax's). The order is
the stable one (equal values keep their order, as NumPy's kind="stable" and
PyTorch's stable=True), -0.0 equals 0.0 and NaN sorts above every number, as
in PyTorch. The values' gradient goes back to the positions they came from.

A device without the kernels runs the decomposition: a bitonic sorting network
built from existing ops (comparisons, where, flip, reshape), log2(n) *
(log2(n) + 1) / 2 compare-exchange stages over the row padded to a power of
two, every element carrying its index as the last key, so all keys differ and
the network's result is the stable order; the values are then gathered.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..autograd.graph import no_grad
from ..dtype import bool_, u8, u32
from ..errors import ArgumentError, ShapeError
from ..layout import normalize_dim
from ..tensor import Tensor
from .core import check_tensor, empty, reinterpret
from .creation import arange, from_array, full
from .dispatch import OpDef, apply, define
from .elementwise import where
from .indexing import GATHER, gather
from .shape import cat, contiguous, copy_into

#: PyTorch's torch.return_types: a tuple with ``.values`` and ``.indices``.
SortResult = namedtuple("sort", ["values", "indices"])
TopkResult = namedtuple("topk", ["values", "indices"])


def _pad_keys(x: Tensor, descending: bool):
    """The keys rows of x are ordered by, and their values for padding that sorts
    after every real element: floats as (NaN flag, value with NaN as 0), so that
    NaNs compare equal among themselves and fall to their index."""
    if x._dtype.is_float:
        nan = x != x
        keys = [nan, where(nan, 0.0, x)]
        return keys, [0 if descending else 1, -np.inf if descending else 0.0]
    info = np.iinfo(x._dtype.np)
    return [x], [int(info.min) if descending else int(info.max)]


def _before(a: list, b: list, descending: bool) -> Tensor:
    """u8: element a comes first, keys compared in order, the last (the index) ascending."""
    first = a[-1] < b[-1]
    for ka, kb in zip(reversed(a[:-1]), reversed(b[:-1])):
        wins = ka > kb if descending else ka < kb
        first = wins.maximum((ka == kb) * first)  # wins or (equal and first)
    return first


@no_grad()
def _argsort_rows(x: Tensor, descending: bool) -> Tensor:
    """u32 (rows, n): the stable order of each row of the 2-d tensor x."""
    rows, n = x.shape
    size = 1 << max(n - 1, 0).bit_length()
    keys, pads = _pad_keys(x, descending)
    if size > n:
        keys = [cat([k, full((rows, size - n), p, dtype=k._dtype, device=k._device)], 1) for k, p in zip(keys, pads)]
    keys = [contiguous(k) for k in keys]
    keys.append(arange(size, dtype=u32, device=x._device).broadcast_as((rows, size)).contiguous())
    block = 2
    while block <= size:
        half = block // 2
        while half:
            # pairs (i, i + half) within groups of 2 * half; a group runs descending where bit `block` of i is set
            groups = size // (2 * half)
            split = (rows, groups, 2, half)
            pairs = [k.reshape(split) for k in keys]
            later_first = _before([p[:, :, 1] for p in pairs], [p[:, :, 0] for p in pairs], descending)
            flipped = from_array((np.arange(groups) * 2 * half & block != 0).astype(np.uint8)[:, None], u8, x._device)
            swap = (later_first != flipped).unsqueeze(2).broadcast_as(split)
            keys = [where(swap, p.flip(2), p).reshape(rows, size) for p in pairs]
            half //= 2
        block *= 2
    return keys[-1].narrow(1, 0, n)


def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> SortResult:
    """(values, indices) of x sorted along dim; ``stable`` is accepted, the order always is."""
    check_tensor("sort", x)
    return SortResult(*_along(x, dim, SORT_LAST, descending=bool(descending)))


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """u32 indices that sort x along dim (always the stable order)."""
    check_tensor("argsort", x)
    return _along(x.detach(), dim, SORT_LAST, descending=bool(descending))[1]


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopkResult:
    """(values, indices) of the k largest (or smallest) elements along dim, in
    sorted order (also when ``sorted`` is False); ties keep the lower index first.
    A 0-d x gives itself, as PyTorch's."""
    check_tensor("topk", x)
    size = x.shape[normalize_dim(dim, x.rank)] if x.rank else 1
    if not isinstance(k, int) or isinstance(k, bool):
        raise ArgumentError(f"topk: k must be an int, got {k!r}")
    if not 0 <= k <= size:
        raise ShapeError(f"topk: k = {k} is out of range for a dim of size {size}")
    return TopkResult(*_along(x, dim, TOPK_LAST, k=k, largest=bool(largest)))


def _along(x: Tensor, dim: int, op: OpDef, **params) -> tuple:
    """(values, indices) of op run along dim: moved last as a view, and back."""
    if x.rank == 0:
        normalize_dim(dim, 1)
        return x.copy(), full((), 0, dtype=u32, device=x._device)
    dim = normalize_dim(dim, x.rank)
    last = dim == x.rank - 1
    moved = x if last else x.transpose(dim, -1)
    size = params.get("k", moved.shape[-1])
    indices = empty(moved.shape[:-1] + (size,), u32, x._device)
    values = apply(op, moved, indices, **params)
    if last:
        return values, indices
    return values.transpose(dim, -1).contiguous(), indices.transpose(dim, -1).contiguous()


def sort_last_dim(x: Tensor, asc: bool = True) -> tuple:
    """Candle's sort_last_dim: (sorted values, u32 indices) along the last dim."""
    return tuple(sort(x, -1, not asc))


def arg_sort_last_dim(x: Tensor, asc: bool = True) -> Tensor:
    """Candle's arg_sort_last_dim: the u32 indices that sort the last dim."""
    return argsort(x, -1, not asc)


# ---- the ops ---------------------------------------------------------------------------------------


def _sort_prepare(x, indices, descending):
    return x.shape, x._dtype, (x._storage, x._layout, indices._storage, descending)


def _topk_prepare(x, indices, k, largest):
    return indices.shape, x._dtype, (x._storage, x._layout, indices._storage, k, largest)


def _backward(inputs, out, g, **params):
    """The values' gradient back where they came from (gather's rule); none for the indices."""
    return GATHER.backward(inputs, out, g, dim=inputs[0].rank - 1)


def _decomposed(x: Tensor, indices: Tensor, descending: bool = False, k: int | None = None,
                largest: bool = False) -> Tensor:
    """The rows' order from the sorting network, written into indices; the values gathered."""
    n = x.shape[-1]
    if indices._layout.numel == 0:
        return full(indices.shape, 0, dtype=x._dtype, device=x._device)
    keys = reinterpret(x.detach(), u8) if x._dtype is bool_ else x.detach()
    order = _argsort_rows(keys.reshape(-1, n), descending or largest).reshape(x.shape)
    if k is not None:
        order = order.narrow(-1, 0, k)
    copy_into(indices, indices._layout, order)
    return gather(x, indices, x.rank - 1)


SORT_LAST = define(OpDef("sort_last", prepare=_sort_prepare, backward=_backward, decompose=_decomposed))
TOPK_LAST = define(OpDef("topk_last", prepare=_topk_prepare, backward=_backward, decompose=_decomposed))
