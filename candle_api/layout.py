"""Layouts: shape, strides (in elements) and start offset of a view of a storage.

Every view op (reshape of a compatible layout, transpose, permute, narrow,
slicing, squeeze/unsqueeze, broadcast) is a new Layout over the same storage:
nothing is copied. Layouts are immutable.
"""

from __future__ import annotations

import operator

from .errors import DimensionError, ShapeError, ShapeTypeError

MAX_DIMS = 32  # the most dimensions a tensor may have (backends rely on it)

_CONTIG: dict[tuple, tuple] = {}  # shape -> (strides, numel)
_CONTIG_LAYOUTS: dict[tuple, "Layout"] = {}  # shape -> the contiguous Layout at offset 0


def contiguous_strides(shape: tuple) -> tuple:
    info = _CONTIG.get(shape)
    if info is None:
        info = _contig_info(shape)
    return info[0]


def _contig_info(shape: tuple) -> tuple:
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    info = (tuple(reversed(strides)), acc)
    if len(_CONTIG) < 4096:
        _CONTIG[shape] = info
    return info


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def check_shape(shape) -> tuple:
    """Validates and normalizes a shape to a tuple of non-negative ints."""
    try:
        shape = tuple(operator.index(d) for d in shape)  # ints only: 2.5 is no dim
    except TypeError:
        raise ShapeTypeError(f"a shape must be a sequence of ints, got {shape!r}") from None
    if len(shape) > MAX_DIMS:
        raise ShapeError(f"tensors have at most {MAX_DIMS} dims, got {len(shape)}")
    for d in shape:
        if d < 0:
            raise DimensionError(f"negative dimension in shape {shape}")
    return shape


def normalize_dim(dim, rank: int, what: str = "dim") -> int:
    """Maps a possibly negative dim to [0, rank); raises ShapeError."""
    if not isinstance(dim, int):
        try:
            dim = int(dim.__index__())
        except AttributeError:
            raise ShapeError(f"{what} must be an int, got {dim!r}") from None
    if -rank <= dim < rank:
        return dim + rank if dim < 0 else dim
    raise ShapeError(f"{what} {dim} is out of range for a tensor of rank {rank}")


class Layout:
    __slots__ = ("shape", "strides", "offset", "numel", "contiguous")

    def __init__(self, shape: tuple, strides: tuple, offset: int = 0):
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self.numel = numel(shape)
        self.contiguous = _is_contiguous(shape, strides)

    @staticmethod
    def contig(shape: tuple, offset: int = 0) -> "Layout":
        """The contiguous layout of shape (layouts are immutable, so offset-0 ones are shared)."""
        if not offset:
            lay = _CONTIG_LAYOUTS.get(shape)
            if lay is not None:
                return lay
        info = _CONTIG.get(shape) or _contig_info(shape)
        lay = raw(shape, info[0], offset, info[1], True)
        if not offset and len(_CONTIG_LAYOUTS) < 4096:
            _CONTIG_LAYOUTS[shape] = lay
        return lay

    def __repr__(self) -> str:
        return f"Layout(shape={self.shape}, strides={self.strides}, offset={self.offset})"

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Layout)
            and self.shape == other.shape
            and self.strides == other.strides
            and self.offset == other.offset
        )

    __hash__ = None  # mutable-looking; compare explicitly

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def fortran_contiguous(self) -> bool:
        acc = 1
        for d, s in zip(self.shape, self.strides):
            if d != 1 and s != acc:
                return False
            acc *= d
        return True

    def span(self) -> tuple[int, int]:
        """(lowest, highest + 1) element offsets the view touches; (offset, offset) if empty."""
        if self.numel == 0:
            return self.offset, self.offset
        lo = hi = self.offset
        for d, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (d - 1) * s
            else:
                lo += (d - 1) * s
        return lo, hi + 1

    # ---- views ---------------------------------------------------------------
    def transpose(self, d0: int, d1: int) -> "Layout":
        shape, strides = list(self.shape), list(self.strides)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        strides[d0], strides[d1] = strides[d1], strides[d0]
        return Layout(tuple(shape), tuple(strides), self.offset)

    def permute(self, dims: tuple) -> "Layout":
        return Layout(tuple(self.shape[d] for d in dims), tuple(self.strides[d] for d in dims), self.offset)

    def narrow(self, dim: int, start: int, length: int) -> "Layout":
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1 :]
        offset = self.offset + start * self.strides[dim]
        if dim == 0 and self.contiguous:  # narrowing the outer dim keeps contiguity
            size = self.shape[0]
            return raw(shape, self.strides, offset, self.numel // size * length if size else 0, True)
        return Layout(shape, self.strides, offset)

    def slice(self, dim: int, start: int, length: int, step: int) -> "Layout":
        """`length` elements from `start` every `step` (step may be negative)."""
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1 :]
        strides = self.strides[:dim] + (self.strides[dim] * step,) + self.strides[dim + 1 :]
        offset = self.offset + start * self.strides[dim] if length else self.offset
        return Layout(shape, strides, offset)

    def select(self, dim: int, index: int) -> "Layout":
        """Drops dim, keeping position `index` of it."""
        return Layout(
            self.shape[:dim] + self.shape[dim + 1 :],
            self.strides[:dim] + self.strides[dim + 1 :],
            self.offset + index * self.strides[dim],
        )

    def unsqueeze(self, dim: int) -> "Layout":
        # The stride of a size-1 dim is arbitrary; this one keeps contiguity checks simple.
        inner = self.strides[dim] * self.shape[dim] if dim < len(self.shape) else 1
        return Layout(self.shape[:dim] + (1,) + self.shape[dim:], self.strides[:dim] + (inner,) + self.strides[dim:],
                      self.offset)

    def squeeze(self, dim: int) -> "Layout":
        return Layout(self.shape[:dim] + self.shape[dim + 1 :], self.strides[:dim] + self.strides[dim + 1 :], self.offset)

    def broadcast_as(self, shape: tuple) -> "Layout":
        """Expands size-1 dims (stride 0) and adds leading dims; raises ShapeError."""
        extra = len(shape) - len(self.shape)
        if extra < 0:
            raise ShapeError(f"cannot broadcast shape {self.shape} to {shape}: target has fewer dims")
        strides = [0] * extra
        for i, (d, s) in enumerate(zip(self.shape, self.strides)):
            t = shape[extra + i]
            if d == t:
                strides.append(s)
            elif d == 1:
                strides.append(0)
            else:
                raise ShapeError(f"cannot broadcast shape {self.shape} to {shape}")
        return Layout(tuple(shape), tuple(strides), self.offset)

    def reshape(self, shape: tuple) -> "Layout | None":
        """A view with the new shape, or None when the data must be copied.

        Works for contiguous layouts and for any layout whose dims can be grouped
        so that each group of new dims maps onto a run of old dims that is
        contiguous within itself (the rule PyTorch's view follows)."""
        if self.contiguous:
            return Layout.contig(shape, self.offset)
        new_strides = _view_strides(self.shape, self.strides, shape)
        return None if new_strides is None else Layout(shape, new_strides, self.offset)


_new_layout = object.__new__


def raw(shape: tuple, strides: tuple, offset: int, numel: int, contiguous: bool) -> Layout:
    """A Layout whose numel and contiguity the caller already knows (hot paths)."""
    lay = _new_layout(Layout)
    lay.shape = shape
    lay.strides = strides
    lay.offset = offset
    lay.numel = numel
    lay.contiguous = contiguous
    return lay


def _is_contiguous(shape, strides) -> bool:
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        d = shape[i]
        if d != 1 and strides[i] != acc:
            return 0 in shape  # an empty view is contiguous whatever its strides
        acc *= d
    return True


def _view_strides(old_shape, old_strides, new_shape):
    if numel(old_shape) == 0:
        return contiguous_strides(new_shape)
    # Drop size-1 dims from the old layout; they constrain nothing.
    old = [(d, s) for d, s in zip(old_shape, old_strides) if d != 1]
    new_strides = [0] * len(new_shape)
    oi, ni = 0, 0
    n_new = len(new_shape)
    while ni < n_new:
        if new_shape[ni] == 1:
            new_strides[ni] = 1
            ni += 1
            continue
        if oi >= len(old):
            return None
        # Grow a chunk of old dims and new dims with equal element counts.
        chunk_old = [old[oi]]
        size_old = old[oi][0]
        oi += 1
        chunk_new = [ni]
        size_new = new_shape[ni]
        ni += 1
        while size_old != size_new:
            if size_old < size_new:
                if oi >= len(old):
                    return None
                chunk_old.append(old[oi])
                size_old *= old[oi][0]
                oi += 1
            else:
                while ni < n_new and new_shape[ni] == 1:
                    new_strides[ni] = 1
                    ni += 1
                if ni >= n_new:
                    return None
                chunk_new.append(ni)
                size_new *= new_shape[ni]
                ni += 1
        # The old dims of the chunk must be contiguous among themselves.
        for (d0, s0), (d1, s1) in zip(chunk_old, chunk_old[1:]):
            if s0 != d1 * s1:
                return None
        stride = chunk_old[-1][1]
        for j in reversed(chunk_new):
            new_strides[j] = stride
            stride *= new_shape[j]
    if oi != len(old):
        return None
    return tuple(new_strides)
