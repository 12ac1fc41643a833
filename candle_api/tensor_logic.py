"""The Tensor's logical and bitwise methods (``logical_and``..., ``& | ^ ~``),
a base class of :class:`candle_api.Tensor`; the work is in
:mod:`candle_api.ops.logical`."""

from __future__ import annotations


def _ops():
    from .ops import logical

    return logical


class LogicalMethods:
    __slots__ = ()

    def logical_and(self, other):
        """bool: both nonzero (PyTorch's logical_and; any dtypes, broadcasting)."""
        return _ops().logical_and(self, other)

    def logical_or(self, other):
        return _ops().logical_or(self, other)

    def logical_xor(self, other):
        return _ops().logical_xor(self, other)

    def logical_not(self):
        return _ops().logical_not(self)

    def __and__(self, other):
        """Logical on bool tensors, bitwise on integers (PyTorch's &)."""
        return _ops().bitwise_and(self, other)

    def __or__(self, other):
        return _ops().bitwise_or(self, other)

    def __xor__(self, other):
        return _ops().bitwise_xor(self, other)

    def __invert__(self):
        return _ops().bitwise_not(self)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    bitwise_and, bitwise_or, bitwise_xor, bitwise_not = __and__, __or__, __xor__, __invert__
