"""What is installed: plugins, their devices, and which plugin serves each op
(``candle_api.plugins()`` and ``candle info``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .registry import registry


@dataclass
class BackendInfo:
    device_type: str
    plugin: str
    available: bool
    reason: str
    device_count: int
    description: str
    details: str = ""
    aliases: tuple = ()


@dataclass
class PluginInfo:
    name: str
    distribution: str
    version: str
    error: str
    backends: list = field(default_factory=list)
    serves: dict = field(default_factory=dict)  # device type -> sorted op names it provides kernels for
    kernel_notes: dict = field(default_factory=dict)  # device type -> the description of its kernel set

    @property
    def loaded(self) -> bool:
        return not self.error


def plugins() -> list[PluginInfo]:
    """Every plugin found through the ``candle_api`` entry points (or registered at
    run time), with its version, load error if any, the devices it provides and,
    per available device, the ops it serves."""
    reg = registry()
    found = []
    for dev_type, (spec, plugin) in sorted(reg.backends().items()):
        try:
            ok, reason = spec.availability()
            count = spec.device_count() if ok else 0
            details = spec.details() if ok else ""
            aliases = tuple(spec.aliases()) if ok else ()
        except Exception as exc:  # availability must never take `candle info` down
            ok, reason, count, details, aliases = False, f"{type(exc).__name__}: {exc}", 0, "", ()
        if ok:  # built before the records are read: a kernel plugin whose hook fails (mkl without its library)
            reg.kernel_table(dev_type)  # is recorded, and shown with the reason
        found.append(BackendInfo(dev_type, plugin, ok, reason, count, spec.description, details, aliases))
    out = {r.name: PluginInfo(r.name, r.distribution, r.version, r.error) for r in reg.records()}
    for b in found:
        out[b.plugin].backends.append(b)
        if b.available:
            for provider, note in reg.kernel_table(b.device_type).descriptions.items():
                out.setdefault(provider, PluginInfo(provider, "", "", "")).kernel_notes[b.device_type] = note
            for op, by_dtype in kernel_providers(b.device_type).items():
                for provider in set(by_dtype.values()):
                    out.setdefault(provider, PluginInfo(provider, "", "", "")).serves.setdefault(
                        b.device_type, []).append(op)
    return list(out.values())


def kernel_providers(device_type: str) -> dict[str, dict[str, str]]:
    """op -> {dtype: plugin} for one device type."""
    table = registry().kernel_table(device_type)
    ops: dict[str, dict[str, str]] = {}
    for (op, dtype), (plugin, _priority) in sorted(table.providers.items()):
        ops.setdefault(op, {})[str(dtype)] = plugin
    return ops


def decomposed_rows(device_type: str) -> list[str]:
    """The optional contract rows a device has no kernel for (in some of its
    dtypes: those are named), which it runs as their decompositions (rows
    newer than its contract version included)."""
    from .contract.table import ROWS

    spec = registry().backends()[device_type][0]
    ops = kernel_providers(device_type)
    out = []
    for row in ROWS:
        if row.required:
            continue
        held = [d for d in row.dtypes if d in spec.dtypes]
        missing = [d for d in held if d not in ops.get(row.name, {})]
        if missing:
            out.append(row.name if missing == held else f"{row.name} ({' '.join(missing)})")
    return out


def describe(show_ops: bool = True) -> str:
    """The text `candle info` prints."""
    from . import __version__

    lines = [f"candle-api {__version__}", "", "plugins:"]
    infos = plugins()
    if not infos:
        lines.append("  (none: install a backend, e.g. `pip install ./backends/cpu` in a checkout of candle-api)")
    for p in infos:
        dist = f"{p.distribution} {p.version}".strip()
        lines.append(f"  {p.name}: {dist}" + (f"  [NOT LOADED: {p.error}]" if p.error else ""))
        for b in p.backends:
            state = f"available ({b.device_count} device(s))" if b.available else f"unavailable: {b.reason}"
            about = "; ".join(x for x in (b.description, b.details) if x)
            also = f" (also {', '.join(b.aliases)})" if b.aliases else ""
            lines.append(f"    device {b.device_type}{also}: {state}" + (f" - {about}" if about else ""))
        for dev_type, note in sorted(p.kernel_notes.items()):
            lines.append(f"    kernels for {dev_type}: {note}")
    custom = registry().ops.names()
    if custom:
        lines += ["", "custom ops (a device without the op's kernel runs its decomposition, if it has one):"]
        for name in custom:
            op = registry().ops.get(name)
            served = [f"{dev_type} {' '.join(sorted(by_dtype))} <- {', '.join(sorted(set(by_dtype.values())))}"
                      for dev_type in sorted(registry().backends())
                      for by_dtype in [kernel_providers(dev_type).get(name, {})] if by_dtype]
            fallback = "decomposition elsewhere" if op.decompose is not None else "no decomposition"
            lines.append(f"  {name}: kernels on {'; '.join(served) or 'no device'}; {fallback}")
    if show_ops:
        for p in infos:
            for b in p.backends:
                if not b.available:
                    continue
                lines += ["", f"ops on {b.device_type} (op: dtypes <- plugin):"]
                for op, by_dtype in kernel_providers(b.device_type).items():
                    groups: dict[str, list[str]] = {}
                    for dtype, plugin in by_dtype.items():
                        groups.setdefault(plugin, []).append(dtype)
                    served = "; ".join(f"{' '.join(d)} <- {plugin}" for plugin, d in groups.items())
                    lines.append(f"  {op}: {served}")
                conflicts = registry().kernel_table(b.device_type).conflicts
                lines += [f"  conflict: {c}" for c in conflicts]
                decomposed = decomposed_rows(b.device_type)
                if decomposed:
                    lines.append(f"  runs as decompositions (optional rows without a kernel): {', '.join(decomposed)}")
    return "\n".join(lines)
