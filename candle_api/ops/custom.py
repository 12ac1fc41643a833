"""Calling ops that plugins define (``candle_api_custom_ops`` hook)."""

from __future__ import annotations

from ..errors import UnsupportedOpError
from ..registry import registry
from ..tensor import Tensor
from .core import check_tensor, same_device, same_dtype
from .dispatch import apply


def custom_op(name: str, *inputs: Tensor, **params) -> Tensor:
    """Runs the plugin-defined op ``name`` on the inputs' device: its kernel
    when the device has one for the first input's dtype, else the op's
    decomposition. Kernels are called as ``kernel(out, [(storage, layout)...], params)``."""
    registry().ensure_loaded()
    op = registry().ops.get(name)
    if op is None:
        raise UnsupportedOpError(name, "any device", None, registry().ops.names())
    if not inputs:
        raise TypeError(f"custom op {name!r} needs at least one tensor input")
    for t in inputs:
        check_tensor(name, t, "input")
    same_device(name, *inputs)
    same_dtype(name, *inputs)  # the kernel is chosen by one dtype and told no other
    return apply(op, *inputs, **params)
