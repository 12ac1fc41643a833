"""The plugin registry: finds plugins through entry points and answers, from
cached tables, which backend serves a device and which kernel serves an op.

Nothing here runs at ``import candle_api``. The entry points are read on the
first device, kernel or format query; a plugin that fails to import is
recorded (and shown by ``candle info``) instead of breaking the others. Kernel
tables are built from the hooks once per device type and rebuilt only when a
plugin registers or unregisters, so the per-op cost is a dict lookup.

``CANDLE_DISABLE_PLUGINS`` (entry point names, comma-separated) turns plugins
off without uninstalling them: they are listed, as disabled, and not imported.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable

import pluggy

from .contract.table import CONTRACT_VERSION
from .dtype import get_dtype
from .errors import DTypeError, PluginError
from .hooks import HOOK_API_VERSION, BackendSpec, FormatSpec, HookSpecs, KernelSet, OpDef

ENTRY_POINT_GROUP = "candle_api"
ENV_DISABLE = "CANDLE_DISABLE_PLUGINS"


def env_names(variable: str) -> set[str]:
    """The comma-separated plugin names an environment variable holds (CANDLE_DISABLE_PLUGINS, ...)."""
    return {n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()}


@dataclass
class PluginRecord:
    name: str
    distribution: str = ""
    version: str = ""
    error: str = ""  # why it could not be loaded, if it could not


@dataclass
class KernelTable:
    """The kernels of one device type, with who provides each."""

    kernels: dict = field(default_factory=dict)    # (op, DType) -> kernel
    providers: dict = field(default_factory=dict)  # (op, DType) -> (plugin name, priority)
    conflicts: list = field(default_factory=list)  # ties between plugins, for `candle info`
    descriptions: dict = field(default_factory=dict)  # plugin name -> its KernelSet.description
    aliasing: set = field(default_factory=set)     # (op, DType) whose kernel may write over an input (row.alias)


class OpRegistry:
    """What the ``candle_api_custom_ops`` hook receives: ``define(OpDef)`` adds
    a custom op to the one op table (:data:`candle_api.ops.dispatch.OPS`),
    where the built-in ops are too, and makes its name a kernel name the
    registry accepts."""

    def __init__(self) -> None:
        self._custom: set[str] = set()

    def define(self, op: OpDef) -> None:
        from .contract.table import BY_NAME
        from .ops.dispatch import OPS, define

        if getattr(op, "name", None) in BY_NAME or (getattr(op, "name", None) in OPS
                                                    and op.name not in self._custom):
            raise PluginError(f"op {op.name!r} is built in: a custom op needs a name of its own")
        if op.name in self._custom:
            del OPS[op.name]  # a plugin defines its ops again when the plugins change
        define(op)
        self._custom.add(op.name)

    def get(self, name: str) -> OpDef | None:
        from .ops.dispatch import OPS

        return OPS.get(name) if name in self._custom else None

    def names(self) -> list[str]:
        return sorted(self._custom)

    def clear(self) -> None:
        from .ops.dispatch import OPS

        for name in self._custom:
            OPS.pop(name, None)
        self._custom.clear()


class Registry:
    def __init__(self) -> None:
        self._pm = pluggy.PluginManager("candle_api")
        self._pm.add_hookspecs(HookSpecs)
        self._lock = threading.RLock()
        self._loaded = False
        self._records: dict[str, PluginRecord] = {}
        self._tables: dict[str, KernelTable] = {}
        self._backends: dict[str, tuple[BackendSpec, str]] | None = None
        self._formats: list[tuple[FormatSpec, str]] | None = None
        self._listeners: list[Callable[[], None]] = []
        self.ops = OpRegistry()

    # ---- loading ---------------------------------------------------------------
    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            from importlib import metadata  # slow to import; only needed here, once

            self._pm.hook.candle_api_custom_ops.call_historic(kwargs={"registry": self.ops})
            disabled = env_names(ENV_DISABLE)
            for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                self._load_entry_point(ep, ep.name in disabled)
            self._loaded = True

    def _load_entry_point(self, ep, disabled: bool = False) -> None:
        dist = getattr(ep, "dist", None)
        record = PluginRecord(ep.name, dist.name if dist else "", dist.version if dist else "")
        self._records[ep.name] = record
        if disabled:
            record.error = f"disabled by {ENV_DISABLE}"
            return
        if self._pm.has_plugin(ep.name):
            return
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken plugin must not break the others
            record.error = f"import failed: {type(exc).__name__}: {exc}"
            return
        wanted = getattr(plugin, "CANDLE_API_HOOK_VERSION", 1)
        if wanted > HOOK_API_VERSION:
            record.error = (
                f"needs hook API {wanted}, this candle-api implements {HOOK_API_VERSION}: upgrade candle-api"
            )
            return
        try:
            self._pm.register(plugin, name=ep.name)
        except Exception as exc:
            record.error = f"registration failed: {type(exc).__name__}: {exc}"

    def register(self, plugin, name: str | None = None) -> str:
        """Registers a plugin object at run time (tests, notebooks); kernel
        tables are rebuilt and devices pick up the change. A plugin whose hooks
        answer malformed results is refused and unregistered again."""
        self.ensure_loaded()
        with self._lock:
            name = self._pm.register(plugin, name=name)
            if name is None:
                raise PluginError(f"plugin {plugin!r} is already registered")
            record = self._records.setdefault(name, PluginRecord(name, "(registered at run time)"))
            self._changed()
            for device_type in self.backends():  # so that kernels the contract refuses are refused now
                self.kernel_table(device_type)
            if record.error:
                error = record.error
                self.unregister(name)
                raise PluginError(f"plugin {name!r} refused: {error}")
        return name

    def unregister(self, name: str) -> None:
        with self._lock:
            self._pm.unregister(name=name)
            self._records.pop(name, None)
            # the custom ops of the plugins that remain, defined again without the leaver's
            self.ops.clear()
            for plugin, fn in self._impls("candle_api_custom_ops"):
                self._call(plugin, fn, registry=self.ops)
            self._changed()

    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def _changed(self) -> None:
        self._tables.clear()
        self._backends = None
        self._formats = None
        for callback in self._listeners:
            callback()

    # ---- queries -----------------------------------------------------------------
    def records(self) -> list[PluginRecord]:
        self.ensure_loaded()
        return [self._records[k] for k in sorted(self._records)]

    def _call(self, plugin: str, fn, **kwargs):
        """Calls one hook implementation; a plugin that raises is recorded and
        skipped rather than taking every device down with it."""
        try:
            return fn(**kwargs)
        except Exception as exc:
            self._records.setdefault(plugin, PluginRecord(plugin)).error = (
                f"{fn.__name__} raised {type(exc).__name__}: {exc}")
            return None

    def _bad_result(self, plugin: str, hook: str, value) -> None:
        self._records.setdefault(plugin, PluginRecord(plugin)).error = (
            f"{hook} returned {type(value).__name__} {value!r:.60}, not the documented type")

    def implementers(self, *hook_names: str) -> set[str]:
        """Names of the plugins implementing any of these hooks."""
        self.ensure_loaded()
        return {plugin for hook in hook_names for plugin, _ in self._impls(hook)}

    def _impls(self, hook_name: str):
        """(plugin name, function) of every implementation of a hook."""
        hook = getattr(self._pm.hook, hook_name)
        return [(impl.plugin_name, impl.function) for impl in hook.get_hookimpls()]

    def backends(self) -> dict[str, tuple[BackendSpec, str]]:
        """device type -> (spec, plugin name), the highest priority winning."""
        self.ensure_loaded()
        if self._backends is not None:
            return self._backends
        with self._lock:
            found: dict[str, tuple[BackendSpec, str]] = {}
            for plugin, fn in self._impls("candle_api_backends"):
                for spec in self._call(plugin, fn) or ():
                    if not isinstance(spec, BackendSpec):
                        self._bad_result(plugin, "candle_api_backends", spec)
                        continue
                    if spec.api_version > HOOK_API_VERSION:
                        self._records[plugin].error = f"backend {spec.name!r} needs hook API {spec.api_version}"
                        continue
                    if spec.contract_version > CONTRACT_VERSION:
                        self._records[plugin].error = (
                            f"backend {spec.name!r} implements contract version {spec.contract_version}, this "
                            f"candle-api knows version {CONTRACT_VERSION}: upgrade candle-api")
                        continue
                    if spec.name not in found or spec.priority > found[spec.name][0].priority:
                        found[spec.name] = (spec, plugin)
            self._backends = found
            return found

    def formats(self) -> list[tuple[FormatSpec, str]]:
        """(spec, plugin name) of every format, highest priority first."""
        self.ensure_loaded()
        if self._formats is not None:
            return self._formats
        with self._lock:
            found = []
            for plugin, fn in self._impls("candle_api_formats"):
                for spec in self._call(plugin, fn) or ():
                    if not isinstance(spec, FormatSpec):
                        self._bad_result(plugin, "candle_api_formats", spec)
                    elif spec.api_version > HOOK_API_VERSION:
                        self._records[plugin].error = f"format {spec.name!r} needs hook API {spec.api_version}"
                    else:
                        found.append((spec, plugin))
            found.sort(key=lambda item: -item[0].priority)
            self._formats = found
            return found

    def kernel_table(self, device_type: str) -> KernelTable:
        self.ensure_loaded()
        table = self._tables.get(device_type)
        if table is not None:
            return table
        with self._lock:
            table = KernelTable()
            for plugin, fn in self._impls("candle_api_kernels"):
                kset = self._call(plugin, fn, device_type=device_type)
                if kset is None:
                    continue
                if not isinstance(kset, KernelSet):
                    self._bad_result(plugin, "candle_api_kernels", kset)
                    continue
                refused = self._refused_kernels(kset)
                if refused:
                    self._records.setdefault(plugin, PluginRecord(plugin)).error = (
                        f"kernels for {device_type} refused: {refused}")
                    continue
                if kset.description:
                    table.descriptions[plugin] = kset.description
                for (op, dtype), kernel in kset.kernels.items():
                    key = (op, get_dtype(dtype))
                    current = table.providers.get(key)
                    if current is None or kset.priority > current[1]:
                        table.kernels[key] = kernel
                        table.providers[key] = (plugin, kset.priority)
                        _note_aliasing(table, key, kset.aliasing)
                    elif kset.priority == current[1]:
                        table.conflicts.append(f"{op}/{dtype}: {current[0]} and {plugin} tie; {current[0]} kept")
            _serve_bool_with_u8(table)
            self._tables[device_type] = table
            return table

    def _refused_kernels(self, kset: KernelSet) -> str:
        """Why some kernels of a set are not acceptable ("" when all are): a name
        that is neither a row of the contract table nor a defined custom op, or
        a dtype the row does not have."""
        from .contract.table import BY_NAME, CONTRACT_VERSION

        problems = []
        for key in kset.kernels:
            op, dtype = key if isinstance(key, tuple) and len(key) == 2 else (key, None)
            try:
                dtype = get_dtype(dtype).name
            except DTypeError:
                problems.append(f"{op!r}: {dtype!r} is not a dtype")
                continue
            row = BY_NAME.get(op)
            if row is None and op not in self.ops.names():
                problems.append(f"{op!r} is not a kernel of the contract table (version {CONTRACT_VERSION}) nor a "
                                "custom op defined through candle_api_custom_ops")
            elif row is not None and dtype not in row.dtypes:
                problems.append(f"{op!r} has no {dtype} kernel in the contract (its dtypes: {' '.join(row.dtypes)})")
        return "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")


def _note_aliasing(table: KernelTable, key: tuple, declared: bool) -> None:
    """key's kernel may write over an input where its row allows it and its kernel set says so."""
    from .contract.table import BY_NAME

    row = BY_NAME.get(key[0])
    if declared and row is not None and row.alias:
        table.aliasing.add(key)
    else:
        table.aliasing.discard(key)


def _serve_bool_with_u8(table: KernelTable) -> None:
    """bool is u8's bytes: every contract row listing bool that no plugin gave a
    bool kernel runs its u8 kernel (docs/backend-contract.md)."""
    from .contract.table import ROWS
    from .dtype import bool_, u8

    for row in ROWS:
        key, u8_key = (row.name, bool_), (row.name, u8)
        if "bool" in row.dtypes and key not in table.kernels and u8_key in table.kernels:
            table.kernels[key] = table.kernels[u8_key]
            table.providers[key] = table.providers[u8_key]


_REGISTRY = Registry()


def registry() -> Registry:
    """The process-wide registry."""
    return _REGISTRY
