"""Planning: a graph is compiled once into a list of steps.

Compiling a graph resolves every node's implementation at the model's
opset (functions are inlined first, see ``functions.py``), fills in
attribute defaults, compiles subgraphs, orders the nodes topologically,
evaluates the nodes whose inputs are all constant (constant folding), drops
nodes no output depends on, and records after which step each intermediate
value has had its last reader, so a run frees it there. Running a plan is
then one loop over the steps.

A run may be given :class:`RunOptions` (limits and cancellation, off by
default as in onnxruntime): they are checked before every step, at every
Loop and Scan iteration, so even a loop whose body has no node stops.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Callable, Iterator

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto

from .dtypes import UnsupportedTypeError, from_numpy_dtype, onnx_type
from .errors import NodeError, RunInterruptedError, UnsupportedNodeError
from .functions import body_opsets, inline, schema_function
from .fusion import BASIC_RULES, RULES, Graph, drop_identities, fuse
from .host_shapes import hoist
from .registry import MS_DOMAIN, Node, canonical_domain, resolve

#: the first element of the keys of packed weights in a plan's constants (the others: the
#: weight's name, the pack hook, the node's groups)
PACKED = "packed"
#: onnxruntime's ORT_ENABLE_EXTENDED: the level from which every fusion runs and weights are packed
EXTENDED = 2


class Step:
    __slots__ = ("fn", "node", "inputs", "outputs", "free", "reads", "pure", "foldable", "pack")

    def __init__(self, fn, node: Node, inputs: list[str], outputs: list[str], reads: set[str], pure: bool,
                 foldable: bool, pack=None):
        self.fn, self.node, self.inputs, self.outputs = fn, node, inputs, outputs
        self.reads = reads          # inputs plus the outer names its subgraphs read
        self.pure = pure            # same inputs, same outputs (not a random generator)
        self.foldable = foldable    # pure and without subgraphs: may run at planning time
        self.pack = pack            # the op's pack hook (registry.py), or None
        self.free: list[str] = []


class RunOptions:
    """Limits and cancellation for runs, all off by default (as in onnxruntime,
    whose ``RunOptions.terminate`` this mirrors). ``max_seconds``: the
    longest a run may take; ``max_iterations``: the most iterations one
    Loop or Scan node may run; ``terminate``: set it to True from another
    thread to stop the runs using these options. A run that hits one raises
    :class:`RunInterruptedError` naming the node it stopped at."""

    def __init__(self, max_seconds: float | None = None, max_iterations: int | None = None):
        self.max_seconds, self.max_iterations = max_seconds, max_iterations
        self.terminate = False


class _Watch:
    """The options of the run in progress, with its deadline."""

    def __init__(self, options: RunOptions):
        self.options = options
        self.deadline = None if options.max_seconds is None else time.monotonic() + options.max_seconds

    def check(self, node) -> None:
        if self.options.terminate:
            raise _interrupted(node, "the run was cancelled (RunOptions.terminate)")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _interrupted(node, f"the run took longer than RunOptions.max_seconds = {self.options.max_seconds}")


def _interrupted(node, reason: str) -> RunInterruptedError:
    return RunInterruptedError(node.name, node.op_type, node.domain, node.opset, reason)


#: the watch of the run in progress in this thread (None: no options)
_WATCH: ContextVar[_Watch | None] = ContextVar("candle_onnx_run", default=None)
#: the recorder of the run in progress in this thread (replay.py), or None
RECORDER: ContextVar = ContextVar("candle_onnx_recorder", default=None)


@contextmanager
def watched(options: RunOptions | None) -> Iterator[None]:
    """Runs within this block (subgraph runs included) obey ``options``."""
    token = _WATCH.set(_Watch(options) if options is not None else None)
    try:
        yield
    finally:
        _WATCH.reset(token)


def check_iteration(node, i: int) -> None:
    """Before iteration ``i`` of a Loop or Scan node: the run's limits and cancellation."""
    watch = _WATCH.get()
    if watch is None:
        return
    watch.check(node)
    limit = watch.options.max_iterations
    if limit is not None and i >= limit:
        raise _interrupted(node, f"ran {i} iterations, the most RunOptions.max_iterations allows")


class Plan:
    """A compiled graph. ``run(feeds, outer)`` returns the output values in
    order; ``outer`` supplies the enclosing graphs' values a subgraph reads."""

    def __init__(self, inputs, outputs, constants, defaults, steps, captures, types):
        self.inputs: list[str] = inputs
        self.outputs: list[str] = outputs
        self.constants: dict[str, Any] = constants
        self.defaults: dict[str, Any] = defaults    # initializers a feed may override
        self.steps: list[Step] = steps
        self.captures: list[str] = captures          # names read from enclosing graphs
        self.types = types                           # name -> OnnxType (or None)
        self._env = {**constants, **defaults, "": None}

    def run(self, feeds: Mapping, outer: Mapping | None = None) -> list:
        env = self._env.copy()
        for name in self.captures:
            env[name] = outer[name]
        env.update(feeds)
        watch = _WATCH.get()
        recorder = RECORDER.get()
        for step in self.steps:
            if watch is not None:
                watch.check(step.node)
            if recorder is None:
                store(env, step, call(step, env))
            else:
                recorder.step(step, env)
            for name in step.free:
                del env[name]
        return [env[n] for n in self.outputs]

    @property
    def peak_live(self) -> int:
        """The most intermediate values alive at once during a run (feeds included)."""
        live = len(self.inputs)
        peak = live
        for step in self.steps:
            live += sum(1 for n in step.outputs if n)
            peak = max(peak, live)
            live -= len(step.free)
        return peak


def call(step: Step, env: dict):
    """The step's outputs from the values in ``env``; an op's own error becomes one naming the node."""
    try:
        return step.fn(step.node, *[env[n] for n in step.inputs])
    except (NodeError, UnsupportedNodeError):
        raise
    except Exception as exc:
        raise step.node.fail(f"{type(exc).__name__}: {exc}") from exc


def store(env: dict, step: Step, out) -> None:
    names = step.outputs
    if type(out) is not tuple:
        env[names[0]] = out
        return
    if len(out) < len(names):
        raise step.node.fail(f"produced {len(out)} outputs, the node names {len(names)}")
    for name, value in zip(names, out):
        if name:
            env[name] = value


# ---- compiling ---------------------------------------------------------------------------------
class Compiler:
    """Compiles the graphs of one model. ``tensor(proto)`` turns an
    initializer or tensor attribute into a numpy array of its ONNX type
    (external data resolved by the loader); ``to_device(array)`` makes the
    tensor the evaluator holds."""

    def __init__(self, opsets: dict[str, int], device, functions: dict, tensor: Callable,
                 to_device: Callable, fold: bool = True, level: int = 99):
        self.opsets = {canonical_domain(d): v for d, v in opsets.items()}
        self.device = device
        self.functions = functions   # (domain, name) -> FunctionProto
        self.tensor = tensor
        self.to_device = to_device
        self.fold = fold
        self.level = level           # onnxruntime's optimization level: the fusions (fusion.py) and packing
        self._fused = itertools.count()

    def graph(self, graph: GraphProto, outer_types: dict | None = None, opsets: dict | None = None) -> Plan:
        opsets = opsets or self.opsets
        types = dict(outer_types or {})
        for vi in (*graph.input, *graph.output, *graph.value_info):
            types[vi.name] = _declared_type(vi.type) or types.get(vi.name)
        constants = {}
        for init in graph.initializer:
            constants[init.name] = self._constant(init)
            types[init.name] = types.get(init.name) or _safe_type(init.data_type)
        for sparse in graph.sparse_initializer:
            constants[sparse.values.name] = self.to_device(_dense(self.tensor, sparse))
        declared = [vi.name for vi in graph.input]
        defaults = {n: constants.pop(n) for n in declared if n in constants}
        feeds = [n for n in declared if n not in defaults]
        outer = set(outer_types or ())
        nodes = _topological(self._expand(graph.node, opsets, types),
                             set(feeds) | set(defaults) | set(constants) | outer)
        for proto, _ in nodes:  # subgraphs see every value of this graph, typed or not
            for name in proto.output:
                types.setdefault(name, None)
        steps = []
        for proto, node_opsets in nodes:
            step = self._step(proto, node_opsets, types)
            if self._foldable(step, constants):
                self._fold(step, constants)
            else:
                steps.append(step)
        outputs = [vi.name for vi in graph.output]
        if self.level > 0:
            steps = self._fuse(steps, constants, types, outputs, opsets)
        steps = _live_steps(steps, outputs)
        packed = _pack(steps, constants) if self.level >= EXTENDED else {}
        host_constants, host_keys = hoist(steps, constants, outputs)
        needed = {n for s in steps for n in s.reads} | set(outputs)
        constants = {n: v for n, v in constants.items() if n in needed}
        constants.update(packed)
        local = set(feeds) | set(defaults) | set(constants) | {n for s in steps for n in s.outputs}
        captures = sorted(n for n in needed if n and n not in local)
        missing = [n for n in captures if n not in outer]
        if missing:
            raise NodeError(graph.name, "Graph", "", None, f"values {missing} are never produced")
        constants.update(host_constants)
        _mark_frees(steps, set(outputs) | set(constants) | set(captures) | host_keys)
        return Plan(feeds, outputs, constants, defaults, steps, captures, types)

    # ---- nodes ----
    def _expand(self, nodes, opsets: dict, types: dict) -> list[tuple[NodeProto, dict]]:
        """Nodes with function calls replaced by their bodies (recursively)."""
        out = []
        for node in nodes:
            domain = canonical_domain(node.domain)
            local = self.functions.get((node.domain, node.op_type))
            if local is not None:
                out += self._expand(inline(node, local), body_opsets(local, opsets), types)
                continue
            opset = _opset(opsets, domain)
            if resolve(domain, node.op_type, opset) is None:
                fn = schema_function(node, opset, [_type_proto(types.get(n)) for n in node.input])
                if fn is not None:
                    out += self._expand(inline(node, fn), body_opsets(fn, opsets), types)
                    continue
                raise UnsupportedNodeError(node.name, node.op_type, node.domain, opset,
                                           "no implementation of this op at this opset")
            out.append((node, opsets))
        return out

    def _step(self, proto: NodeProto, opsets: dict, types: dict) -> Step:
        domain = canonical_domain(proto.domain)
        opset = _opset(opsets, domain)
        impl = resolve(domain, proto.op_type, opset)
        node = Node(proto.name, proto.op_type, proto.domain, opset, None,
                    [types.get(n) if n else None for n in proto.input],
                    [types.get(n) if n else None for n in proto.output], len(proto.output), self.device)
        reads = set(proto.input) - {""}
        try:
            node.attrs = self._attributes(proto, domain, opset, impl.defaults, types, opsets)
        except (NodeError, UnsupportedNodeError):
            raise
        except (UnsupportedTypeError, ValueError, TypeError) as exc:
            raise node.fail(f"bad attribute: {exc}") from exc
        subplans = [p for v in node.attrs.values() for p in (v if isinstance(v, list) else [v])
                    if isinstance(p, Plan)]
        # a node with subgraphs also receives the outer values they read, after its own inputs
        node.captures = sorted({n for plan in subplans for n in plan.captures})
        reads |= set(node.captures)
        return Step(impl.fn, node, list(proto.input) + node.captures, list(proto.output), reads, impl.pure,
                    impl.pure and not subplans, impl.pack)

    def _attributes(self, proto: NodeProto, domain: str, opset: int, defaults: dict, types: dict,
                    opsets: dict) -> dict:
        attrs = {**_schema_defaults(domain, proto.op_type, opset), **defaults}  # defaults: domains without schemas
        for a in proto.attribute:
            if a.ref_attr_name:
                raise NodeError(proto.name, proto.op_type, proto.domain, opset,
                                f"attribute {a.name!r} refers to {a.ref_attr_name!r} outside a function")
            attrs[a.name] = self._attribute(a, types, opsets)
        return attrs

    def _attribute(self, a: AttributeProto, types: dict, opsets: dict):
        if a.type == AttributeProto.GRAPH:
            return self.graph(a.g, types, opsets)
        if a.type == AttributeProto.GRAPHS:
            return [self.graph(g, types, opsets) for g in a.graphs]
        if a.type == AttributeProto.TENSOR:
            return self.tensor(a.t)
        if a.type == AttributeProto.SPARSE_TENSOR:
            return _dense(self.tensor, a.sparse_tensor)
        return _decoded(onnx.helper.get_attribute_value(a))

    def _constant(self, proto):
        return self.to_device(self.tensor(proto))

    # ---- fusions ----
    def _fuse(self, steps: list, constants: dict, types: dict, outputs: list, opsets: dict) -> list:
        keep = set(outputs) | {n for s in steps for n in s.node.captures}
        steps = drop_identities(steps, keep)

        def add_constant(array: np.ndarray, hint: str) -> str:
            name = f"{hint}::fused{next(self._fused)}"
            constants[name] = self.to_device(array)
            types[name] = from_numpy_dtype(array.dtype)
            return name

        def make_step(op_type: str, domain: str, inputs: list, outputs: list, attrs: dict, like: Step) -> Step:
            proto = onnx.helper.make_node(op_type, inputs, outputs, name=like.node.name, domain=domain, **attrs)
            return self._step(proto, opsets, types)

        return fuse(Graph(steps, constants, keep, make_step, add_constant),
                    RULES if self.level >= EXTENDED else BASIC_RULES)

    # ---- folding ----
    def _foldable(self, step: Step, constants: dict) -> bool:
        return self.fold and step.foldable and all(n in constants for n in step.reads)

    def _fold(self, step: Step, constants: dict) -> None:
        env = {n: constants[n] for n in step.reads}
        env[""] = None
        store(env, step, call(step, env))
        for name in step.outputs:
            if name:
                constants[name] = env[name]


def _opset(opsets: dict, domain: str) -> int:
    if domain in opsets:
        return opsets[domain]
    return 1 if domain == MS_DOMAIN else opsets.get("", 1) if domain == "" else 1


@lru_cache(maxsize=None)
def _schema_defaults(domain: str, op_type: str, opset: int) -> dict:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return {}
    out = {}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default.type != AttributeProto.UNDEFINED:
            out[name] = _decoded(onnx.helper.get_attribute_value(default))
    return out


def _decoded(value):
    """Attribute strings (and lists of them) as str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def _declared_type(tp):
    """The OnnxType of a tensor TypeProto, or of the tensors in a sequence or
    optional one; None when unknown."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return _safe_type(tp.tensor_type.elem_type) if tp.tensor_type.elem_type else None
    if kind in ("sequence_type", "optional_type"):
        return _declared_type(getattr(tp, kind).elem_type)
    return None


def _safe_type(code: int):
    try:
        return onnx_type(code)
    except UnsupportedTypeError:
        return None


def _type_proto(t):
    return None if t is None else onnx.helper.make_tensor_type_proto(t.code, None)


def _dense(tensor: Callable, sparse) -> np.ndarray:
    values = tensor(sparse.values)
    indices = tensor(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 2:  # coordinates per value
        dense[tuple(indices.T)] = values
    else:                  # linear positions
        dense.reshape(-1)[indices] = values
    return dense


def free_names(graph: GraphProto) -> set[str]:
    """Names a graph reads without defining them: values of enclosing graphs."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used = set()
    for node in graph.node:
        defined.update(node.output)
        used.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                used |= free_names(sub)
    used.update(o.name for o in graph.output)
    return used - defined - {""}


def _topological(nodes: list, available: set) -> list:
    """Nodes in an order where each runs after the producers of what it reads
    (Kahn's algorithm, keeping the file's order among ready nodes)."""
    producer = {}
    for i, (node, _) in enumerate(nodes):
        for name in node.output:
            if name:
                producer[name] = i
    deps = []
    for node, _ in nodes:
        reads = set(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                reads |= free_names(sub)
        reads.discard("")
        missing = [n for n in reads if n not in producer and n not in available]
        if missing:
            raise NodeError(node.name, node.op_type, node.domain, None,
                            f"input {missing[0]!r} is not produced by any node, initializer or graph input")
        deps.append({producer[n] for n in reads if n in producer})
    users = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order = []
    while ready:
        ready.sort(reverse=True)
        i = ready.pop()
        order.append(nodes[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        stuck = next(nodes[i][0] for i, w in enumerate(waiting) if w)
        raise NodeError(stuck.name, stuck.op_type, stuck.domain, None, "the graph has a cycle through this node")
    return order


def _pack(steps: list[Step], constants: dict) -> dict:
    """Packs the constant inputs of steps whose op has a pack hook (weights, once per
    model): {key: packed value}, the steps reading the keys instead."""
    packed: dict = {}
    for step in steps:
        if step.pack is None:
            continue
        for i, name in enumerate(step.inputs):
            value = constants.get(name) if isinstance(name, str) else None
            if value is None or isinstance(value, list):
                continue
            key = (PACKED, name, step.pack.__name__, step.node.get("group", 1))
            if key not in packed:
                packed[key] = step.pack(step.node, i, value)
            if packed[key] is not None:
                step.inputs[i] = key
        step.reads = {n for n in step.inputs if isinstance(n, str) and n} | set(step.node.captures)
    return {k: v for k, v in packed.items() if v is not None}


def _live_steps(steps: list[Step], outputs: list[str]) -> list[Step]:
    """The steps some output depends on."""
    needed = set(outputs)
    kept = []
    for step in reversed(steps):
        if any(n in needed for n in step.outputs if n):
            kept.append(step)
            needed |= step.reads
    return kept[::-1]


def _mark_frees(steps: list[Step], keep: set) -> None:
    """step.free: the values whose last reader is that step (or that nobody reads)."""
    last = {}
    for i, step in enumerate(steps):
        for name in step.reads:
            last[name] = i
    for i, step in enumerate(steps):
        for name in step.outputs:
            if name and name not in last and name not in keep:
                step.free.append(name)
    for name, i in last.items():
        if name not in keep:
            steps[i].free.append(name)
    for step in steps:  # a step reading a value twice frees it once, in a stable order
        step.free = sorted(set(step.free))

