"""Errors naming the node they come from: its name, op type, domain and opset.

Malformed files raise candle_api.errors.FormatError (path, offset, reason).
"""

from __future__ import annotations

from candle_api.errors import CandleError, UnsupportedOpError


def describe(name: str, op_type: str, domain: str, opset: int | None) -> str:
    where = f"node {name!r}" if name else "an unnamed node"
    return f"{where} ({op_type}, domain {domain or 'ai.onnx'!r}, opset {opset})"


class _NodeMixin:
    def _set(self, name: str, op_type: str, domain: str, opset: int | None) -> None:
        self.node_name, self.op_type, self.domain, self.opset = name, op_type, domain or "ai.onnx", opset


class UnsupportedNodeError(UnsupportedOpError, _NodeMixin):
    """A node whose op (or this version of it, or these inputs) the evaluator does not implement."""

    def __init__(self, name: str, op_type: str, domain: str, opset: int | None, reason: str = ""):
        self._set(name, op_type, domain, opset)
        self.op, self.device, self.dtype, self.plugins = op_type, None, None, []
        detail = f": {reason}" if reason else ""
        Exception.__init__(self, f"{describe(name, op_type, domain, opset)} is not supported{detail}")


class NodeError(CandleError, RuntimeError, _NodeMixin):
    """A node that failed: a bad attribute or input, or an op error while it ran."""

    def __init__(self, name: str, op_type: str, domain: str, opset: int | None, reason: str):
        self._set(name, op_type, domain, opset)
        self.reason = reason
        super().__init__(f"{describe(name, op_type, domain, opset)}: {reason}")


class RunInterruptedError(NodeError):
    """A run stopped at this node: cancelled (``RunOptions.terminate``) or past a limit of its RunOptions."""
