"""candle-pyo3's ``candle.nn``: a Module whose state is its Tensor attributes.

Where candle-api's :class:`candle_api.nn.Module` follows PyTorch (parameters
are Vars, buffers are registered), candle-pyo3's Module treats every Tensor
attribute as state (a "buffer"): it shows in ``named_buffers`` and
``state_dict``, and ``load_state_dict`` assigns the checkpoint's tensors in
its place after checking their shapes. A QTensor assigned to an attribute
named in ``_quantizable_buffers`` stays quantized (f32/f16 ones are decoded:
plain ops are faster on them); anywhere else it is dequantized.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from ...dtype import DType, get_dtype
from ...nn.container import ModuleDictMethods, ModuleListMethods, SequentialMethods
from ...nn.module import ModuleTree
from ...ops.creation import ones, randn, zeros
from ...quantized import QTensor
from ...tensor import Tensor


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict(strict=False) did not match."""

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


class Module(ModuleTree):
    """Base class of candle-pyo3 modules: subclasses set Tensors, QTensors and
    Modules as attributes in ``__init__`` and define ``forward``."""

    _version: int = 1

    def __init__(self, *args, **kwargs) -> None:
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_quantizable_buffers", set())

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    # ---- attributes ---------------------------------------------------------------------------------
    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, QTensor):
            self._buffers[name] = _stored(value, name in self._quantizable_buffers)
        elif isinstance(value, Tensor) or (value is None and name in self.__dict__.get("_buffers", ())):
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        for table in ("_modules", "_buffers"):
            found = self.__dict__.get(table, {})
            if name in found:
                return found[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in (self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def add_module(self, name: str, module) -> None:
        """Adds a child module under name (None keeps the slot empty)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"a module name must be a non-empty string without '.', got {name!r}")
        if name in self.__dict__ or name in self._buffers:
            raise KeyError(f"attribute {name!r} already exists")
        self._modules[name] = module

    register_module = add_module

    # ---- walking (children and modules: ModuleTree) -----------------------------------------------
    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """(dotted name, Tensor or QTensor) of this module's state (and its descendants')."""
        seen = set()
        owners = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix,
                                                                                                         self)]
        for owner_prefix, module in owners:
            for name, value in module._buffers.items():
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (f"{owner_prefix}.{name}" if owner_prefix else name), value

    def buffers(self, recurse: bool = True):
        return (value for _, value in self.named_buffers(recurse=recurse))

    # ---- state dicts --------------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict of every persistent buffer by dotted name, with
        ``_metadata`` (each module's version) as PyTorch's has."""
        if args:  # the old positional form: destination, prefix, keep_vars
            destination = args[0] if destination is None else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = {"version": self._version}
        for name, value in self._buffers.items():
            if value is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = value.detach() if isinstance(value, Tensor) and not keep_vars else value
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=f"{prefix}{name}.", keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False) -> IncompatibleKeys:
        """Assigns the state dict's tensors to this module's buffers, each after
        a shape check. RuntimeError lists every problem (with strict, also the
        missing and unexpected keys)."""
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"expected a mapping of names to tensors, got {type(state_dict).__name__}")
        missing, errors = [], []
        known = set()
        for owner_prefix, module in self.named_modules():
            prefix = f"{owner_prefix}." if owner_prefix else ""
            for name, current in list(module._buffers.items()):
                if current is None or name in module._non_persistent_buffers_set:
                    continue
                key = prefix + name
                known.add(key)
                if key not in state_dict:
                    missing.append(key)
                    continue
                errors += module._load_one(name, key, state_dict[key], current)
        unexpected = [k for k in state_dict.keys() if k not in known]
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        return IncompatibleKeys(missing, unexpected)

    def _load_one(self, name: str, key: str, value, current) -> list:
        """Assigns one checkpoint entry, or says why not."""
        if not isinstance(value, (Tensor, QTensor)):
            return [f'While copying the parameter named "{key}", expected a Tensor or QTensor from the checkpoint, '
                    f"got {type(value).__name__}"]
        if tuple(value.shape) != tuple(current.shape):
            return [f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from checkpoint, "
                    f"the shape in current model is {tuple(current.shape)}."]
        setattr(self, name, value)
        return []

    # ---- devices and dtypes -------------------------------------------------------------------------
    def _apply(self, fn) -> "Module":
        for module in self.children():
            module._apply(fn)
        for name, value in self._buffers.items():
            if value is not None:
                self._buffers[name] = fn(value)
        return self

    def device(self):
        """The device of the first tensor (cpu for a QTensor or a module without state)."""
        first = next(iter(self.buffers()), None)
        return first.device if first is not None else "cpu"

    def cuda(self) -> "Module":
        return self._apply(lambda t: _moved(t, "cuda"))

    def cpu(self) -> "Module":
        return self._apply(lambda t: _moved(t, "cpu"))

    def type(self, dst_type) -> "Module":
        """Every Tensor cast to dst_type (a QTensor raises TypeError)."""
        return self._apply(lambda t: _cast(t, dst_type))

    def to(self, *args, **kwargs) -> "Module":
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or keywords: moves
        and/or casts every Tensor in place; dtypes must be float (f16, f32, f64)."""
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"Module.to() got unexpected arguments {sorted(kwargs)}")
        for arg in args:
            if isinstance(arg, DType):
                dtype = arg
            elif isinstance(arg, str) and (arg.lower() == "cpu" or arg.lower().startswith("cuda")):
                device = arg.lower()
            elif isinstance(arg, str):
                dtype = arg
            else:
                raise TypeError(f"Module.to() got an invalid combination of arguments: {args}")
        if dtype is not None and get_dtype(dtype).name not in ("f16", "f32", "f64"):
            raise TypeError(f"Module.to only accepts floating point dtypes, got {dtype}")

        def convert(t):
            t = _cast(t, dtype) if dtype is not None else t
            return _moved(t, device) if device is not None else t

        return self._apply(convert)

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(module).replace("\n", "\n  ") for name, module in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(([extra] if extra else []) + lines) + "\n)"

    def extra_repr(self) -> str:
        return ""


def _stored(q: QTensor, quantizable: bool):
    """What an attribute holds for a QTensor: itself where it may stay quantized, else its values."""
    kind = q.ggml_dtype
    if quantizable and kind not in ("f32", "f16"):
        return q
    values = q.dequantize()
    return values.to_dtype("f16") if kind == "f16" else values


def _moved(t, device):
    return t.to_device(device)  # a QTensor moves its blocks


def _cast(t, dtype):
    if not isinstance(t, Tensor):
        raise TypeError(f"Module dtype casts take Tensors, not {type(t).__name__} (dequantize it first)")
    return t.to_dtype(dtype)


# ---- layers --------------------------------------------------------------------------------------------


class Identity(Module):
    def forward(self, x):
        return x


class Linear(Module):
    """y = x @ weight^T + bias; weight (out, in) starts as ones and bias as zeros
    (candle-pyo3's; load real ones with load_state_dict). A QTensor weight is
    kept quantized and multiplied as it is."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self._quantizable_buffers.add("weight")
        self.in_features, self.out_features = in_features, out_features
        self.weight = ones((out_features, in_features), dtype=dtype, device=device)
        self.bias = zeros((out_features,), dtype=dtype, device=device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        out = w.matmul_t(x) if isinstance(w, QTensor) else x.matmul(w.t())
        return out if self.bias is None else out.broadcast_add(self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table, normal at first."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None) -> None:
        super().__init__()
        self._quantizable_buffers.add("weight")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = randn((num_embeddings, embedding_dim), device=device)

    def forward(self, indexes: Tensor) -> Tensor:
        return self.weight.embedding(indexes)  # a QTensor decodes only the rows asked for

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalizes the last dims (``normalized_shape``) to zero mean and unit
    variance, then scales by weight and shifts by bias."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:
            self.weight = ones(shape, dtype=dtype, device=device)
            self.bias = zeros(shape, dtype=dtype, device=device) if bias else None
        else:
            self.weight = self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        dims = list(range(x.rank - len(self.normalized_shape), x.rank))
        centered = x.broadcast_sub(x.mean_keepdim(dims))
        var = (centered * centered).mean_keepdim(dims)
        out = centered.broadcast_div((var + self.eps).sqrt())
        if self.weight is not None:
            out = out.broadcast_mul(self.weight)
        return out if self.bias is None else out.broadcast_add(self.bias)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


# ---- containers (PyTorch's and candle-pyo3's behave alike) ---------------------------------------------


class Sequential(SequentialMethods, Module):
    __doc__ = SequentialMethods.__doc__


class ModuleList(ModuleListMethods, Module):
    __doc__ = ModuleListMethods.__doc__


class ModuleDict(ModuleDictMethods, Module):
    __doc__ = ModuleDictMethods.__doc__
