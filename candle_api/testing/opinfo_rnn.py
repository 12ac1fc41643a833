"""The recurrent layer ops of the conformance suite (lstm_layer, gru_layer)
and their NumPy references: PyTorch's cells, and ONNX's options (gate orders,
peepholes, clip, input_forget, linear_before_reset = 0, sequence lengths with
reverse layers). Imported by :mod:`.opinfo`, whose table they join."""

from __future__ import annotations

import numpy as np

from ..ops.rnn import GRU_GATES, LSTM_GATES, gru_layer, lstm_layer
from . import reference as R
from .opinfo import NONSCALAR, Index, Sample, op, values

# ---- references ----------------------------------------------------------------------------------


def _steps(steps: int, reverse: bool):
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _clipper(clip):
    return (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)


def _layer(xw, states, lengths, reverse, cell):
    """Runs cell(t, states) -> new states over the steps; rows past their length
    keep their states and output zeros. Returns the outputs, then the final states."""
    steps, batch = xw.shape[:2]
    lens = np.full(batch, steps) if lengths is None else np.asarray(lengths)
    out = np.zeros((steps,) + states[0].shape)
    for t in _steps(steps, reverse):
        active = (t < lens)[:, None]
        new = cell(t, states)
        states = [np.where(active, n, s) for n, s in zip(new, states)]
        out[t] = np.where(active, new[0], 0.0)
    return np.concatenate([out] + [s[None] for s in states])


def lstm_reference(x, w_ih, w, h0, c0, b_ih=None, b_hh=None, lengths=None, peepholes=None, *, reverse=False,
                   gates="ifgo", clip=None, input_forget=False, activations=(R.sigmoid, np.tanh, np.tanh)):
    """lstm_layer in NumPy (float64), with any activations f (gates), g (cell input), h (output)."""
    f_act, g_act, h_act = activations
    hidden, slots, xw = w.shape[1], LSTM_GATES[gates][1], x @ w_ih.T
    bias = sum(b for b in (b_ih, b_hh) if b is not None)
    clipped = _clipper(clip)
    p_i, p_o, p_f = np.split(peepholes, 3) if peepholes is not None else (0.0, 0.0, 0.0)

    def cell(t, states):
        h, c = states
        z = xw[t] + h @ w.T + bias
        gi, gf, gg, go = (z[:, s * hidden:(s + 1) * hidden] for s in slots)
        i = f_act(clipped(gi + p_i * c))
        f = 1.0 - i if input_forget else f_act(clipped(gf + p_f * c))
        c = f * c + i * g_act(clipped(gg))
        return [f_act(clipped(go + p_o * c)) * h_act(c), c]

    return _layer(xw, [h0, c0], lengths, reverse, cell)


def gru_reference(x, w_ih, w, h0, b_ih=None, b_hh=None, lengths=None, *, reverse=False, gates="rzn", clip=None,
                  linear_before_reset=True, activations=(R.sigmoid, np.tanh)):
    """gru_layer in NumPy (float64), with any activations f (gates) and g (candidate)."""
    f_act, g_act = activations
    hidden, (r_at, z_at, n_at), xw = w.shape[1], GRU_GATES[gates][1], x @ w_ih.T
    b_ih = np.zeros(3 * hidden) if b_ih is None else b_ih
    b_hh = np.zeros(3 * hidden) if b_hh is None else b_hh
    clipped = _clipper(clip)

    def part(v, slot):
        return v[..., slot * hidden:(slot + 1) * hidden]

    def cell(t, states):
        (h,) = states
        xt, hw = xw[t] + b_ih, h @ w.T + b_hh
        r = f_act(clipped(part(xt, r_at) + part(hw, r_at)))
        z = f_act(clipped(part(xt, z_at) + part(hw, z_at)))
        if linear_before_reset:
            n = g_act(clipped(part(xt, n_at) + r * part(hw, n_at)))
        else:
            n = g_act(clipped(part(xt, n_at) + (r * h) @ part(w.T, n_at) + part(b_hh, n_at)))
        return [(1 - z) * n + z * h]

    return _layer(xw, [h0], lengths, reverse, cell)


# ---- samples ---------------------------------------------------------------------------------------


def _operands(rng, dtype, layout, gates: int, states: int, steps=4, batch=3, hidden=5, features=3):
    """x, w_ih, w_hh, the initial states and the two biases; steps 0 for the empty layout."""
    steps = 0 if layout == "empty" else steps
    arrays = [values(rng, dtype, (steps, batch, features), -2, 2),
              values(rng, dtype, (gates * hidden, features), -0.8, 0.8),
              values(rng, dtype, (gates * hidden, hidden), -0.6, 0.6)]
    arrays += [values(rng, dtype, (batch, hidden), -1, 1) for _ in range(states)]
    arrays += [values(rng, dtype, (gates * hidden,), -0.5, 0.5) for _ in range(2)]
    return arrays


def _lengths(rng, steps: int, batch: int) -> Index:
    lens = rng.integers(0, steps + 1, size=batch)
    lens[0] = steps  # one full row, so the longest sequence is the whole one
    return Index(lens.astype(np.int64))


def _pytorch_samples(gates: int, states: int):
    def gen(rng, dtype, layout):
        # the small one is checked for gradients too (finite differences cost two passes an element)
        return [Sample(_operands(rng, dtype, layout, gates, states, steps=3, batch=2, hidden=3, features=2),
                       {"reverse": True}),
                Sample(_operands(rng, dtype, layout, gates, states, hidden=16)),
                # more units than one block of the native kernel, and a batch of one
                Sample(_operands(rng, dtype, layout, gates, states, steps=3, batch=1, hidden=37))]
    return gen


def _lstm_onnx_samples(rng, dtype, layout):
    a = _operands(rng, dtype, layout, 4, 2, steps=3, batch=2, hidden=2, features=2)
    peep = values(rng, dtype, (6,), -0.5, 0.5)
    return [Sample(a + [_lengths(rng, a[0].shape[0], 2), peep], {"reverse": True, "clip": 1.5}),
            Sample(a + [_lengths(rng, a[0].shape[0], 2), peep], {"input_forget": True})]


def _gru_onnx_samples(rng, dtype, layout):
    a = _operands(rng, dtype, layout, 3, 1, steps=3, batch=2, hidden=2, features=2)
    return [Sample(a + [_lengths(rng, a[0].shape[0], 2)], {"reverse": True, "clip": 1.5}),
            Sample(a + [_lengths(rng, a[0].shape[0], 2)], {"linear_before_reset": True})]


def _lstm_call(x, w_ih, w, h0, c0, b_ih, b_hh, lengths=None, peepholes=None, **kw):
    return lstm_layer(x, w_ih, w, h0, c0, b_ih, b_hh, peepholes=peepholes, lengths=lengths, **kw)


def _gru_call(x, w_ih, w, h0, b_ih, b_hh, lengths=None, **kw):
    return gru_layer(x, w_ih, w, h0, b_ih, b_hh, lengths=lengths, **kw)


def _onnx(call, gates: str, **defaults):
    """call with ONNX's gate order (and ONNX's defaults for the other options)."""
    return lambda *a, **kw: call(*a, gates=gates, **{**defaults, **kw})


# Recurrences accumulate rounding over the steps, and half dtypes round the gates of the decomposition at
# every op: a wider tolerance than one op's.
op("lstm_layer", _lstm_call, lstm_reference, samples=_pytorch_samples(4, 2), layouts=NONSCALAR, tol_scale=16)
op("lstm_layer_onnx", _onnx(_lstm_call, "iofc"), _onnx(lstm_reference, "iofc"), samples=_lstm_onnx_samples,
   layouts=NONSCALAR, tol_scale=16, kernel="lstm_layer")
op("gru_layer", _gru_call, gru_reference, samples=_pytorch_samples(3, 1), layouts=NONSCALAR, tol_scale=16)
op("gru_layer_onnx", _onnx(_gru_call, "zrh", linear_before_reset=False),
   _onnx(gru_reference, "zrh", linear_before_reset=False), samples=_gru_onnx_samples, layouts=NONSCALAR,
   tol_scale=16, kernel="gru_layer")
