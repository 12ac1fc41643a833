"""Shape arithmetic on the host.

Exported graphs compute at run time the shapes they reshape to: Shape, then
Gather, Unsqueeze, Concat and integer arithmetic on a handful of int64
values. As device ops each of those steps costs allocations and kernel calls
for a few numbers; planned here they run on NumPy arrays, and a value
becomes a device tensor only where a device op (or the caller) reads it.

A value is host-side when it is a small integer constant or an output of a
host step; a step is a host step when its op is one of ``HOST_OPS`` and all
its inputs are host-side (Shape and Size read only their input's shape, so
they take any input). Host values live in the run's environment under the
key ``(HOST, name)``, next to the device tensor of the same name when one is
needed.
"""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .helpers import tensor_from_array

HOST = "host"
#: constants at most this large (and of an integer type) are also kept on the host
MAX_CONSTANT = 64
INTEGER = (np.int32, np.int64)


def _axis(a: int, rank: int) -> int:
    if not -rank <= a < max(rank, 1):
        raise ValueError(f"axis {a} is out of range for rank {rank}")
    return a % max(rank, 1)


def _shape(node, x):
    dims = x.shape
    return np.array(dims[slice(node.get("start", 0), node.get("end", len(dims)))], dtype=np.int64)


def _size(node, x):
    return np.array(math.prod(x.shape), dtype=np.int64)


def _gather(node, data, indices):
    a = _axis(node.get("axis", 0), data.ndim)
    n = data.shape[a]
    wrapped = [i + n if i < 0 else i for i in indices.reshape(-1).tolist()]  # a few indices: Python is fastest
    if any(not 0 <= i < n for i in wrapped):
        raise IndexError(f"indices {indices.reshape(-1).tolist()} out of range for a dim of size {n}")
    return np.take(data, np.array(wrapped, dtype=np.int64).reshape(indices.shape), axis=a)


def _unsqueeze(node, x, axes=None):
    given = axes.reshape(-1).tolist() if axes is not None else node["axes"]
    rank = x.ndim + len(given)
    dims = {_axis(a, rank) for a in given}
    if len(dims) != len(given):
        raise ValueError(f"repeated axes {given}")
    it = iter(x.shape)
    return x.reshape([1 if d in dims else next(it) for d in range(rank)])


def _squeeze(node, x, axes=None):
    given = axes.reshape(-1).tolist() if axes is not None else node.get("axes")
    if not given:
        return np.squeeze(x)
    dims = tuple({_axis(a, x.ndim) for a in given})
    if any(x.shape[d] != 1 for d in dims):
        raise ValueError(f"cannot squeeze dims {dims} of shape {x.shape}")
    return np.squeeze(x, dims)


def _concat(node, *xs):
    return np.concatenate(xs, axis=_axis(node["axis"], xs[0].ndim))


def _cast(node, x):
    return x.astype(_CAST_TO[node["to"]])


_CAST_TO = {6: np.int32, 7: np.int64}  # TensorProto.INT32, INT64


def _binary(fn):
    def run(node, a, b):
        if a.dtype != b.dtype:
            raise TypeError(f"operands of types {a.dtype} and {b.dtype}")
        return fn(a, b)

    return run


HOST_OPS = {
    "Shape": _shape, "Size": _size, "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Concat": _concat, "Cast": _cast, "Identity": lambda node, x: x,
    "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
}
#: ops whose result depends only on the shape of their input
SHAPE_READERS = ("Shape", "Size")
#: device ops and the inputs they only read on the host (through helpers.ints): given host values as they are
HOST_READ = {"Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Tile": {1, 2}, "Slice": {1, 2, 3, 4},
             "Squeeze": {1}, "Unsqueeze": {1}}


def _default_domain(node) -> bool:
    return node.domain in ("", "ai.onnx")


def _host_step(step, host: set) -> bool:
    node = step.node
    if not _default_domain(node) or node.op_type not in HOST_OPS:
        return False
    if node.op_type == "Cast" and node.get("to") not in _CAST_TO:
        return False
    if node.op_type in SHAPE_READERS:
        return True
    return all(n == "" or n in host for n in step.inputs)


def _host_inputs(step, host: set, positions) -> None:
    """Points the step's inputs at the host copies of the host values in ``positions``."""
    step.inputs = [(HOST, n) if i in positions and n in host else n for i, n in enumerate(step.inputs)]
    step.reads = {n for n in step.inputs if isinstance(n, str) and n}


def hoist(steps: list, constants: dict, outputs: list) -> tuple[dict, set]:
    """Moves the shape arithmetic among the (just compiled) steps to the host, in
    place; returns the host copies of the constants it reads and the keys of
    host values (never freed: they are a few numbers each)."""
    host = {n for n, v in constants.items()
            if isinstance(v, c.Tensor) and v.dtype.np in INTEGER and v.numel() <= MAX_CONSTANT}
    host_steps = set()
    for i, step in enumerate(steps):
        if _host_step(step, host):
            host_steps.add(i)
            host.update(n for n in step.outputs if n)
    if not host_steps:
        return {}, set()
    for i, step in enumerate(steps):
        if i in host_steps:
            _host_inputs(step, host, range(len(step.inputs)))
        elif _default_domain(step.node) and step.node.op_type in HOST_READ:
            _host_inputs(step, host, HOST_READ[step.node.op_type])
    # device readers of host values: steps on the device (subgraph captures included) and the caller
    device_reads = {n for i, s in enumerate(steps) if i not in host_steps for n in s.reads} | set(outputs)
    host_read = {n[1] for s in steps for n in s.inputs if isinstance(n, tuple)}
    host_constants = {(HOST, n): constants[n].numpy() for n in host_read if n in constants}
    keys = set(host_constants)
    for i in host_steps:
        step = steps[i]
        results = [n for n in step.outputs if n]
        published = [n for n in results if n in device_reads]
        keys.update((HOST, n) for n in results)
        step.fn = _runner(HOST_OPS[step.node.op_type], results, published)
        step.outputs = [(HOST, n) for n in results] + published
    return host_constants, keys


def _runner(fn, results: list, published: list):
    """The step's function: the host results, then device tensors of the published ones."""
    count, where = len(results), [results.index(n) for n in published]

    def run(node, *args):
        values = fn(node, *args)
        values = tuple(map(np.asarray, values)) if isinstance(values, tuple) else (np.asarray(values),)  # 0-d
        if len(values) != count:
            raise ValueError(f"produced {len(values)} outputs, the node names {count}")
        return (*values, *(tensor_from_array(values[i], node.device) for i in where))

    return run
