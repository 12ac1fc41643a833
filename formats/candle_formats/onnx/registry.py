"""The op table: ``(domain, op_type)`` -> implementations by opset version.

An implementation is registered with :func:`op` and serves every opset from
its ``since`` version up to the next registered version of the same op.
It is called as ``fn(node, *inputs)`` (a missing optional input is None)
and returns one value (a Tensor, a list for a sequence, None for an empty
optional) or a tuple of values for several outputs. ``node`` is the
:class:`Node`: attributes with the defaults of the op's schema at the
model's opset filled in, the ONNX types of inputs and outputs, the device.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .dtypes import OnnxType, natural
from .errors import NodeError, UnsupportedNodeError

#: the default ONNX domain has two spellings
DEFAULT_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"
_MODULES = ("ops_math", "ops_reduce", "ops_tensor", "ops_index", "ops_cast", "ops_nn", "ops_pool", "ops_norm",
            "ops_resize", "ops_rnn", "ops_attention", "ops_quant", "ops_control", "ops_sequence", "ops_random",
            "ops_loss", "ops_contrib", "ops_fused", "ops_signal", "ops_vision", "ops_qlstm")


@dataclass(frozen=True)
class OpImpl:
    fn: Callable
    since: int
    defaults: dict       #: attribute defaults for domains without onnx schemas (com.microsoft)
    pure: bool           #: same inputs give the same outputs (constant folding may run it)
    #: pack(node, index, tensor) -> what the op takes instead of constant input ``index``
    #: (packed weights), or None to keep it; run once when the model is planned
    pack: Callable | None = None


_OPS: dict[tuple[str, str], list[OpImpl]] = {}
_loaded = False


def op(*op_types: str, domain: str = "", since: int = 1, defaults: dict | None = None, pure: bool = True,
       pack: Callable | None = None):
    """Registers ``fn`` for op_types of domain from opset ``since``."""

    def register(fn):
        for op_type in op_types:
            versions = _OPS.setdefault((domain, op_type), [])
            versions.append(OpImpl(fn, since, dict(defaults or {}), pure, pack))
            versions.sort(key=lambda impl: impl.since)
        return fn

    return register


def _load() -> None:
    global _loaded
    if not _loaded:
        for module in _MODULES:
            importlib.import_module(f"{__package__}.{module}")
        _loaded = True


def canonical_domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def resolve(domain: str, op_type: str, opset: int) -> OpImpl | None:
    """The implementation serving op_type at this opset, or None."""
    _load()
    versions = _OPS.get((canonical_domain(domain), op_type), ())
    found = None
    for impl in versions:
        if impl.since <= opset:
            found = impl
    return found


def supported() -> list[tuple[str, str, int]]:
    """(domain, op_type, since) of every registered implementation."""
    _load()
    return sorted((d or "ai.onnx", t, impl.since) for (d, t), impls in _OPS.items() for impl in impls)


class Node:
    """What an implementation knows about the node it runs: attributes,
    declared/inferred ONNX types of inputs and outputs, its subgraphs
    (compiled plans) and the device its tensors live on."""

    __slots__ = ("name", "op_type", "domain", "opset", "attrs", "in_types", "out_types", "n_outputs", "device",
                 "captures")

    def __init__(self, name, op_type, domain, opset, attrs, in_types, out_types, n_outputs, device):
        self.name, self.op_type, self.domain, self.opset = name, op_type, domain, opset
        self.attrs: dict[str, Any] = attrs
        self.in_types: list[OnnxType | None] = in_types
        self.out_types: list[OnnxType | None] = out_types
        self.n_outputs = n_outputs
        self.device = device
        self.captures: list[str] = []   # outer values its subgraphs read, passed after the inputs

    def split_captures(self, args: tuple) -> tuple[tuple, dict]:
        """(the node's own inputs, {outer name: value}) from the arguments of a node with subgraphs."""
        k = len(args) - len(self.captures)
        return args[:k], dict(zip(self.captures, args[k:]))

    def __getitem__(self, attr: str):
        return self.attrs[attr]

    def get(self, attr: str, default=None):
        value = self.attrs.get(attr)
        return default if value is None else value

    def in_type(self, i: int, tensor) -> OnnxType:
        """The ONNX type of input i: declared or inferred, else the one its dtype stands for."""
        t = self.in_types[i] if i < len(self.in_types) else None
        return t if t is not None else natural(tensor.dtype)

    def out_type(self, i: int = 0) -> OnnxType | None:
        return self.out_types[i] if i < len(self.out_types) else None

    def fail(self, reason: str) -> NodeError:
        return NodeError(self.name, self.op_type, self.domain, self.opset, reason)

    def unsupported(self, reason: str) -> UnsupportedNodeError:
        return UnsupportedNodeError(self.name, self.op_type, self.domain, self.opset, reason)
