"""Matrix products and vector norms."""

from __future__ import annotations

import math

from ..autograd.helpers import sum_to
from ..errors import ArgumentError, ShapeError
from ..layout import Layout, numel
from ..tensor import Tensor
from .core import broadcast_shape, check_tensor, require_float, same_device, same_dtype
from .dispatch import OpDef, apply, apply_binary, define
from .reduce import _ACCUMULATE


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Batched matmul with PyTorch's rules: (..., m, k) @ (..., k, n) with batch
    dims broadcast; a 1-d operand is a row (left) or column (right) vector that
    is dropped from the result. Operands may have any strides."""
    if a.__class__ is not Tensor or b.__class__ is not Tensor:
        check_tensor("matmul", a, "left operand")
        check_tensor("matmul", b, "right operand")
    sa, sb = a._layout.shape, b._layout.shape
    if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]:  # the common case, in short
        return apply_binary(MATMUL, a, b, None, (sa[0], sb[1]))
    if not sa or not sb:
        raise ShapeError(f"matmul: operands need at least 1 dim, got shapes {a.shape} and {b.shape}")
    out = apply(MATMUL, a, b)
    if a.rank == 1 or b.rank == 1:
        shape = out.shape[:-2] + out.shape[-2:-1] * (a.rank > 1) + out.shape[-1:] * (b.rank > 1)
        out = out.reshape(shape)
    return out


def _matmul_prepare(a: Tensor, b: Tensor):
    """The product of a and b as (..., m, k) @ (..., k, n), 1-d operands
    viewed as a row or a column."""
    dtype = a._dtype
    if b._dtype is not dtype:
        same_dtype("matmul", a, b)
    if b._device is not a._device:
        same_device("matmul", a, b)
    la, lb = a._layout, b._layout
    if len(la.shape) == 2 and len(lb.shape) == 2 and la.shape[1] == lb.shape[0]:  # the common case, in short
        return (la.shape[0], lb.shape[1]), dtype, (a._storage, la, b._storage, lb)
    if la.rank == 1:
        la = la.unsqueeze(0)
    if lb.rank == 1:
        lb = lb.unsqueeze(1)
    m, k = la.shape[-2:]
    k2, n = lb.shape[-2:]
    if k != k2:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not match: inner dims {k} and {k2} differ")
    batch = la.shape[:-2]
    if lb.shape[:-2] != batch:
        batch = broadcast_shape("matmul", batch, lb.shape[:-2])
        la = la.broadcast_as(batch + (m, k))
        lb = lb.broadcast_as(batch + (k, n))
    shape = batch + (m, n)
    if batch and not any(lb.strides[:-2]) and n:
        # One right operand for every batch (x @ weight): the batches stacked as rows make one product
        # with a taller left operand, which the kernel blocks better than many short ones.
        rows = la.reshape((numel(shape) // n, k))
        if rows is not None:
            la, lb = rows, Layout(lb.shape[-2:], lb.strides[-2:], lb.offset)
    return shape, dtype, (a._storage, la, b._storage, lb)


def _matmul_backward(inputs, out, g):
    """dA = G @ B^T and dB = A^T @ G, summed over broadcast batch dims."""
    a, b = inputs
    a2 = a.unsqueeze(0) if a.rank == 1 else a
    b2 = b.unsqueeze(1) if b.rank == 1 else b
    ga = sum_to(_laid_out_like(a2, g, b2.transpose(-1, -2)), a2.shape).reshape(a.shape) if a._node is not None else None
    gb = sum_to(_laid_out_like(b2, a2.transpose(-1, -2), g), b2.shape).reshape(b.shape) if b._node is not None else None
    return ga, gb


def _laid_out_like(x: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """left @ right, column-major when x is (a transposed view, such as a
    Linear's weight.t()): the gradient then reaches the weight contiguous,
    so the optimizer reads it without a copy."""
    if x.rank >= 2 and x._layout.strides[-2] == 1 and x._layout.strides[-1] != 1:
        return matmul(right.transpose(-1, -2), left.transpose(-1, -2)).transpose(-1, -2)
    return matmul(left, right)


MATMUL = define(OpDef("matmul", prepare=_matmul_prepare, backward=_matmul_backward))


def mm(a: Tensor, b: Tensor) -> Tensor:
    """The product of two matrices (2-d only, no broadcasting: PyTorch's mm)."""
    check_tensor("mm", a, "left operand")
    check_tensor("mm", b, "right operand")
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"mm: needs two 2-d tensors, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched products of (b, n, m) and (b, m, p) (3-d, equal batches: PyTorch's bmm)."""
    check_tensor("bmm", a, "left operand")
    check_tensor("bmm", b, "right operand")
    if a.rank != 3 or b.rank != 3 or a.shape[0] != b.shape[0]:
        raise ShapeError(f"bmm: needs two 3-d tensors with the same batch size, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)


def norm(x: Tensor, p=2, dim=None, keepdim: bool = False) -> Tensor:
    """The vector p-norm over dim (all dims when None): p a positive number,
    inf (max |x|), -inf (min |x|), 0 (the count of nonzeros) or 'fro' (2).
    Halves are computed in f32, as their means are."""
    check_tensor("norm", x)
    require_float("norm", x)
    if p == "fro":
        p = 2
    if isinstance(p, str) or not isinstance(p, (int, float)) or p < 0 and p != -math.inf:
        raise ArgumentError(f"norm: p must be 'fro', inf, -inf or a number >= 0, got {p!r}")
    if x._dtype in _ACCUMULATE:
        return norm(x.to_dtype(_ACCUMULATE[x._dtype]), p, dim, keepdim).to_dtype(x._dtype)
    if p == math.inf:
        return abs(x).amax(dim, keepdim)
    if p == -math.inf:
        return abs(x).amin(dim, keepdim)
    if p == 0:
        return (x != 0).to_dtype(x._dtype).sum(dim, keepdim)
    if p == 1:
        return abs(x).sum(dim, keepdim)
    if p == 2:
        return x.sqr().sum(dim, keepdim).sqrt()
    return abs(x).powf(p).sum(dim, keepdim).powf(1.0 / p)
