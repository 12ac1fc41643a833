"""Weights packed once per model, and the activations fused ops apply.

When Conv, FusedConv, MatMul or Linear read a constant f32 weight, planning
packs it once (the ``pack`` hook of the op table, see registry.py) into a
:class:`Panels`, and every run multiplies by the packed panels
(candle_api.ops.panels); a weight that is not constant takes the ordinary
ops. Fused nodes name their activation as onnxruntime's FusedConv does
(``activation``, ``activation_params``; HardSwish, Gelu and Swish are ours).
"""

from __future__ import annotations

from dataclasses import dataclass

import candle_api as c
from candle_api.ops import panels

#: onnxruntime's activation names (FusedConv, FusedGemm) -> the contract's, and the
#: activation_params each reads (with their defaults)
ACTIVATIONS = {
    "": ("none", ()), "Relu": ("relu", ()), "Tanh": ("tanh", ()), "Sigmoid": ("sigmoid", ()),
    "LeakyRelu": ("leaky_relu", (0.01,)), "Clip": ("clip", (float("-inf"), float("inf"))),
    "HardSigmoid": ("hard_sigmoid", (0.2, 0.5)), "HardSwish": ("hard_swish", ()), "Gelu": ("gelu_erf", ()),
    "Swish": ("silu", ()),
}
#: the attributes of a fused node's activation, and their defaults
FUSED_ATTRIBUTES = {"activation": "", "activation_params": []}


@dataclass(frozen=True)
class Panels:
    """A constant weight packed for the panels kernels: ``tensor`` is
    pack_panels' output, ``shape`` the weight's ONNX shape."""

    tensor: c.Tensor
    shape: tuple
    groups: int = 1


def activation(node) -> tuple[str, float, float]:
    """(contract name, alpha, beta) of a node's activation (none for ops without one)."""
    name = node.get("activation", "")
    if name not in ACTIVATIONS:
        raise node.unsupported(f"activation {name!r} (supported: {', '.join(n for n in ACTIVATIONS if n)})")
    act, defaults = ACTIVATIONS[name]
    given = list(node.get("activation_params") or [])
    params = given + list(defaults[len(given):])
    return act, *(params + [0.0, 0.0])[:2]


def pack_conv(node, index: int, w):
    """A convolution's weight (input 1) as panels: 1-d and 2-d f32 kernels."""
    if index != 1 or w.dtype != c.f32 or w.rank not in (3, 4):
        return None
    groups = node.get("group", 1)
    return Panels(panels.conv_weights(w if w.rank == 4 else w.unsqueeze(2), groups), w.shape, groups)


def pack_matmul(node, index: int, w):
    """A (k, n) f32 weight (input 1) as panels of its transpose."""
    if index != 1 or w.dtype != c.f32 or w.rank != 2:
        return None
    return Panels(panels.pack_panels(w.t()), w.shape)


def matmul_any(node, x, w, bias=None):
    """act(x @ w + bias), on the packed panels when w is packed and x is f32."""
    act, alpha, beta = activation(node)
    if isinstance(w, Panels):
        if x.dtype == c.f32:
            return panels.linear_panels(x, w.tensor, w.shape[1], bias, act, alpha, beta)
        w = panels.unpack_panels(w.tensor, w.shape[1])[0].t()
    y = x @ w
    return panels.activate(y if bias is None else y + bias, act, alpha, beta)
