"""Parameters and in-place assignment, shared by modules, VarMap and nn.init."""

from __future__ import annotations

import numpy as np

from ..autograd import versions
from ..errors import ShapeError
from ..ops.creation import from_array
from ..ops.shape import copy_into
from ..tensor import Tensor
from ..var import Var

#: A trainable tensor, as ``torch.nn.Parameter``: the same class as :class:`candle_api.Var`.
Parameter = Var


def assign_(target: Tensor, value, name: str = "tensor") -> None:
    """Writes ``value`` (a Tensor or numpy array of the same shape) into
    ``target``'s storage, converting dtype and device, so every view of the
    target (a state_dict entry, a VarMap entry) sees the new values."""
    if isinstance(value, np.ndarray):
        value = from_array(value)
    if not isinstance(value, Tensor):
        raise TypeError(f"{name}: expected a Tensor or a numpy array, got {type(value).__name__}")
    if value.shape != target.shape:
        raise ShapeError(f"{name}: a value of shape {value.shape} for a tensor of shape {target.shape}")
    value = value.detach().to_device(target.device).to_dtype(target.dtype)
    copy_into(target, target._layout, value)
    versions.bump(target)
