"""Predicates and truth reductions: isnan, isinf, isfinite, isclose, allclose,
any, all. Predicates give u8 tensors of 0/1, as Candle's comparisons; any and
all give bool for a bool input and u8 otherwise, as PyTorch's do for bool and
uint8 (allclose is a Python bool, as in PyTorch)."""

from __future__ import annotations

import math

from ..dtype import bool_, f64, u8
from ..tensor import Tensor
from .core import check_tensor, dims_arg, same_device, same_dtype
from .creation import full
from .elementwise import cast, compare
from .reduce import _ACCUMULATE, _out_shape, reduce


def _constant(x: Tensor, value: int) -> Tensor:
    """A u8 tensor of x's shape holding value: integers are never NaN or infinite."""
    return full(x.shape, value, dtype=u8, device=x._device)


def isnan(x: Tensor) -> Tensor:
    check_tensor("isnan", x)
    return x != x if x._dtype.is_float else _constant(x, 0)


def isinf(x: Tensor) -> Tensor:
    check_tensor("isinf", x)
    return abs(x) == math.inf if x._dtype.is_float else _constant(x, 0)


def isfinite(x: Tensor) -> Tensor:
    check_tensor("isfinite", x)
    return (x - x) == 0 if x._dtype.is_float else _constant(x, 1)  # inf - inf and NaN - NaN are NaN


def isclose(a: Tensor, b: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|a - b| <= atol + rtol * |b| elementwise (PyTorch's and NumPy's rule), with
    equal infinities close and, with equal_nan, NaN close to NaN. Integers are
    compared in f64, halves in f32, so atol does not vanish in the dtype."""
    check_tensor("isclose", a)
    check_tensor("isclose", b, "other")
    same_dtype("isclose", a, b)
    same_device("isclose", a, b)
    if a._dtype.is_bool:
        return a == b
    wider = f64 if a._dtype.is_int else _ACCUMULATE.get(a._dtype, a._dtype)
    a, b = cast(a, wider), cast(b, wider)
    diff = abs(a - b)
    close = ((diff <= abs(b) * rtol + atol) * isfinite(diff)).maximum(a == b)  # inf - -inf is not within inf
    return close.maximum(isnan(a) * isnan(b)) if equal_nan else close


def allclose(a: Tensor, b: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(all_(isclose(a, b, rtol, atol, equal_nan)).item())


def _truth(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    """any/all as max/min of x != 0; an empty reduction is False/True, as in PyTorch."""
    check_tensor(op, x)
    dims = dims_arg(op, dim, x.rank)
    out = bool_ if x._dtype is bool_ else u8
    if any(x.shape[d] == 0 for d in dims):
        return full(_out_shape(x.shape, dims, keepdim), int(op == "all"), dtype=out, device=x._device)
    mask = x if out is bool_ else compare("ne", x, 0)
    return reduce("max" if op == "any" else "min", mask, dims, keepdim)


def any_(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Whether some element along dim (all dims when None) is nonzero (NaN counts):
    bool for a bool x, else u8."""
    return _truth("any", x, dim, keepdim)


def all_(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Whether every element along dim (all dims when None) is nonzero (bool for bool, else u8)."""
    return _truth("all", x, dim, keepdim)

