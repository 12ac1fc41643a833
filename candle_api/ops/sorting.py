"""Sorting: sort, argsort, topk and Candle's sort_last_dim / arg_sort_last_dim.

The contract has no sort kernel, so the order is found on the tensor's own
device by a bitonic sorting network built from existing ops (comparisons,
where, flip, reshape): log2(n) * (log2(n) + 1) / 2 compare-exchange stages over
the dim padded to a power of two. Every element carries its index as the last
key, so all keys differ and the network's result is the stable order (equal
values keep their order, as NumPy's kind="stable" and PyTorch's stable=True).
NaN sorts above every number, as in PyTorch. Values are then gathered from the
input, so gradients flow through gather's backward. Indices are u32, Candle's
index dtype (as argmax's).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..autograd.graph import no_grad
from ..dtype import u8, u32
from ..errors import ArgumentError, ShapeError
from ..layout import normalize_dim
from ..tensor import Tensor
from .core import check_tensor
from .creation import arange, from_array, full
from .elementwise import where
from .indexing import gather
from .shape import cat, contiguous

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


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """u32 indices that sort x along dim (always the stable order)."""
    check_tensor("argsort", x)
    if x.rank == 0:
        normalize_dim(dim, 1)
        return full((), 0, dtype=u32, device=x._device)
    dim = normalize_dim(dim, x.rank)
    moved = x.detach().transpose(dim, -1)
    n = moved.shape[-1]
    if moved.numel() == 0:
        return full(x.shape, 0, dtype=u32, device=x._device)
    order = _argsort_rows(moved.reshape(-1, n), bool(descending))
    return order.reshape(moved.shape).transpose(dim, -1).contiguous()


def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> SortResult:
    """(values, indices) of x sorted along dim; ``stable`` is accepted, the order always is."""
    idx = argsort(x, dim, descending)
    return SortResult(_take(x, idx, dim), idx)


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopkResult:
    """(values, indices) of the k largest (or smallest) elements along dim, in
    sorted order (also when ``sorted`` is False); ties keep the lower index first."""
    check_tensor("topk", x)
    size = x.shape[normalize_dim(dim, x.rank)] if x.rank else 1
    if not isinstance(k, int) or isinstance(k, bool):
        raise ArgumentError(f"topk: k must be an int, got {k!r}")
    if not 0 <= k <= size:
        raise ShapeError(f"topk: k = {k} is out of range for a dim of size {size}")
    idx = argsort(x, dim, largest)
    if x.rank:
        idx = contiguous(idx.narrow(dim, 0, k))
    return TopkResult(_take(x, idx, dim), idx)


def _take(x: Tensor, idx: Tensor, dim: int) -> Tensor:
    return gather(x, idx, dim) if x.rank else x.copy()


def sort_last_dim(x: Tensor, asc: bool = True) -> tuple:
    """Candle's sort_last_dim: (sorted values, u32 indices) along the last dim."""
    return tuple(sort(x, -1, not asc))


def arg_sort_last_dim(x: Tensor, asc: bool = True) -> Tensor:
    """Candle's arg_sort_last_dim: the u32 indices that sort the last dim."""
    return argsort(x, -1, not asc)

