"""Var: a trainable tensor (Candle's Var, PyTorch's leaf with requires_grad)."""

from __future__ import annotations

from .autograd.graph import Leaf, no_grad
from .errors import DTypeError, ShapeError
from .tensor import Tensor, _shape_args


class Var(Tensor):
    """A float tensor that owns its storage, keeps its gradient in ``.grad``
    and is updated in place by :meth:`set` (optimizers use it).

    ``Var(data)`` takes what ``Tensor(data)`` takes, or a Tensor (copied)."""

    __slots__ = ()

    def __init__(self, data, dtype=None, device=None):
        from .ops import creation, shape

        if isinstance(data, Tensor):
            src = data.detach()
            if dtype is not None:
                src = src.to_dtype(dtype)
            if device is not None:
                src = src.to_device(device)
            src = shape.copy(src)
        else:
            src = creation.tensor(data, dtype=dtype, device=device)
        if not src.dtype.is_float:
            raise DTypeError(f"a Var needs a float dtype (gradients are floats), got {src.dtype}")
        self._storage, self._layout, self._dtype, self._device = src._storage, src._layout, src._dtype, src._device
        self._node = Leaf()

    @classmethod
    def from_tensor(cls, tensor: Tensor) -> "Var":
        return cls(tensor)

    @classmethod
    def zeros(cls, *shape, dtype="f32", device=None) -> "Var":
        from .ops.creation import zeros

        return cls(zeros(_shape_args(shape), dtype=dtype, device=device))

    @classmethod
    def ones(cls, *shape, dtype="f32", device=None) -> "Var":
        from .ops.creation import ones

        return cls(ones(_shape_args(shape), dtype=dtype, device=device))

    @classmethod
    def rand(cls, *shape, lo: float = 0.0, up: float = 1.0, dtype="f32", device=None) -> "Var":
        from .ops.creation import rand

        return cls(rand(_shape_args(shape), lo=lo, up=up, dtype=dtype, device=device))

    @classmethod
    def randn(cls, *shape, mean: float = 0.0, std: float = 1.0, dtype="f32", device=None) -> "Var":
        from .ops.creation import randn

        return cls(randn(_shape_args(shape), mean=mean, std=std, dtype=dtype, device=device))

    def as_tensor(self) -> Tensor:
        """The current values as a plain tensor sharing this Var's storage."""
        return self.detach()

    def set(self, value: Tensor) -> None:
        """Overwrites the values in place (same shape, dtype and device)."""
        from .autograd import versions
        from .ops.shape import copy_into

        if not isinstance(value, Tensor):
            raise TypeError(f"Var.set takes a Tensor, got {type(value).__name__}")
        if value.shape != self.shape or value.dtype is not self.dtype or value.device is not self.device:
            raise ShapeError(f"Var.set: a value of shape {value.shape}, {value.dtype} on {value.device} for a Var "
                             f"of shape {self.shape}, {self.dtype} on {self.device}")
        with no_grad():
            copy_into(self, self._layout, value)
        versions.bump(self)
