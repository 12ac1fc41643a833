"""Graph fusions: what onnxruntime's graph optimizer does to exported models
before they run, done to the planned steps of a graph.

- Identity nodes go (their readers read the value itself).
- A Conv or ConvTranspose followed by a BatchNormalization, or by a
  per-channel Mul and Add with constants (what exporters write for a folded
  batch norm), becomes one Conv or ConvTranspose with new weights and bias.
- A Conv followed by an Add of another tensor (a residual) and an activation
  (Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, HardSwish
  written out as x * HardSigmoid(x) or x * Clip(x + 3, 0, 6) / 6, and Swish
  written out as x * Sigmoid(x))
  becomes one FusedConv (ai.candle's), which also takes a following Mul
  and Add by scalar constants; a ConvTranspose and an activation become one
  FusedConvTranspose (ai.candle's).
- A MatMul by a constant 2-d weight followed by the Add of a bias and an
  activation (GELU written out with Erf included) becomes one ai.candle
  Linear; a GELU written out elsewhere becomes com.microsoft Gelu, and after
  the Add of a constant bias along the last dim, one BiasGelu (FastGelu for
  the tanh form) on the bias_gelu kernel.
- Attention written out as MatMul(Q, K^T), a scale (Div or Mul), an additive
  mask and Softmax, then MatMul by V, becomes one ai.candle
  ScaledDotProductAttention.
- LayerNormalization written out (ReduceMean, Sub, Pow, ReduceMean, Add,
  Sqrt, Div, Mul, Add over the last dim) becomes one (com.microsoft's, which
  any opset has) LayerNormalization.
- An Add read only by a LayerNormalization over the last dim (a residual and
  its norm) becomes one com.microsoft SkipLayerNormalization: the sum is made
  in the norm's pass over each row (nn.skip_layer_norm), never stored.

The fused ops are in ops_fused.py. A rewrite only ever removes values that
nothing else reads (no other node, no subgraph, no graph output), so every
value the graph still names is computed as before; results differ from the
unfused graph by float rounding only.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

import candle_api as c

from .ops_fused import CANDLE_DOMAIN
from .registry import MS_DOMAIN

#: activations a fused node takes over: op type -> (its name as FusedConv spells it, its params)
_SIMPLE_ACTIVATIONS = {
    "Relu": lambda n: ("Relu", []),
    "Sigmoid": lambda n: ("Sigmoid", []),
    "Tanh": lambda n: ("Tanh", []),
    "LeakyRelu": lambda n: ("LeakyRelu", [n.get("alpha", 0.01)]),
    "HardSigmoid": lambda n: ("HardSigmoid", [n.get("alpha", 0.2), n.get("beta", 0.5)]),
    "HardSwish": lambda n: ("HardSwish", []),
}


class Graph:
    """The steps of one graph being rewritten: who produces and who reads each value."""

    def __init__(self, steps: list, constants: dict, keep: set, make_step, add_constant):
        self.steps = steps
        self.constants = constants
        self.keep = keep              # values read outside the steps: graph outputs, subgraph captures
        self.make_step = make_step    # (op_type, domain, inputs, outputs, attrs, like) -> Step
        self.add_constant = add_constant  # (array, hint) -> its name
        self._index()

    def _index(self) -> None:
        self.producer, self.readers = {}, defaultdict(list)
        self.done: set[int] = set()   # steps a rewrite of this pass consumed
        self.new: dict[int, object] = {}  # id(last step of a rewrite) -> its replacement
        for step in self.steps:
            for name in step.outputs:
                if isinstance(name, str) and name:
                    self.producer[name] = step
            for name in step.reads:
                self.readers[name].append(step)

    def commit(self) -> bool:
        """Applies the pass's rewrites; whether there were any."""
        if not self.done:
            return False
        steps = []
        for step in self.steps:
            if id(step) in self.new:
                steps.append(self.new[id(step)])
            elif id(step) not in self.done:
                steps.append(step)
        self.steps = steps
        self._index()
        return True

    # ---- queries ----
    def free(self, step) -> bool:
        return id(step) not in self.done

    def sole_reader(self, name: str):
        """The one step reading name, once, when nothing else does; else None."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or name in self.keep or not self.free(readers[0]):
            return None
        step = readers[0]
        return step if step.inputs.count(name) == 1 and name not in step.node.captures else None

    def readers_of(self, name: str) -> list:
        return [] if name in self.keep else self.readers.get(name, [])

    def const(self, name) -> np.ndarray | None:
        value = self.constants.get(name) if isinstance(name, str) else None
        return value.numpy() if isinstance(value, c.Tensor) else None

    def scalar(self, name) -> float | None:
        value = self.const(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    # ---- rewriting ----
    def rewrite(self, old: list, op_type: str, domain: str, inputs: list, attrs: dict) -> None:
        """Replaces the steps ``old`` (the last one's outputs become the new step's)."""
        last = old[-1]
        self.new[id(last)] = self.make_step(op_type, domain, inputs, list(last.outputs), attrs, old[0])
        self.done.update(id(s) for s in old)


def is_op(step, op_type: str, domain: str = "") -> bool:
    node = step.node
    return node.op_type == op_type and (node.domain in ("", "ai.onnx") if domain == "" else node.domain == domain)


def _other(step, name: str) -> str:
    """The other input of a binary step that reads name."""
    a, b = step.inputs[:2]
    return b if a == name else a


def _close(value: float | None, target: float, tol: float = 1e-3) -> bool:
    return value is not None and abs(value - target) <= tol * abs(target)


def _attrs(node, names) -> dict:
    """The node's attributes of these names that are set (an empty list has no ONNX type)."""
    return {k: node.attrs[k] for k in names if node.attrs.get(k) is not None and node.attrs[k] != []}


# ---- Identity -----------------------------------------------------------------------------------
def drop_identities(steps: list, keep: set) -> list:
    """Steps without the Identity nodes whose output only steps of this graph read."""
    alias, out = {}, []
    for step in steps:
        step.inputs = [alias.get(n, n) if isinstance(n, str) else n for n in step.inputs]
        if step.reads:
            step.reads = {alias.get(n, n) for n in step.reads}
        if (is_op(step, "Identity") and step.outputs[0] not in keep and isinstance(step.inputs[0], str)
                and step.inputs[0]):
            alias[step.outputs[0]] = step.inputs[0]
            continue
        out.append(step)
    return out


# ---- convolutions -------------------------------------------------------------------------------
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_CONV_TRANSPOSE_ATTRS = _CONV_ATTRS + ("output_padding", "output_shape")


def _channel_values(g: Graph, name: str, channels: int, rank: int) -> np.ndarray | None:
    """A constant that broadcasts along the channels of a (N, C, ...) tensor of rank ``rank``, as (C,)."""
    value = g.const(name)
    if value is None or value.ndim > rank:
        return None
    if value.size == 1:
        return np.full(channels, value.reshape(-1)[0], np.float64)
    shape = (1,) * (rank - value.ndim) + value.shape
    if shape[1] == channels and all(d == 1 for i, d in enumerate(shape) if i != 1):
        return value.reshape(-1).astype(np.float64)
    return None


def _scale_channels(w: np.ndarray, scale, transposed: bool, groups: int) -> np.ndarray:
    """A Conv (cout, ...) or ConvTranspose (cin, cout / groups, ...) weight with each output channel scaled."""
    scale = np.broadcast_to(np.asarray(scale, np.float64), (w.shape[1] * groups if transposed else w.shape[0],))
    if not transposed:
        return w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    per_group = w.reshape((groups, -1) + w.shape[1:])
    return (per_group * scale.reshape((groups, 1, -1) + (1,) * (w.ndim - 2))).reshape(w.shape)


def fold_conv_affine(g: Graph, step) -> bool:
    """Conv or ConvTranspose, then BatchNormalization or a per-channel Mul or Add by
    constants: one Conv or ConvTranspose."""
    transposed = is_op(step, "ConvTranspose")
    if not (is_op(step, "Conv") or transposed):
        return False
    w = g.const(step.inputs[1])
    bias_name = step.inputs[2] if len(step.inputs) > 2 else ""
    bias = g.const(bias_name) if bias_name else None
    if w is None or w.dtype.kind != "f" or (bias_name and bias is None):
        return False
    reader = g.sole_reader(step.outputs[0])
    if reader is None:
        return False
    groups = step.node.get("group", 1)
    channels, rank = (w.shape[1] * groups if transposed else w.shape[0]), w.ndim
    b = bias.astype(np.float64) if bias is not None else np.zeros(channels)
    scale = shift = None
    if is_op(reader, "BatchNormalization") and len([o for o in reader.outputs if o]) == 1:
        params = [g.const(n) for n in reader.inputs[1:5]]
        if any(p is None for p in params) or reader.node.get("training_mode", 0):
            return False
        gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
        scale = gamma / np.sqrt(var + reader.node.get("epsilon", 1e-5))
        shift = beta - mean * scale
    elif (is_op(reader, "Mul") or is_op(reader, "Add")) and reader.inputs.count(step.outputs[0]) == 1:
        values = _channel_values(g, _other(reader, step.outputs[0]), channels, rank)
        if values is None:
            return False
        scale, shift = (values, 0.0) if is_op(reader, "Mul") else (1.0, values)
    else:
        return False
    new_w = _scale_channels(w.astype(np.float64), scale, transposed, groups).astype(w.dtype)
    new_b = (b * scale + shift).astype(w.dtype)
    inputs = [step.inputs[0], g.add_constant(new_w, step.inputs[1]), g.add_constant(new_b, bias_name or "bias")]
    attrs = _attrs(step.node, _CONV_TRANSPOSE_ATTRS if transposed else _CONV_ATTRS)
    g.rewrite([step, reader], step.node.op_type, "", inputs, attrs)
    return True


def _activation(g: Graph, name: str) -> tuple[list, str, list] | None:
    """The steps that apply an activation to value ``name`` (read by nothing
    else), with the activation's FusedConv name and params."""
    readers = g.readers_of(name)
    if not readers or not all(g.free(r) for r in readers):
        return None
    if len(readers) == 1:
        r = readers[0]
        if r.node.domain in ("", "ai.onnx") and r.node.op_type in _SIMPLE_ACTIVATIONS and r.inputs[0] == name:
            act, params = _SIMPLE_ACTIVATIONS[r.node.op_type](r.node)
            return [r], act, params
        if is_op(r, "Clip") and r.inputs[0] == name:
            lo, hi = _clip_bounds(g, r)
            if lo is not None:
                return [r], "Clip", [lo, hi]
        return None
    return _swish(g, name, readers) or _hard_swish(g, name, readers)


def _swish(g: Graph, name: str, readers: list):
    """x * Sigmoid(x), or x * Sigmoid(x * 1) (a swish of beta 1, as Paddle exports it)."""
    if len(readers) != 2:
        return None
    for mul, gate in (readers, readers[::-1]):
        if not is_op(mul, "Mul") or mul.inputs.count(name) != 1:
            continue
        chain, sigmoid = [gate], gate
        if is_op(gate, "Mul") and _close(g.scalar(_other(gate, name)), 1.0):
            sigmoid = g.sole_reader(gate.outputs[0])
            chain.append(sigmoid)
        if sigmoid is not None and is_op(sigmoid, "Sigmoid") and g.sole_reader(sigmoid.outputs[0]) is mul \
                and _other(mul, sigmoid.outputs[0]) == name:
            return chain + [mul], "Swish", []
    return None


def _clip_bounds(g: Graph, step):
    if step.node.opset < 11:
        return step.node.get("min", -math.inf), step.node.get("max", math.inf)
    bounds = []
    for name in (step.inputs[1:3] + ["", ""])[:2]:
        value = g.scalar(name) if name else None
        if name and value is None:
            return None, None
        bounds.append(value)
    return (bounds[0] if bounds[0] is not None else -math.inf), (bounds[1] if bounds[1] is not None else math.inf)


def _is_sixth(g: Graph, step, name: str) -> bool:
    """Whether step divides value name by 6 (or multiplies it by 1/6)."""
    if is_op(step, "Div"):
        return step.inputs[0] == name and _close(g.scalar(step.inputs[1]), 6.0)
    return is_op(step, "Mul") and step.inputs.count(name) == 1 and _close(g.scalar(_other(step, name)), 1 / 6)


def _hard_swish(g: Graph, name: str, readers: list):
    """x * HardSigmoid(x) (alpha 1/6, beta 1/2), x * (Clip(x + 3, 0, 6) / 6) or (x * Clip(x + 3, 0, 6)) / 6."""
    if len(readers) != 2:
        return None
    mul = next((r for r in readers if is_op(r, "Mul")), None)
    gate = next((r for r in readers if r is not mul), None)
    if mul is None or gate is None:
        return None
    if is_op(gate, "HardSigmoid"):
        if not (_close(gate.node.get("alpha", 0.2), 1 / 6) and _close(gate.node.get("beta", 0.5), 0.5)):
            return None
        chain, tail = [gate], []
    elif is_op(gate, "Add") and _close(g.scalar(_other(gate, name)), 3.0):
        clip = g.sole_reader(gate.outputs[0])
        if clip is None or not is_op(clip, "Clip") or _clip_bounds(g, clip) != (0.0, 6.0):
            return None
        after = g.sole_reader(clip.outputs[0])
        if after is None:
            return None
        if after is mul:  # (x * clip) / 6
            div = g.sole_reader(mul.outputs[0])
            if div is None or not _is_sixth(g, div, mul.outputs[0]):
                return None
            chain, tail = [gate, clip], [div]
        elif _is_sixth(g, after, clip.outputs[0]):  # x * (clip / 6)
            chain, tail = [gate, clip, after], []
        else:
            return None
    else:
        return None
    if g.sole_reader(chain[-1].outputs[0]) is not mul or _other(mul, chain[-1].outputs[0]) != name:
        return None
    return chain + [mul] + tail, "HardSwish", []


def fuse_conv(g: Graph, step) -> bool:
    """Conv (+ Add of another tensor) (+ activation): one FusedConv."""
    if not is_op(step, "Conv"):
        return False
    inputs = (list(step.inputs) + ["", ""])[:4]
    steps, out = [step], step.outputs[0]
    reader = g.sole_reader(out)
    if not inputs[3] and reader is not None and is_op(reader, "Add") and reader.inputs.count(out) == 1:
        z = _other(reader, out)
        if g.const(z) is None:  # a constant goes into the bias (fold_conv_affine)
            inputs[3] = z
            steps.append(reader)
            out = reader.outputs[0]
    found = _activation(g, out)
    if found is None and len(steps) == 1:
        return False
    attrs = _attrs(step.node, _CONV_ATTRS)
    if found is not None:
        chain, act, params = found
        steps += chain
        attrs["activation"] = act
        if params:
            attrs["activation_params"] = [float(p) for p in params]
    while inputs and not inputs[-1]:
        inputs.pop()
    g.rewrite(steps, "FusedConv", CANDLE_DOMAIN, inputs, attrs)
    return True


def fuse_conv_transpose(g: Graph, step) -> bool:
    """ConvTranspose + activation: one FusedConvTranspose."""
    found = _activation(g, step.outputs[0]) if is_op(step, "ConvTranspose") else None
    if found is None:
        return False
    chain, act, params = found
    attrs = {**_attrs(step.node, _CONV_TRANSPOSE_ATTRS), "activation": act}
    if params:
        attrs["activation_params"] = [float(p) for p in params]
    g.rewrite([step] + chain, "FusedConvTranspose", CANDLE_DOMAIN, list(step.inputs), attrs)
    return True


def fuse_conv_affine_after(g: Graph, step) -> bool:
    """FusedConv, then a Mul and or an Add by scalar constants: its output_scale and output_shift."""
    if not is_op(step, "FusedConv", CANDLE_DOMAIN) or step.node.get("output_scale") != 1.0 \
            or step.node.get("output_shift") != 0.0:
        return False
    steps, out, scale, shift = [step], step.outputs[0], 1.0, 0.0
    for kind in ("Mul", "Add"):
        reader = g.sole_reader(out)
        value = g.scalar(_other(reader, out)) if reader is not None and is_op(reader, kind) else None
        if value is not None and reader.inputs.count(out) == 1:
            scale, shift = (value, shift) if kind == "Mul" else (scale, value)
            steps.append(reader)
            out = reader.outputs[0]
    if len(steps) == 1:
        return False
    attrs = {**_attrs(step.node, _CONV_ATTRS + ("activation", "activation_params")), "output_scale": float(scale),
             "output_shift": float(shift)}
    g.rewrite(steps, "FusedConv", CANDLE_DOMAIN, list(step.inputs), attrs)
    return True


# ---- products -----------------------------------------------------------------------------------
def _gelu(g: Graph, name: str):
    """The steps of GELU written out on value name: x * 0.5 * (1 + erf(x / sqrt 2)) in
    the orders exporters write it."""
    readers = g.readers_of(name)
    if len(readers) != 2 or not all(g.free(r) for r in readers):
        return None
    scaled = next((r for r in readers if (is_op(r, "Div") and _close(g.scalar(r.inputs[1]), math.sqrt(2)))
                   or (is_op(r, "Mul") and _close(g.scalar(_other(r, name)), 1 / math.sqrt(2)))), None)
    mul = next((r for r in readers if r is not scaled and is_op(r, "Mul")), None)
    if scaled is None or mul is None:
        return None
    erf = g.sole_reader(scaled.outputs[0])
    if erf is None or not is_op(erf, "Erf"):
        return None
    add = g.sole_reader(erf.outputs[0])
    if add is None or not is_op(add, "Add") or not _close(g.scalar(_other(add, erf.outputs[0])), 1.0):
        return None
    if g.sole_reader(add.outputs[0]) is not mul or _other(mul, add.outputs[0]) != name:
        return None
    half = g.sole_reader(mul.outputs[0])
    if half is None or not is_op(half, "Mul") or not _close(g.scalar(_other(half, mul.outputs[0])), 0.5):
        return None
    return [scaled, erf, add, mul, half]


def fuse_linear(g: Graph, step) -> bool:
    """MatMul by a constant (k, n) weight (+ Add of a bias) (+ activation): one Linear."""
    if not is_op(step, "MatMul"):
        return False
    w = g.const(step.inputs[1])
    if w is None or w.ndim != 2 or w.dtype != np.float32:
        return False
    inputs, steps, out = [step.inputs[0], step.inputs[1]], [step], step.outputs[0]
    reader = g.sole_reader(out)
    if reader is not None and is_op(reader, "Add"):
        bias = g.const(_other(reader, out))
        if bias is not None and bias.size == w.shape[1] and bias.shape[-1] == w.shape[1]:
            inputs.append(g.add_constant(bias.reshape(-1), _other(reader, out)))
            steps.append(reader)
            out = reader.outputs[0]
    attrs = {}
    gelu = _gelu(g, out)
    found = (gelu, "Gelu", []) if gelu else _activation(g, out)
    if found is not None:
        chain, act, params = found
        steps += chain
        attrs = {"activation": act, **({"activation_params": [float(p) for p in params]} if params else {})}
    g.rewrite(steps, "Linear", CANDLE_DOMAIN, inputs, attrs)
    return True


def fuse_gelu(g: Graph, step) -> bool:
    """GELU written out (after anything but a MatMul, see fuse_linear): com.microsoft Gelu."""
    for name in step.outputs:
        chain = _gelu(g, name) if isinstance(name, str) and name else None
        if chain:
            g.rewrite(chain, "Gelu", MS_DOMAIN, [name], {})
            return True
    return False


# ---- attention ----------------------------------------------------------------------------------
def fuse_attention(g: Graph, step) -> bool:
    """MatMul(Q, K^T) / s (+ mask) -> Softmax(-1) -> MatMul(., V): ScaledDotProductAttention."""
    if not is_op(step, "MatMul"):
        return False
    scale_step = g.sole_reader(step.outputs[0])
    if scale_step is None:
        return False
    if is_op(scale_step, "Div"):
        s = g.scalar(scale_step.inputs[1])
        scale = 1.0 / s if s else None
    elif is_op(scale_step, "Mul"):
        scale = g.scalar(_other(scale_step, step.outputs[0]))
    else:
        return False
    if scale is None or scale_step.inputs.count(step.outputs[0]) != 1:
        return False
    chain, out, mask = [step, scale_step], scale_step.outputs[0], ""
    nxt = g.sole_reader(out)
    if nxt is not None and is_op(nxt, "Add") and nxt.inputs.count(out) == 1:
        mask = _other(nxt, out)
        chain.append(nxt)
        out = nxt.outputs[0]
        nxt = g.sole_reader(out)
    if nxt is None or not is_op(nxt, "Softmax") or nxt.node.get("axis") != -1:
        return False
    chain.append(nxt)
    final = g.sole_reader(nxt.outputs[0])
    if final is None or not is_op(final, "MatMul") or final.inputs[0] != nxt.outputs[0]:
        return False
    inputs = [step.inputs[0], step.inputs[1], final.inputs[1]] + ([mask] if mask else [])
    g.rewrite(chain + [final], "ScaledDotProductAttention", CANDLE_DOMAIN, inputs, {"scale": float(scale)})
    return True


# ---- layer norm ---------------------------------------------------------------------------------
def _last_axis_mean(g: Graph, step) -> bool:
    if not is_op(step, "ReduceMean") or not step.node.get("keepdims", 1):
        return False
    axes = step.node.get("axes")
    if axes is None and len(step.inputs) > 1 and step.inputs[1]:
        value = g.const(step.inputs[1])
        axes = None if value is None else value.reshape(-1).tolist()
    return axes == [-1]


def fuse_layer_norm(g: Graph, step) -> bool:
    """LayerNormalization over the last dim written out: one LayerNormalization."""
    if not _last_axis_mean(g, step):
        return False
    x = step.inputs[0]
    sub = g.sole_reader(step.outputs[0])
    if sub is None or not is_op(sub, "Sub") or sub.inputs != [x, step.outputs[0]]:
        return False
    readers = g.readers_of(sub.outputs[0])
    if len(readers) != 2:
        return False
    square = next((r for r in readers if is_op(r, "Pow") and _close(g.scalar(r.inputs[1]), 2.0)), None)
    div = next((r for r in readers if is_op(r, "Div") and r.inputs[0] == sub.outputs[0]), None)
    if square is None or div is None:
        return False
    var = g.sole_reader(square.outputs[0])
    if var is None or not _last_axis_mean(g, var):
        return False
    add = g.sole_reader(var.outputs[0])
    eps = g.scalar(_other(add, var.outputs[0])) if add is not None and is_op(add, "Add") else None
    sqrt = g.sole_reader(add.outputs[0]) if eps is not None else None
    if sqrt is None or not is_op(sqrt, "Sqrt") or g.sole_reader(sqrt.outputs[0]) is not div:
        return False
    mul = g.sole_reader(div.outputs[0])
    gamma = g.const(_other(mul, div.outputs[0])) if mul is not None and is_op(mul, "Mul") else None
    shift = g.sole_reader(mul.outputs[0]) if gamma is not None and gamma.ndim == 1 else None
    beta = g.const(_other(shift, mul.outputs[0])) if shift is not None and is_op(shift, "Add") else None
    if beta is None or beta.shape != gamma.shape:
        return False
    inputs = [x, _other(mul, div.outputs[0]), _other(shift, mul.outputs[0])]
    g.rewrite([step, sub, square, var, add, sqrt, div, mul, shift], "LayerNormalization", MS_DOMAIN, inputs,
              {"axis": -1, "epsilon": float(eps)})
    return True


def fuse_skip_layer_norm(g: Graph, step) -> bool:
    """Add(a, b) read only by a last-axis LayerNormalization (one output, 1-d constant scale and
    bias): one com.microsoft SkipLayerNormalization, whose kernel adds in the norm's own pass."""
    if not is_op(step, "Add") or len(step.inputs) != 2:
        return False
    norm = g.sole_reader(step.outputs[0])
    if norm is None or not (is_op(norm, "LayerNormalization") or is_op(norm, "LayerNormalization", MS_DOMAIN)):
        return False
    if norm.inputs[0] != step.outputs[0] or len(norm.outputs) != 1 or norm.node.get("axis", -1) != -1:
        return False
    params = [name for name in norm.inputs[1:3] if name]
    if not all(g.const(name) is not None and g.const(name).ndim == 1 for name in params):
        return False
    g.rewrite([step, norm], "SkipLayerNormalization", MS_DOMAIN, list(step.inputs) + params,
              {"epsilon": float(norm.node.get("epsilon", 1e-5))})
    return True


def fuse_bias_gelu(g: Graph, step) -> bool:
    """Add of a constant bias along the last dim read only by a GELU (com.microsoft's, or the
    default domain's of opset 20): one com.microsoft BiasGelu, or FastGelu for the tanh form."""
    if not is_op(step, "Add") or len(step.inputs) != 2:
        return False
    gelu = g.sole_reader(step.outputs[0])
    if gelu is None or not (is_op(gelu, "Gelu") or is_op(gelu, "Gelu", MS_DOMAIN)):
        return False
    approximate = gelu.node.get("approximate", "none")
    biases = [name for name in step.inputs if g.const(name) is not None and g.const(name).ndim == 1]
    if not biases or approximate not in ("none", "tanh"):
        return False
    x = _other(step, biases[0])
    g.rewrite([step, gelu], "FastGelu" if approximate == "tanh" else "BiasGelu", MS_DOMAIN, [x, biases[0]], {})
    return True


#: onnxruntime's basic level: rewrites that only fold constants into a node
BASIC_RULES = (fold_conv_affine,)
#: every rewrite, in the order they are tried on each step
RULES = (fold_conv_affine, fuse_layer_norm, fuse_skip_layer_norm, fuse_attention, fuse_conv, fuse_conv_transpose,
         fuse_conv_affine_after, fuse_linear, fuse_gelu, fuse_bias_gelu)


def fuse(g: Graph, rules=RULES) -> list:
    """The steps with every rewrite applied (passes until none applies)."""
    for _ in range(16):
        for step in list(g.steps):
            if g.free(step) and id(step) not in g.new:
                for rule in rules:
                    if rule(g, step):
                        break
        if not g.commit():
            break
    return g.steps
