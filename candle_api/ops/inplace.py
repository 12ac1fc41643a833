"""In-place ops: ``x.add_(y)``, ``x.zero_()``, ``x[...] = v``... and the rules
they keep, as PyTorch's do:

- a read-only storage (a memory-mapped checkpoint, a read-only NumPy array)
  is refused with ReadOnlyError before anything is computed, and so is a
  broadcast view (InPlaceError: its elements share memory);
- under grad mode, a leaf that requires grad (or a view of one) is refused
  with InPlaceError: change it under ``no_grad()``, as optimizers do;
- every write counts in the storage's version (:mod:`..autograd.versions`),
  so a backward pass that needs the old values raises instead of using the
  new ones;
- on a tensor autograd tracks (or with an operand it tracks), the op is
  recorded: the tensor takes the op's node, its old node feeding it, so
  gradients flow through the in-place op as through its out-of-place form.

An elementwise op (``add_``, ``mul_``, ``exp_``, ``clamp_``...) on a tensor
autograd does not track runs its kernel straight into the tensor's memory
when the tensor is contiguous from its storage's start, the kernel may write
over its input (the contract row's ``alias`` and ``KernelSet.aliasing``) and
no operand overlaps the tensor other than as the tensor itself: one pass
over memory. Otherwise an op is computed out of place from the tensor's
current values, then copied into its memory (any layout) by the copy kernel:
every backend serves it, and operands that overlap the target are read
before it is written. fill_, zero_ and copy_ of an untracked tensor write
directly.
"""

from __future__ import annotations

from ..autograd import versions
from ..autograd.graph import Leaf, is_grad_enabled, no_grad, record
from ..autograd.helpers import sum_to
from ..dtype import bool_, get_dtype
from ..errors import InPlaceError, ShapeError
from ..layout import normalize_dim
from ..tensor import Tensor
from .core import check_tensor, make
from .creation import fill_ as _fill_kernel, full, rand, randn, zeros
from . import dispatch
from .dispatch import check_writable
from .elementwise import cast, kernel_call, where
from .indexing import getitem, masked_index, picked_index, scatter
from .shape import cat, copy, copy_into


def _check_target(op: str, x: Tensor) -> None:
    check_tensor(op, x)
    check_writable(op, x)
    lay = x._layout
    if any(stride == 0 and size > 1 for size, stride in zip(lay.shape, lay.strides)):
        raise InPlaceError(f"{op}: the tensor written in place is a broadcast view (shape {lay.shape}, strides "
                           f"{lay.strides}): several of its elements are one memory location; write into a "
                           ".contiguous() copy")
    if not is_grad_enabled() or x._node is None:
        return
    node, base = x._node, x
    while not isinstance(node, Leaf):  # walk back through the views of the same memory
        up = node.inputs[0] if node.inputs else None
        if up is None or up._storage is not base._storage or up._node is None:
            break
        base, node = up, up._node
    if isinstance(node, Leaf):
        what = "a leaf tensor" if base is x else "a view of a leaf tensor"
        raise InPlaceError(f"{op}: {what} that requires grad is used in an in-place operation; change it under "
                           "candle_api.no_grad() (as optimizers do), or change a .clone()")
    versions.check_current(x, op)


def apply_inplace(op: str, x: Tensor, compute, *operands) -> Tensor:
    """Writes ``compute(x, *operands)`` (an out-of-place result of x's shape)
    into x's memory and returns x; recorded for autograd when the result is."""
    _check_target(op, x)
    before = make(x._storage, x._layout, x._dtype, x._device)
    before._node = x._node  # x as it was: the recorded op's input
    if _tracked(x, *operands):  # its backward may read x's old values: they are about to be overwritten
        before = copy(before)
    out = compute(before, *operands)
    if out._storage is x._storage or isinstance(out._node, Leaf) or any(out is o for o in operands):
        out = copy(out)  # x's own memory (read it before writing over it), or a tensor whose node is not ours
    if out.shape != x.shape:
        raise ShapeError(f"{op}: the result has shape {out.shape}, the tensor written in place {x.shape} "
                         "(an operand broadcasts past it)")
    if out._dtype is not x._dtype:
        out = cast(out, x._dtype)
    with no_grad():
        copy_into(x, x._layout, out)
    # A recorded result becomes x's node. One that depends on nothing tracked (x.fill_(0) on a tensor
    # autograd tracked) cuts x from the graph: its values no longer come from its old node.
    rebased = out._node is not None or (x._node is not None and is_grad_enabled())
    versions.bump(x, rebased)
    if rebased:
        x._node = out._node
        if out._node is not None:
            out._node.rebases = versions.rebases(x._storage)
    return x


def elementwise_(name: str, x: Tensor, op: str, compute, *operands) -> Tensor:
    """``x.op(*operands)`` written into x (``name``: the in-place method):
    the op's one kernel run into x's memory where it may be (see the module
    doc), else :func:`apply_inplace` with ``compute(x, *operands)``, the same
    op out of place."""
    if not _tracked(x, *operands) and dispatch.observer is None:  # a trace or shadow sees apply() run
        _check_target(name, x)
        call = kernel_call(op, x, *operands)
        if call is not None and _into(x, *call):
            versions.bump(x)
            return x
    return apply_inplace(name, x, compute, *operands)


def _into(x: Tensor, op, inputs: tuple, params: dict) -> bool:
    """Runs op's kernel with x's storage as its output, when the kernel may
    write over x (False when it may not: nothing is written)."""
    lay, dev = x._layout, x._device
    if not lay.contiguous or lay.offset or not lay.numel or (op.name, x._dtype) not in dev.aliasing:
        return False
    for t in inputs:  # an operand in x's memory but elsewhere than x's own layout would be overwritten first
        if t is not x and (t._layout != lay if t._storage is x._storage else _overlap(t._storage, x._storage)):
            return False
    shape, dtype, args = op.prepare(*inputs, **params)
    if shape != lay.shape or dtype is not x._dtype:  # an operand broadcasts past x: apply_inplace says so
        return False
    dev.kernels[(op.name, x._dtype)](x._storage, *args)
    return True


def _overlap(a, b) -> bool:
    """Whether two storages' host memory intersects (numpy views or DLPack imports of one buffer; a
    storage without an address shares memory with no other)."""
    pa, pb = getattr(a, "ptr", None), getattr(b, "ptr", None)
    return pa is not None and pb is not None and pa < pb + b.nbytes and pb < pa + a.nbytes


def _tracked(*tensors) -> bool:
    return is_grad_enabled() and any(isinstance(t, Tensor) and t._node is not None for t in tensors)


# ---- writes ---------------------------------------------------------------------------------------


def fill_(x: Tensor, value) -> Tensor:
    """Every element set to value (a scalar, or a 0-d tensor)."""
    if isinstance(value, Tensor):
        if value.rank:
            raise ShapeError(f"fill_: the value must be a scalar or a 0-d tensor, got shape {value.shape}")
        return copy_(x, value)
    if _tracked(x):
        return apply_inplace("fill_", x, _full_like, value)
    _check_target("fill_", x)
    _fill_kernel(x, value)
    versions.bump(x)
    return x


def _full_like(t: Tensor, value) -> Tensor:
    return full(t.shape, value, dtype=t._dtype, device=t._device)


def copy_(x: Tensor, src) -> Tensor:
    """src's values (broadcast to x's shape, converted to its dtype and device) written into x."""
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_: expected a Tensor, got {type(src).__name__}")
    if _tracked(x, src):
        return apply_inplace("copy_", x, _like, src)
    _check_target("copy_", x)
    value = _like(x, src)
    if value._layout.numel:
        copy_into(x, x._layout, value)
    versions.bump(x)
    return x


def _like(t: Tensor, src: Tensor) -> Tensor:
    """src on t's device, in t's dtype, broadcast to t's shape (a copy where it is t's own memory)."""
    value = cast(src.to_device(t._device), t._dtype)
    if value.shape != t.shape:
        value = value.expand(t.shape) if value.rank <= t.rank else value.reshape(t.shape)
    return value if value._storage is not t._storage else value.copy()


def random_(x: Tensor, dist: str, p0: float, p1: float) -> Tensor:
    """uniform_ (p0 <= x < p1) and normal_ (mean p0, std p1): a fresh draw of the
    device's stream, in x's dtype, written into x."""
    draw = rand if dist == "uniform" else randn
    kw = {"lo": p0, "up": p1} if dist == "uniform" else {"mean": p0, "std": p1}
    value = draw(x.shape, dtype=x._dtype if x._dtype.is_float else get_dtype("f32"), device=x._device, **kw)
    return copy_(x, value)


def setitem(x: Tensor, index, value) -> None:
    """``x[index] = value``: basic indexing (ints, slices, None, ...) writes through
    the view; a bool/u8 mask takes a scalar or a 0-d value; one list or integer
    tensor of indices along a dim takes values broadcast to what it picks."""
    mask = masked_index(x, index)
    if mask is not None:
        if isinstance(value, Tensor) and value.rank:
            raise ShapeError(f"x[mask] = value: value must be a scalar or a 0-d tensor, got shape {value.shape}")
        apply_inplace("setitem", x, lambda t, v: t.masked_fill(mask, v), value)
        return
    picked = picked_index(x, index)
    if picked is not None:
        dim, ids = picked
        apply_inplace("setitem", x, lambda t, v: _index_put(t, dim, ids, v), value)
        return
    with no_grad():
        target = getitem(x, index)
    if target._storage is not x._storage:
        raise IndexError(f"x[{index!r}] = value: this index makes a copy, so there is nothing to write through; "
                         "use basic indexing, one bool mask, or one index list along a dim")
    if _tracked(x, value):  # recorded as a whole-tensor op, so x keeps a graph that knows the write
        apply_inplace("setitem", x, lambda t, v: _placed(t, index, v), value)
    elif isinstance(value, Tensor):
        copy_(target, value)
    else:
        fill_(target, value)


def _placed(t: Tensor, index, value) -> Tensor:
    """t with value written at t[index] (basic indexing), out of place; the
    gradient goes to t outside the region and to value inside it."""
    with no_grad():
        out = copy(t)
        region = out[index]
        (copy_ if isinstance(value, Tensor) else fill_)(region, value.detach() if isinstance(value, Tensor) else value)
        covered = zeros(t.shape, dtype=bool_, device=t._device)
        covered[index] = True
    if not isinstance(value, Tensor):
        if _tracked(t):
            record(out, "setitem", (t,), lambda g: (where(covered, 0.0, g),))
    elif _tracked(t, value):
        record(out, "setitem", (t, value), lambda g: (where(covered, 0.0, g), sum_to(g[index], value.shape)))
    return out


def _index_put(t: Tensor, dim: int, ids: Tensor, value) -> Tensor:
    """t with value (broadcast to t.index_select(ids, dim)'s shape) at ids along dim."""
    shape = t.shape[:dim] + (ids.shape[0],) + t.shape[dim + 1:]
    if isinstance(value, Tensor):
        src = cast(value.to_device(t._device), t._dtype).expand(shape)
    else:
        src = full(shape, value, dtype=t._dtype, device=t._device)
    view = [1] * t.rank
    view[dim] = ids.shape[0]
    at = ids.reshape(view).expand(shape)
    return scatter(t, at.contiguous(), src.contiguous(), dim, accumulate=False)


def slice_assign(t: Tensor, src: Tensor, dim: int, offset: int) -> Tensor:
    """t with src over t.narrow(dim, offset, src.shape[dim]), out of place (Candle's slice_scatter)."""
    dim = normalize_dim(dim, t.rank)
    n, size = src.shape[dim], t.shape[dim]
    if not 0 <= offset <= size - n:
        raise ShapeError(f"slice_set: {n} elements from offset {offset} do not fit in dim {dim} of size {size}")
    src = cast(src.to_device(t._device), t._dtype)
    return cat([t.narrow(dim, 0, offset), src, t.narrow(dim, offset + n, size - offset - n)], dim)
