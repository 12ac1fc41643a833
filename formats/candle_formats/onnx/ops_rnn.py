"""Recurrent layers: RNN, GRU and LSTM (forward, reverse, bidirectional).

LSTM and GRU run on candle_api's layer ops (:mod:`candle_api.ops.rnn`: one
native call per direction on the cpu device), which take ONNX's gate orders,
biases, peepholes, clip, input_forget, linear_before_reset and
sequence_lens. Activations other than the defaults (sigmoid and tanh) run the
same ops' step-by-step decompositions with those activations; RNN runs step
by step after one matmul for the inputs of every step. Batches shorter than the sequence
(``sequence_lens``) keep their state past their end and output zeros there.
"""

from __future__ import annotations

import numpy as np

import candle_api as c
from candle_api.ops.rnn import gru_layer, gru_steps, lstm_layer, lstm_steps, project, run_steps

from .helpers import const
from .registry import op

#: activations taking (alpha, beta) from activation_alpha / activation_beta, with their defaults
_PARAMS = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
           "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}
_NAMES = {n.lower(): n for n in ["Relu", "Tanh", "Sigmoid", "Softsign", "Softplus", *_PARAMS]}


def _activation(name: str, alpha, beta):
    f = {
        "Relu": lambda x: x.relu(), "Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(),
        "Softsign": lambda x: x / (x.abs() + 1.0), "Softplus": lambda x: x.softplus(),
        "Affine": lambda x: x * alpha + beta, "LeakyRelu": lambda x: c.where(x < 0, x * alpha, x),
        "ThresholdedRelu": lambda x: c.where(x > alpha, x, 0.0),
        "ScaledTanh": lambda x: (x * beta).tanh() * alpha,
        "HardSigmoid": lambda x: (x * alpha + beta).clamp(0.0, 1.0), "Elu": lambda x: x.elu(alpha),
    }.get(name)
    if f is None:
        raise ValueError(f"unknown activation {name!r}")
    return f


def layer_activations(node, defaults: list[str], directions: int) -> list:
    """Per direction: None for the default activations (the fused layer ops), else the activation functions."""
    names = [_NAMES.get(n.lower(), n) for n in node.get("activations") or defaults * directions]
    alphas, betas = list(node.get("activation_alpha") or []), list(node.get("activation_beta") or [])
    funcs = []
    for name in names:
        a, b = _PARAMS.get(name, (None, None))
        if name in _PARAMS:
            a = alphas.pop(0) if alphas else a
            if b is not None:
                b = betas.pop(0) if betas else b
        funcs.append(_activation(name, a, b))
    per = len(defaults)
    return [None if names[d * per:(d + 1) * per] == defaults else funcs[d * per:(d + 1) * per]
            for d in range(directions)]


class _Layer:
    """What the three layers share: layout, directions, clip, lengths, the inputs, each
    direction's biases and initial states, and the assembly of the outputs."""

    def __init__(self, node, x, r, b, gates: int, seq_lens, initial: list):
        self.node, self.x, self.b, self.gates = node, x, b, gates
        self.batch_first = bool(node.get("layout", 0))
        self.steps, self.batch = (x.shape[1], x.shape[0]) if self.batch_first else x.shape[:2]
        self.hidden = node.get("hidden_size") or r.shape[-1]
        direction = node.get("direction", "forward")
        self.reverse = [direction == "reverse"] if direction != "bidirectional" else [False, True]
        self.clip = node.get("clip")
        self.lengths = None
        if seq_lens is not None:
            self.lengths = const(seq_lens, "i64", x.device) if isinstance(seq_lens, np.ndarray) else seq_lens
        zeros = c.zeros((len(self.reverse), self.batch, self.hidden), dtype=x.dtype, device=x.device)
        # initial states given batch-first (layout=1) as (batch, dirs, hidden)
        self.initial = [zeros if s is None else s.transpose(0, 1) if self.batch_first else s for s in initial]

    def inputs(self) -> c.Tensor:
        """X viewed (steps, batch, features)."""
        return self.x.transpose(0, 1) if self.batch_first else self.x

    def biases(self, d: int) -> tuple:
        """(Wb, Rb) of direction d, or (None, None)."""
        n = self.gates * self.hidden
        return (None, None) if self.b is None else (self.b[d].narrow(0, 0, n), self.b[d].narrow(0, n, n))

    def states(self, d: int) -> list:
        return [s[d] for s in self.initial]

    def outputs(self, outs: list):
        """Y (steps, dirs, batch, hidden) and each final state (dirs, batch, hidden) from each
        direction's (steps + states, batch, hidden); batch first for layout=1."""
        y = c.stack([o.narrow(0, 0, self.steps) for o in outs], 1)
        finals = [c.stack([o[self.steps + k] for o in outs], 0) for k in range(outs[0].shape[0] - self.steps)]
        if self.batch_first:
            return (y.permute(2, 0, 1, 3), *(s.transpose(0, 1) for s in finals))
        return (y, *finals)


@op("RNN", since=7)
def rnn(node, x, w, r, b=None, seq_lens=None, initial_h=None):
    layer = _Layer(node, x, r, b, 1, seq_lens, [initial_h])
    acts = layer_activations(node, ["Tanh"], len(layer.reverse))
    clip = layer.clip
    outs = []
    for d, reverse in enumerate(layer.reverse):
        xw, rt, (wb, rb) = project(layer.inputs(), w[d]), r[d].t(), layer.biases(d)
        bias = None if b is None else wb + rb
        f = acts[d][0] if acts[d] else (lambda v: v.tanh())

        def step(t, states, xw=xw, rt=rt, bias=bias, f=f):
            pre = xw[t] + states[0] @ rt
            pre = pre if bias is None else pre + bias
            return [f(pre.clamp(-clip, clip) if clip else pre)]

        outs.append(run_steps("RNN", xw, layer.states(d), layer.lengths, reverse, step))
    return layer.outputs(outs)


@op("GRU", since=7)
def gru(node, x, w, r, b=None, seq_lens=None, initial_h=None):
    layer = _Layer(node, x, r, b, 3, seq_lens, [initial_h])
    acts = layer_activations(node, ["Sigmoid", "Tanh"], len(layer.reverse))
    lbr = bool(node.get("linear_before_reset", 0))
    outs = []
    for d, reverse in enumerate(layer.reverse):
        x_, (h0,) = layer.inputs(), layer.states(d)
        if acts[d] is None:
            outs.append(gru_layer(x_, w[d], r[d], h0, *layer.biases(d), reverse=reverse, gates="zrh",
                                  clip=layer.clip or None, linear_before_reset=lbr, lengths=layer.lengths))
        else:
            outs.append(gru_steps(x_, w[d], r[d], *layer.biases(d), h0, layer.lengths, reverse, 1,
                                  layer.clip or 0.0, lbr, activations=acts[d]))
    return layer.outputs(outs)


@op("LSTM", since=7)
def lstm(node, x, w, r, b=None, seq_lens=None, initial_h=None, initial_c=None, p=None):
    layer = _Layer(node, x, r, b, 4, seq_lens, [initial_h, initial_c])
    acts = layer_activations(node, ["Sigmoid", "Tanh", "Tanh"], len(layer.reverse))
    couple = bool(node.get("input_forget", 0))
    outs = []
    for d, reverse in enumerate(layer.reverse):
        x_, (h0, c0), peep = layer.inputs(), layer.states(d), None if p is None else p[d]
        if acts[d] is None:
            outs.append(lstm_layer(x_, w[d], r[d], h0, c0, *layer.biases(d), reverse=reverse, gates="iofc",
                                   peepholes=peep, clip=layer.clip or None, input_forget=couple,
                                   lengths=layer.lengths))
        else:
            outs.append(lstm_steps(x_, w[d], r[d], *layer.biases(d), h0, c0, peep, layer.lengths, reverse, 1,
                                   layer.clip or 0.0, couple, activations=acts[d]))
    return layer.outputs(outs)
