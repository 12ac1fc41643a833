"""A Llama-family decoding step with its kernel calls bound once: one token of one sequence through
every layer as the device's kernels (the contract's rows, called as the core calls them), without
building a Tensor, a layout or a dispatch per op.

A decoding step runs ~23 ops a layer on vectors of a few hundred values: their Python dispatch
(shapes checked, layouts and Tensors built) costs more than their arithmetic, and on a small
model as much as the quantized products themselves. Here the layouts and buffers of every op are
made when the step is bound to a cache, and a step calls 13 kernels a layer on them. The kernels
are the ones the model's own forward reaches, on the same inputs, so the logits are the same bit
for bit (tests/models/test_llama_decode_step.py checks it). A device whose backend offers
``bind_decode_step(spec)`` (the cpu's) takes the whole bound step and runs it in one call of the same
kernels: even bound, ~400 calls from Python cost a token ~0.8 ms, as much as a second thread saves.

It serves the plain case only, and the model's forward takes it only there: f32 activations,
quantized weights (no bias), a silu MLP, no per-head norm, a
:class:`~candle_models.decoder.KVCache` of batch 1, no gradient to record, no observer, and a device
with every kernel it calls. Anything else runs the model's forward as written.
"""

from __future__ import annotations

import math

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.autograd.graph import is_grad_enabled
from candle_api.dtype import f32, u8
from candle_api.layout import Layout
from candle_api.ops import dispatch
from candle_api.ops.core import make

from .decoder import KVCache

#: The kernels every step calls (f32), besides the rope's and the products'.
KERNELS = ("rms_norm", "copy", "sdpa", "add", "silu_mul")


def _projection(linear):
    """The parts of a TransposedLinear without bias on quantized weights, each (kernel, blocks storage,
    their layout, ggml type id, rows): one part, or several of different types (a Q4_K_M file's q/k/v),
    written side by side; else None."""
    if linear.quantized is None or linear.bias is not None:
        return None
    parts = []
    for w in linear.quantized:
        if w._packed is not None:
            parts.append(("qmatmul_packed", w._packed._storage, w._packed._layout, w._type.type_id, w.shape[0]))
        elif w._blocks is not None and w._type.name not in ("f32", "f16", "bf16"):
            parts.append(("qmatmul", w._blocks._storage, w._blocks._layout, w._type.type_id, w.shape[0]))
        else:
            return None
    return tuple(parts)


def _bind_product(kern: dict, dev, parts: tuple, k: int):
    """f(out, x): out (1, 1, n) = x (1, 1, k) @ W^T for the parts of a projection. Several parts go to
    buffers of their own, then to their columns of out (the copy kernel)."""
    lx = Layout.contig((1, 1, k))
    if len(parts) == 1:
        name, w, lw, qtype, n = parts[0]
        fn = kern[name]
        return lambda out, x: fn(out, x, lx, w, lw, qtype, n)
    total = sum(p[4] for p in parts)
    whole, copy, bound, start = Layout.contig((1, 1, total)), kern["copy"], [], 0
    for name, w, lw, qtype, n in parts:
        bound.append((kern[name], w, lw, qtype, n, dev.alloc(n * 4), whole.narrow(2, start, n),
                      Layout.contig((1, 1, n))))
        start += n

    def product(out, x):
        for fn, w, lw, qtype, n, tmp, dst, src in bound:
            fn(tmp, x, lx, w, lw, qtype, n)
            copy(out, dst, tmp, src)

    return product


def plan_for(model):
    """The model's layers as DecodeStep needs them, or None where it does not serve this model."""
    from .llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP

    layers = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if (type(layer) is not LlamaDecoderLayer or type(attn) is not LlamaAttention or type(mlp) is not LlamaMLP
                or attn.q_norm is not None or mlp.act is not F.silu
                or type(layer.input_layernorm) is not nn.RmsNorm
                or type(layer.post_attention_layernorm) is not nn.RmsNorm):
            return None
        projections = [_projection(p) for p in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)]
        norms = [(n.weight, n.eps) for n in (layer.input_layernorm, layer.post_attention_layernorm)]
        if None in projections or any(w is None or w._dtype is not f32 or e is None for w, e in norms):
            return None
        scale = attn.scale if attn.scale is not None else 1.0 / math.sqrt(attn.head_dim)
        layers.append((norms, projections, attn.window, scale))
    head = _projection(model.lm_head)
    norm = model.model.norm
    if (head is None or type(norm) is not nn.RmsNorm or norm.weight is None or norm.weight._dtype is not f32
            or norm.eps is None):
        return None
    return layers, head, (norm.weight, norm.eps)


class DecodeStep:
    """Decoding steps of ``model`` on ``cache`` (a KVCache of batch 1, f32): ``step(ids)`` gives the
    last position's logits (1, 1, vocab) and advances the cache, as ``model(ids, cache, last_only=True)``
    does. Bound to the cache's buffers: a cache that grows binds a new step."""

    def __init__(self, model, cache, plan, kern: dict, one_call: bool = True):
        cfg = model.config
        self.model, self.cache, (self.layers, self.head, self.final_norm) = model, cache, plan
        self.keys, self.values = list(cache.keys), list(cache.values)
        dev = self.dev = model.device
        self.kern, self.rope = kern, _rope_name(cfg)
        h, kvh, d, hidden = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        width = (h + 2 * kvh) * d
        ffn = cfg.intermediate_size
        self.lay_x, self.lay_gu = Layout.contig((1, 1, hidden)), Layout.contig((1, 1, 2 * ffn))
        # Buffers reused by every layer: the residual stream (two, one written from the other), the
        # normed input, q/k/v, the roped q and k, the attention's output, a projection's, gate/up, the gate.
        nbytes = {"x0": hidden, "x1": hidden, "n": hidden, "qkv": width, "qk": (h + kvh) * d, "att": h * d,
                  "y": hidden, "gu": 2 * ffn, "g": ffn}
        self.buf = {k: dev.alloc(n * 4) for k, n in nbytes.items()}
        inputs = (hidden, h * d, hidden, ffn)  # what qkv, o, gate/up and down multiply
        self.products = [[_bind_product(kern, dev, parts, n) for parts, n in zip(projections, inputs)]
                         for _, projections, _, _ in self.layers]
        self.head_product = _bind_product(kern, dev, self.head, hidden)
        self.lay_logits = Layout.contig((1, 1, sum(p[4] for p in self.head)))
        heads = Layout.contig((1, 1, h + 2 * kvh, d)).transpose(1, 2)  # q/k/v's heads, (1, heads, 1, d)
        self.lay_rope_in = heads.narrow(1, 0, h + kvh)
        self.lay_qk = Layout.contig((1, h + kvh, 1, d))
        self.lay_q = self.lay_qk.narrow(1, 0, h).reshape((1, kvh, h // kvh, d))  # grouped queries: plain attention
        self.lay_k_new, self.lay_v_new = self.lay_qk.narrow(1, h, kvh), heads.narrow(1, h + kvh, kvh)
        self.one_call = self._bind_one_call(cfg) if one_call else None

    def _bind_one_call(self, cfg):
        """The device's whole step in one call (its bind_decode_step), or None."""
        bind = getattr(self.dev.backend, "bind_decode_step", None)
        cos, _ = self.model.rotary.cos_sin(0, 1)
        if bind is None or len(cos.shape) != 2 or not cos._layout.contiguous:
            return None
        return bind({"hidden": cfg.hidden_size, "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
                     "head_dim": cfg.head_dim, "ffn": cfg.intermediate_size, "interleaved": cfg.rope_interleaved,
                     "layers": self.layers, "head": self.head, "final_norm": self.final_norm, "keys": self.keys,
                     "values": self.values, "rope_in": self.lay_rope_in, "q": self.lay_q})

    def __call__(self, ids) -> c.Tensor:
        cache = self.cache
        pos = cache.length
        if pos + 1 > cache.shape[2]:
            raise RuntimeError("DecodeStep: the cache is full (the model's forward grows it)")
        x = self.model.embed(ids)
        cos, sin = self.model.rotary.cos_sin(pos, 1)
        out = self.dev.alloc(self.lay_logits.numel * 4)
        if self.one_call is not None and x._layout.contiguous:  # (an embedding's row is)
            self.one_call(pos, x._storage.ptr + x._layout.offset * 4, cos._storage.ptr + cos._layout.offset * 4,
                          sin._storage.ptr + sin._layout.offset * 4, out.ptr)
        else:
            self._layers(pos, x, cos, sin, out)
        cache.advance(1)
        return make(out, self.lay_logits, f32, self.dev)

    def _layers(self, pos, x, cos, sin, out) -> None:
        """The step's kernels one by one, the logits into out."""
        cache, k = self.cache, self.kern
        end = pos + 1
        slot = cache.keys[0]._layout.narrow(2, pos, 1)
        span = {}  # the keys each window sees: a layout of the cache's buffers
        xs, xl = x._storage, x._layout
        b = self.buf
        for i, ((norms, _, window, scale), (qkv, o, gu, down)) in enumerate(zip(self.layers, self.products)):
            start = 0 if window is None or end <= window else end - window
            lkv = span.get(start)
            if lkv is None:
                lkv = span[start] = cache.keys[i]._layout.narrow(2, start, end - start)
            k["rms_norm"](b["n"], xs, xl, norms[0][0]._storage, norms[0][0]._layout, norms[0][1])
            qkv(b["qkv"], b["n"])
            k[self.rope](b["qk"], b["qkv"], self.lay_rope_in, cos._storage, cos._layout, sin._storage, sin._layout)
            keys, values = self.keys[i]._storage, self.values[i]._storage
            k["copy"](keys, slot, b["qk"], self.lay_k_new)
            k["copy"](values, slot, b["qkv"], self.lay_v_new)
            k["sdpa"](b["att"], b["qk"], self.lay_q, keys, lkv, values, lkv, None, None, u8, False, scale)
            o(b["y"], b["att"])
            x1 = b["x1"] if xs is not b["x1"] else b["x0"]
            k["add"](x1, xs, xl, b["y"], self.lay_x)
            k["rms_norm"](b["n"], x1, self.lay_x, norms[1][0]._storage, norms[1][0]._layout, norms[1][1])
            gu(b["gu"], b["n"])
            k["silu_mul"](b["g"], b["gu"], self.lay_gu)
            down(b["y"], b["g"])
            xs = b["x0"] if x1 is b["x1"] else b["x1"]
            k["add"](xs, x1, self.lay_x, b["y"], self.lay_x)
            xl = self.lay_x
        w, eps = self.final_norm
        k["rms_norm"](b["n"], xs, xl, w._storage, w._layout, eps)
        self.head_product(out, b["n"])


def decode_step(model, cache):
    """model's DecodeStep for ``cache`` when it serves them, else None. The step (or None) is bound once
    per cache and its buffers (the model keeps it), so that weights replaced between generations are
    seen; ``model.bound_decoding = False`` turns it off (the forward's ops, as a reference)."""
    if not getattr(model, "bound_decoding", True) or dispatch.observer is not None or is_grad_enabled():
        return None
    bound = model.__dict__.get("_decode_step")
    if bound is not None and bound[0] is cache and bound[1] is cache.keys[0]:
        return bound[2]
    step = None
    if type(cache) is KVCache and cache.shape[0] == 1 and cache.keys[0]._dtype is f32:
        plan = plan_for(model)
        kern = _kernels(model, plan) if plan is not None else None
        if kern is not None:
            step = DecodeStep(model, cache, plan, kern)
    model.__dict__["_decode_step"] = (cache, cache.keys[0], step)
    return step


def _rope_name(cfg) -> str:
    return "rope_i" if cfg.rope_interleaved else "rope"


def _kernels(model, plan) -> dict | None:
    """The f32 kernels a step of this plan calls, by name, or None when the device lacks one."""
    layers, head, _ = plan
    names = {*KERNELS, _rope_name(model.config)}
    names.update(part[0] for parts in [head] + [p for _, projections, _, _ in layers for p in projections]
                 for part in parts)
    kern = {name: model.device.kernels.get((name, f32)) for name in names}
    return None if None in kern.values() else kern
