"""Recurrent layers: LSTM and GRU with PyTorch's semantics and parameter names
(``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, LSTM's
``weight_hr_l0`` with ``proj_size``, and ``..._reverse`` for the backward
direction), multi-layer, bidirectional, ``batch_first``, dropout between
layers in training; and LSTMCell and GRUCell, one step of the same cells with
the same parameters (without the ``_l0`` suffix).

Each layer and direction is one fused recurrent op
(:func:`candle_api.ops.rnn.lstm_layer`, ``gru_layer``): a native kernel on
the cpu device, the step-by-step decomposition elsewhere. An LSTM with
``proj_size`` runs its steps one by one (the projection of h sits inside the
recurrence)."""

from __future__ import annotations

import math

from ..errors import ShapeError
from ..ops.creation import zeros
from ..ops.rnn import gru_layer, lstm_cell, lstm_layer, project
from ..ops.shape import cat, stack
from ..tensor import Tensor
from .dropout import dropout
from .init import Uniform
from .module import Module
from .var_builder import VarBuilder, get_parameter, layer_builder


def _add_cell_parameters(module: Module, vb: VarBuilder, suffix: str, input_size: int, state_size: int,
                         proj_size: int = 0) -> list:
    """Registers one cell's weight_ih, weight_hh (and bias_ih, bias_hh, weight_hr)
    with ``suffix``, in PyTorch's order and as it initializes them:
    U(-1/sqrt(hidden), 1/sqrt(hidden)). Returns the names of (w_ih, w_hh, b_ih,
    b_hh, w_hr), None for those it does not have."""
    hidden, rows = module.hidden_size, module._gates * module.hidden_size
    k = 1.0 / math.sqrt(hidden)
    init = Uniform(-k, k)
    shapes = {"weight_ih": (rows, input_size), "weight_hh": (rows, state_size)}
    if module.bias:
        shapes.update({"bias_ih": (rows,), "bias_hh": (rows,)})
    if proj_size:
        shapes["weight_hr"] = (proj_size, hidden)
    for role, shape in shapes.items():
        setattr(module, role + suffix, get_parameter(vb, shape, role + suffix, init))
    return [role + suffix if role in shapes else None
            for role in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")]


def _weights(module: Module, names: list) -> tuple:
    """(w_ih, w_hh, b_ih, b_hh, w_hr) of one cell, absent ones None."""
    return tuple(None if n is None else getattr(module, n) for n in names)


class _RNNBase(Module):
    """What LSTM and GRU share; each sets ``_gates`` and ``_states``, and runs a
    layer in one direction with ``_layer``."""

    _gates: int  # blocks stacked in the weights: 4 for LSTM (i, f, g, o), 3 for GRU (r, z, n)
    _states: int  # tensors carried from step to step: 2 for LSTM (h, c), 1 for GRU (h)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None, *, vb: VarBuilder | None = None, proj_size: int = 0) -> None:
        super().__init__()
        name = type(self).__name__
        if num_layers < 1 or hidden_size < 1:
            raise ValueError(f"{name}: num_layers and hidden_size must be positive")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        if not 0 <= proj_size < hidden_size:
            raise ValueError(f"{name}: proj_size must be in [0, hidden_size), got {proj_size}")
        vb = layer_builder(vb, dtype, device)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, dropout, bidirectional
        self.proj_size = proj_size
        directions = 2 if bidirectional else 1
        out_size = proj_size or hidden_size
        self._cells = []  # parameter names (w_ih, w_hh, b_ih, b_hh, w_hr) per layer and direction
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else out_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                self._cells.append(_add_cell_parameters(self, vb, suffix, layer_input, out_size, proj_size))

    def _layer(self, x: Tensor, weights: tuple, states: list, reverse: bool) -> tuple:
        """One layer in one direction over x (steps, batch, features): (outputs of every step, final states)."""
        raise NotImplementedError

    def _initial_state(self, hx, batch: int, like: Tensor) -> list:
        """The initial states as one (layers * directions, batch, size) tensor per state kind."""
        layers = self.num_layers * (2 if self.bidirectional else 1)
        sizes = [self.proj_size or self.hidden_size, self.hidden_size][:self._states]
        if hx is None:
            return [zeros((layers, batch, size), dtype=like.dtype, device=like.device) for size in sizes]
        hx = list(hx) if self._states > 1 else [hx]
        if len(hx) != self._states:
            raise ShapeError(f"{type(self).__name__}: hx must hold {self._states} tensors, got {len(hx)}")
        for h, size in zip(hx, sizes):
            if not isinstance(h, Tensor) or h.shape != (layers, batch, size):
                got = h.shape if isinstance(h, Tensor) else type(h).__name__
                raise ShapeError(f"{type(self).__name__}: initial state of shape {got}, expected "
                                 f"{(layers, batch, size)}")
        return hx

    def forward(self, input: Tensor, hx=None):
        """input (time, batch, features), (batch, time, features) when batch_first, or
        (time, features) unbatched. Returns the last layer's outputs for every step
        and the final states (layers * directions, batch, hidden)."""
        name = type(self).__name__
        if not isinstance(input, Tensor) or input.rank not in (2, 3) or input.shape[-1] != self.input_size:
            got = input.shape if isinstance(input, Tensor) else type(input).__name__
            raise ShapeError(f"{name}: expected a 2-d or 3-d input with {self.input_size} features in the last dim, "
                             f"got shape {got}")
        unbatched = input.rank == 2
        batch_first = self.batch_first and not unbatched
        if unbatched:
            input = input.unsqueeze(1)
            hx = None if hx is None else ([h.unsqueeze(1) for h in hx] if self._states > 1 else hx.unsqueeze(1))
        initial = self._initial_state(hx, input.shape[0 if batch_first else 1], input)
        directions = 2 if self.bidirectional else 1
        x, finals = input.transpose(0, 1) if batch_first else input, []  # a view: the ops take any strides
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                i = layer * directions + direction
                weights = _weights(self, self._cells[i])
                out, states = self._layer(x, weights, [s[i] for s in initial], bool(direction))
                outputs.append(out)
                finals.append(states)
            x = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = dropout(x, self.dropout)
        states = [stack([f[k] for f in finals], 0) for k in range(self._states)]
        if unbatched:
            x, states = x.squeeze(1), [s.squeeze(1) for s in states]
        elif batch_first:
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
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        return s


class LSTM(_RNNBase):
    """Returns ``output, (h_n, c_n)``; ``hx`` is ``(h_0, c_0)`` or None (zeros).
    With ``proj_size`` P, h is projected to P features (``weight_hr``)."""

    _gates, _states = 4, 2

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, device,
                         dtype, vb=vb, proj_size=proj_size)

    def _layer(self, x, weights, states, reverse):
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        if w_hr is not None:
            return _projected(x, w_ih, w_hh, b_ih, b_hh, w_hr, states, reverse)
        steps = x.shape[0]
        out = lstm_layer(x, w_ih, w_hh, states[0], states[1], b_ih, b_hh, reverse=reverse)
        return out.narrow(0, 0, steps), (out[steps], out[steps + 1])


def _projected(x, w_ih, w_hh, b_ih, b_hh, w_hr, states, reverse) -> tuple:
    """An LSTM layer with h projected by w_hr at every step, a step at a time."""
    xw = project(x, w_ih)
    h, c = states
    bias = None if b_ih is None else b_ih + b_hh
    outputs = [None] * xw.shape[0]
    for t in reversed(range(xw.shape[0])) if reverse else range(xw.shape[0]):
        z = xw[t] + h.matmul(w_hh.t())
        h, c = lstm_cell(z if bias is None else z + bias, c)
        h = outputs[t] = h.matmul(w_hr.t())
    if not outputs:
        return zeros((0,) + h.shape, dtype=h.dtype, device=h.device), (h, c)
    return stack(outputs, 0), (h, c)


class GRU(_RNNBase):
    """Returns ``output, h_n``; ``hx`` is ``h_0`` or None (zeros)."""

    _gates, _states = 3, 1

    def _layer(self, x, weights, states, reverse):
        w_ih, w_hh, b_ih, b_hh, _ = weights
        steps = x.shape[0]
        out = gru_layer(x, w_ih, w_hh, states[0], b_ih, b_hh, reverse=reverse)
        return out.narrow(0, 0, steps), (out[steps],)


class _RNNCellBase(Module):
    """One step of LSTM or GRU with PyTorch's parameter names (``weight_ih``,
    ``weight_hh``, ``bias_ih``, ``bias_hh``); input (batch, input_size) or
    (input_size,) unbatched: the layer op over one step."""

    _gates: int
    _states: int

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__()
        if hidden_size < 1:
            raise ValueError(f"{type(self).__name__}: hidden_size must be positive")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self._names = _add_cell_parameters(self, layer_builder(vb, dtype, device), "", input_size, hidden_size)

    def _forward(self, input: Tensor, hx) -> tuple:
        name = type(self).__name__
        if not isinstance(input, Tensor) or input.rank not in (1, 2) or input.shape[-1] != self.input_size:
            got = input.shape if isinstance(input, Tensor) else type(input).__name__
            raise ShapeError(f"{name}: expected a 1-d or 2-d input with {self.input_size} features in the last dim, "
                             f"got shape {got}")
        expected = input.shape[:-1] + (self.hidden_size,)
        if hx is None:
            hx = (zeros(expected, dtype=input.dtype, device=input.device),) * self._states
        for h in hx:
            if not isinstance(h, Tensor) or h.shape != expected:
                got = h.shape if isinstance(h, Tensor) else type(h).__name__
                raise ShapeError(f"{name}: state of shape {got}, expected {expected}")
        batched = input.rank == 2
        x = input if batched else input.unsqueeze(0)
        states = [h if batched else h.unsqueeze(0) for h in hx]
        w_ih, w_hh, b_ih, b_hh, _ = _weights(self, self._names)
        if self._states == 2:
            out = lstm_layer(x.unsqueeze(0), w_ih, w_hh, states[0], states[1], b_ih, b_hh)
        else:
            out = gru_layer(x.unsqueeze(0), w_ih, w_hh, states[0], b_ih, b_hh)
        return tuple(out[1 + k] if batched else out[1 + k, 0] for k in range(self._states))

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class LSTMCell(_RNNCellBase):
    """Returns ``(h_1, c_1)``; ``hx`` is ``(h_0, c_0)`` or None (zeros)."""

    _gates, _states = 4, 2

    def forward(self, input: Tensor, hx=None) -> tuple:
        if hx is not None and len(hx) != 2:
            raise ShapeError(f"LSTMCell: hx must hold 2 tensors (h, c), got {len(hx)}")
        return self._forward(input, hx)


class GRUCell(_RNNCellBase):
    """Returns ``h_1``; ``hx`` is ``h_0`` or None (zeros)."""

    _gates, _states = 3, 1

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._forward(input, None if hx is None else (hx,))[0]
