"""Recurrent layers: LSTM and GRU with PyTorch's semantics and parameter names
(``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, and
``..._reverse`` for the backward direction), multi-layer, bidirectional,
``batch_first``; and LSTMCell and GRUCell, one step of the same cells with
the same parameters (without the ``_l0`` suffix). Steps are kept as separate
tensors between layers and only stacked at the end: slicing a stacked tensor
once per step would cost a full-size gradient per step in the backward pass."""

from __future__ import annotations

import math

from .. import functional as F
from ..errors import ShapeError
from ..ops.creation import zeros
from ..ops.shape import cat, stack
from ..tensor import Tensor
from .dropout import dropout
from .init import Uniform
from .module import Module
from .var_builder import VarBuilder, get_parameter, layer_builder


def _add_cell_parameters(module: Module, vb: VarBuilder, suffix: str, input_size: int) -> list:
    """Registers one cell's weight_ih, weight_hh (and bias_ih, bias_hh) with
    ``suffix``, as PyTorch initializes them: U(-1/sqrt(hidden), 1/sqrt(hidden));
    returns their names."""
    hidden, rows = module.hidden_size, module._gates * module.hidden_size
    k = 1.0 / math.sqrt(hidden)
    init = Uniform(-k, k)
    names = [f"weight_ih{suffix}", f"weight_hh{suffix}"]
    setattr(module, names[0], get_parameter(vb, (rows, input_size), names[0], init))
    setattr(module, names[1], get_parameter(vb, (rows, hidden), names[1], init))
    if module.bias:
        names += [f"bias_ih{suffix}", f"bias_hh{suffix}"]
        for name in names[2:]:
            setattr(module, name, get_parameter(vb, (rows,), name, init))
    return names


def _weights(module: Module, names: list) -> tuple:
    """(w_ih, w_hh, b_ih, b_hh) of one cell, the biases None when absent."""
    w_ih, w_hh, *biases = (getattr(module, n) for n in names)
    return (w_ih, w_hh, *(biases or (None, None)))


def _step(cell, x: Tensor, state: tuple, w_ih, w_hh, b_ih, b_hh) -> tuple:
    """One time step of ``cell`` over x (batch, features): the next state tuple."""
    xw = x.matmul(w_ih.t())
    return cell(xw + b_ih if b_ih is not None else xw, state, w_hh, b_hh)


def _lstm_cell(xw, state, w_hh, b_hh):
    """One LSTM step from the input's projection ``xw`` (bias included) and
    ``(h, c)``; the weights stack the gates i, f, g, o."""
    h, c = state
    gates = xw + h.matmul(w_hh.t())
    if b_hh is not None:
        gates = gates + b_hh
    i, f, g, o = gates.chunk(4, -1)
    c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    return F.sigmoid(o) * F.tanh(c), c


def _gru_cell(xw, state, w_hh, b_hh):
    """One GRU step, as :func:`_lstm_cell`, with ``(h,)``; the gates are r, z, n."""
    (h,) = state
    hw = h.matmul(w_hh.t())
    if b_hh is not None:
        hw = hw + b_hh
    xr, xz, xn = xw.chunk(3, -1)
    hr, hz, hn = hw.chunk(3, -1)
    r = F.sigmoid(xr + hr)
    z = F.sigmoid(xz + hz)
    n = F.tanh(xn + r * hn)
    return (n + z * (h - n),)  # (1 - z) * n + z * h


class _RNNBase(Module):
    """What LSTM and GRU share; each sets ``_cell``, its step function."""

    _gates: int  # blocks stacked in the weights: 4 for LSTM (i, f, g, o), 3 for GRU (r, z, n)
    _states: int  # tensors carried from step to step: 2 for LSTM (h, c), 1 for GRU (h)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__()
        if num_layers < 1 or hidden_size < 1:
            raise ValueError(f"{type(self).__name__}: num_layers and hidden_size must be positive")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout must be in [0, 1], got {dropout}")
        vb = layer_builder(vb, dtype, device)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, dropout, bidirectional
        directions = 2 if bidirectional else 1
        self._cells = []  # parameter names (w_ih, w_hh, b_ih, b_hh) per layer and direction
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                self._cells.append(_add_cell_parameters(self, vb, suffix, layer_input))

    def _run(self, xs: list, names: list, state: tuple, reverse: bool) -> tuple[list, tuple]:
        """One layer in one direction over the steps xs (each (batch, features)):
        the output of every step and the final state."""
        weights = _weights(self, names)
        outputs = [None] * len(xs)
        for t in reversed(range(len(xs))) if reverse else range(len(xs)):
            state = _step(self._cell, xs[t], state, *weights)
            outputs[t] = state[0]
        return outputs, state

    def _initial_state(self, hx, batch: int, like: Tensor) -> list:
        """The initial states as one (layers * directions, batch, hidden) tensor per state kind."""
        expected = (self.num_layers * (2 if self.bidirectional else 1), batch, self.hidden_size)
        if hx is None:
            return [zeros(expected, dtype=like.dtype, device=like.device)] * self._states
        hx = list(hx) if self._states > 1 else [hx]
        if len(hx) != self._states:
            raise ShapeError(f"{type(self).__name__}: hx must hold {self._states} tensors, got {len(hx)}")
        for h in hx:
            if h.shape != expected:
                raise ShapeError(f"{type(self).__name__}: initial state of shape {h.shape}, expected {expected}")
        return hx

    def forward(self, input: Tensor, hx=None):
        """input (time, batch, features), (batch, time, features) when batch_first, or
        (time, features) unbatched. Returns the last layer's outputs for every step
        and the final states (layers * directions, batch, hidden)."""
        name = type(self).__name__
        if input.rank not in (2, 3) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: expected a 2-d or 3-d input with {self.input_size} features in the last dim, "
                             f"got shape {input.shape}")
        unbatched = input.rank == 2
        if unbatched:
            x = input.unsqueeze(1)
            hx = None if hx is None else ([h.unsqueeze(1) for h in hx] if self._states > 1 else hx.unsqueeze(1))
        else:
            x = input.transpose(0, 1) if self.batch_first else input
        initial = self._initial_state(hx, x.shape[1], x)
        directions = 2 if self.bidirectional else 1
        steps = [x[t] for t in range(x.shape[0])]
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                i = layer * directions + direction
                out, state = self._run(steps, self._cells[i], tuple(s[i] for s in initial), bool(direction))
                outputs.append(out)
                finals.append(state)
            steps = outputs[0] if directions == 1 else [cat(pair, -1) for pair in zip(*outputs)]
            if self.dropout and self.training and layer < self.num_layers - 1:
                steps = [dropout(s, self.dropout) for s in steps]
        x = stack(steps, 0)
        states = [stack([f[k] for f in finals], 0) for k in range(self._states)]
        if unbatched:
            x, states = x.squeeze(1), [s.squeeze(1) for s in states]
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (tuple(states) if self._states > 1 else states[0])

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class LSTM(_RNNBase):
    """Returns ``output, (h_n, c_n)``; ``hx`` is ``(h_0, c_0)`` or None (zeros)."""

    _gates, _states, _cell = 4, 2, staticmethod(_lstm_cell)


class GRU(_RNNBase):
    """Returns ``output, h_n``; ``hx`` is ``h_0`` or None (zeros)."""

    _gates, _states, _cell = 3, 1, staticmethod(_gru_cell)


class _RNNCellBase(Module):
    """One step of LSTM or GRU with PyTorch's parameter names (``weight_ih``,
    ``weight_hh``, ``bias_ih``, ``bias_hh``); input (batch, input_size) or
    (input_size,) unbatched. Subclasses set ``_gates``, ``_states`` and ``_cell`` as LSTM and GRU do."""

    _gates: int
    _states: int

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__()
        if hidden_size < 1:
            raise ValueError(f"{type(self).__name__}: hidden_size must be positive")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self._names = _add_cell_parameters(self, layer_builder(vb, dtype, device), "", input_size)

    def _forward(self, input: Tensor, hx) -> tuple:
        name = type(self).__name__
        if input.rank not in (1, 2) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: expected a 1-d or 2-d input with {self.input_size} features in the last dim, "
                             f"got shape {input.shape}")
        expected = input.shape[:-1] + (self.hidden_size,)
        if hx is None:
            hx = (zeros(expected, dtype=input.dtype, device=input.device),) * self._states
        for h in hx:
            if h.shape != expected:
                raise ShapeError(f"{name}: state of shape {h.shape}, expected {expected}")
        if input.rank == 1:  # unbatched: one step of a batch of one
            state = _step(self._cell, input.unsqueeze(0), tuple(h.unsqueeze(0) for h in hx),
                          *_weights(self, self._names))
            return tuple(s.squeeze(0) for s in state)
        return _step(self._cell, input, tuple(hx), *_weights(self, self._names))

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class LSTMCell(_RNNCellBase):
    """Returns ``(h_1, c_1)``; ``hx`` is ``(h_0, c_0)`` or None (zeros)."""

    _gates, _states, _cell = 4, 2, staticmethod(_lstm_cell)

    def forward(self, input: Tensor, hx=None) -> tuple:
        if hx is not None and len(hx) != 2:
            raise ShapeError(f"LSTMCell: hx must hold 2 tensors (h, c), got {len(hx)}")
        return self._forward(input, hx)


class GRUCell(_RNNCellBase):
    """Returns ``h_1``; ``hx`` is ``h_0`` or None (zeros)."""

    _gates, _states, _cell = 3, 1, staticmethod(_gru_cell)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._forward(input, None if hx is None else (hx,))[0]
