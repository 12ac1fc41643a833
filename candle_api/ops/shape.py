"""Shape ops. Views (reshape of a compatible layout, transpose, permute,
narrow, squeeze, unsqueeze, broadcast, select, unbind) share the storage and copy
nothing; contiguous, copy, cat, stack, pad_with_zeros, repeat, flip and roll copy
through the device's strided "copy" kernel."""

from __future__ import annotations

from ..autograd.graph import record, tracks
from ..autograd.helpers import scatter_view, sum_to
from ..errors import IndexOutOfRangeError, ShapeError
from ..layout import MAX_DIMS, Layout, check_shape, normalize_dim, numel
from ..tensor import Tensor
from .core import check_tensor, derived_view, empty, same_device, same_dtype
from .dispatch import OpDef, apply, define
from .creation import zeros


def copy_into(dst: Tensor, dst_layout: Layout, src: Tensor) -> None:
    """Copies src into the dst_layout view of dst's storage (same shape and dtype). Anything else is
    refused: the kernel walks src's elements through the view's strides, so a larger src (a KV cache
    fed a bigger batch than it was made for) would write past the view."""
    if src.shape != dst_layout.shape:
        raise ShapeError(f"copy_into: a source of shape {src.shape} for a view of shape {dst_layout.shape}")
    same_dtype("copy_into", dst, src)
    if src._layout.numel:
        apply(COPY, dst, src, layout=dst_layout)


# In place: the kernel writes the dst view itself (no output is allocated).
COPY = define(OpDef("copy", prepare=lambda dst, src, layout: (None, None, (dst._storage, layout, src._storage,
                                                                            src._layout))))


def contiguous(x: Tensor) -> Tensor:
    return x if x._layout.contiguous else copy(x)


def copy(x: Tensor) -> Tensor:
    out = empty(x._layout.shape, x._dtype, x._device)
    copy_into(out, out._layout, x)
    if tracks(x):
        record(out, "copy", (x,), lambda g: (g,))
    return out


def _resolve_hole(shape: tuple, total: int) -> tuple:
    holes = [i for i, d in enumerate(shape) if d == -1]
    if len(holes) > 1:
        raise ShapeError(f"reshape: only one dim may be -1, got {shape}")
    if holes:
        known = numel(d for d in shape if d != -1)
        if known == 0 or total % known:
            raise ShapeError(f"reshape: cannot infer the -1 in {shape} for {total} elements")
        shape = shape[: holes[0]] + (total // known,) + shape[holes[0] + 1 :]
    return check_shape(shape)


def reshape(x: Tensor, shape: tuple) -> Tensor:
    lay = x._layout
    shape = _resolve_hole(tuple(shape), lay.numel)
    if numel(shape) != lay.numel:
        raise ShapeError(f"reshape: cannot reshape {lay.shape} ({lay.numel} elements) into {shape}")
    new = lay.reshape(shape)
    if new is None:
        x = copy(x)
        new = Layout.contig(shape)
    old = x.shape
    return derived_view(x, new, "reshape", lambda g: g.reshape(old))


def flatten(x: Tensor, start: int = 0, end: int = -1) -> Tensor:
    rank = x.rank
    if rank == 0:
        return reshape(x, (1,))
    start, end = normalize_dim(start, rank), normalize_dim(end, rank)
    if start > end:
        raise ShapeError(f"flatten: start dim {start} is after end dim {end}")
    s = x.shape
    return reshape(x, s[:start] + (numel(s[start : end + 1]),) + s[end + 1 :])


def squeeze(x: Tensor, dim=None) -> Tensor:
    lay = x._layout
    old = lay.shape
    if dim is None:
        keep = [i for i, d in enumerate(lay.shape) if d != 1]
        new = Layout(tuple(lay.shape[i] for i in keep), tuple(lay.strides[i] for i in keep), lay.offset)
    else:
        dim = normalize_dim(dim, lay.rank)
        if lay.shape[dim] != 1:
            return x  # as in PyTorch and Candle: squeezing a dim of size > 1 is a no-op
        new = lay.squeeze(dim)
    return derived_view(x, new, "squeeze", lambda g: g.reshape(old))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    rank = x.rank
    if rank >= MAX_DIMS:
        raise ShapeError(f"unsqueeze: tensors have at most {MAX_DIMS} dims")
    old = x.shape
    return derived_view(x, x._layout.unsqueeze(normalize_dim(dim, rank + 1)), "unsqueeze", lambda g: g.reshape(old))


def t(x: Tensor) -> Tensor:
    if x.rank < 2:
        raise ShapeError(f"t: needs at least 2 dims, got shape {x.shape}")
    return transpose(x, -2, -1)


def transpose(x: Tensor, d0: int, d1: int) -> Tensor:
    rank = x.rank
    d0, d1 = normalize_dim(d0, rank), normalize_dim(d1, rank)
    return derived_view(x, x._layout.transpose(d0, d1), "transpose", lambda g: g.transpose(d0, d1))


def permute(x: Tensor, dims: tuple) -> Tensor:
    rank = x.rank
    dims = tuple(normalize_dim(d, rank) for d in dims)
    if sorted(dims) != list(range(rank)):
        raise ShapeError(f"permute: {dims} is not a permutation of the {rank} dims")
    inverse = tuple(sorted(range(rank), key=dims.__getitem__))
    return derived_view(x, x._layout.permute(dims), "permute", lambda g: g.permute(inverse))


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    lay = x._layout
    dim = normalize_dim(dim, lay.rank)
    size = lay.shape[dim]
    if start < 0:
        start += size
    if length < 0 or start < 0 or start + length > size:
        raise ShapeError(f"narrow: [{start}, {start + length}) is out of range for dim {dim} of size {size}")
    return derived_view(x, lay.narrow(dim, start, length), "narrow",
                        lambda g: scatter_view(x, lambda lz: lz.narrow(dim, start, length), g))


def select(x: Tensor, dim: int, index: int) -> Tensor:
    """Drops dim, keeping position index of it (a view)."""
    lay = x._layout
    dim = normalize_dim(dim, lay.rank)
    size = lay.shape[dim]
    if not -size <= index < size:
        raise IndexOutOfRangeError(f"index {index} is out of range for dim {dim} of size {size}")
    index = index + size if index < 0 else index
    return derived_view(x, lay.select(dim, index), "select",
                        lambda g: scatter_view(x, lambda lz: lz.select(dim, index), g))


def chunk(x: Tensor, chunks: int, dim: int = 0) -> list:
    if chunks < 1:
        raise ShapeError(f"chunk: chunks must be positive, got {chunks}")
    dim = normalize_dim(dim, x.rank)
    size = x.shape[dim]
    step = -(-size // chunks) if size else 0
    if step == 0:
        return [x]
    return [narrow(x, dim, s, min(step, size - s)) for s in range(0, size, step)]


def split(x: Tensor, split_size, dim: int = 0) -> list:
    """Pieces of split_size along dim (the last may be smaller), or of the given sizes."""
    dim = normalize_dim(dim, x.rank)
    size = x.shape[dim]
    if isinstance(split_size, int):
        if split_size < 1:
            raise ShapeError(f"split: split_size must be positive, got {split_size}")
        sizes = [min(split_size, size - s) for s in range(0, size, split_size)]
    else:
        sizes = list(split_size)
        if sum(sizes) != size:
            raise ShapeError(f"split: sizes {sizes} do not add up to dim {dim} of size {size}")
    out, start = [], 0
    for n in sizes:
        out.append(narrow(x, dim, start, n))
        start += n
    return out


def broadcast_as(x: Tensor, shape: tuple) -> Tensor:
    shape = check_shape(shape)
    return derived_view(x, x._layout.broadcast_as(shape), "broadcast", lambda g: sum_to(g, x.shape))


def expand(x: Tensor, shape: tuple) -> Tensor:
    extra = len(shape) - x.rank
    if extra < 0:
        raise ShapeError(f"expand: target {shape} has fewer dims than {x.shape}")
    shape = tuple(x.shape[i - extra] if d == -1 and i >= extra else d for i, d in enumerate(shape))
    return broadcast_as(x, shape)


def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenates along an existing dim."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: needs at least one tensor")
    for t_ in tensors:
        check_tensor("cat", t_, "element")
    first = tensors[0]
    dtype = same_dtype("cat", *tensors)
    dev = same_device("cat", *tensors)
    rank = first.rank
    if rank == 0:
        raise ShapeError("cat: cannot concatenate 0-d tensors; use stack")
    dim = normalize_dim(dim, rank)
    total = 0
    for t_ in tensors:
        s = t_.shape
        if len(s) != rank or s[:dim] != first.shape[:dim] or s[dim + 1 :] != first.shape[dim + 1 :]:
            raise ShapeError(f"cat: shapes {[t_.shape for t_ in tensors]} differ outside dim {dim}")
        total += s[dim]
    out = empty(first.shape[:dim] + (total,) + first.shape[dim + 1 :], dtype, dev)
    starts = []
    start = 0
    for t_ in tensors:
        n = t_.shape[dim]
        copy_into(out, out._layout.narrow(dim, start, n), t_)
        starts.append(start)
        start += n
    if tracks(*tensors):
        record(out, "cat", tuple(tensors),
               lambda g: tuple(narrow(g, dim, s0, t_.shape[dim]) if t_._node is not None else None
                               for s0, t_ in zip(starts, tensors)))
    return out


def stack(tensors, dim: int = 0) -> Tensor:
    """Stacks equal-shaped tensors along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
    shapes = {check_tensor("stack", t_, "element").shape for t_ in tensors}
    if len(shapes) > 1:
        raise ShapeError(f"stack: shapes differ: {[t_.shape for t_ in tensors]}")
    dim = normalize_dim(dim, tensors[0].rank + 1)
    return cat([unsqueeze(t_, dim) for t_ in tensors], dim)


def pad_with_zeros(x: Tensor, dim: int, left: int, right: int) -> Tensor:
    if left < 0 or right < 0:
        raise ShapeError("pad_with_zeros: padding must be non-negative")
    dim = normalize_dim(dim, x.rank)
    parts = []
    if left:
        parts.append(zeros(x.shape[:dim] + (left,) + x.shape[dim + 1 :], dtype=x.dtype, device=x.device))
    parts.append(x)
    if right:
        parts.append(zeros(x.shape[:dim] + (right,) + x.shape[dim + 1 :], dtype=x.dtype, device=x.device))
    return cat(parts, dim) if len(parts) > 1 else x


def repeat(x: Tensor, repeats: tuple) -> Tensor:
    """Tiles x: repeats[i] copies along dim i (leading extra repeats add dims)."""
    if len(repeats) < x.rank:
        raise ShapeError(f"repeat: needs at least {x.rank} repeat counts, got {repeats}")
    if any(r < 0 for r in repeats):
        raise ShapeError(f"repeat: counts must be non-negative, got {repeats}")
    shape = (1,) * (len(repeats) - x.rank) + x.shape
    # View x as (1, d0, 1, d1, ...), broadcast to (r0, d0, r1, d1, ...), copy, merge pairs.
    paired = reshape(x, tuple(v for d in shape for v in (1, d)))
    big = broadcast_as(paired, tuple(v for r, d in zip(repeats, shape) for v in (r, d)))
    return reshape(contiguous(big), tuple(r * d for r, d in zip(repeats, shape)))


def flip(x: Tensor, dims) -> Tensor:
    """A copy with the order of elements reversed along dims."""
    rank = x.rank
    dims = [dims] if isinstance(dims, int) else list(dims)
    lay = x._layout
    flipped = [d for d in {normalize_dim(d, rank) for d in dims} if lay.shape[d] > 1]

    def relayout(lay):
        for d in flipped:
            lay = lay.slice(d, lay.shape[d] - 1, lay.shape[d], -1)
        return lay

    return copy(derived_view(x, relayout(lay), "flip", lambda g: g.flip(flipped)))


def unbind(x: Tensor, dim: int = 0) -> tuple:
    """The slices of x along dim, as views without that dim."""
    dim = normalize_dim(dim, x.rank)
    return tuple(select(x, dim, i) for i in range(x.shape[dim]))


def roll(x: Tensor, shifts, dims=None) -> Tensor:
    """A copy with elements shifted along dims (wrapping around); with dims None,
    the flattened tensor is rolled and the shape restored (PyTorch's roll)."""
    if dims is None:
        if not isinstance(shifts, int):
            raise ShapeError(f"roll: without dims, shifts must be one int, got {shifts!r}")
        return reshape(roll(flatten(x), shifts, 0), x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = x
    for shift, dim in zip(shifts, dims):
        dim = normalize_dim(dim, x.rank)
        size = x.shape[dim]
        shift = shift % size if size else 0
        if shift:  # the last `shift` elements move to the front
            out = cat([narrow(out, dim, size - shift, shift), narrow(out, dim, 0, size - shift)], dim)
    return out if out is not x else copy(x)
