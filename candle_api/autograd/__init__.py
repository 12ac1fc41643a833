"""Reverse-mode automatic differentiation, in the core and backend-agnostic:
every backward rule is written with Tensor ops, so it runs on any device.

See docs/autograd.md. ``Var`` (a trainable tensor) lives in candle_api.var.
"""

from .engine import GradStore, backward, grad
from .graph import Leaf, Node, enable_grad, is_grad_enabled, no_grad, record, set_grad_enabled, tracks

__all__ = ["GradStore", "backward", "grad", "Leaf", "Node", "enable_grad", "is_grad_enabled", "no_grad",
           "record", "set_grad_enabled", "tracks"]
