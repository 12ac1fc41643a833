"""``nn.Module``: PyTorch's module protocol (candle-pyo3's ``candle.nn.Module``
follows it too). Assigning a Var (``nn.Parameter``) or a Module to an
attribute registers it; buffers are registered explicitly."""

from __future__ import annotations

from collections import namedtuple
from typing import Callable, Iterator

from ..device import get_device
from ..dtype import get_dtype
from ..errors import DTypeError, ShapeError, TensorNameError
from ..ops.creation import zeros_like
from ..tensor import Tensor
from ..var import Var
from .parameter import assign_

#: What ``load_state_dict`` returns: the keys it did not find and those it did not use.
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _check_name(owner: "Module", name, kind: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"a {kind} name must be a string, got {type(name).__name__}")
    if not name or "." in name:
        raise KeyError(f"a {kind} name must be non-empty and contain no '.', got {name!r}")
    if "_parameters" not in owner.__dict__:
        raise AttributeError(f"cannot register a {kind} before Module.__init__() is called "
                             f"(call super().__init__() first in {type(owner).__name__}.__init__)")


class ModuleTree:
    """Walking a tree of modules through their ``_modules`` dict: shared by
    this Module and candle-pyo3's (:mod:`candle_api.compat.pyo3.nn`)."""

    def named_children(self) -> Iterator[tuple[str, "ModuleTree"]]:
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator["ModuleTree"]:
        for _, module in self.named_children():
            yield module

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        """(dotted name, module) for this module and every descendant, each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator["ModuleTree"]:
        for _, module in self.named_modules():
            yield module


class Module(ModuleTree):
    """Base class of layers and models: subclasses set their parameters
    (Vars), buffers and sub-modules in ``__init__`` and compute in ``forward``."""

    training: bool

    def __init__(self) -> None:
        d = self.__dict__
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers"] = set()
        d["_modules"] = {}
        d["training"] = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- registration ----------------------------------------------------------------
    def register_parameter(self, name: str, param: Var | None) -> None:
        """Registers a Var (or None: an absent optional parameter such as a bias)."""
        _check_name(self, name, "parameter")
        if param is not None and not isinstance(param, Var):
            raise TypeError(f"parameter {name!r} must be a Var (nn.Parameter) or None, got {type(param).__name__}")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Registers non-trainable state (running statistics...): it follows
        ``to()`` and, when persistent, is part of the state dict."""
        _check_name(self, name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"buffer {name!r} must be a Tensor or None, got {type(tensor).__name__}")
        self._forget(name)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        _check_name(self, name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"module {name!r} must be a Module or None, got {type(module).__name__}")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def _forget(self, name: str) -> None:
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            registry.pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if isinstance(value, Var):
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self.add_module(name, value)
        elif name in d.get("_parameters", ()):
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} to parameter {name!r} (a Var or None)")
            d["_parameters"][name] = None
        elif name in d.get("_modules", ()):
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} to sub-module {name!r} (a Module or None)")
            d["_modules"][name] = None
        elif name in d.get("_buffers", ()):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign a {type(value).__name__} to buffer {name!r} (a Tensor or None)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):  # only called when ordinary lookup fails
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            members = d.get(registry)
            if members is not None and name in members:
                return members[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if any(name in self.__dict__[r] for r in ("_parameters", "_buffers", "_modules")):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    # ---- traversal (children and modules: ModuleTree) ---------------------------------
    def _named_members(self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool):
        seen = set()
        owners = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for owner_prefix, owner in owners:
            for name, tensor in owner.__dict__[registry].items():
                if tensor is None or (remove_duplicate and id(tensor) in seen):
                    continue
                seen.add(id(tensor))
                yield (f"{owner_prefix}.{name}" if owner_prefix else name), tensor

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """(dotted name, Var) of every parameter, a shared one once."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Var]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def get_submodule(self, target: str) -> "Module":
        """The descendant at a dotted path such as ``"encoder.layers.0"`` ("" is self)."""
        module = self
        walked = []
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                path = ".".join(walked) or "the root"
                raise AttributeError(f"{type(module).__name__} at {path} has no sub-module {part!r} "
                                     f"(looking up {target!r})")
            module = child
            walked.append(part)
        return module

    # ---- state ---------------------------------------------------------------------------
    def _state_items(self, prefix: str = ""):
        """(key, tensor) of the parameters and persistent buffers, in state_dict order."""
        for name, param in self._parameters.items():
            if param is not None:
                yield prefix + name, param
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers:
                yield prefix + name, buf
        for name, module in self._modules.items():
            if module is not None:
                yield from module._state_items(f"{prefix}{name}.")

    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> dict:
        """name -> tensor for every parameter and persistent buffer. The tensors
        share the module's storage (detached unless ``keep_vars``), so they see
        later updates; copy them to keep a snapshot."""
        return {key: t if keep_vars else t.detach() for key, t in self._state_items(prefix)}

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Copies the values of ``state_dict`` (tensors or numpy arrays) into the
        parameters and buffers in place, converting dtype and device. Shape
        mismatches always raise ShapeError; with ``strict``, missing or unexpected
        keys raise TensorNameError. Nothing is written when an error is raised."""
        targets = dict(self._state_items())
        missing = [k for k in targets if k not in state_dict]
        unexpected = [k for k in state_dict if k not in targets]
        mismatched = []
        for key, target in targets.items():
            if key not in state_dict:
                continue
            shape = getattr(state_dict[key], "shape", None)
            if shape is None:
                raise TypeError(f"load_state_dict: {key!r} is a {type(state_dict[key]).__name__}, not a tensor")
            if tuple(shape) != target.shape:
                mismatched.append(f"{key}: shape {tuple(shape)} in the state dict, {target.shape} in the model")
        name = type(self).__name__
        if mismatched:
            raise ShapeError(f"load_state_dict for {name}: size mismatch for " + "; ".join(mismatched))
        if strict and (missing or unexpected):
            problems = ([f"missing keys {missing}"] if missing else []) + (
                [f"unexpected keys {unexpected}"] if unexpected else [])
            raise TensorNameError(f"load_state_dict for {name}: " + "; ".join(problems))
        for key, target in targets.items():
            if key in state_dict:
                assign_(target, state_dict[key], key)
        return IncompatibleKeys(missing, unexpected)

    # ---- conversion and modes -------------------------------------------------------------
    def to(self, *args, **kwargs) -> "Module":
        """``to(dtype)``, ``to(device)``, ``to(dtype=..., device=...)``: converts
        every parameter and buffer in place (float ones only change dtype, as
        in PyTorch) and returns self. The Vars stay the same objects, so a
        VarMap holding them follows; build optimizers after converting."""
        dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
        if kwargs:
            raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
        for arg in args:
            try:
                dtype = get_dtype(arg)
            except (DTypeError, TypeError):
                device = arg
        if dtype is None and device is None:
            raise TypeError("Module.to() needs a dtype or a device")
        dtype = get_dtype(dtype) if dtype is not None else None
        if dtype is not None and not dtype.is_float:
            raise DTypeError(f"Module.to() converts to a float dtype, not {dtype}")
        device = get_device(device) if device is not None else None
        for t in list(self.parameters()) + list(self.buffers()):
            _convert_(t, dtype if t.dtype.is_float else None, device)
        return self

    def train(self, mode: bool = True) -> "Module":
        for module in self.modules():
            module.training = bool(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Freezes (False) or unfreezes every parameter."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.parameters():
            if param.grad is not None:
                param.grad = None if set_to_none else zeros_like(param)

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Calls ``fn`` on every descendant, then on self (e.g. custom initialization)."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- printing ----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The layer's settings, shown inside its parentheses."""
        return ""

    def __repr__(self) -> str:
        lines = self.extra_repr().split("\n") if self.extra_repr() else []
        lines += [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        if not self._modules:
            return f"{type(self).__name__}({''.join(lines)})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


def _convert_(t: Tensor, dtype, device) -> None:
    """Converts t in place: the object keeps its identity (and its place in
    optimizers and VarMaps) while its storage is replaced."""
    new = t.detach()
    if device is not None:
        new = new.to_device(device)
    if dtype is not None:
        new = new.to_dtype(dtype)
    if new._storage is t._storage:
        return
    grad = t.grad
    t._storage, t._layout, t._dtype, t._device = new._storage, new._layout, new._dtype, new._device
    if grad is not None:
        t.grad = grad.to_device(t.device).to_dtype(t.dtype)
