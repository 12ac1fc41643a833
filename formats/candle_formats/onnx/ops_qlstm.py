"""com.microsoft DynamicQuantizeLSTM: the LSTM that onnxruntime's
``quantize_dynamic`` writes, its products on the int8 kernels.

As onnxruntime computes it: each direction's weights W (input, 4 * hidden)
and R (hidden, 4 * hidden) are int8 (or uint8) with a scale and zero point
per direction or per gate column; the whole input sequence is quantized to
u8 at once and multiplied by W, then at every step the hidden state is
quantized and multiplied by R, each product scaled back to f32; the gates
(i, o, f, c, with optional peepholes, clip, coupled input-forget gate and
ONNX's activations) are the ONNX LSTM's cell, candle_api.ops.rnn.lstm_cell.

The LSTM of ops_rnn.py runs on the fused float layer kernel; this op keeps
its own step loop because its recurrent product quantizes the state at
every step (and, as onnxruntime, a finished row's zeros with the others).
"""

from __future__ import annotations

import numpy as np

import candle_api as c
from candle_api.ops.int8 import quantize_u8
from candle_api.ops.rnn import LSTM_GATES, lstm_cell

from . import int8_products as int8
from .dtypes import TYPES, UINT8
from .helpers import const, ints
from .ops_rnn import layer_activations
from .registry import MS_DOMAIN, op

_DEFAULTS = {"activations": [], "activation_alpha": [], "activation_beta": [], "clip": None, "direction": "forward",
             "hidden_size": None, "input_forget": 0}


def _pack(node, index: int, w):
    """W (input 1) and R (input 2): each direction's matrix packed for the int8 kernel."""
    t = node.in_types[index] if index < len(node.in_types) else None
    if index not in (1, 2) or w.rank != 3 or t is None:
        return None
    per = [int8.pack_int8(node, index, w[d], weight_index=index) for d in range(w.shape[0])]
    if any(p is None for p in per):
        return None
    return int8.Int8Weights(tuple(p.packed[0] for p in per), tuple(w.shape), per[0].shift, w.shape[0])


def _direction(weights: int8.Int8Weights, scale, zero_point, d: int):
    """(the packed weights, scale and zero point) of direction d."""
    one = int8.Int8Weights((weights.packed[d],), weights.shape[1:], weights.shift)
    pick = (lambda t: t[d] if t is not None and t.rank == 2 else (t.reshape(-1).narrow(0, d, 1)
                                                                 if t is not None else None))
    return one, pick(scale), pick(zero_point)


def _product(x, weights, scale, zero_point):
    """quantize(x) @ W, scaled back to f32 (x (rows, k) f32)."""
    q, q_scale, q_zp = quantize_u8(x)
    return int8.matmul(q, q_zp, TYPES[UINT8], weights, zero_point, q_scale, scale)


def _reversal(lengths: list, steps: int, batch: int) -> np.ndarray:
    """The rows (of a (steps * batch, ...) flattening) that reverse each batch's
    sequence within its length, the steps past it in place: onnxruntime's
    reverse direction reads its input so (and quantizes it whole), and its
    output comes back the same way."""
    t = np.arange(steps).reshape(-1, 1)
    lens = np.array(lengths).reshape(1, -1)
    return (np.where(t < lens, lens - 1 - t, t) * batch + np.arange(batch).reshape(1, -1)).reshape(-1)


def _reorder(x, rows: np.ndarray):
    """x (steps, batch, ...) with its rows taken as _reversal says."""
    steps, batch = x.shape[:2]
    return x.reshape(steps * batch, -1).index_select(const(rows, c.i64, x.device), 0).reshape(x.shape)


@op("DynamicQuantizeLSTM", domain=MS_DOMAIN, defaults=_DEFAULTS, pack=_pack)
def dynamic_quantize_lstm(node, x, w, r, b=None, seq_lens=None, initial_h=None, initial_c=None, p=None,
                          w_scale=None, w_zero_point=None, r_scale=None, r_zero_point=None):
    if not isinstance(w, int8.Int8Weights) or not isinstance(r, int8.Int8Weights) or x.dtype != c.f32:
        raise node.unsupported("DynamicQuantizeLSTM needs constant int8 or uint8 W and R and an f32 input")
    steps, batch, _ = x.shape
    hidden = node.get("hidden_size") or r.shape[1]
    direction = node.get("direction", "forward")
    reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if reverse is None or len(reverse) != w.groups:
        raise node.fail(f"direction {direction!r} with weights for {w.groups} direction(s)")
    lengths = ints(seq_lens) if seq_lens is not None else [steps] * batch
    if any(not 0 <= n <= steps for n in lengths):
        raise node.fail(f"sequence_lens {lengths} out of range for {steps} steps")
    longest = max(lengths, default=0)
    acts = layer_activations(node, ["Sigmoid", "Tanh", "Tanh"], len(reverse))
    ys, hs, cs = [], [], []
    for d, rev in enumerate(reverse):
        rows = _reversal(lengths, steps, batch) if rev else None
        xs = (_reorder(x, rows) if rev else x).narrow(0, 0, longest)
        state = (initial_h[d] if initial_h is not None else None, initial_c[d] if initial_c is not None else None)
        y, h, cell = _direction_run(node, xs, lengths, state, _direction(w, w_scale, w_zero_point, d),
                                    _direction(r, r_scale, r_zero_point, d), b[d] if b is not None else None,
                                    p[d] if p is not None else None, acts[d], hidden)
        y = y.pad_with_zeros(0, 0, steps - longest) if longest < steps else y
        ys.append(_reorder(y, rows) if rev else y)
        hs.append(h)
        cs.append(cell)
    return c.stack(ys, 1), c.stack(hs, 0), c.stack(cs, 0)


def _direction_run(node, xs, lengths, state, w, r, bias, peep, acts, hidden: int):
    """One direction over xs (steps, batch, input) in order: (Y, last h, last c). A batch
    past its length outputs zeros, and (as in onnxruntime) its zeros are what the next
    step's product quantizes with the other rows; its last h and c stay."""
    steps, batch, _ = xs.shape
    zeros = c.zeros((batch, hidden), dtype=c.f32, device=xs.device)
    h = state[0] if state[0] is not None else zeros
    cell = state[1] if state[1] is not None else zeros
    if not steps:
        return zeros.unsqueeze(0).narrow(0, 0, 0), h, cell
    gates_x = _product(xs.reshape(steps * batch, -1), *w).reshape(steps, batch, -1)
    if bias is not None:
        gates_x = gates_x + bias.narrow(0, 0, 4 * hidden) + bias.narrow(0, 4 * hidden, 4 * hidden)
    options = {"peepholes": peep, "clip": node.get("clip") or 0.0, "input_forget": bool(node.get("input_forget", 0))}
    if acts is not None:  # others than the defaults
        options["activations"] = acts
    out, last = [], h
    for t in range(steps):
        new_h, new_c = lstm_cell(gates_x[t] + _product(h, *r), cell, LSTM_GATES["iofc"][1], **options)
        if any(n <= t for n in lengths):
            keep = const([[int(n > t)] for n in lengths], c.u8, xs.device)
            last, cell = c.where(keep, new_h, last), c.where(keep, new_c, cell)
            h = c.where(keep, new_h, 0.0)
        else:
            last, cell, h = new_h, new_c, new_h
        out.append(h)
    return c.stack(out, 0), last, cell

