"""Elementwise ops: unary, unary with parameters, binary with NumPy
broadcasting, comparisons (u8 results), where, casts and clamp.

Binary ops need equal dtypes (Candle's rule; convert explicitly). A Python
scalar operand takes the tensor's dtype: +, - and * become one affine kernel,
other ops use a cached 0-d tensor broadcast with zero strides. A float scalar
that an integer dtype cannot hold exactly is an error, not a silent rounding.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..autograd.graph import is_grad_enabled, record
from ..autograd.helpers import sum_to, where_or_zero
from ..dtype import u8
from ..errors import DTypeError
from ..layout import Layout

_contig = Layout.contig
_new = object.__new__
from ..tensor import Tensor
from .creation import from_array
from .core import broadcast_shape, check_tensor, has_kernel, kernel, make, same_device, same_dtype, unsupported

# ---- unary -------------------------------------------------------------------------------


def unary(op: str, x: Tensor) -> Tensor:
    dev, dtype = x._device, x._dtype
    k = dev.kernels.get((op, dtype))
    if k is None:
        decomposition = DECOMPOSITIONS.get(op)
        if decomposition is None or not dtype.is_float:
            raise unsupported(op, dev, dtype)
        return decomposition(x)
    lay = _contig(x._layout.shape)
    out = dev.backend.alloc(lay.numel * dtype.itemsize)
    if lay.numel:
        k(out, x._storage, x._layout)
    t = _new(Tensor)
    t._storage, t._layout, t._dtype, t._device, t._node = out, lay, dtype, dev, None
    if x._node is not None and is_grad_enabled():
        rule, y = UNARY_GRADS[op], t.detach()  # detached: a closure holding t would be a reference cycle
        record(t, op, (x,), lambda g: (rule(x, y, g),))
    return t


def param(op: str, x: Tensor, p0: float, p1: float) -> Tensor:
    """Unary ops with two float parameters (affine, powf, elu, leaky_relu, clamp)."""
    dev, dtype = x._device, x._dtype
    k = dev.kernels.get((op, dtype))
    if k is None:
        raise unsupported(op, dev, dtype)
    lay = Layout.contig(x._layout.shape)
    out = dev.backend.alloc(lay.numel * dtype.itemsize)
    if lay.numel:
        k(out, x._storage, x._layout, float(p0), float(p1))
    t = make(out, lay, dtype, dev)
    if x._node is not None and is_grad_enabled():
        rule, y = PARAM_GRADS[op], t.detach()
        record(t, op, (x,), lambda g: (rule(x, y, g, p0, p1),))
    return t


# Composite forms of unary ops, for backends without a kernel for them.
DECOMPOSITIONS = {
    "sigmoid": lambda x: (unary("neg", x).exp() + 1.0).recip(),
    "silu": lambda x: x * unary("sigmoid", x),
    "gelu": lambda x: x * 0.5 * (((x * x * x) * 0.044715 + x) * math.sqrt(2.0 / math.pi)).tanh().affine(1.0, 1.0),
    "gelu_erf": lambda x: x * 0.5 * (x * (1.0 / math.sqrt(2.0))).erf().affine(1.0, 1.0),
    # as the kernels: x above 20, else log1p(exp(x)) (clamped, so neither branch overflows nor gives NaN gradients)
    "softplus": lambda x: where(x > 20.0, x, x.clamp(None, 20.0).exp().log1p()),
    "rsqrt": lambda x: x.sqrt().recip(),
    "sqr": lambda x: x * x,
    "relu": lambda x: param("clamp", x, 0.0, math.inf),
}

# ---- binary -------------------------------------------------------------------------------


def binary(op: str, a: Tensor, b: Tensor, out_dtype=None) -> Tensor:
    """a op b with NumPy broadcasting; dtypes and devices must match. The result
    has a's dtype, or out_dtype (u8 for comparisons)."""
    dtype = a._dtype
    if b.__class__ is not Tensor:
        check_tensor(op, b, "right operand")
    if b._dtype is not dtype:
        same_dtype(op, a, b)
    dev = a._device
    if b._device is not dev:
        same_device(op, a, b)
    la, lb = a._layout, b._layout
    shape = la.shape
    if lb.shape != shape:
        shape = broadcast_shape(op, shape, lb.shape)
        if la.shape != shape:
            la = la.broadcast_as(shape)
        if lb.shape != shape:
            lb = lb.broadcast_as(shape)
    k = dev.kernels.get((op, dtype))
    if k is None:
        raise unsupported(op, dev, dtype)
    if out_dtype is None:
        out_dtype = dtype
    lay = _contig(shape)
    out = dev.backend.alloc(lay.numel * out_dtype.itemsize)
    if lay.numel:
        k(out, a._storage, la, b._storage, lb)
    t = _new(Tensor)
    t._storage, t._layout, t._dtype, t._device, t._node = out, lay, out_dtype, dev, None
    if (a._node is not None or b._node is not None) and out_dtype is dtype and is_grad_enabled():
        rule, y = BINARY_GRADS[op], t.detach()
        record(t, op, (a, b), lambda g: _binary_backward(rule, a, b, y, g))
    return t


def _binary_backward(rule, a, b, out, g):
    ga, gb = rule(a, b, out, g)
    return (sum_to(ga, a.shape) if a._node is not None else None,
            sum_to(gb, b.shape) if b._node is not None else None)


_AFFINE = {  # scalar forms that are one affine kernel: (mul, add) from the scalar s
    ("add", False): lambda s: (1.0, s),
    ("add", True): lambda s: (1.0, s),
    ("sub", False): lambda s: (1.0, -s),
    ("sub", True): lambda s: (-1.0, s),
    ("mul", False): lambda s: (s, 0.0),
    ("mul", True): lambda s: (s, 0.0),
}


def binary_any(op: str, x: Tensor, other, reflected: bool = False) -> Tensor:
    """x op other, other a Tensor or a Python/numpy scalar; ``reflected`` computes other op x."""
    if isinstance(other, Tensor):
        return binary(op, other, x) if reflected else binary(op, x, other)
    if not isinstance(other, numbers.Number):
        return NotImplemented
    if x._dtype.is_int:
        _check_int_scalar(other, x._dtype)
    affine = _AFFINE.get((op, reflected))
    # Doubles carry integers exactly up to 2**53; larger ones take the tensor path.
    if affine is not None and abs(other) < 2**53 and has_kernel(x._device, "affine", x._dtype):
        mul, add = affine(float(other))
        return param("affine", x, mul, add)
    if op == "pow" and not reflected and x._dtype.is_float:
        return param("powf", x, float(other), 0.0)
    s = scalar(other, x._dtype, x._device)
    return binary(op, s, x) if reflected else binary(op, x, s)


def compare(op: str, x: Tensor, other) -> Tensor:
    """x op other as a u8 tensor of 0/1; other a Tensor or a scalar."""
    if isinstance(other, Tensor):
        return binary(op, x, other, u8)
    if not isinstance(other, numbers.Number):
        return NotImplemented
    return binary(op, x, scalar(other, x._dtype, x._device), u8)


_SCALARS: dict = {}


def scalar(value, dtype, device) -> Tensor:
    """A cached 0-d tensor holding value in dtype on device."""
    key = (device, dtype, type(value), value)
    t = _SCALARS.get(key)
    if t is not None:
        return t
    if dtype.is_int:
        _check_int_scalar(value, dtype)
    t = from_array(np.array(value, dtype=dtype.np), dtype, device)
    if len(_SCALARS) > 512:
        _SCALARS.clear()
    _SCALARS[key] = t
    return t


def _check_int_scalar(value, dtype) -> None:
    """An integer tensor takes only scalars it can hold exactly."""
    if isinstance(value, float) and not value.is_integer():
        raise DTypeError(f"the scalar {value} cannot be used with a {dtype} tensor without rounding; "
                         "convert the tensor to a float dtype first")
    info = np.iinfo(dtype.np)
    if not info.min <= value <= info.max:
        raise DTypeError(f"the scalar {value} does not fit in {dtype}")


# ---- where, casts, clamp ----------------------------------------------------------------


def where(cond: Tensor, on_true, on_false) -> Tensor:
    """on_true where cond is nonzero, else on_false; all three broadcast together."""
    check_tensor("where", cond, "condition")
    ref = on_true if isinstance(on_true, Tensor) else on_false
    if not isinstance(ref, Tensor):
        raise TypeError("where: on_true or on_false must be a Tensor")
    if not isinstance(on_true, Tensor):
        on_true = scalar(on_true, ref._dtype, ref._device)
    if not isinstance(on_false, Tensor):
        on_false = scalar(on_false, ref._dtype, ref._device)
    dtype = same_dtype("where", on_true, on_false)
    dev = same_device("where", cond, on_true, on_false)
    if cond._dtype is not u8:
        cond = compare("ne", cond, 0)
    shape = broadcast_shape("where", cond.shape, on_true.shape, on_false.shape)
    lay = Layout.contig(shape)
    out = dev.backend.alloc(lay.numel * dtype.itemsize)
    if lay.numel:
        kernel(dev, "where", dtype)(
            out,
            cond._storage, cond._layout.broadcast_as(shape),
            on_true._storage, on_true._layout.broadcast_as(shape),
            on_false._storage, on_false._layout.broadcast_as(shape),
        )
    t = make(out, lay, dtype, dev)
    if (on_true._node is not None or on_false._node is not None) and is_grad_enabled():
        record(t, "where", (on_true, on_false), lambda g: (sum_to(where_or_zero(cond, g), on_true.shape),
                                                          sum_to(where(cond, 0.0, g), on_false.shape)))
    return t


def cast(x: Tensor, dtype) -> Tensor:
    """x converted to dtype. Floats saturate into integers and NaN becomes 0
    (Rust's `as`, which Candle inherits); integers wrap into narrower integers."""
    if dtype is x._dtype:
        return x
    dev = x._device
    lay = Layout.contig(x._layout.shape)
    out = dev.backend.alloc(lay.numel * dtype.itemsize)
    if lay.numel:
        kernel(dev, "cast", x._dtype)(out, x._storage, x._layout, dtype)
    t = make(out, lay, dtype, dev)
    if x._node is not None and dtype.is_float and is_grad_enabled():
        record(t, "cast", (x,), lambda g: (cast(g, x._dtype),))
    return t


def clamp(x: Tensor, lo=None, hi=None) -> Tensor:
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        out = x
        if lo is not None:
            out = binary_any("maximum", out, lo)
        if hi is not None:
            out = binary_any("minimum", out, hi)
        return out
    return param("clamp", x, -math.inf if lo is None else lo, math.inf if hi is None else hi)


# ---- gradients ------------------------------------------------------------------------------
# rule(x, y, g) -> dL/dx for y = op(x); the rules use tensor ops, so they run on any device.
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _zero(x, y, g):
    return g * 0.0


def _gelu_tanh_grad(x, y, g):
    inner = (x * x * 0.044715 + 1.0) * x * _SQRT_2_OVER_PI
    t = inner.tanh()
    d_inner = (x * x * (3 * 0.044715) + 1.0) * _SQRT_2_OVER_PI
    return g * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * d_inner)


def _gelu_erf_grad(x, y, g):
    cdf = (x * (1.0 / math.sqrt(2.0))).erf().affine(0.5, 0.5)
    pdf = (x * x * -0.5).exp() * (1.0 / math.sqrt(2.0 * math.pi))
    return g * (cdf + x * pdf)


def _silu_grad(x, y, g):
    s = x.sigmoid()
    return g * s * (x * (1.0 - s) + 1.0)


UNARY_GRADS = {
    "abs": lambda x, y, g: g * x.sign(),
    "neg": lambda x, y, g: -g,
    "sqr": lambda x, y, g: g * x * 2.0,
    "sign": _zero, "ceil": _zero, "floor": _zero, "round": _zero, "trunc": _zero,
    "relu": lambda x, y, g: where_or_zero(x > 0, g),
    "recip": lambda x, y, g: -(g * y * y),
    "sqrt": lambda x, y, g: g * 0.5 / y,
    "rsqrt": lambda x, y, g: g * y * y * y * -0.5,
    "exp": lambda x, y, g: g * y,
    "expm1": lambda x, y, g: g * (y + 1.0),
    "log": lambda x, y, g: g / x,
    "log1p": lambda x, y, g: g / (x + 1.0),
    "sin": lambda x, y, g: g * x.cos(),
    "cos": lambda x, y, g: -(g * x.sin()),
    "tan": lambda x, y, g: g * (y * y + 1.0),
    "asin": lambda x, y, g: g * (1.0 - x * x).rsqrt(),
    "acos": lambda x, y, g: -(g * (1.0 - x * x).rsqrt()),
    "atan": lambda x, y, g: g / (x * x + 1.0),
    "sinh": lambda x, y, g: g * x.cosh(),
    "cosh": lambda x, y, g: g * x.sinh(),
    "tanh": lambda x, y, g: g * (1.0 - y * y),
    "asinh": lambda x, y, g: g * (x * x + 1.0).rsqrt(),
    "acosh": lambda x, y, g: g * (x * x - 1.0).rsqrt(),
    "atanh": lambda x, y, g: g / (1.0 - x * x),
    "erf": lambda x, y, g: g * (x * x * -1.0).exp() * (2.0 / math.sqrt(math.pi)),
    "gelu": _gelu_tanh_grad,
    "gelu_erf": _gelu_erf_grad,
    "silu": _silu_grad,
    "sigmoid": lambda x, y, g: g * y * (1.0 - y),
    "softplus": lambda x, y, g: g * x.sigmoid(),
}

# rule(x, y, g, p0, p1) for the ops with two float parameters.
PARAM_GRADS = {
    "affine": lambda x, y, g, mul, add: g * float(mul),
    "powf": lambda x, y, g, p, _: g * param("powf", x, p - 1.0, 0.0) * float(p),
    "elu": lambda x, y, g, alpha, _: where(x > 0, g, g * (y + float(alpha))),
    "leaky_relu": lambda x, y, g, slope, _: where(x > 0, g, g * float(slope)),
    "clamp": lambda x, y, g, lo, hi: where_or_zero((x >= lo) * (x <= hi), g),
}


def _extreme_grads(a, b, out, g, a_wins):
    """maximum/minimum: the gradient goes to the winner, split evenly on ties."""
    half = g * 0.5
    ga = where(a_wins, g, where(a == b, half, 0.0))
    return ga, g - ga


def _pow_grads(a, b, out, g):
    ga = g * b * binary("pow", a, b - 1.0)
    # d/db a^b = a^b log a, taken as 0 where a == 0 (the limit for b > 0)
    gb = where(a == 0, 0.0, g * out * a.log())
    return ga, gb


BINARY_GRADS = {
    "add": lambda a, b, out, g: (g, g),
    "sub": lambda a, b, out, g: (g, -g),
    "mul": lambda a, b, out, g: (g * b, g * a),
    "div": lambda a, b, out, g: (g / b, -(g * out / b)),
    "maximum": lambda a, b, out, g: _extreme_grads(a, b, out, g, a > b),
    "minimum": lambda a, b, out, g: _extreme_grads(a, b, out, g, a < b),
    "pow": _pow_grads,
    "rem": lambda a, b, out, g: (g, -(g * (a / b).floor())),
    "fmod": lambda a, b, out, g: (g, -(g * (a / b).trunc())),
}
