"""Candle's VarBuilder and VarMap.

A :class:`VarBuilder` hands a model its tensors by dotted name: from a
checkpoint (any name -> tensor mapping, such as the lazy ``TensorFile`` of
``candle_api.load``), from a :class:`VarMap` that creates trainable Vars on
first request (the init hint says how), or zeros. Layers take one through
their ``vb`` keyword: ``nn.Linear(784, 512, vb=vb.pp("fc1"))``.
"""

from __future__ import annotations

import difflib
import os
import threading
from collections import ChainMap
from collections.abc import Mapping

from ..device import get_device
from ..dtype import f32, get_dtype
from ..errors import DTypeError, ShapeError, TensorNameError
from ..io import load, save
from ..ops.creation import zeros
from ..tensor import Tensor
from ..var import Var
from .init import ZERO, Init
from .parameter import assign_


def _shape(shape) -> tuple:
    return (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)


def _not_found(what: str, name: str, names) -> TensorNameError:
    """An error naming the missing tensor and a few names that look like it."""
    names = list(names)
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    if close:
        hint = "close names: " + ", ".join(close)
    elif names:
        hint = f"it has {len(names)} tensors, e.g. " + ", ".join(names[:5])
    else:
        hint = "it is empty"
    return TensorNameError(f"{what}: cannot find tensor {name!r} ({hint})")


class VarMap:
    """Named trainable Vars, created on first request (Candle's VarMap):
    ``VarBuilder.from_varmap(varmap, ...)`` gives a model its variables and
    ``varmap.all_vars()`` gives them to an optimizer."""

    def __init__(self) -> None:
        self._vars: dict[str, Var] = {}
        self._lock = threading.Lock()  # get() checks and inserts atomically, as Candle's Mutex

    def all_vars(self) -> list[Var]:
        return list(self._vars.values())

    def data(self) -> dict[str, Var]:
        """The live name -> Var dict."""
        return self._vars

    def __len__(self) -> int:
        return len(self._vars)

    def get(self, shape, name: str, init: Init | None = None, dtype=f32, device=None) -> Var:
        """The Var called ``name``, created with ``init`` (default zeros) if missing."""
        shape = _shape(shape)
        with self._lock:
            var = self._vars.get(name)
            if var is None:
                var = self._vars[name] = (init or ZERO).var(shape, get_dtype(dtype), device)
            elif var.shape != shape:
                raise ShapeError(f"VarMap: {name!r} has shape {var.shape}, requested {shape}")
            return var

    def get_unchecked(self, name: str, dtype=None, device=None) -> Var:
        var = self._vars.get(name)
        if var is None:
            raise _not_found("VarMap", name, self._vars)
        return var

    def contains_tensor(self, name: str) -> bool:
        return name in self._vars

    def set_one(self, name: str, value) -> None:
        """Overwrites the Var called ``name`` in place (converting dtype and device)."""
        assign_(self.get_unchecked(name), value, name)

    def set(self, values) -> None:
        """set_one for every (name, value) of a mapping or an iterable of pairs."""
        for name, value in (values.items() if isinstance(values, Mapping) else values):
            self.set_one(name, value)

    def save(self, path: str | os.PathLike, metadata: Mapping | None = None) -> None:
        """Writes every Var (through ``candle_api.save``: the format follows the extension)."""
        save({name: var.detach() for name, var in self._vars.items()}, path, metadata)

    def load(self, path: str | os.PathLike) -> None:
        """Sets every Var from the file; names the file has and the map does
        not are ignored. A missing name or a shape mismatch raises before
        anything is written."""
        tensors = load(path)
        for name, var in self._vars.items():
            if name not in tensors:
                raise _not_found(f"VarMap.load({os.fspath(path)!r})", name, tensors)
            if tensors[name].shape != var.shape:
                raise ShapeError(f"VarMap.load({os.fspath(path)!r}): {name!r} has shape {tensors[name].shape} "
                                 f"in the file and {var.shape} in the map")
        for name, var in self._vars.items():
            assign_(var, tensors[name], name)


class _Tensors:
    """A VarBuilder backend over a name -> tensor mapping (a checkpoint)."""

    def __init__(self, tensors: Mapping) -> None:
        self.tensors = tensors

    def contains_tensor(self, name: str) -> bool:
        return name in self.tensors

    def _lookup(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise _not_found("VarBuilder", name, self.tensors)
        t = self.tensors[name]
        if not isinstance(t, Tensor):
            raise DTypeError(f"VarBuilder: {name!r} is a {type(t).__name__}, not a Tensor (dequantize it first)")
        return t

    def get_unchecked(self, name: str, dtype, device) -> Tensor:
        t = self._lookup(name).to_device(device)
        return t.to_dtype(dtype) if t.dtype.is_float else t  # integer tensors (ids, counters) keep their dtype

    def get(self, shape: tuple, name: str, init, dtype, device) -> Tensor:
        found = self._lookup(name).shape
        if found != shape:
            raise ShapeError(f"VarBuilder: tensor {name!r} has shape {found} in the checkpoint, expected {shape}")
        return self.get_unchecked(name, dtype, device)

    def get_weight(self, shape: tuple, name: str, dtype, device):
        from ..quantized import QTensor

        t = self.tensors.get(name)
        if not isinstance(t, QTensor):
            return self.get(shape, name, None, dtype, device)
        if t.shape != shape:
            raise ShapeError(f"VarBuilder: tensor {name!r} has shape {t.shape} in the checkpoint, expected {shape}")
        return t.to_device(device)


class _Zeros:
    """A VarBuilder backend answering every request with zeros."""

    def contains_tensor(self, name: str) -> bool:
        return True

    def get(self, shape: tuple, name: str, init, dtype, device) -> Tensor:
        return zeros(shape, dtype=dtype, device=device)

    def get_unchecked(self, name: str, dtype, device) -> Tensor:
        raise ShapeError(f"VarBuilder.zeros: {name!r} has no shape to make zeros of; use get(shape, name)")


class VarBuilder:
    """Tensors by dotted name, under a prefix (Candle's VarBuilder).

    ``get(shape, name, init)`` returns the tensor at ``prefix.name`` in the
    builder's dtype (float tensors) and device, checking its shape; ``init``
    is the hint a VarMap-backed builder uses to create a missing variable."""

    def __init__(self, backend, dtype=f32, device=None, path: tuple = ()) -> None:
        self._backend = backend
        self._dtype = get_dtype(dtype)
        self._device = get_device(device)
        self._path = tuple(path)

    @classmethod
    def from_tensors(cls, tensors: Mapping, dtype=f32, device=None) -> "VarBuilder":
        """Over any name -> tensor mapping, such as ``candle_api.load(path)``."""
        return cls(_Tensors(tensors), dtype, device)

    @classmethod
    def from_file(cls, paths, dtype=f32, device=None) -> "VarBuilder":
        """Over one or several tensor files (shards), read lazily through ``candle_api.load``."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        files = [load(p) for p in paths]
        return cls.from_tensors(files[0] if len(files) == 1 else ChainMap(*files), dtype, device)

    # Candle's constructors for particular formats: candle_api.load recognizes the file.
    from_mmaped_safetensors = from_npz = from_pth = from_file

    @classmethod
    def from_varmap(cls, varmap: VarMap, dtype=f32, device=None) -> "VarBuilder":
        """Over a VarMap: missing variables are created with the init hint (training)."""
        return cls(varmap, dtype, device)

    @classmethod
    def zeros(cls, dtype=f32, device=None) -> "VarBuilder":
        return cls(_Zeros(), dtype, device)

    # ---- prefixes -----------------------------------------------------------------------
    def push_prefix(self, name) -> "VarBuilder":
        """A builder one level down: ``vb.pp("encoder").pp(0)`` reads ``encoder.0.*``."""
        return VarBuilder(self._backend, self._dtype, self._device, self._path + (str(name),))

    pp = push_prefix

    @property
    def prefix(self) -> str:
        return ".".join(self._path)

    def root(self) -> "VarBuilder":
        return VarBuilder(self._backend, self._dtype, self._device)

    def set_prefix(self, prefix: str) -> "VarBuilder":
        return VarBuilder(self._backend, self._dtype, self._device, (prefix,) if prefix else ())

    def _full_name(self, name: str) -> str:
        return ".".join(self._path + (name,))

    # ---- tensors -------------------------------------------------------------------------
    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self):
        return self._device

    def to_dtype(self, dtype) -> "VarBuilder":
        """The same tensors, converted to another float dtype."""
        return VarBuilder(self._backend, dtype, self._device, self._path)

    def get(self, shape, name: str, init: Init | None = None) -> Tensor:
        return self._backend.get(_shape(shape), self._full_name(name), init, self._dtype, self._device)

    get_with_hints = get

    def get_weight(self, shape, name: str):
        """A weight as the checkpoint keeps it: a QTensor stays quantized (on
        the builder's device; Candle's quantized VarBuilder), anything else is
        :meth:`get`."""
        get_weight = getattr(self._backend, "get_weight", None)
        if get_weight is None:
            return self.get(shape, name)
        return get_weight(_shape(shape), self._full_name(name), self._dtype, self._device)

    def get_unchecked(self, name: str) -> Tensor:
        """The tensor at ``prefix.name`` whatever its shape."""
        return self._backend.get_unchecked(self._full_name(name), self._dtype, self._device)

    def contains_tensor(self, name: str) -> bool:
        """True when ``prefix.name`` itself is a tensor (not merely a prefix of some)."""
        return self._backend.contains_tensor(self._full_name(name))

    def __repr__(self) -> str:
        source = type(self._backend).__name__.strip("_")
        return f"VarBuilder({source}, prefix={self.prefix!r}, {self._dtype}, {self._device})"


# ---- how layers take their tensors -----------------------------------------------------------

def layer_builder(vb: VarBuilder | None, dtype, device) -> VarBuilder:
    """The builder a layer reads from: ``vb``, or for PyTorch-style construction
    a fresh VarMap's, which creates every tensor with its init."""
    if vb is None:
        return VarBuilder.from_varmap(VarMap(), dtype if dtype is not None else f32, device)
    if not isinstance(vb, VarBuilder):
        raise TypeError(f"vb must be a VarBuilder, got {type(vb).__name__}")
    if dtype is not None or device is not None:
        raise TypeError("give a layer dtype/device or vb (whose dtype and device it uses), not both")
    return vb


def get_parameter(vb: VarBuilder, shape, name: str, init: Init) -> Var:
    """A trainable parameter: a VarMap's own Var, or a checkpoint tensor copied into a Var."""
    t = vb.get(shape, name, init)
    return t if isinstance(t, Var) else Var(t)


def get_buffer(vb: VarBuilder, shape, name: str, init: Init) -> Tensor:
    """Module state updated in place (running statistics): a VarMap's Var, or
    a copy of the checkpoint tensor (whose memory may be a read-only file map)."""
    t = vb.get(shape, name, init)
    return t if isinstance(t, Var) else t.copy()
