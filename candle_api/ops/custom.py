"""Calling ops that plugins define (``candle_api_custom_ops`` hook)."""

from __future__ import annotations

from ..autograd.graph import record, tracks
from ..errors import CandleError, UnsupportedOpError
from ..registry import registry
from ..tensor import Tensor
from .core import check_tensor, empty, same_device, unsupported


def custom_op(name: str, *inputs: Tensor, **params) -> Tensor:
    """Runs the plugin-defined op ``name`` on the inputs' device: its kernel
    when the device has one for the first input's dtype, else the op's
    decomposition. Kernels are called as ``kernel(out, [(storage, layout)...], params)``."""
    registry().ensure_loaded()
    opdef = registry().ops.get(name)
    if opdef is None:
        raise UnsupportedOpError(name, "any device", None, registry().ops.names())
    if not inputs:
        raise TypeError(f"custom op {name!r} needs at least one tensor input")
    for t in inputs:
        check_tensor(name, t, "input")
    dev = same_device(name, *inputs)
    k = dev.kernels.get((name, inputs[0].dtype))
    if k is None:
        if opdef.decompose is not None:
            return opdef.decompose(*inputs, **params)
        raise unsupported(name, dev, inputs[0].dtype)
    shape, out_dtype = opdef.infer(*inputs, **params)
    out = empty(tuple(shape), out_dtype, dev)
    if out._layout.numel:
        k(out._storage, [(t._storage, t._layout) for t in inputs], params)
    if tracks(*inputs):
        result = out.detach()  # a closure holding out would be a reference cycle
        record(out, name, inputs, lambda g: _custom_backward(opdef, inputs, result, g, params))
    return out


def _custom_backward(opdef, inputs, out, g, params):
    if opdef.backward is None:
        raise CandleError(f"custom op {opdef.name!r} has no backward: it cannot pass gradients to its inputs "
                          "(give its OpDef a backward, or a decompose and run it on a device without the kernel)")
    return tuple(opdef.backward(inputs, out, g, **params))
