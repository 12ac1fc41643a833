"""Helpers shared by the op modules: making tensors and checking operands
(kernels are found and called in :mod:`.dispatch`)."""

from __future__ import annotations

from ..autograd.graph import is_grad_enabled, record
from ..errors import DeviceError, DTypeError, ShapeError
from ..layout import Layout, normalize_dim
from ..tensor import Tensor

_new = object.__new__


def make(storage, layout: Layout, dtype, device) -> Tensor:
    """A tensor over an existing storage (the internal constructor)."""
    t = _new(Tensor)
    t._storage = storage
    t._layout = layout
    t._dtype = dtype
    t._device = device
    t._node = None
    return t


def view(x: Tensor, layout: Layout) -> Tensor:
    """Another view of x's storage (not recorded for autograd: see derived_view)."""
    return make(x._storage, layout, x._dtype, x._device)


def reinterpret(x: Tensor, dtype) -> Tensor:
    """x's bytes read as dtype of the same size (a bool mask as u8, a u8 of 0/1
    as bool): a view, never recorded for autograd."""
    return make(x._storage, x._layout, dtype, x._device)


def derived_view(x: Tensor, layout: Layout, op: str, backward) -> Tensor:
    """A view of x that autograd follows: ``backward(g)`` is x's gradient."""
    t = make(x._storage, layout, x._dtype, x._device)
    if x._node is not None and is_grad_enabled():
        record(t, op, (x,), lambda g: (backward(g),))
    return t


def empty(shape: tuple, dtype, device) -> Tensor:
    """A contiguous tensor with uninitialized contents."""
    lay = Layout.contig(shape)
    return make(device.backend.alloc(lay.numel * dtype.itemsize), lay, dtype, device)


def has_kernel(device, op: str, dtype) -> bool:
    return (op, dtype) in device.kernels


def check_tensor(op: str, x, what: str = "argument") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(x).__name__}")
    return x


def _same(op: str, tensors, attr: str, error, what: str, advice: str):
    value = getattr(tensors[0], attr)
    for t in tensors[1:]:
        if getattr(t, attr) is not value:
            raise error(f"{op}: {what} ({', '.join(str(getattr(t, attr)) for t in tensors)}); {advice}")
    return value


def same_device(op: str, *tensors: Tensor):
    return _same(op, tensors, "_device", DeviceError, "tensors are on different devices",
                 "move them with .to_device() first")


def same_dtype(op: str, *tensors: Tensor):
    return _same(op, tensors, "_dtype", DTypeError, "dtypes differ", "convert with .to_dtype() first")


def require_float(op: str, x: Tensor) -> None:
    if not x._dtype.is_float:
        raise DTypeError(f"{op} needs a float tensor, got {x._dtype}")


def broadcast_shape(op: str, *shapes: tuple) -> tuple:
    """NumPy broadcasting of several shapes; raises ShapeError naming the op."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        size = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0:
                continue
            d = s[j]
            if d != 1:
                if size != 1 and d != size:
                    raise ShapeError(f"{op}: shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together")
                size = d
        out.append(size)
    return tuple(out)


def dims_arg(op: str, dim, rank: int) -> tuple:
    """Normalizes an int / sequence of ints / None (all dims) to sorted unique dims."""
    if dim is None:
        return tuple(range(rank))
    if isinstance(dim, int):
        return (normalize_dim(dim, rank),)
    dims = sorted({normalize_dim(d, rank) for d in dim})
    if len(dims) != len(list(dim)):
        raise ShapeError(f"{op}: repeated dims in {list(dim)}")
    return tuple(dims)
