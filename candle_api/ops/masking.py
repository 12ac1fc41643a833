"""Masks: triangles (tril, triu and Candle's tril2 / triu2), masked_fill,
masked_select and nonzero, built on the device from comparisons, where,
cumsum, scatter and index_select. Masks are bool or u8 (as Candle's
comparisons give them; any integer works: nonzero is true).

nonzero and masked_select have a data-dependent size: the count of true
elements is read back (one scalar, as PyTorch synchronizes too); the indices
themselves are computed on the device.
"""

from __future__ import annotations

from ..device import get_device
from ..dtype import f32, get_dtype, i64, u32
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .core import broadcast_shape, check_tensor, same_device
from .creation import arange, zeros
from .elementwise import cast, compare, scalar, where
from .indexing import index_select, scatter
from .shape import stack


def _triangle(rows: int, cols: int, diagonal: int, lower: bool, device) -> Tensor:
    """u8 (rows, cols): 1 where col - row <= diagonal (lower) or >= diagonal (upper)."""
    offset = arange(cols, dtype=i64, device=device) - arange(rows, dtype=i64, device=device).unsqueeze(1)
    return compare("le" if lower else "ge", offset, diagonal)


def _tri(op: str, x: Tensor, diagonal: int, lower: bool) -> Tensor:
    check_tensor(op, x)
    if x.rank < 2:
        raise ShapeError(f"{op}: needs at least 2 dims, got shape {x.shape}")
    return where(_triangle(*x.shape[-2:], int(diagonal), lower, x._device), x, 0)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """x with the elements above the diagonal-th diagonal set to 0 (over the last two dims)."""
    return _tri("tril", x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """x with the elements below the diagonal-th diagonal set to 0 (over the last two dims)."""
    return _tri("triu", x, diagonal, False)


def tril2(n: int, dtype=None, device=None) -> Tensor:
    """Candle's tril2: an (n, n) matrix of ones on and below the diagonal."""
    return cast(_triangle(n, n, 0, True, get_device(device)), get_dtype(dtype) if dtype is not None else f32)


def triu2(n: int, dtype=None, device=None) -> Tensor:
    """Candle's triu2: an (n, n) matrix of ones on and above the diagonal."""
    return cast(_triangle(n, n, 0, False, get_device(device)), get_dtype(dtype) if dtype is not None else f32)


def _check_mask(op: str, mask) -> Tensor:
    check_tensor(op, mask, "mask")
    if mask._dtype.is_float:
        raise DTypeError(f"{op}: the mask must be bool or u8 (or another integer dtype), got {mask._dtype}")
    return mask


def masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    """x with value (a scalar or a 0-d tensor) where mask (bool or u8), broadcast to x's shape, is nonzero."""
    check_tensor("masked_fill", x)
    _check_mask("masked_fill", mask)
    same_device("masked_fill", x, mask)
    if broadcast_shape("masked_fill", x.shape, mask.shape) != x.shape:
        raise ShapeError(f"masked_fill: a mask of shape {mask.shape} does not broadcast to {x.shape}")
    if isinstance(value, Tensor) and value.rank:
        raise ShapeError(f"masked_fill: the value must be a scalar or a 0-d tensor, got shape {value.shape}")
    return where(mask, value, x)


def _flat_nonzero(mask: Tensor) -> Tensor:
    """i64 positions of the nonzero elements of the flattened mask, in order:
    element i, when set, goes to slot cumsum(set)[i] - 1; the others are added
    into a spare last slot that is cut off (scatter_add: duplicates are defined)."""
    is_set = compare("ne", mask.flatten_all(), 0)
    hit = cast(is_set, i64)
    count = int(hit.sum_all().item()) if hit.numel() else 0
    slots = where(is_set, hit.cumsum(0) - 1, scalar(count, i64, mask._device))
    found = scatter(zeros(count + 1, dtype=i64, device=mask._device), slots,
                    arange(hit.numel(), dtype=i64, device=mask._device), 0, accumulate=True)
    return found.narrow(0, 0, count)


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """A 1-d tensor of the elements of x where mask is nonzero (x and mask broadcast together)."""
    check_tensor("masked_select", x)
    _check_mask("masked_select", mask)
    same_device("masked_select", x, mask)
    shape = broadcast_shape("masked_select", x.shape, mask.shape)
    return index_select(x.broadcast_as(shape).flatten_all(), _flat_nonzero(mask.broadcast_as(shape)), 0)


def nonzero(x: Tensor, as_tuple: bool = False):
    """The u32 coordinates of the nonzero elements in row-major order: (count, rank),
    or with as_tuple one 1-d tensor per dim (a 0-d x counts as 1-d)."""
    check_tensor("nonzero", x)
    shape = x.shape or (1,)
    flat = _flat_nonzero(x)
    coords, stride = [], 1
    for size in reversed(shape):
        coords.append(cast((flat / stride) % size, u32))
        stride *= size
    coords.reverse()
    if as_tuple:
        return tuple(coords)
    if not x.shape:
        return zeros(flat.shape[0], 0, dtype=u32, device=x._device)
    return stack(coords, 1)

