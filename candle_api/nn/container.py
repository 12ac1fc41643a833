"""Containers: Sequential, ModuleList and ModuleDict (PyTorch's). Their
behaviour is in mixins over ``_modules`` and ``add_module``, which
candle-pyo3's containers (:mod:`candle_api.compat.pyo3.nn`) share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .module import Module


def _position(index: int, length: int) -> int:
    if not -length <= index < length:
        raise IndexError(f"index {index} is out of range for a container of {length} modules")
    return index + length if index < 0 else index


class SequentialMethods:
    """Runs its modules one after the other: ``Sequential(a, b, c)`` (named
    "0", "1", "2") or ``Sequential({"fc": a, "act": b})``."""

    def __init__(self, *modules) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                self.add_module(str(i), module)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x

    def __getitem__(self, index):
        items = list(self._modules.items())
        if isinstance(index, slice):
            return type(self)(dict(items[index]))
        return items[_position(index, len(items))][1]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module) -> "SequentialMethods":
        self.add_module(str(len(self)), module)
        return self


class ModuleListMethods:
    """A list of modules whose parameters are registered (named "0", "1"...)."""

    def __init__(self, modules: Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, index):
        values = list(self._modules.values())
        if isinstance(index, slice):
            return type(self)(values[index])
        return values[_position(index, len(values))]

    def __setitem__(self, index: int, module) -> None:
        self.add_module(str(_position(index, len(self))), module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module) -> "ModuleListMethods":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable) -> "ModuleListMethods":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module) -> None:
        values = list(self._modules.values())
        values.insert(index, module)
        self._modules.clear()
        self.extend(values)


class ModuleDictMethods:
    """A dict of modules whose parameters are registered under their keys."""

    def __init__(self, modules: Mapping | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str):
        return self._modules[key]

    def __setitem__(self, key: str, module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules: Mapping) -> None:
        for key, module in modules.items():
            self[key] = module

    def pop(self, key: str):
        return self._modules.pop(key)


class Sequential(SequentialMethods, Module):
    __doc__ = SequentialMethods.__doc__


class ModuleList(ModuleListMethods, Module):
    __doc__ = ModuleListMethods.__doc__


class ModuleDict(ModuleDictMethods, Module):
    __doc__ = ModuleDictMethods.__doc__
