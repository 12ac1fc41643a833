"""Small tensor helpers the op families share: host reads of shape-like
inputs, constants on the node's device, axes, integer arithmetic that
candle-api's kernels do not provide directly (floor division, bit tests)."""

from __future__ import annotations

import numpy as np

import candle_api as c
from candle_api.ops.creation import from_array, from_numpy

from .dtypes import OnnxType, boundary_array, from_numpy_dtype, storage_array


def host(t) -> np.ndarray:
    """The tensor's values on the host (a view on cpu); host values (see host_shapes.py) as they are."""
    return t if isinstance(t, np.ndarray) else t.numpy()


def ints(t) -> list[int]:
    """A shape-like input (axes, sizes, pads...) as Python ints."""
    return np.asarray(host(t)).astype(np.int64, copy=False).reshape(-1).tolist()


def scalar(t):
    return host(t).reshape(-1)[0].item()


def const(value, dtype, device):
    """A tensor holding ``value`` (a scalar or array) in dtype on device."""
    arr = np.asarray(value, dtype=c.get_dtype(dtype).np, order="C")  # ascontiguousarray would make 0-d 1-d
    return from_array(arr, dtype, device)


def full(shape, value, dtype, device):
    return c.full(tuple(shape), value, dtype=dtype, device=device)


def arange(n: int, dtype, device):
    return c.arange(0, n, dtype=dtype, device=device)


def axis(a: int, rank: int, node=None) -> int:
    if not -rank <= a < max(rank, 1):
        if node is not None:
            raise node.fail(f"axis {a} is out of range for rank {rank}")
        raise ValueError(f"axis {a} is out of range for rank {rank}")
    return a + rank if a < 0 else a


def axes(values, rank: int, node=None) -> list[int]:
    return [axis(int(a), rank, node) for a in values]


def tensor_from_array(arr: np.ndarray, device, t: OnnxType | None = None):
    """An array of an ONNX type as the tensor holding it on device (sharing
    the array's memory on cpu when the storage dtype is the same)."""
    t = t or from_numpy_dtype(arr.dtype)
    tensor = from_numpy(np.asarray(storage_array(arr, t), order="C"))
    return tensor if device == "cpu" else tensor.to_device(device)


def to_numpy(t, onnx_type: OnnxType | None) -> np.ndarray:
    """A value leaving the evaluator as an array of its ONNX type."""
    arr = np.asarray(host(t))
    if onnx_type is None:
        return arr.copy()
    return np.array(boundary_array(arr, onnx_type), copy=True)


def bool_(t):
    """Any tensor as a u8 0/1 mask."""
    return t if t.dtype == "u8" and t._layout.numel == 0 else (t != 0)


def floor_div(a, b):
    """Integer division rounding down (candle's integer / truncates toward zero)."""
    r = a % b  # the remainder takes the divisor's sign, so a - r is an exact multiple of b
    return (a - r) / b


def broadcast(*tensors):
    shape = np.broadcast_shapes(*(t.shape for t in tensors))
    return [t if t.shape == shape else t.broadcast_as(shape) for t in tensors]


def move_to_last(x, a: int):
    """x with axis a moved last, and a function moving it back."""
    rank = x.rank
    if a == rank - 1:
        return x, lambda y: y
    order = [d for d in range(rank) if d != a] + [a]
    back = sorted(range(rank), key=order.__getitem__)
    return x.permute(order), lambda y: y.permute(back)


def narrow_to(x, shape):
    """x cut to ``shape`` (each dim no larger than x's) from the start."""
    for d, n in enumerate(shape):
        if x.shape[d] != n:
            x = x.narrow(d, 0, n)
    return x


def float_type(t):
    """The float dtype to compute t in: its own, or f32 for integers."""
    return t.dtype if t.dtype.is_float else c.f32
