"""Making tensors: from Python data or numpy, constant fills, ranges, random
values; moving them between devices and dtypes."""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import device as device_mod
from ..autograd.graph import is_grad_enabled, record
from ..device import get_device, known_devices
from ..dtype import bf16, f32, get_dtype, from_numpy_dtype, i64, u32
from ..errors import ArgumentError, DTypeError, ShapeError
from ..layout import Layout, check_shape
from ..tensor import Tensor, _shape_args
from .core import make
from . import dispatch
from .dispatch import OpDef, apply, define


def _infer_dtype(arr: np.ndarray):
    """candle-pyo3's rules for Python data: floats -> f32; ints -> u32 when they
    all fit, else i64; bools -> u8."""
    kind = arr.dtype.kind
    if kind == "f":
        return f32
    if kind in "iu":
        if arr.size == 0 or (arr.min() >= 0 and arr.max() <= 0xFFFFFFFF):
            return u32
        if arr.min() >= -(2**63) and arr.max() < 2**63:
            return i64
        raise DTypeError("integer values do not fit in i64")
    return from_numpy_dtype(arr.dtype)


def _to_array(data) -> np.ndarray:
    try:
        arr = np.asarray(data)
    except (ValueError, OverflowError) as exc:
        raise ShapeError(f"cannot make a tensor from {type(data).__name__}: {exc}") from None
    if arr.dtype == object:
        raise ShapeError(f"cannot make a tensor from ragged or non-numeric data of type {type(data).__name__}")
    return arr


def _cast_rules(arr: np.ndarray, dt) -> np.ndarray:
    """Data converted into dtype dt as docs/semantics.md says casts do, not as
    NumPy's astype would: floats saturate into integers and NaN becomes 0;
    integers that do not fit an integer dtype are refused (a cast of a tensor
    would wrap them, but data written as a literal means the number)."""
    if not dt.is_int or not arr.size or arr.dtype == dt.np:
        return arr
    info = np.iinfo(dt.np)
    if arr.dtype.kind == "f" or arr.dtype == bf16.np:
        v = np.asarray(arr, np.float64)
        top = float(info.max) if float(info.max) <= info.max else np.nextafter(float(info.max), 0.0)
        v = np.where(np.isnan(v), 0.0, v)
        return np.where(v > top, info.max, np.clip(np.trunc(v), float(info.min), top).astype(np.int64)).astype(dt.np)
    if arr.dtype.kind in "iu":
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise DTypeError(f"the value {lo if lo < info.min else hi} does not fit in {dt}")
    return arr


def _has_float(data) -> bool:
    """Whether (nested) data holds a float, which makes Tensor(data) a float tensor."""
    if isinstance(data, (list, tuple)):
        return any(_has_float(item) for item in data)
    return isinstance(data, float)


def _refuse_ints_beyond(data, lo: int, hi: int, dtype) -> None:
    """DTypeError for a Python int in (nested) data outside [lo, hi]."""
    if isinstance(data, (list, tuple)):
        for item in data:
            _refuse_ints_beyond(item, lo, hi, dtype)
    elif isinstance(data, int) and not lo <= data <= hi:
        raise DTypeError(f"the value {data} does not fit in {dtype}")


def from_array(arr: np.ndarray, dtype=None, device=None, copy: bool = True) -> Tensor:
    """A tensor from a numpy array, converting to ``dtype`` when given.
    With copy=False on a host backend the tensor shares the array's memory."""
    dev = get_device(device)
    dt = get_dtype(dtype) if dtype is not None else from_numpy_dtype(arr.dtype)
    dev.check_dtype(dt)
    if arr.dtype != dt.np:
        arr = arr.astype(dt.np)
        copy = False  # already a fresh array
    shape = check_shape(arr.shape)
    storage, layout = dev.backend.from_numpy(arr.view(np.uint8) if dt.is_bool else arr, copy)
    return make(storage, layout if layout is not None else Layout.contig(shape), dt, dev)


def tensor(data, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of ``data`` (scalar, nested lists, numpy array, Tensor)."""
    if isinstance(data, Tensor):
        out = data.to_device(device) if device is not None else data.copy()
        return out.to_dtype(dtype) if dtype is not None else out
    arr = _to_array(data)
    if isinstance(data, np.ndarray) or hasattr(data, "__array__") or hasattr(data, "__array_interface__"):
        dt = get_dtype(dtype) if dtype is not None else None
    else:
        dt = get_dtype(dtype) if dtype is not None else None
        if arr.dtype.kind == "f" and arr.size and (dt.is_int if dt is not None else not _has_float(data)):
            # NumPy turns ints mixed with floats, or past i64 ([2**63, -1]), into floats without a word: in
            # an integer dtype the ints among them are literals, held to the integer rule one by one
            info = np.iinfo(dt.np if dt is not None else np.int64)
            _refuse_ints_beyond(data, int(info.min), int(info.max), dt or "i64")
        dt = dt or _infer_dtype(arr)
    return from_array(_cast_rules(arr, dt) if dt is not None else arr, dt, device)


def from_numpy(arr: np.ndarray, device=None) -> Tensor:
    """A tensor sharing ``arr``'s memory on the cpu (zero-copy, any non-negative
    strides), copied to other devices. Later writes to ``arr`` show in the tensor."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy takes a numpy array, got {type(arr).__name__}")
    return from_array(arr, None, device, copy=False)


def _fill(shape, value, dtype, device) -> Tensor:
    shape = check_shape(_shape_args(shape))
    dt = get_dtype(dtype) if dtype is not None else f32
    dev = get_device(device)
    out = empty(shape, dtype=dt, device=dev)
    fill_(out, value)  # an empty tensor too: the value is checked all the same
    return out


def fill_(t: Tensor, value) -> Tensor:
    """Sets every element of t (any layout) to value, in place."""
    value = _cast_rules(np.asarray(value), t._dtype).astype(t._dtype.np).tobytes()
    if t._layout.numel:
        apply(FILL, t, value=value)
    return t


FILL = define(OpDef("fill", prepare=lambda t, value: (None, None, (t._storage, t._layout, value))))


def zeros(*shape, dtype=None, device=None) -> Tensor:
    return _fill(shape, 0, dtype, device)


def ones(*shape, dtype=None, device=None) -> Tensor:
    return _fill(shape, 1, dtype, device)


def full(shape, fill_value, dtype=None, device=None) -> Tensor:
    if dtype is None:
        dtype = _infer_dtype(np.asarray(fill_value))  # True/False: bool, as torch.full gives
    return _fill((shape,) if isinstance(shape, int) else tuple(shape), fill_value, dtype, device)


def empty(*shape, dtype=None, device=None) -> Tensor:
    """A tensor with uninitialized contents."""
    shape = check_shape(_shape_args(shape))
    dt = get_dtype(dtype) if dtype is not None else f32
    dev = get_device(device)
    dev.check_dtype(dt)
    lay = Layout.contig(shape)
    return make(dev.backend.alloc(lay.numel * dt.itemsize), lay, dt, dev)


def _like(fn, x: Tensor, dtype, device, *args):
    return fn(x.shape, *args, dtype=dtype if dtype is not None else x.dtype,
              device=device if device is not None else x.device)


def zeros_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return _like(zeros, x, dtype, device)


def ones_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return _like(ones, x, dtype, device)


def empty_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return _like(empty, x, dtype, device)


def full_like(x: Tensor, fill_value, dtype=None, device=None) -> Tensor:
    return full(x.shape, fill_value, dtype=dtype if dtype is not None else x.dtype,
                device=device if device is not None else x.device)


def rand_like(x: Tensor, lo: float = 0.0, up: float = 1.0) -> Tensor:
    return rand(x.shape, lo=lo, up=up, dtype=x.dtype, device=x.device)


def randn_like(x: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return randn(x.shape, mean=mean, std=std, dtype=x.dtype, device=x.device)


def arange(start, end=None, step=1, dtype=None, device=None) -> Tensor:
    """Values from start (inclusive) to end (exclusive). Integer arguments give
    i64, floats f32 (as PyTorch), unless dtype says otherwise."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    for name, v in (("start", start), ("end", end), ("step", step)):
        if not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ArgumentError(f"arange: {name} must be a finite number, got {v!r}")
    if dtype is None:
        dtype = i64 if all(isinstance(v, numbers.Integral) for v in (start, end, step)) else f32
    dt = get_dtype(dtype)
    count = max(0, math.ceil((end - start) / step))
    if count > MAX_ARANGE:
        raise ShapeError(f"arange: {count} values are too many for one tensor (at most {MAX_ARANGE})")
    values = np.arange(start, end, step, dtype=np.float64 if dt.is_float else np.int64)
    return from_array(values, dt, device)


#: More values than arange makes (2^40: 8 TiB of i64); NumPy refuses far sooner than memory runs out.
MAX_ARANGE = 1 << 40


def arange_step(start, end, step, dtype=None, device=None) -> Tensor:
    return arange(start, end, step, dtype=dtype, device=device)


def linspace(start, end, steps: int, dtype=None, device=None) -> Tensor:
    """steps values evenly spaced from start to end, both included (f32 unless
    dtype says otherwise; integer dtypes truncate, as PyTorch's)."""
    if not isinstance(steps, numbers.Integral) or steps < 0:
        raise ArgumentError(f"linspace: steps must be an int >= 0, got {steps!r}")
    for name, v in (("start", start), ("end", end)):
        if not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ArgumentError(f"linspace: {name} must be a finite number, got {v!r}")
    if steps > MAX_ARANGE:
        raise ShapeError(f"linspace: {steps} values are too many for one tensor (at most {MAX_ARANGE})")
    dt = get_dtype(dtype) if dtype is not None else f32
    return from_array(_cast_rules(np.linspace(start, end, int(steps)), dt), dt, device)


def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    dt = get_dtype(dtype) if dtype is not None else f32
    return from_array(np.eye(n, m if m is not None else n, dtype=dt.np), dt, device)


def _random(shape, dist: int, p0: float, p1: float, dtype, device) -> Tensor:
    shape = check_shape(_shape_args(shape))
    dt = get_dtype(dtype) if dtype is not None else f32
    if not dt.is_float:
        raise DTypeError(f"random values need a float dtype, got {dt}")
    dev = get_device(device)
    dev.check_dtype(dt)
    lay = Layout.contig(shape)
    n = lay.numel
    out = make(dev.backend.alloc(n * dt.itemsize), lay, dt, dev)
    if n:
        seed, offset = dev.next_random_offset(n)
        dev.backend.random(out._storage, dt, n, dist, float(p0), float(p1), seed, offset)
    return out


def rand(*shape, lo: float = 0.0, up: float = 1.0, dtype=None, device=None) -> Tensor:
    """Uniform values in [lo, up), from the device's seeded stream (see manual_seed)."""
    return _random(shape, 0, lo, up, dtype, device)


def randn(*shape, mean: float = 0.0, std: float = 1.0, dtype=None, device=None) -> Tensor:
    """Normal values, from the device's seeded stream (see manual_seed)."""
    return _random(shape, 1, mean, std, dtype, device)


def manual_seed(seed: int) -> None:
    """Resets the random stream of every device (and of devices made later)."""
    device_mod.DEFAULT_SEED = int(seed)
    for dev in known_devices():
        dev.manual_seed(seed)


def to_device(x: Tensor, device) -> Tensor:
    dev = get_device(device)
    if dev is x._device:
        return x
    host = x.numpy()  # from_array copies it (np.ascontiguousarray would make a 0-d array 1-d)
    out = from_array(host, x._dtype, dev)
    if dispatch.observer is not None:
        dispatch.observer.crossed(x._device, dev, host.nbytes)
    if x._node is not None and is_grad_enabled():
        source = x._device
        record(out, "to_device", (x,), lambda g: (to_device(g, source),))
    return out


def to(x: Tensor, *args, **kwargs) -> Tensor:
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)`` (other's
    dtype and device), or the keywords ``dtype``, ``device``, ``other``
    (PyTorch's ``non_blocking`` and ``copy`` too). An argument that is neither
    a dtype, a device nor a tensor, or no argument, is a TypeError; a dtype or
    device given twice is a ValueError (candle-pyo3's rules)."""
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    wanted = {"dtype": None, "device": None}
    named = [(key, value) for key in ("dtype", "device") if (value := kwargs.pop(key, None)) is not None]
    other = kwargs.pop("other", None)
    if kwargs:
        raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
    for arg in args + ((other,) if other is not None else ()):
        if isinstance(arg, Tensor):
            _set_once(wanted, "dtype", arg.dtype)
            _set_once(wanted, "device", arg.device)
        else:
            _set_once(wanted, _kind_of(arg), arg)
    for key, value in named:
        if key == "dtype" and not _is_dtype(value):
            raise TypeError(f"to(dtype=...): {value!r} is not a dtype")
        _set_once(wanted, key, value)
    dtype, device = wanted["dtype"], wanted["device"]
    if dtype is None and device is None:
        raise TypeError("to() needs a dtype, a device or a tensor")
    out = x.to_device(device) if device is not None else x
    out = out.to_dtype(dtype) if dtype is not None else out
    return out.copy() if copy and out is x else out


def _set_once(wanted: dict, key: str, value) -> None:
    if wanted[key] is not None:
        raise ValueError(f"to(): the {key} is given twice ({wanted[key]} and {value})")
    wanted[key] = value


def _kind_of(arg) -> str:
    """Whether a positional argument of to() is a dtype or a device; TypeError for neither."""
    if _is_dtype(arg):
        return "dtype"
    if isinstance(arg, str) and device_mod.is_device_name(arg) or hasattr(arg, "type"):
        return "device"
    raise TypeError(f"to(): {arg!r} is neither a dtype, a device nor a tensor")


def _is_dtype(value) -> bool:
    try:
        get_dtype(value)
        return True
    except (DTypeError, TypeError):
        return False
