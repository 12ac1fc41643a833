"""Seeing what the backends do: the trace and the shadow check.

``with candle_api.trace() as t: ...`` (or ``CANDLE_TRACE=1`` for the whole
process, printed at exit) records which plugin and kernel served each op on
each device, which ops ran as a decomposition, and where data crossed
devices; ``t.summary()`` is the table.

``with candle_api.shadow("ref"): ...`` (or ``CANDLE_SHADOW=ref``) re-runs
every kernel on the reference device and raises :class:`ShadowMismatchError`
at the first result that differs beyond the conformance tolerance (each
output, and each input: sort's indices are one, and a kernel must leave the
others as they were), naming the op, its inputs' layouts and the plugin that
served it: a new backend's author finds a wrong kernel in one run of their
model.

Both hang on :data:`candle_api.ops.dispatch.observer`, the one hook of the
dispatch path, and cost nothing when off.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections import Counter

import numpy as np

from .contract.table import BY_NAME, TOLERANCES
from .errors import CandleError
from .ops import dispatch
from .registry import registry

_local = threading.local()  # .busy: inside an observer's own work, whose ops are not observed
_installed: list = []


def _install(obs) -> None:
    _installed.append(obs)
    dispatch.observer = _Chain(list(_installed))


def _remove(obs) -> None:
    _installed.remove(obs)
    dispatch.observer = _Chain(list(_installed)) if _installed else None


class _Chain(dispatch.Observer):
    """The installed observers, outermost first. Their own ops (the shadow's
    copies and reruns) and the kernel launch itself run unobserved."""

    def __init__(self, observers):
        self.observers = observers

    def active(self) -> bool:
        return not getattr(_local, "busy", False)

    def run(self, op, device, dtype, inputs, params, launch):
        def unobserved():
            with _busy():
                return launch()

        for obs in reversed(self.observers):
            unobserved = (lambda o, inner: lambda: o.run(op, device, dtype, inputs, params, inner))(obs, unobserved)
        return unobserved()

    def decomposed(self, op, device, dtype):
        if self.active():
            for obs in self.observers:
                obs.decomposed(op, device, dtype)

    def crossed(self, source, target, nbytes):
        if self.active():
            for obs in self.observers:
                obs.crossed(source, target, nbytes)

    def read(self, tensor):
        if self.active():
            for obs in self.observers:
                obs.read(tensor)


class _busy:
    """Marks this thread's work as the observers' own: not observed."""

    def __enter__(self):
        self.saved = getattr(_local, "busy", False)
        _local.busy = True

    def __exit__(self, *exc):
        _local.busy = self.saved


def _provider(device, op_name: str, dtype) -> str:
    entry = registry().kernel_table(device.type).providers.get((op_name, dtype))
    return entry[0] if entry else "?"


class Trace(dispatch.Observer):
    """Counts of what served each op: ``kernels[(device, op, dtype, plugin)]``,
    ``decompositions[(device, op, dtype)]`` and ``crossings[(source, target)]``
    (copies, bytes)."""

    def __init__(self) -> None:
        self.kernels: Counter = Counter()
        self.decompositions: Counter = Counter()
        self.crossings: dict = {}
        self._lock = threading.Lock()

    def run(self, op, device, dtype, inputs, params, launch):
        with self._lock:
            self.kernels[(str(device), op.name, str(dtype), _provider(device, op.name, dtype))] += 1
        return launch()

    def decomposed(self, op, device, dtype):
        with self._lock:
            self.decompositions[(str(device), op.name, str(dtype))] += 1

    def crossed(self, source, target, nbytes):
        with self._lock:
            copies, total = self.crossings.get((str(source), str(target)), (0, 0))
            self.crossings[(str(source), str(target))] = (copies + 1, total + nbytes)

    def summary(self) -> str:
        lines = ["candle-api trace", f"{'device':10s} {'op':26s} {'dtype':6s} {'served by':24s} {'calls':>8s}"]
        for (device, op, dtype, plugin), n in sorted(self.kernels.items()):
            lines.append(f"{device:10s} {op:26s} {dtype:6s} {'kernel of ' + plugin:24s} {n:8d}")
        for (device, op, dtype), n in sorted(self.decompositions.items()):
            lines.append(f"{device:10s} {op:26s} {dtype:6s} {'decomposition':24s} {n:8d}")
        if self.crossings:
            lines.append("data crossing devices:")
            for (source, target), (copies, nbytes) in sorted(self.crossings.items()):
                lines.append(f"  {source} -> {target}: {copies} copies, {nbytes} bytes")
        return "\n".join(lines)

    def __enter__(self) -> "Trace":
        _install(self)
        return self

    def __exit__(self, *exc) -> None:
        _remove(self)


def trace() -> Trace:
    """A context manager recording what served each op inside it."""
    return Trace()


class ShadowMismatchError(CandleError, AssertionError):
    """A kernel's result differs from the reference device's beyond tolerance."""


# Families whose kernels accumulate (and so round differently from the
# reference) get this many times the per-dtype tolerance.
_ACCUMULATING = {"reduce", "scan", "matmul", "conv", "pool", "resample", "fused", "optim"}


class Shadow(dispatch.Observer):
    """Re-runs every kernel on ``device`` and compares (see the module doc)."""

    def __init__(self, device: str = "ref", scale: float = 1.0) -> None:
        self.device_name, self.scale = device, scale
        self.checked = 0

    def run(self, op, device, dtype, inputs, params, launch):
        from .device import get_device

        ref = get_device(self.device_name)
        if device is ref:
            return launch()
        if op.name == "copy":  # its layout parameter points into the destination's storage
            launch()
            self._check_copy(op, device, dtype, inputs, params)
            return None
        with _busy():
            before = [_to(t, ref) for t in inputs]  # an in-place op changes its first input
        out = launch()
        self.checked += 1
        with _busy():
            expected = dispatch.apply(op, *before, **params)
            if out is not None:
                self._compare(op, device, dtype, inputs, out, expected)
            # an in-place op's target; an op's further outputs (sort's indices); inputs no kernel may change
            for got, want in zip(inputs, before):
                if got is not None:
                    self._compare(op, device, dtype, inputs, got, want)
        return out

    def _check_copy(self, op, device, dtype, inputs, params):
        from .ops.core import view

        dst, src = inputs
        self.checked += 1
        with _busy():
            self._compare(op, device, dtype, inputs, view(dst, params["layout"]), src)

    def _compare(self, op, device, dtype, inputs, got, want) -> None:
        a, b = got.numpy(), want.numpy()
        if a.shape == b.shape:
            if got.dtype.is_float:
                row = BY_NAME.get(op.name)
                factor = self.scale * (16 if row is not None and row.family in _ACCUMULATING else 2)
                rtol, atol = (t * factor for t in TOLERANCES[str(got.dtype)])
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                bad = ~np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
            else:
                bad = a != b
            if not bad.any():
                return
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            detail = f"at index {where}: {a[where]!r}, the reference device gives {b[where]!r}"
        else:
            detail = f"shape {a.shape}, the reference device gives {b.shape}"
        layouts = "; ".join(f"{t.dtype}{tuple(t.shape)} strides {t.stride} offset {t._layout.offset}"
                            for t in inputs if t is not None)
        raise ShadowMismatchError(
            f"{op.name} ({dtype}) on {device}, kernel of plugin {_provider(device, op.name, dtype)}: {detail} "
            f"[inputs: {layouts}]")

    def __enter__(self) -> "Shadow":
        _install(self)
        return self

    def __exit__(self, *exc) -> None:
        _remove(self)


def _to(t, device):
    if t is None:
        return None
    from .ops.creation import from_array

    return from_array(t.numpy(), t.dtype, device)


def shadow(device: str = "ref", scale: float = 1.0) -> Shadow:
    """A context manager re-running every kernel inside it on ``device``;
    ``scale`` multiplies the tolerances."""
    return Shadow(device, scale)


def install_from_environment() -> None:
    """``CANDLE_TRACE=1`` traces the whole process and prints the summary to
    stderr at exit; ``CANDLE_SHADOW=<device>`` shadows it on that device."""
    if os.environ.get("CANDLE_TRACE", "") not in ("", "0"):
        whole = Trace()
        _install(whole)
        atexit.register(lambda: print(whole.summary(), file=sys.stderr))
    device = os.environ.get("CANDLE_SHADOW", "")
    if device:
        _install(Shadow(device))
