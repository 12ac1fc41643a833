"""DLPack export (``Tensor.__dlpack__``) and import (``from_dlpack``), zero-copy.

Both capsule kinds are produced: the versioned DLPack 1.0 one
(``dltensor_versioned``, marked read-only, since tensors are immutable from
outside) when the consumer passes ``max_version`` >= (1, 0), else the legacy
``dltensor``. The tensor stays alive until the consumer calls the deleter.
Works for any backend whose storages expose ``.ptr`` and whose device object
has ``dlpack_device()`` and ``wrap(ptr, nbytes, owner)``.
"""

from __future__ import annotations

import ctypes
import threading

from .dtype import bf16, bool_, f16, f32, f64, i16, i32, i64, u8, u32
from .errors import DTypeError
from .layout import Layout

# ---- the C structures (dlpack.h) -----------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


FLAG_READ_ONLY = 1
DEVICE_CPU, DEVICE_CUDA, DEVICE_METAL = 1, 2, 8
DEVICE_TYPES = {"cpu": DEVICE_CPU, "cuda": DEVICE_CUDA, "metal": DEVICE_METAL}
_DTYPE_CODES = {u8: (1, 8), u32: (1, 32), i16: (0, 16), i32: (0, 32), i64: (0, 64),
                bf16: (4, 16), f16: (2, 16), f32: (2, 32), f64: (2, 64), bool_: (6, 8)}  # kDLBool: one byte
_FROM_CODES = {v: k for k, v in _DTYPE_CODES.items()}

_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"
_USED_LEGACY = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"

# ---- capsule API (with raw pointers where the capsule may be dying) ----------------------
_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR)(
    ("PyCapsule_New", _api))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# Exported tensors, kept alive until their deleter runs: address -> (struct, tensor, arrays).
_LIVE: dict[int, tuple] = {}
_LIVE_LOCK = threading.Lock()


@DELETER
def _deleter(address):
    with _LIVE_LOCK:
        _LIVE.pop(address, None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # An unconsumed capsule still owns the tensor: release it.
    for name, struct in ((_LEGACY, DLManagedTensor), (_VERSIONED, DLManagedTensorVersioned)):
        if _raw_is_valid(capsule, name):
            address = _raw_pointer(capsule, name)
            struct.from_address(address).deleter(address)
            return


def device_of(t) -> tuple[int, int]:
    return t._device.backend.dlpack_device()


def to_dlpack(t, stream=None, max_version=None, dl_device=None, copy=None):
    if not hasattr(t._storage, "ptr"):  # a GPU buffer behind an API without addresses (WebGPU)
        raise BufferError(f"a {t.device} tensor has no memory address to export through DLPack: copy it to the "
                          "cpu first (.to_device('cpu'))")
    if dl_device is not None and tuple(dl_device) != device_of(t):
        raise BufferError(f"cannot export a {t.device} tensor to DLPack device {tuple(dl_device)} without a copy")
    if copy:
        t = t.copy()
    t._device.synchronize()
    code = _DTYPE_CODES[t.dtype]
    ndim = t.rank
    shape = (ctypes.c_int64 * max(ndim, 1))(*t.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*t.stride)
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    dl = managed.dl_tensor
    dl.data = t._storage.ptr
    dl.device = DLDevice(*device_of(t))
    dl.ndim = ndim
    dl.dtype = DLDataType(code[0], code[1], 1)
    dl.shape = shape
    dl.strides = strides
    dl.byte_offset = t._layout.offset * t.dtype.itemsize
    managed.deleter = _deleter
    if versioned:
        managed.version = DLPackVersion(1, 0)
        managed.flags = FLAG_READ_ONLY
    address = ctypes.addressof(managed)
    with _LIVE_LOCK:
        _LIVE[address] = (managed, t, shape, strides)
    return _capsule_new(address, _VERSIONED if versioned else _LEGACY, _capsule_destructor)


class _Owner:
    """Keeps an imported DLPack tensor's memory alive; calls its deleter when dropped."""

    __slots__ = ("address", "struct")

    def __init__(self, address: int, struct):
        self.address, self.struct = address, struct

    def __del__(self):
        deleter = self.struct.from_address(self.address).deleter
        if deleter:
            deleter(self.address)


def from_dlpack(obj):
    """A tensor sharing the memory of any DLPack producer (numpy, PyTorch, JAX...)."""
    from .device import get_device
    from .ops.core import make
    from .tensor import Tensor

    if isinstance(obj, Tensor):
        return obj
    if hasattr(obj, "__dlpack__"):
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:
            capsule = obj.__dlpack__()
    else:
        capsule = obj
    if _capsule_is_valid(capsule, _VERSIONED):
        address = _capsule_pointer(capsule, _VERSIONED)
        struct, used = DLManagedTensorVersioned, _USED_VERSIONED
    elif _capsule_is_valid(capsule, _LEGACY):
        address = _capsule_pointer(capsule, _LEGACY)
        struct, used = DLManagedTensor, _USED_LEGACY
    else:
        raise TypeError(f"from_dlpack needs a DLPack capsule or an object with __dlpack__, got {type(obj).__name__}")
    managed = struct.from_address(address)
    dl = managed.dl_tensor
    key = (dl.dtype.code, dl.dtype.bits)
    if key not in _FROM_CODES or dl.dtype.lanes != 1:
        raise DTypeError(f"DLPack dtype (code {dl.dtype.code}, {dl.dtype.bits} bits, {dl.dtype.lanes} lanes) "
                         "has no candle-api equivalent")
    dtype = _FROM_CODES[key]
    names = {v: k for k, v in DEVICE_TYPES.items()}
    dev_name = names.get(dl.device.device_type)
    if dev_name is None:
        raise BufferError(f"DLPack device type {dl.device.device_type} is not supported")
    device = get_device(dev_name if dev_name == "cpu" else f"{dev_name}:{dl.device.device_id}")
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    strides = tuple(dl.strides[i] for i in range(dl.ndim)) if dl.strides else None
    _capsule_set_name(capsule, used)  # we own it now
    owner = _Owner(address, struct)
    layout = Layout.contig(shape) if strides is None else Layout(shape, strides, 0)
    lo, hi = layout.span()
    isz = dtype.itemsize
    if dl.byte_offset % isz:
        raise BufferError("DLPack byte_offset is not a multiple of the item size")
    base = dl.data + dl.byte_offset + lo * isz
    layout = Layout(shape, layout.strides, -lo)
    storage = device.backend.wrap(base, (hi - lo) * isz, owner)
    if struct is DLManagedTensorVersioned and managed.flags & FLAG_READ_ONLY:
        storage.writable = False  # the producer's promise: in-place ops must not write into it
    out = make(storage, layout, dtype, device)
    return out if min(layout.strides, default=0) >= 0 else out.contiguous()
