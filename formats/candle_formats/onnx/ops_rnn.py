"""Recurrent layers: RNN, GRU and LSTM (forward, reverse, bidirectional).

The input projection X @ W^T of every time step is one matmul; the
recurrence then runs step by step. Batches shorter than the sequence
(``sequence_lens``) keep their state past their end and output zeros there.
"""

from __future__ import annotations

import candle_api as c

from .helpers import const, host
from .registry import op

#: activations taking (alpha, beta) from activation_alpha / activation_beta, with their defaults
_PARAMS = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
           "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}


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


def _activations(node, defaults: list[str], directions: int):
    names = node.get("activations") or defaults * directions
    alphas, betas = list(node.get("activation_alpha") or []), list(node.get("activation_beta") or [])
    out = []
    for name in names:
        name = {n.lower(): n for n in ["Relu", "Tanh", "Sigmoid", "Softsign", "Softplus", *_PARAMS]}.get(
            name.lower(), name)
        a, b = _PARAMS.get(name, (None, None))
        if name in _PARAMS:
            a = alphas.pop(0) if alphas else a
            if b is not None:
                b = betas.pop(0) if betas else b
        out.append(_activation(name, a, b))
    per = len(defaults)
    return [out[d * per:(d + 1) * per] for d in range(directions)]


class _Layer:
    """What the three layers share: layout, directions, clipping, lengths, and output assembly."""

    def __init__(self, node, x, w, gates: int, seq_lens, initial: list):
        self.node = node
        self.batch_first = bool(node.get("layout", 0))
        self.x = x.transpose(0, 1) if self.batch_first else x      # (seq, batch, input)
        self.steps, self.batch = self.x.shape[:2]
        self.hidden = node.get("hidden_size") or w.shape[1] // gates
        direction = node.get("direction", "forward")
        self.reverse = [direction == "reverse"] if direction != "bidirectional" else [False, True]
        self.clip = node.get("clip")
        self.lengths = None if seq_lens is None else [int(n) for n in host(seq_lens).reshape(-1)]
        zeros = c.zeros((len(self.reverse), self.batch, self.hidden), dtype=x.dtype, device=x.device)
        self.initial = [s if s is not None else zeros for s in initial]

    def clipped(self, v):
        return v.clamp(-self.clip, self.clip) if self.clip else v

    def order(self, d: int):
        return range(self.steps - 1, -1, -1) if self.reverse[d] else range(self.steps)

    def active(self, t: int):
        """(batch, 1) mask of the batches whose sequence includes step t, or None when all do."""
        if self.lengths is None or all(n > t for n in self.lengths):
            return None
        return const([[1 if n > t else 0] for n in self.lengths], c.u8, self.x.device)

    def run(self, cell):
        """cell(d, t, states) -> new states (the first one is the output h); (Y, final states)."""
        ys, finals = [], []
        for d in range(len(self.reverse)):
            states = [s[d] for s in self.initial]
            out = [None] * self.steps
            for t in self.order(d):
                new = cell(d, t, states)
                keep = self.active(t)
                if keep is not None:
                    new = [c.where(keep, n, s) for n, s in zip(new, states)]
                    out[t] = c.where(keep, new[0], 0.0)
                else:
                    out[t] = new[0]
                states = new
            ys.append(c.stack(out, 0) if self.steps else
                      c.zeros((0, self.batch, self.hidden), dtype=self.x.dtype, device=self.x.device))
            finals.append(states)
        y = c.stack(ys, 1)                                          # (seq, dirs, batch, hidden)
        if self.batch_first:
            y = y.permute(2, 0, 1, 3)                               # (batch, seq, dirs, hidden)
        last = [c.stack([f[k] for f in finals], 0) for k in range(len(finals[0]))]
        if self.batch_first:
            last = [s.transpose(0, 1) for s in last]
        return y, last


def _inputs(node, x, w, r, b, gates: int):
    """Per direction: x (all steps) @ W^T + Wb + Rb, and R^T."""
    projected, recurrent = [], []
    n = gates * (node.get("hidden_size") or w.shape[1] // gates)
    for d in range(w.shape[0]):
        p = x @ w[d].t()
        if b is not None:
            p = p + b[d].narrow(0, 0, n) + b[d].narrow(0, n, n)
        projected.append(p)
        recurrent.append(r[d].t())
    return projected, recurrent


def _initial(node, states):
    """Initial states given batch-first (layout=1) as (batch, dirs, hidden)."""
    return [s.transpose(0, 1) if s is not None and node.get("layout", 0) else s for s in states]


@op("RNN", since=7)
def rnn(node, x, w, r, b=None, seq_lens=None, initial_h=None):
    layer = _Layer(node, x, w, 1, seq_lens, _initial(node, [initial_h]))
    px, rt = _inputs(node, layer.x, w, r, b, 1)
    acts = _activations(node, ["Tanh"], len(layer.reverse))

    def cell(d, t, states):
        return [acts[d][0](layer.clipped(px[d][t] + states[0] @ rt[d]))]

    y, (h,) = layer.run(cell)
    return y, h


@op("GRU", since=7)
def gru(node, x, w, r, b=None, seq_lens=None, initial_h=None):
    layer = _Layer(node, x, w, 3, seq_lens, _initial(node, [initial_h]))
    hs = layer.hidden
    acts = _activations(node, ["Sigmoid", "Tanh"], len(layer.reverse))
    before_reset = bool(node.get("linear_before_reset", 0))
    # the input projections of all gates at once; the h gate's recurrent bias stays apart
    px = [layer.x @ w[d].t() + (b[d].narrow(0, 0, 3 * hs) if b is not None else 0.0) for d in range(w.shape[0])]
    rb = [b[d].narrow(0, 3 * hs, 3 * hs) if b is not None else None for d in range(w.shape[0])]

    def cell(d, t, states):
        h = states[0]
        f, g = acts[d]
        xz, xr, xh = px[d][t].split(hs, -1)
        rz, rr, rh = r[d].split(hs, 0)
        bz, br, bh = rb[d].split(hs, 0) if rb[d] is not None else (0.0, 0.0, 0.0)
        z = f(layer.clipped(xz + h @ rz.t() + bz))
        reset = f(layer.clipped(xr + h @ rr.t() + br))
        if before_reset:
            n = g(layer.clipped(xh + reset * (h @ rh.t() + bh)))
        else:
            n = g(layer.clipped(xh + (reset * h) @ rh.t() + bh))
        return [(1.0 - z) * n + z * h]

    y, (h,) = layer.run(cell)
    return y, h


@op("LSTM", since=7)
def lstm(node, x, w, r, b=None, seq_lens=None, initial_h=None, initial_c=None, p=None):
    layer = _Layer(node, x, w, 4, seq_lens, _initial(node, [initial_h, initial_c]))
    hs = layer.hidden
    px, rt = _inputs(node, layer.x, w, r, b, 4)
    acts = _activations(node, ["Sigmoid", "Tanh", "Tanh"], len(layer.reverse))
    couple = bool(node.get("input_forget", 0))

    def cell(d, t, states):
        h, cell_state = states
        f, g, act_h = acts[d]
        gates = px[d][t] + h @ rt[d]
        gi, go, gf, gc = gates.split(hs, -1)
        pi, po, pf = p[d].split(hs, 0) if p is not None else (None, None, None)
        i = f(layer.clipped(gi + pi * cell_state if pi is not None else gi))
        fg = f(layer.clipped(gf + pf * cell_state if pf is not None else gf))
        if couple:
            fg = 1.0 - i
        new_c = fg * cell_state + i * g(layer.clipped(gc))
        o = f(layer.clipped(go + po * new_c if po is not None else go))
        return [o * act_h(new_c), new_c]

    y, (h, cell_state) = layer.run(cell)
    return y, h, cell_state
