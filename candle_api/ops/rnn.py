"""Recurrent layers as ops: one LSTM or GRU layer in one direction over every
time step.

At each step the gates are ``x[t] @ W_ih^T + b_ih + b_hh + h @ W_hh^T``; only
the ``h`` part is serial in time. A device with the ``lstm_layer`` /
``gru_layer`` kernel runs the whole layer in one call (the cpu kernel
projects the inputs a chunk of steps at a time and keeps the recurrence in
its threads' caches); any other device runs the decomposition: one matmul
for the inputs of every step, then a step at a time from matmul and
elementwise ops, which also serves ONNX's activations other than sigmoid and
tanh (:func:`lstm_steps`, :func:`gru_steps`). Both take PyTorch's gate order
or ONNX's, ONNX's sequence lengths, clip and, for LSTM, peepholes and
input_forget; GRU takes ONNX's linear_before_reset = 0 too (PyTorch's GRU is
linear_before_reset = 1).

The backward recomputes the decomposition under autograd (the fused forward
keeps no gates).
"""

from __future__ import annotations

from ..autograd.engine import grad as autograd_grad
from ..autograd.graph import enable_grad
from ..dtype import i64
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor
from .core import check_tensor, require_float, same_device, same_dtype
from .dispatch import OpDef, apply, define
from .elementwise import where
from .shape import stack

#: gate orders: name -> (code the kernel takes, storage slot of each gate in the cell's own order:
#: LSTM i, f, g, o; GRU r, z, n)
LSTM_GATES = {"ifgo": (0, (0, 1, 2, 3)), "iofc": (1, (0, 2, 3, 1))}
GRU_GATES = {"rzn": (0, (0, 1, 2)), "zrh": (1, (1, 0, 2))}


def _sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def _tanh(x: Tensor) -> Tensor:
    return x.tanh()


def lstm_layer(x: Tensor, w_ih: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, b_ih: Tensor | None = None,
               b_hh: Tensor | None = None, *, reverse: bool = False, gates: str = "ifgo",
               peepholes: Tensor | None = None, clip: float | None = None, input_forget: bool = False,
               lengths: Tensor | None = None) -> Tensor:
    """One LSTM layer over every step of ``x`` (T, B, I), any strides (a
    batch-first input transposed is a view), with ``w_ih`` (4H, I), ``w_hh``
    (4H, H), ``h0`` and ``c0`` (B, H) and optional biases (4H,); the gates
    stacked i, f, g, o (``gates="ifgo"``, PyTorch) or i, o, f, c (``"iofc"``,
    ONNX). ONNX's options: ``peepholes`` (3H,: i, o, f), ``clip`` (gate inputs
    clipped to [-clip, clip]), ``input_forget`` (f = 1 - i) and ``lengths``
    (B,) of each sequence (rows past their length keep their state and output
    zeros; a reverse layer starts at each row's last step).

    Returns one tensor (T + 2, B, H): the h of every step, then the final h
    and the final c."""
    _gate_order("lstm_layer", gates, LSTM_GATES)
    hidden = _check("lstm_layer", 4, x, w_ih, w_hh, (h0, c0), (b_ih, b_hh), lengths)
    if peepholes is not None:
        _check_vector("lstm_layer", "peepholes", peepholes, x, 3 * hidden)
    return apply(LSTM_LAYER, x, w_ih, w_hh, b_ih, b_hh, h0, c0, peepholes, _lengths(lengths),
                 reverse=bool(reverse), onnx_gates=LSTM_GATES[gates][0], clip=_clip("lstm_layer", clip),
                 input_forget=bool(input_forget))


def gru_layer(x: Tensor, w_ih: Tensor, w_hh: Tensor, h0: Tensor, b_ih: Tensor | None = None,
              b_hh: Tensor | None = None, *, reverse: bool = False, gates: str = "rzn", clip: float | None = None,
              linear_before_reset: bool = True, lengths: Tensor | None = None) -> Tensor:
    """One GRU layer, as :func:`lstm_layer`: ``w_ih`` (3H, I), ``w_hh``
    (3H, H), the gates stacked r, z, n (``"rzn"``, PyTorch) or z, r, h
    (``"zrh"``, ONNX). The candidate is n = tanh(x W_in^T + b_in + r * (h
    W_hn^T + b_hn)) with ``linear_before_reset`` (PyTorch's GRU), tanh(x
    W_in^T + b_in + (r * h) W_hn^T + b_hn) without (ONNX's default); h = (1 -
    z) n + z h.

    Returns one tensor (T + 1, B, H): the h of every step, then the final h."""
    _gate_order("gru_layer", gates, GRU_GATES)
    _check("gru_layer", 3, x, w_ih, w_hh, (h0,), (b_ih, b_hh), lengths)
    return apply(GRU_LAYER, x, w_ih, w_hh, b_ih, b_hh, h0, _lengths(lengths), reverse=bool(reverse),
                 onnx_gates=GRU_GATES[gates][0], clip=_clip("gru_layer", clip),
                 linear_before_reset=bool(linear_before_reset))


# ---- checks ------------------------------------------------------------------------------------


def _gate_order(op: str, gates: str, orders: dict) -> tuple:
    if gates not in orders:
        raise ArgumentError(f"{op}: gates must be one of {sorted(orders)}, got {gates!r}")
    return orders[gates]


def _check(op: str, n_gates: int, x, w_ih, w_hh, states: tuple, biases: tuple, lengths) -> int:
    """The hidden size, after checking every operand's shape, dtype and device."""
    for name, t in (("x", x), ("w_ih", w_ih), ("w_hh", w_hh)):
        check_tensor(op, t, name)
    if x.rank != 3:
        raise ShapeError(f"{op}: x must be (steps, batch, features), got shape {x.shape}")
    if w_hh.rank != 2 or w_hh.shape[0] != n_gates * w_hh.shape[1]:
        raise ShapeError(f"{op}: w_hh must be ({n_gates} * hidden, hidden), got shape {w_hh.shape}")
    steps, batch, features = x.shape
    hidden = w_hh.shape[1]
    if w_ih.shape != (n_gates * hidden, features):
        raise ShapeError(f"{op}: w_ih must be ({n_gates} * hidden, features) = {(n_gates * hidden, features)} for "
                         f"x {x.shape} and w_hh {w_hh.shape}, got shape {w_ih.shape}")
    require_float(op, x)
    same_dtype(op, x, w_ih, w_hh)
    same_device(op, x, w_ih, w_hh)
    for name, s in zip(("h0", "c0"), states):
        check_tensor(op, s, name)
        if s.shape != (batch, hidden):
            raise ShapeError(f"{op}: {name} must be (batch, hidden) = {(batch, hidden)}, got shape {s.shape}")
        same_dtype(op, x, s)
        same_device(op, x, s)
    for name, b in zip(("b_ih", "b_hh"), biases):
        if b is not None:
            _check_vector(op, name, b, x, n_gates * hidden)
    if lengths is not None:
        check_tensor(op, lengths, "lengths")
        if lengths.shape != (batch,) or lengths.dtype.is_float:
            raise ShapeError(f"{op}: lengths must be integers of shape ({batch},), got {lengths.dtype} "
                             f"of shape {lengths.shape}")
        same_device(op, x, lengths)
    return hidden


def _check_vector(op: str, name: str, v, like: Tensor, size: int) -> None:
    check_tensor(op, v, name)
    if v.shape != (size,):
        raise ShapeError(f"{op}: {name} must have shape ({size},), got {v.shape}")
    same_dtype(op, like, v)
    same_device(op, like, v)


def _clip(op: str, clip) -> float:
    if clip is None:
        return 0.0
    if not isinstance(clip, (int, float)) or not clip > 0:
        raise ArgumentError(f"{op}: clip must be a positive number or None, got {clip!r}")
    return float(clip)


def _lengths(lengths: Tensor | None) -> Tensor | None:
    """Lengths as the kernels take them: i64, contiguous."""
    if lengths is None:
        return None
    return (lengths if lengths.dtype is i64 else lengths.to_dtype(i64)).contiguous()


# ---- the decompositions --------------------------------------------------------------------------


def _host_lengths(lengths: Tensor | None, steps: int, op: str) -> list | None:
    if lengths is None:
        return None
    values = [int(n) for n in lengths.numpy().reshape(-1)]
    for r, n in enumerate(values):
        if not 0 <= n <= steps:
            raise ArgumentError(f"{op}: sequence length {n} of batch entry {r} is out of range [0, {steps}]")
    return values


def project(x: Tensor, w: Tensor) -> Tensor:
    """x (T, B, I) @ w^T for every step at once: one product (x made contiguous first when its steps and batch
    entries are not one run of rows, a batch-first input for one)."""
    steps, batch, features = x.shape
    return (x.contiguous().reshape(steps * batch, features) @ w.t()).reshape(steps, batch, w.shape[0])


def run_steps(op: str, xw: Tensor, states: list, lengths, reverse: bool, step) -> Tensor:
    """Steps ``step(t, states) -> new states`` (h first) in time order (reversed
    for a reverse layer); rows whose sequence ended keep their states and output
    zeros. Returns the outputs of every step, then the final states, stacked."""
    steps = xw.shape[0]
    lens = _host_lengths(lengths, steps, op)
    outputs = [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        new = step(t, states)
        if lens is not None and not all(n > t for n in lens):
            keep = Tensor([[1 if n > t else 0] for n in lens], dtype="u8", device=xw.device)
            new = [where(keep, n, s) for n, s in zip(new, states)]
            outputs[t] = where(keep, new[0], 0.0)
        else:
            outputs[t] = new[0]
        states = new
    return stack(outputs + states, 0)


def _clipper(clip: float):
    return (lambda v: v.clamp(-clip, clip)) if clip else (lambda v: v)


def _plus(a, b):
    """a + b, where either may be None (absent)."""
    if a is None:
        return b
    return a if b is None else a + b


def lstm_cell(z: Tensor, c: Tensor, slots=LSTM_GATES["ifgo"][1], peepholes=None, clip: float = 0.0,
              input_forget: bool = False, activations=(_sigmoid, _tanh, _tanh)) -> tuple:
    """One LSTM step from its gates' inputs z (B, 4H) = x W_ih^T + biases + h
    W_hh^T (gates in storage ``slots``) and the cell state c: the new (h, c)."""
    f, g, h_act = activations
    hidden = c.shape[-1]
    gi, gf, gg, go = (z.narrow(-1, s * hidden, hidden) for s in slots)
    clipped = _clipper(clip)
    if peepholes is not None:
        p_i, p_o, p_f = peepholes.chunk(3, 0)
        gi, gf = gi + p_i * c, gf + p_f * c
    i = f(clipped(gi))
    forget = 1.0 - i if input_forget else f(clipped(gf))
    c = forget * c + i * g(clipped(gg))
    if peepholes is not None:
        go = go + p_o * c
    return f(clipped(go)) * h_act(c), c


def lstm_steps(x, w_ih, w_hh, b_ih, b_hh, h0, c0, peepholes, lengths, reverse: bool = False, onnx_gates: int = 0,
               clip: float = 0.0, input_forget: bool = False, activations=(_sigmoid, _tanh, _tanh)) -> Tensor:
    """:func:`lstm_layer` a step at a time (its arguments as the op passes
    them), with any activations f (gates), g (cell input) and h (output)."""
    xw = project(x, w_ih)
    slots = LSTM_GATES["iofc" if onnx_gates else "ifgo"][1]
    bias, wt = _plus(b_ih, b_hh), w_hh.t()

    def step(t, states):
        h, c = states
        return list(lstm_cell(_plus(xw[t] + h @ wt, bias), c, slots, peepholes, clip, input_forget, activations))

    return run_steps("lstm_layer", xw, [h0, c0], lengths, reverse, step)


def gru_steps(x, w_ih, w_hh, b_ih, b_hh, h0, lengths, reverse: bool = False, onnx_gates: int = 0, clip: float = 0.0,
              linear_before_reset: bool = True, activations=(_sigmoid, _tanh)) -> Tensor:
    """:func:`gru_layer` a step at a time, with any activations f (gates) and g (candidate)."""
    xw = project(x, w_ih)
    f, g = activations
    r_slot, z_slot, n_slot = GRU_GATES["zrh" if onnx_gates else "rzn"][1]
    hidden = w_hh.shape[1]

    def part(v, slot):
        return None if v is None else v.narrow(-1, slot * hidden, hidden)

    # r and z are stored in the first two slots in either order, the candidate in the third
    w_rz, w_n = w_hh.narrow(0, 0, 2 * hidden).t(), w_hh.narrow(0, 2 * hidden, hidden).t()
    b_r, b_z = (_plus(part(b_ih, s), part(b_hh, s)) for s in (r_slot, z_slot))
    b_in, b_hn = part(b_ih, n_slot), part(b_hh, n_slot)
    clipped = _clipper(clip)

    def step(t, states):
        (h,) = states
        xt, hw = xw[t], h @ w_rz
        r = f(clipped(_plus(part(xt, r_slot) + part(hw, r_slot), b_r)))
        z = f(clipped(_plus(part(xt, z_slot) + part(hw, z_slot), b_z)))
        if linear_before_reset:
            candidate = r * _plus(h @ w_n, b_hn)
        else:
            candidate = _plus((r * h) @ w_n, b_hn)
        n = g(clipped(_plus(part(xt, n_slot), b_in) + candidate))
        return [n + z * (h - n)]

    return run_steps("gru_layer", xw, [h0], lengths, reverse, step)


# ---- the ops ---------------------------------------------------------------------------------------


def _operand(t: Tensor | None) -> tuple:
    return (None, None) if t is None else (t._storage, t._layout)


def _lstm_prepare(x, w_ih, w_hh, b_ih, b_hh, h0, c0, peepholes, lengths, reverse, onnx_gates, clip, input_forget):
    steps, batch, _ = x.shape
    return (steps + 2, batch, w_hh.shape[1]), x._dtype, (
        *_operand(x), *_operand(w_ih), *_operand(w_hh), *_operand(b_ih), *_operand(b_hh), *_operand(h0), *_operand(c0),
        *_operand(peepholes), *_operand(lengths), reverse, onnx_gates, clip, input_forget)


def _gru_prepare(x, w_ih, w_hh, b_ih, b_hh, h0, lengths, reverse, onnx_gates, clip, linear_before_reset):
    steps, batch, _ = x.shape
    return (steps + 1, batch, w_hh.shape[1]), x._dtype, (
        *_operand(x), *_operand(w_ih), *_operand(w_hh), *_operand(b_ih), *_operand(b_hh), *_operand(h0),
        *_operand(lengths), reverse, onnx_gates, clip, linear_before_reset)


def _recomputed(steps):
    """The backward of a layer op: its decomposition ``steps`` run again under
    autograd from the inputs that need a gradient."""

    def backward(inputs, out, g, **params):
        wanted = [t is not None and t._node is not None for t in inputs]
        with enable_grad():
            leaves = [None if t is None else t.detach().requires_grad_() if w else t.detach()
                      for t, w in zip(inputs, wanted)]
            y = steps(*leaves, **params)
        grads = iter(autograd_grad(y, [leaf for leaf, w in zip(leaves, wanted) if w], g))
        return tuple(next(grads) if w else None for w in wanted)

    return backward


LSTM_LAYER = define(OpDef("lstm_layer", prepare=_lstm_prepare, backward=_recomputed(lstm_steps), decompose=lstm_steps))
GRU_LAYER = define(OpDef("gru_layer", prepare=_gru_prepare, backward=_recomputed(gru_steps), decompose=gru_steps))
