"""Logical and bitwise ops: ``logical_and/or/xor/not`` (any dtype, nonzero is
true, a bool result as in PyTorch) and the operators ``& | ^ ~``: logical on
bool tensors, bitwise on integer tensors (two's complement), as in PyTorch.

bool work runs on u8 kernels over the same bytes (maximum, minimum, ne), so
every backend serves it. Integers have no bit kernels: a bitwise op sums the
bit planes of its operands, one plane at a time, with integer arithmetic.
"""

from __future__ import annotations

from ..dtype import bool_, u8
from ..errors import DTypeError
from ..tensor import Tensor
from .core import check_tensor, reinterpret, same_device
from .elementwise import binary, compare, floor_divide, scalar


def truth(x: Tensor) -> Tensor:
    """u8 0/1: whether each element of x is nonzero (a bool's own bytes)."""
    check_tensor("truth", x)
    return reinterpret(x, u8) if x._dtype is bool_ else compare("ne", x, 0)


def _as_tensor(x: Tensor, other) -> Tensor:
    if isinstance(other, Tensor):
        return other
    if isinstance(other, (bool, int)):
        return scalar(other, x._dtype, x._device)
    raise TypeError(f"expected a Tensor, a bool or an int, got {type(other).__name__}")


def logical_and(a: Tensor, b) -> Tensor:
    """bool: a and b nonzero (broadcasting)."""
    b = _as_tensor(a, b)
    same_device("logical_and", a, b)
    return reinterpret(binary("minimum", truth(a), truth(b)), bool_)


def logical_or(a: Tensor, b) -> Tensor:
    b = _as_tensor(a, b)
    same_device("logical_or", a, b)
    return reinterpret(binary("maximum", truth(a), truth(b)), bool_)


def logical_xor(a: Tensor, b) -> Tensor:
    b = _as_tensor(a, b)
    same_device("logical_xor", a, b)
    return reinterpret(compare("ne", truth(a), truth(b)), bool_)


def logical_not(x: Tensor) -> Tensor:
    return reinterpret(compare("eq", truth(x), 0), bool_)


def _operands(op: str, a: Tensor, b) -> tuple:
    b = _as_tensor(a, b)
    if a._dtype is not b._dtype:
        raise DTypeError(f"{op}: dtypes differ ({a._dtype}, {b._dtype}); convert one (a bool mask: .bool())")
    if a._dtype.is_float:
        raise DTypeError(f"{op} takes bool or integer tensors, got {a._dtype}")
    return a, b


def bit_and(a: Tensor, b: Tensor, bits: int | None = None) -> Tensor:
    """a & b of integer tensors holding ``bits``-bit values (the dtype's width by
    default; two's complement when it is signed), summed plane by plane."""
    bits = bits or a._dtype.itemsize * 8
    out = None
    for k in range(bits):
        if a._dtype.is_signed and k == bits - 1:  # the sign bit weighs -2**k
            term = (binary("mul", compare("lt", a, 0), compare("lt", b, 0))).to_dtype(a._dtype) * -(2 ** k)
        else:
            p = 2 ** k
            term = (floor_divide(a, p) % 2) * (floor_divide(b, p) % 2) * p
        out = term if out is None else out + term
    return out


def bitwise_and(a: Tensor, b) -> Tensor:
    """a & b: logical for bool, bitwise for integers."""
    a, b = _operands("&", a, b)
    return logical_and(a, b) if a._dtype is bool_ else bit_and(a, b)


def bitwise_or(a: Tensor, b) -> Tensor:
    a, b = _operands("|", a, b)
    return logical_or(a, b) if a._dtype is bool_ else a + b - bit_and(a, b)


def bitwise_xor(a: Tensor, b) -> Tensor:
    a, b = _operands("^", a, b)
    return logical_xor(a, b) if a._dtype is bool_ else a + b - bit_and(a, b) * 2


def bitwise_not(x: Tensor) -> Tensor:
    """~x: logical for bool, bitwise for integers (all ones minus x unsigned, -x - 1 signed)."""
    check_tensor("~", x)
    if x._dtype is bool_:
        return logical_not(x)
    if x._dtype.is_float:
        raise DTypeError(f"~ takes bool or integer tensors, got {x._dtype}")
    if x._dtype.is_signed:
        return -x - 1
    return scalar((1 << (x._dtype.itemsize * 8)) - 1, x._dtype, x._device) - x
