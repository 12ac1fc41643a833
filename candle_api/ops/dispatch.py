"""One op definition and one path from an op to a backend.

Every op that reaches a kernel, built in or defined by a plugin, is an
:class:`OpDef`: its name (which is the name of its kernel row in
:mod:`candle_api.contract.table`, or of a custom op), how its inputs become
the output's shape and dtype and the kernel's arguments, its backward and its
decomposition. :func:`apply` is the only place that looks a kernel up and
calls it: Tensor methods, ``functional``, ``nn``, the optimizers and
``custom_op`` all end here, and so do the trace and the shadow check.

The steady-state cost of :func:`apply` is one dict lookup, the op's
``prepare``, one allocation and the kernel's own call; everything else
(tracing, shadowing, recording for autograd) is one attribute test when it
is off.
"""

from __future__ import annotations

from ..autograd import versions
from ..autograd.graph import Node, _mode
from ..contract.opdef import OpDef
from ..contract.table import BY_NAME
from ..errors import CandleError, PluginError, ReadOnlyError
from ..layout import Layout
from ..tensor import Tensor

_contig = Layout.contig
_new = object.__new__
# Tensors are made below with one attribute store per slot, not a tuple assignment: 20 ns an op.


#: Every op defined so far, built in or custom: name -> OpDef.
OPS: dict[str, OpDef] = {}


def define(op: OpDef) -> OpDef:
    """Adds an op to :data:`OPS`; a name may be defined once."""
    if not isinstance(op, OpDef):
        raise PluginError(f"define() takes an OpDef, got {type(op).__name__}")
    if OPS.get(op.name, op) is not op:
        raise PluginError(f"op {op.name!r} is already defined")
    OPS[op.name] = op
    return op


class Observer:
    """What :func:`apply` tells the trace and the shadow check
    (:mod:`candle_api.debug`) and the recorded runs of the ONNX evaluator.
    Installed as :data:`observer`."""

    def active(self) -> bool:
        """False while the observer's own work runs (its ops are not observed)."""
        return True

    def run(self, op: OpDef, device, dtype, inputs, params, launch):
        """A kernel is to run: ``launch()`` runs it (unobserved) and returns the
        output (None for an in-place op); return what it returns."""
        return launch()

    def decomposed(self, op: OpDef, device, dtype) -> None:
        """The op runs as its decomposition."""

    def crossed(self, source, target, nbytes: int) -> None:
        """A tensor was copied from one device to another."""

    def read(self, tensor) -> None:
        """The tensor's values are read on the host (``Tensor.numpy()``, and so
        ``item()``, ``tolist()``...): what a recorded run must guard on."""


#: The installed observer, or None (the common case).
observer: Observer | None = None


def apply(op: OpDef, *inputs, **params):
    """Runs op on its inputs' device: its kernel, else its decomposition."""
    x = inputs[op.key]
    dev = x._device
    k = dev.kernels.get((op.name, x._dtype))
    if k is None:
        return _without_kernel(op, dev, x._dtype, inputs, params)
    if observer is not None and observer.active():  # launch() comes back here, inactive
        return observer.run(op, dev, x._dtype, inputs, params, lambda: apply(op, *inputs, **params))
    shape, dtype, args = op.prepare(*inputs, **params) if params else op.prepare(*inputs)
    if shape is None:  # in place, on the storages of the inputs op.writes
        check_writable(op.name, *(inputs[i] for i in op.writes))
        k(*args)
        return None
    t = _kernel_output(k, dev, shape, dtype, args)
    for i in inputs:
        if i is not None and i._node is not None:
            if _mode.enabled and dtype.is_float:
                _record(op, t, inputs, params)
            break
    return t


# ---- fast paths ------------------------------------------------------------------------------------
# The two calling conventions most ops have, k(out, x, lx, scalars...) and k(out, a, la, b, lb), in their
# common case: a kernel exists, nothing observes, no gradient to record and, for two inputs, the same
# shape, dtype and device. Everything else goes to apply(), which these must agree with (the conformance
# suite runs both: autograd cases take apply()).


def apply_unary(op: OpDef, x: Tensor) -> Tensor:
    """apply(op, x) for an op whose kernel is k(out, x, lx), out shaped and typed
    as x: the most common op of all, so apply_one without its arguments."""
    dev = x._device
    k = dev.kernels.get((op.name, x._dtype))
    if k is None or x._node is not None or observer is not None:
        return apply(op, x)
    lx = x._layout
    lay = _contig(lx.shape)
    out = dev.alloc(lay.numel * x._dtype.itemsize)
    if lay.numel:
        k(out, x._storage, lx)
    t = _new(Tensor)
    t._storage = out; t._layout = lay; t._dtype = x._dtype; t._device = dev; t._node = None  # noqa: E702
    return t


_NO = object()  # no scalar


def apply_one(op: OpDef, x: Tensor, shape: tuple, dtype, s0=_NO, s1=_NO, params: dict | None = None):
    """apply(op, x, **params) for an op whose kernel is k(out, x, lx[, s0[, s1]]),
    when the caller knows the output's shape and dtype (what op.prepare would
    say). ``params`` defaults to the scalars named by ``op.scalars``. (Two
    scalars at most, passed one by one: packing them into a tuple and
    unpacking it into the call costs a tenth of a small op.)"""
    dev = x._device
    k = dev.kernels.get((op.name, x._dtype))
    if k is None or x._node is not None or observer is not None:
        if params is None:
            params = dict(zip(op.scalars, (s for s in (s0, s1) if s is not _NO)))
        return apply(op, x, **params)
    lay = _contig(shape)
    out = dev.alloc(lay.numel * dtype.itemsize)
    if lay.numel:
        if s0 is _NO:
            k(out, x._storage, x._layout)
        elif s1 is _NO:
            k(out, x._storage, x._layout, s0)
        else:
            k(out, x._storage, x._layout, s0, s1)
    t = _new(Tensor)
    t._storage = out; t._layout = lay; t._dtype = dtype; t._device = dev; t._node = None  # noqa: E702
    return t


def apply_binary(op: OpDef, a: Tensor, b: Tensor, out_dtype=None, shape=None) -> Tensor:
    """apply(op, a, b) for an op whose kernel is k(out, a, la, b, lb), out typed as
    a (or out_dtype) and shaped as a and b (or ``shape``, which the caller has
    checked)."""
    dev, dtype = a._device, a._dtype
    k = dev.kernels.get((op.name, dtype))
    if (k is None or b.__class__ is not Tensor or b._dtype is not dtype or b._device is not dev
            or a._node is not None or b._node is not None or observer is not None):
        return apply(op, a, b)
    la, lb = a._layout, b._layout
    if shape is None:
        if la.shape != lb.shape:
            return apply(op, a, b)
        shape = la.shape
    lay = _contig(shape)
    out_dtype = out_dtype or dtype
    out = dev.alloc(lay.numel * out_dtype.itemsize)
    if lay.numel:
        k(out, a._storage, la, b._storage, lb)
    t = _new(Tensor)
    t._storage = out; t._layout = lay; t._dtype = out_dtype; t._device = dev; t._node = None  # noqa: E702
    return t


def apply_checked(op: OpDef, key: Tensor, shape: tuple, inputs: tuple, args: tuple, params: dict) -> Tensor:
    """apply(op, *inputs, **params) for a fused op whose caller has checked its inputs and knows the output
    (shaped ``shape``, typed as ``key``) and the kernel's arguments after out (``args``, what op.prepare
    would give): a kernel exists, nothing observes, no gradient to record (optional inputs may be None).
    Decoding runs a few such ops per layer and token."""
    dev, dtype = key._device, key._dtype
    k = dev.kernels.get((op.name, dtype))
    if k is None or observer is not None or (_mode.enabled and any(i is not None and i._node is not None
                                                                   for i in inputs)):
        return apply(op, *inputs, **params)
    return _kernel_output(k, dev, shape, dtype, args)


def _kernel_output(k, dev, shape: tuple, dtype, args: tuple) -> Tensor:
    """A new contiguous tensor of ``shape`` that kernel ``k`` wrote (``k(out, *args)``; skipped when empty)."""
    lay = _contig(shape)
    out = dev.alloc(lay.numel * dtype.itemsize)
    if lay.numel:
        k(out, *args)
    t = _new(Tensor)
    t._storage = out; t._layout = lay; t._dtype = dtype; t._device = dev; t._node = None  # noqa: E702
    return t


def check_writable(name: str, *tensors) -> None:
    """ReadOnlyError unless every tensor (None is skipped) is writable memory."""
    for t in tensors:
        if t is not None and not getattr(t._storage, "writable", True):
            raise ReadOnlyError(f"{name}: a tensor it writes into is read-only memory (a memory-mapped "
                                "checkpoint, a read-only NumPy array or bytes): take a .copy() first")


def _record(op: OpDef, out: Tensor, inputs: tuple, params: dict) -> None:
    """Gives out the node of op. Optional inputs passed as None are left out of
    the node, and so are their gradients. The backward sees the inputs and the
    output as they were: one written in place since raises when it is read
    (see :mod:`candle_api.autograd.versions`)."""
    backward = op.backward
    y = out.detach()  # a closure holding out itself would be a reference cycle
    present = tuple(i for i, t in enumerate(inputs) if t is not None)
    if versions._COUNTS:
        for t in inputs:
            if t is not None:
                versions.check_current(t, op.name)
    saved = versions.snapshot(inputs + (y,))

    def grads(g):
        if backward is None:
            raise CandleError(f"op {op.name!r} has no backward: it cannot pass gradients to its inputs (give its "
                              "OpDef a backward, or a decompose and run it on a device without the kernel)")
        *seen, seen_y = versions.guarded(inputs + (y,), saved, op.name)
        every = tuple(backward(tuple(seen), seen_y, g, **params))
        return every if len(present) == len(inputs) else tuple(every[i] for i in present)

    out._node = Node(op.name, tuple(inputs[i] for i in present), grads, versions.rebases(out._storage))


def _without_kernel(op: OpDef, dev, dtype, inputs, params):
    """The decomposition, for the dtypes the op's contract row covers."""
    row = BY_NAME.get(op.name)
    if op.decompose is not None and (row is None or dtype in row.dtypes):
        if observer is not None:
            observer.decomposed(op, dev, dtype)
        return op.decompose(*inputs, **params)
    raise unsupported(op.name, dev, dtype)


def unsupported(name: str, device, dtype):
    """The UnsupportedOpError for an op with no kernel and no decomposition on
    device, naming the installed plugins and, for a contract row newer than
    the backend, both versions."""
    from ..errors import UnsupportedDTypeError, UnsupportedOpError
    from ..registry import registry

    row = BY_NAME.get(name)
    if dtype == "bool" and (row is None or "bool" not in row.dtypes):
        return UnsupportedDTypeError(f"op {name!r} takes no bool tensors: bool holds truth values (comparisons, "
                                     "logical ops, where, masks, any/all); convert with .to_dtype() first")
    serving = registry().implementers("candle_api_backends", "candle_api_kernels")
    plugins = [f"{r.name} ({r.distribution} {r.version})".replace(" )", ")")
               for r in registry().records() if not r.error and r.name in serving]
    err = UnsupportedOpError(name, str(device), str(dtype) if dtype is not None else None, plugins)
    spec = registry().backends().get(getattr(device, "type", ""), (None,))[0]
    if row is not None and spec is not None and row.since > spec.contract_version:
        err.args = (f"{err.args[0]}; its kernel row was added in contract version {row.since} and the "
                    f"{device.type} backend implements version {spec.contract_version}",)
    return err
