"""Devices: ``"cpu"``, ``"cuda:0"``, ``"wgpu:0"``...

A :class:`Device` is a ``str`` subclass whose value is its canonical name, so
``t.device == "cpu"`` holds as it does in candle-pyo3, whose devices are
strings. It is resolved to its backend once, when first made, and carries the
backend's kernel table; ``Device("cuda:0") is Device("cuda:0")``. A name a
backend declares as an alias (``BackendSpec.aliases``: ``metal:0`` for the wgpu
device on a Mac) gives the same Device object as the name it stands for.
"""

from __future__ import annotations

import threading

from .contract.device import missing_members
from .errors import BackendUnavailableError, DeviceError, PluginError, UnsupportedDTypeError
from .registry import registry

#: Seed of every device's random stream until manual_seed is called (fixed, as
#: in PyTorch, so a fresh process is reproducible).
DEFAULT_SEED = 67280421310721

_DEVICES: dict[str, "Device"] = {}
_LOCK = threading.Lock()      # guards the device cache
_RNG_LOCK = threading.Lock()  # guards the random streams


class Device(str):
    """A compute device.

    Attributes: ``type`` ("cpu", "cuda"...), ``index``, ``backend`` (the backend
    plugin's device object), ``kernels`` (its ``(op, dtype) -> kernel`` table)
    and ``aliasing`` (the keys whose kernel may write over an input: in-place
    ops run those into the target's memory).
    """

    type: str
    index: int
    backend: object
    alloc: object
    kernels: dict
    aliasing: set
    dtypes: frozenset
    plugin: str

    def __new__(cls, spec="cpu"):
        return get_device(spec)

    @classmethod
    def _create(cls, name: str, dev_type: str, index: int) -> "Device":
        specs = registry().backends()
        entry = specs.get(dev_type)
        if entry is None:
            known = ", ".join(sorted(specs)) or "none"
            raise DeviceError(
                f"no installed plugin provides device type {dev_type!r} (available device types: {known}); "
                f"install its backend plugin (from a checkout of candle-api: `pip install ./backends/cpu` for cpu)"
            )
        spec, plugin = entry
        ok, reason = spec.availability()
        if not ok:
            raise BackendUnavailableError(f"device {name!r} (plugin {plugin}) is not available: {reason}")
        count = spec.device_count()
        if index >= count:
            raise DeviceError(f"device {name!r} does not exist: {count} {dev_type} device(s) found")
        self = str.__new__(cls, name)
        self.type = dev_type
        self.index = index
        self.plugin = plugin
        self.backend = spec.open(index)
        self.alloc = getattr(self.backend, "alloc", None)  # the per-op allocation, one attribute away
        missing = missing_members(self.backend)
        if missing:
            raise PluginError(f"device {name!r}: the device object of plugin {plugin} lacks {', '.join(missing)} "
                              "(see candle_api.contract.BackendDevice)")
        table = registry().kernel_table(dev_type)
        self.kernels, self.aliasing = table.kernels, table.aliasing
        # bool is u8's bytes: a backend holding u8 holds bool (the kernel table serves it with u8 kernels)
        self.dtypes = frozenset(spec.dtypes) | ({"bool"} if "u8" in spec.dtypes else set())
        self._seed = DEFAULT_SEED
        self._offset = 0
        return self

    def __repr__(self) -> str:
        return f"Device({str.__str__(self)!r})"

    def __reduce__(self):
        return (get_device, (str.__str__(self),))

    def next_random_offset(self, n: int) -> tuple[int, int]:
        """(seed, offset) for a draw of n values, advancing this device's stream."""
        with _RNG_LOCK:
            offset = self._offset
            self._offset += n
            return self._seed, offset

    def manual_seed(self, seed: int) -> None:
        with _RNG_LOCK:
            self._seed = int(seed) & 0xFFFFFFFFFFFFFFFF
            self._offset = 0

    def synchronize(self) -> None:
        self.backend.synchronize()

    def check_dtype(self, dtype) -> None:
        """Raises UnsupportedDTypeError when this device does not hold dtype."""
        if dtype not in self.dtypes:
            raise UnsupportedDTypeError(f"device {self} does not hold {dtype} tensors (its dtypes: "
                                        f"{' '.join(sorted(self.dtypes))})")


def resolve_alias(name: str, specs: dict) -> str | None:
    """The device type that name is an alias of (BackendSpec.aliases), or None."""
    for dev_type, (spec, _plugin) in sorted(specs.items()):
        try:
            if name in spec.aliases():
                return dev_type
        except Exception:  # an alias probe that fails is no alias
            continue
    return None


def _parse(spec: str) -> tuple[str, str, int]:
    text = spec.strip().lower()
    dev_type, _, idx = text.partition(":")
    if not dev_type or not dev_type.isidentifier():
        raise DeviceError(f"invalid device {spec!r}; expected e.g. 'cpu' or 'cuda:0'")
    if idx:
        if not idx.isdigit():
            raise DeviceError(f"invalid device index in {spec!r}")
        index = int(idx)
    else:
        index = 0
    name = dev_type if dev_type == "cpu" else f"{dev_type}:{index}"
    return name, dev_type, index


def is_device_name(spec: str) -> bool:
    """Whether spec is spelled as a device ("cpu", "cuda:1"), installed or not."""
    try:
        _parse(spec)
    except DeviceError:
        return False
    return True


def get_device(spec=None) -> Device:
    """Resolves a Device, a name such as ``"cuda:0"`` (``"cuda"`` means index 0),
    or None (the default device, cpu)."""
    if isinstance(spec, Device):
        return spec
    if spec is None:
        spec = "cpu"
    if not isinstance(spec, str):
        dev_type = getattr(spec, "type", None)  # torch.device-like objects
        if isinstance(dev_type, str):
            index = getattr(spec, "index", None)
            spec = dev_type if index is None else f"{dev_type}:{index}"
        else:
            raise DeviceError(f"cannot interpret {spec!r} as a device")
    dev = _DEVICES.get(spec)
    if dev is not None:
        return dev
    name, dev_type, index = _parse(spec)
    specs = registry().backends()
    if dev_type not in specs:
        canonical = resolve_alias(dev_type, specs)
        if canonical is not None:  # "metal:0" is the wgpu device on a Mac: the same Device object
            dev = get_device(canonical if canonical == "cpu" else f"{canonical}:{index}")
            _DEVICES[spec] = dev
            return dev
    with _LOCK:
        dev = _DEVICES.get(name)
        if dev is None:
            dev = Device._create(name, dev_type, index)
            _DEVICES[name] = dev
        _DEVICES[spec] = dev
    return dev


def known_devices() -> list[Device]:
    """Devices made so far in this process."""
    return sorted(set(_DEVICES.values()), key=str)


def _refresh_kernels() -> None:
    for dev in set(_DEVICES.values()):
        table = registry().kernel_table(dev.type)
        dev.kernels, dev.aliasing = table.kernels, table.aliasing


registry().on_change(_refresh_kernels)
