"""Indexing: ``x[...]``, index_select, gather, scatter, scatter_add,
index_add and embedding.

``x[...]`` takes ints (negative count from the end), slices with any step,
None, ``...``, integer lists / arrays / tensors (gathered along their dim,
negative entries wrap) and boolean masks (bool tensors, numpy bool arrays,
lists of bools, or u8 tensors such as comparison results, following
PyTorch's old uint8 rule). Ints, positive-step slices, None and ``...`` give views; the rest copy.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..autograd.graph import is_grad_enabled, record
from ..autograd.helpers import scatter_view
from ..dtype import INDEX_DTYPES, bool_, i64, u8
from ..errors import DTypeError, IndexOutOfRangeError, ShapeError
from ..layout import Layout, normalize_dim
from ..tensor import Tensor
from .core import check_tensor, derived_view, same_device
from .dispatch import OpDef, apply, define
from .creation import from_array, zeros_like
from .shape import contiguous, copy, flatten, reshape


# ---- x[...] -------------------------------------------------------------------------------


def getitem(x: Tensor, index) -> Tensor:
    lay = x._layout
    # Fast paths: x[a:b] and x[i] on dim 0.
    if index.__class__ is slice and index.step is None and lay.shape:
        size = lay.shape[0]
        start, stop, _ = index.indices(size)
        n = stop - start if stop > start else 0
        if lay.contiguous and size:  # the common case, built without recomputing contiguity
            new = _new(Layout)
            new.shape, new.strides, new.offset, new.numel, new.contiguous = (
                (n,) + lay.shape[1:], lay.strides, lay.offset + start * lay.strides[0], lay.numel // size * n, True)
        else:
            new = lay.narrow(0, start, n)
        t = _new(Tensor)
        t._storage, t._layout, t._dtype, t._device, t._node = x._storage, new, x._dtype, x._device, None
        if x._node is not None and is_grad_enabled():
            record(t, "getitem", (x,), lambda g: (scatter_view(x, lambda lz: lz.narrow(0, start, n), g),))
        return t
    if index.__class__ is int and lay.shape:
        n = lay.shape[0]
        if -n <= index < n:
            i = index + n if index < 0 else index
            return derived_view(x, lay.select(0, i), "getitem",
                                lambda g: scatter_view(x, lambda lz: lz.select(0, i), g))
        raise IndexOutOfRangeError(f"index {index} is out of range for dim 0 of size {n}")
    return _getitem(x, index if isinstance(index, tuple) else (index,))


_new = object.__new__


def _is_advanced(item) -> bool:
    return isinstance(item, (Tensor, list, np.ndarray))


def _consumed(item) -> int:
    """How many dims of x an index item consumes."""
    if item is None:
        return 0
    mask = _as_mask(item)
    return mask.ndim if mask is not None else 1


def _as_mask(item):
    """The item as a numpy bool array if it is a mask, else None."""
    if isinstance(item, Tensor):
        return item.numpy().astype(bool) if item.dtype is u8 or item.dtype is bool_ else None
    if isinstance(item, np.ndarray):
        return item if item.dtype == bool else None
    if isinstance(item, list) and item and all(isinstance(v, (bool, np.bool_)) for v in item):
        return np.asarray(item, dtype=bool)
    return None


def masked_index(x: Tensor, index):
    """For ``x[index] = value``: a bool mask on x's device shaped to broadcast
    over x (its leading dims), when index is one mask; else None."""
    mask = _as_mask(index) if not isinstance(index, tuple) else None
    if mask is None:
        return None
    if mask.shape != x.shape[: mask.ndim]:
        raise IndexError(f"mask of shape {mask.shape} does not match dims {x.shape[:mask.ndim]}")
    return from_array(mask.reshape(mask.shape + (1,) * (x.rank - mask.ndim)), bool_, x._device)


def picked_index(x: Tensor, index):
    """For ``x[index] = value``: (dim, i64 indices) when index picks along one dim
    with a 1-d list or integer tensor (full slices before it); else None."""
    items = index if isinstance(index, tuple) else (index,)
    lead = 0
    while lead < len(items) and isinstance(items[lead], slice) and items[lead] == slice(None):
        lead += 1
    if lead != len(items) - 1 or not _is_advanced(items[lead]) or _as_mask(items[lead]) is not None:
        return None
    ids = _index_tensor(items[lead], x.shape[lead], x._device)
    if ids.rank != 1:
        raise IndexError(f"x[...] = value takes one 1-d list of indices along a dim, got shape {ids.shape}")
    return lead, ids


def _getitem(x: Tensor, index: tuple) -> Tensor:
    rank = x.rank
    n_ellipsis = sum(1 for item in index if item is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(_consumed(item) for item in index if item is not Ellipsis)
    if used > rank:
        raise IndexError(f"too many indices for a tensor of rank {rank}: {used} given")
    if n_ellipsis:
        pos = next(i for i, item in enumerate(index) if item is Ellipsis)
        index = index[:pos] + (slice(None),) * (rank - used) + index[pos + 1 :]
    # Basic indexing as one layout change (a list of steps, replayed by the
    # backward pass); advanced items are kept for later with the dim they apply
    # to in the resulting view.
    steps = []
    lay = x._layout
    dim = 0
    advanced = []  # (dim in the view, item)
    needs_copy = False

    def add(step):
        nonlocal lay
        steps.append(step)
        lay = step(lay)

    for item in index:
        if item is None:
            add(lambda l, d=dim: l.unsqueeze(d))
            dim += 1
        elif isinstance(item, slice):
            size = lay.shape[dim]
            start, stop, step = item.indices(size)
            length = len(range(start, stop, step))
            add(lambda l, d=dim, a=start, n=length, s=step: l.slice(d, a, n, s))
            needs_copy |= step < 0
            dim += 1
        elif _is_advanced(item):
            mask = _as_mask(item)
            if mask is not None:
                # A mask over k dims is an index into those dims flattened together.
                k = mask.ndim
                if k == 0 or lay.shape[dim : dim + k] != mask.shape:
                    raise IndexError(f"mask of shape {mask.shape} does not match dims {lay.shape[dim:dim + k]}")
                merged = lay.shape[:dim] + (mask.size,) + lay.shape[dim + k :]
                if lay.reshape(merged) is None:  # those dims cannot merge in place: copy once
                    x = copy(_basic_view(x, steps))
                    steps, lay, needs_copy = [], x._layout, False
                add(lambda l, m=merged: l.reshape(m))
                advanced.append((dim, np.flatnonzero(mask)))
            else:
                advanced.append((dim, item))
            dim += 1
        elif isinstance(item, (numbers.Integral, np.integer)) or (isinstance(item, Tensor) and item.rank == 0):
            i = int(item)
            size = lay.shape[dim]
            if not -size <= i < size:
                raise IndexOutOfRangeError(f"index {i} is out of range for dim {dim} of size {size}")
            add(lambda l, d=dim, j=i + size if i < 0 else i: l.select(d, j))
        else:
            raise IndexError(f"unsupported index {item!r} of type {type(item).__name__}")
    out = _basic_view(x, steps)
    if needs_copy:
        out = copy(out)
    if advanced:
        out = _advanced(out, advanced)
    return out


def _replay(steps, lay: Layout) -> Layout:
    for step in steps:
        lay = step(lay)
    return lay


def _basic_view(x: Tensor, steps: list) -> Tensor:
    """x viewed through the layout steps of basic indexing, which never repeat an element."""
    return derived_view(x, _replay(steps, x._layout), "getitem",
                        lambda g: scatter_view(x, lambda lz: _replay(steps, lz), g))


def _index_tensor(item, size: int, device) -> Tensor:
    """An i64 index tensor on device with negative entries wrapped and range-checked."""
    if isinstance(item, Tensor):
        if not item.dtype.is_int:
            raise DTypeError(f"index tensors must have an integer dtype, got {item.dtype}")
        host = item.numpy().astype(np.int64)
    else:
        host = np.asarray(item)
        if host.dtype.kind not in "iu" and host.size:
            raise DTypeError(f"index arrays must hold integers, got {host.dtype}")
        host = host.astype(np.int64)
    bad = (host < -size) | (host >= size)
    if bad.any():
        v = int(host[bad].flat[0])
        raise IndexOutOfRangeError(f"index {v} is out of range for a dim of size {size}")
    host = np.where(host < 0, host + size, host)
    return from_array(host, i64, device)


def _advanced(x: Tensor, items: list) -> Tensor:
    """Gathers along the dims of advanced index items (broadcast together), as numpy does."""
    dims = [d for d, _ in items]
    idx = [_index_tensor(item, x.shape[d], x.device) for d, item in items]
    bshape = np.broadcast_shapes(*(t.shape for t in idx))
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if not adjacent:  # numpy puts the result dims first when the advanced dims are apart
        order = dims + [d for d in range(x.rank) if d not in dims]
        x = x.permute(order)
        dims = list(range(len(dims)))
    first = dims[0]
    # Linear index into the advanced dims flattened together.
    linear = None
    for d, t in zip(dims, idx):
        t = t.broadcast_as(bshape)
        linear = t if linear is None else linear * x.shape[d] + t
    flat = flatten(x, first, first + len(dims) - 1) if len(dims) > 1 else x
    picked = index_select(flat, contiguous(linear.flatten_all()), first)
    return reshape(picked, flat.shape[:first] + tuple(bshape) + flat.shape[first + 1 :])


# ---- index kernels ---------------------------------------------------------------------


def _check_ids(op: str, ids) -> Tensor:
    check_tensor(op, ids, "indexes")
    if ids.dtype not in INDEX_DTYPES:
        raise DTypeError(f"{op}: indexes must have an integer dtype, got {ids.dtype}")
    return ids


def index_select(x: Tensor, ids: Tensor, dim: int) -> Tensor:
    _check_ids("index_select", ids)
    if ids.rank != 1:
        raise ShapeError(f"index_select: indexes must be 1-d, got shape {ids.shape}")
    dim = normalize_dim(dim, x.rank)
    ids = contiguous(ids)
    if ids.shape[0] and 0 in x.shape[:dim] + x.shape[dim + 1 :]:
        _check_bounds("index_select", ids, x.shape[dim])  # the kernel is not called for an empty output
    return apply(INDEX_SELECT, x, ids, dim=dim)


def _check_bounds(op: str, ids: Tensor, size: int) -> None:
    host = ids.numpy().astype(np.int64)
    bad = host[(host < 0) | (host >= size)]
    if bad.size:
        raise IndexOutOfRangeError(f"{op}: index {int(bad[0])} is out of range for a dimension of size {size}")


def _index_select_prepare(x, ids, dim):
    same_device("index_select", x, ids)
    shape = x.shape[:dim] + (ids.shape[0],) + x.shape[dim + 1 :]
    return shape, x._dtype, (x._storage, x._layout, ids._storage, ids._layout, ids._dtype, dim)


def gather(x: Tensor, ids: Tensor, dim: int) -> Tensor:
    """out[i][j][k] = x[i][ids[i][j][k]][k] for dim 1 (PyTorch's gather)."""
    _check_ids("gather", ids)
    return apply(GATHER, x, ids, dim=normalize_dim(dim, x.rank))


def _gather_prepare(x, ids, dim):
    same_device("gather", x, ids)
    if ids.rank != x.rank:
        raise ShapeError(f"gather: indexes of shape {ids.shape} need the rank of the input {x.shape}")
    for d in range(x.rank):
        if d != dim and ids.shape[d] > x.shape[d]:
            raise ShapeError(f"gather: indexes {ids.shape} exceed the input {x.shape} in dim {d}")
    return ids.shape, x._dtype, (x._storage, x._layout, ids._storage, ids._layout, ids._dtype, dim)


def scatter(x: Tensor, ids: Tensor, src: Tensor, dim: int, accumulate: bool) -> Tensor:
    """A copy of x with src written (or added) at ids along dim (PyTorch's scatter rules)."""
    op = SCATTER_ADD if accumulate else SCATTER
    _check_ids(op.name, ids)
    check_tensor(op.name, src, "source")
    dim = normalize_dim(dim, x.rank)
    if ids._layout.numel and not x._layout.numel and ids.rank == x.rank:
        _check_bounds(op.name, ids.flatten_all(), x.shape[dim])  # the kernel is not called for an empty output
    return apply(op, x, ids, src, dim=dim)


def _scatter_prepare(name: str):
    def prepare(x, ids, src, dim):
        same_device(name, x, ids, src)
        if src.dtype is not x.dtype:
            raise DTypeError(f"{name}: source dtype {src.dtype} differs from {x.dtype}")
        if ids.rank != x.rank or src.rank != x.rank:
            raise ShapeError(f"{name}: input {x.shape}, indexes {ids.shape} and source {src.shape} need the same rank")
        for d in range(x.rank):
            if ids.shape[d] > src.shape[d] or (d != dim and ids.shape[d] > x.shape[d]):
                raise ShapeError(f"{name}: indexes {ids.shape} exceed source {src.shape} or input {x.shape} in dim {d}")
        src_lay = src._layout
        for d in range(x.rank):  # only the part of src that ids covers is read
            if src_lay.shape[d] != ids.shape[d]:
                src_lay = src_lay.narrow(d, 0, ids.shape[d])
        return x.shape, x._dtype, (x._storage, x._layout, ids._storage, ids._layout, ids._dtype, src._storage,
                                   src_lay, dim)

    return prepare


def _scatter_backward(accumulate: bool):
    def backward(inputs, out, g, dim):
        x, ids, src = inputs
        return (g if accumulate else scatter(g, ids, zeros_like(src), dim, False),  # overwritten places get none
                None, _covered_grad(src, ids, gather(g, ids, dim)))

    return backward


def _covered_grad(src: Tensor, ids: Tensor, g: Tensor) -> Tensor:
    """src's gradient when only its leading ids.shape block was read."""
    if src.shape == ids.shape:
        return g

    def block(lay):
        for d, n in enumerate(ids.shape):
            lay = lay.narrow(d, 0, n)
        return lay

    return scatter_view(src, block, g)


def index_add(x: Tensor, ids: Tensor, src: Tensor, dim: int) -> Tensor:
    _check_ids("index_add", ids)
    check_tensor("index_add", src, "source")
    if ids.rank != 1:
        raise ShapeError(f"index_add: indexes must be 1-d, got shape {ids.shape}")
    dim = normalize_dim(dim, x.rank)
    ids = contiguous(ids)
    if ids.shape[0] and not x._layout.numel:
        _check_bounds("index_add", ids, x.shape[dim])  # the kernel is not called for an empty output
    return apply(INDEX_ADD, x, ids, src, dim=dim)


def _index_add_prepare(x, ids, src, dim):
    same_device("index_add", x, ids, src)
    if src.dtype is not x.dtype:
        raise DTypeError(f"index_add: source dtype {src.dtype} differs from {x.dtype}")
    expected = x.shape[:dim] + (ids.shape[0],) + x.shape[dim + 1 :]
    if src.shape != expected:
        raise ShapeError(f"index_add: source shape {src.shape} should be {expected}")
    return x.shape, x._dtype, (x._storage, x._layout, ids._storage, ids._layout, ids._dtype, src._storage,
                               src._layout, dim)


def embedding(ids: Tensor, table: Tensor) -> Tensor:
    """Rows of table (vocab, hidden) for every id: shape ids.shape + (hidden,)."""
    check_tensor("embedding", table, "table")
    if table.rank != 2:
        raise ShapeError(f"embedding: the table must be 2-d (vocab, hidden), got {table.shape}")
    _check_ids("embedding", ids)
    rows = index_select(table, contiguous(ids.flatten_all()), 0)
    return rows.reshape(ids.shape + (table.shape[1],))


INDEX_SELECT = define(OpDef("index_select", prepare=_index_select_prepare, backward=lambda inputs, out, g, dim: (
    index_add(zeros_like(inputs[0]), inputs[1], g, dim), None)))
GATHER = define(OpDef("gather", prepare=_gather_prepare, backward=lambda inputs, out, g, dim: (
    scatter(zeros_like(inputs[0]), inputs[1], g, dim, True), None)))
SCATTER = define(OpDef("scatter", prepare=_scatter_prepare("scatter"), backward=_scatter_backward(False)))
SCATTER_ADD = define(OpDef("scatter_add", prepare=_scatter_prepare("scatter_add"), backward=_scatter_backward(True)))
INDEX_ADD = define(OpDef("index_add", prepare=_index_add_prepare, backward=lambda inputs, out, g, dim: (
    g, None, index_select(g, inputs[1], dim))))
