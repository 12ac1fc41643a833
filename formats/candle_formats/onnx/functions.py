"""Function calls replaced by their bodies before planning.

A node may call a function the model defines (``ModelProto.functions``), or
an op the evaluator has no implementation for but whose ONNX schema defines
it as a function of other ops (Celu, Mish, GroupNormalization, ...; some
bodies depend on the node's attributes and input types). Either way the
node is replaced by the body's nodes, with the body's names made unique,
its formal inputs and outputs bound to the node's, and attribute references
resolved from the node's attributes or the function's defaults.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import onnx
from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto

from .registry import canonical_domain

_counter = itertools.count()


def body_opsets(fn: FunctionProto, outer: dict[str, int]) -> dict[str, int]:
    """The opsets the body's nodes resolve against: the function's imports over the caller's."""
    opsets = dict(outer)
    opsets.update({canonical_domain(o.domain): o.version for o in fn.opset_import})
    return opsets


def schema_function(node: NodeProto, opset: int, input_types: list) -> FunctionProto | None:
    """The function body the schema of node's op defines at this opset, if any."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None
    if schema.has_context_dependent_function:
        if any(t is None for t in input_types):
            return None  # the body depends on input types this model does not tell
        try:
            raw = schema.get_context_dependent_function_with_opset_version(
                opset, node.SerializeToString(), [t.SerializeToString() for t in input_types])
        except ValueError:  # the body builder rejects these inputs (e.g. a tensor where it wants a sequence)
            return None
        return _with_schema_defaults(FunctionProto.FromString(raw), schema) if raw else None
    if schema.has_function:
        return _cached_function(node.op_type, node.domain, opset)
    return None


@lru_cache(maxsize=None)
def _cached_function(op_type: str, domain: str, opset: int) -> FunctionProto | None:
    schema = onnx.defs.get_schema(op_type, opset, domain)
    raw = schema.get_function_with_opset_version(opset)
    return _with_schema_defaults(FunctionProto.FromString(raw), schema) if raw else None


def _with_schema_defaults(fn: FunctionProto, schema) -> FunctionProto:
    """Schema bodies refer to the op's attributes, whose defaults live in the
    schema (e.g. the window ops' ``output_datatype``): they join the body's."""
    own = {a.name for a in fn.attribute_proto}
    for name, attr in schema.attributes.items():
        if name not in own and attr.default_value.type != AttributeProto.UNDEFINED:
            default = AttributeProto()
            default.CopyFrom(attr.default_value)
            default.name = name
            fn.attribute_proto.append(default)
    return fn


def inline(node: NodeProto, fn: FunctionProto) -> list[NodeProto]:
    """fn's body with node's inputs, outputs and attributes bound."""
    prefix = f"{node.name or node.op_type}::{fn.name}#{next(_counter)}/"
    names = {formal: actual for formal, actual in itertools.zip_longest(fn.input, node.input, fillvalue="")
             if formal}
    names.update({formal: actual for formal, actual in zip(fn.output, node.output)})
    names.update({formal: "" for formal in fn.output[len(node.output):]})
    for inner in fn.node:  # every body value gets its name first: subgraphs may read ones defined later
        for name in inner.output:
            _local(name, names, prefix)
    given = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    body = []
    for inner in fn.node:
        copy = NodeProto()
        copy.CopyFrom(inner)
        _rename_node(copy, names, prefix)
        _bind_attributes(copy, given, defaults)
        body.append(copy)
    return body


def _local(name: str, names: dict, prefix: str) -> str:
    if not name:
        return name
    if name not in names:
        names[name] = prefix + name
    return names[name]


def _rename_node(node: NodeProto, names: dict, prefix: str) -> None:
    node.input[:] = [_local(n, names, prefix) for n in node.input]
    node.output[:] = [_local(n, names, prefix) for n in node.output]
    if node.name:
        node.name = prefix + node.name
    for attr in node.attribute:
        for graph in _graphs(attr):
            _rename_outer_refs(graph, names)


def _rename_outer_refs(graph: GraphProto, names: dict) -> None:
    """Inside a body's subgraph only references to the body's names change."""
    own = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    own |= {o for n in graph.node for o in n.output}
    for node in graph.node:
        node.input[:] = [names.get(n, n) if n not in own else n for n in node.input]
        for attr in node.attribute:
            for sub in _graphs(attr):
                _rename_outer_refs(sub, {k: v for k, v in names.items() if k not in own})
    for out in graph.output:
        if out.name not in own and out.name in names:
            out.name = names[out.name]


def _graphs(attr: AttributeProto) -> list[GraphProto]:
    if attr.type == AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def _bind_attributes(node: NodeProto, given: dict, defaults: dict) -> None:
    bound = []
    for attr in node.attribute:
        if attr.ref_attr_name:
            source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
            if source is None:
                continue  # unset and without default: the inner op's own default applies
            value = AttributeProto()
            value.CopyFrom(source)
            value.name = attr.name
            bound.append(value)
        else:
            bound.append(attr)
    del node.attribute[:]
    node.attribute.extend(bound)
