"""Elementwise ops: unary, unary with parameters, binary with NumPy
broadcasting, comparisons (u8 results), where, casts and clamp.

bool tensors take comparisons, where (as condition and as values) and casts;
their kernels are u8's (the registry serves bool with them). A cast to bool is
a comparison with 0, so nonzero (and NaN) is True, as in PyTorch.

Binary ops need equal dtypes (Candle's rule; convert explicitly). A Python
scalar operand takes the tensor's dtype: +, - and * become one affine kernel,
other ops use a cached 0-d tensor broadcast with zero strides. A float scalar
that an integer dtype cannot hold exactly is an error, not a silent rounding.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..autograd.helpers import sum_to, where_or_zero
from ..dtype import bool_, f16, u8
from ..errors import DTypeError
from ..tensor import Tensor
from .core import broadcast_shape, check_tensor, has_kernel, reinterpret, same_device, same_dtype
from .creation import from_array
from .dispatch import OpDef, apply, apply_binary, apply_one, apply_unary, define

# ---- unary -------------------------------------------------------------------------------


def _unary_prepare(x):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay)


def unary(op: str, x: Tensor) -> Tensor:
    return apply_unary(UNARY[op], x)


def _param_prepare(x, p0, p1):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay, p0, p1)


def param(op: str, x: Tensor, p0: float, p1: float) -> Tensor:
    """Unary ops with two float parameters (affine, powf, elu, leaky_relu, clamp)."""
    return apply_one(PARAM[op], x, x._layout.shape, x._dtype, float(p0), float(p1))


def _clamp_decomposed(x: Tensor, p0: float, p1: float) -> Tensor:
    """clamp from maximum and minimum with scalars; an integer tensor takes the
    integer bounds inside [p0, p1], saturated into its dtype."""
    dtype, lo, hi = x._dtype, p0, p1
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        lo = min(max(math.ceil(p0), info.min), info.max) if p0 > info.min else None
        hi = min(max(math.floor(p1), info.min), info.max) if p1 < info.max else None
    out = x if lo is None or lo == -math.inf else binary("maximum", x, scalar(lo, dtype, x._device))
    out = out if hi is None or hi == math.inf else binary("minimum", out, scalar(hi, dtype, x._device))
    return out if out is not x else x.copy()


# Composite forms of the optional unary rows, for backends without a kernel for them.
DECOMPOSITIONS = {
    "sigmoid": lambda x: (unary("neg", x).exp() + 1.0).recip(),
    "silu": lambda x: x * unary("sigmoid", x),
    # as the kernels: x above 20, else log(1 + exp(x)) in a form that overflows in no dtype (maximum's
    # gradient splits the tie at 0, so the gradient there is sigmoid(0) = 1/2 as the kernel's)
    "softplus": lambda x: where(x > 20.0, x, binary("maximum", x, scalar(0, x._dtype, x._device))
                                + unary("neg", unary("abs", x)).exp().log1p()),
    "rsqrt": lambda x: x.sqrt().recip(),
    "sqr": lambda x: x * x,
    "relu": lambda x: binary("maximum", x, scalar(0, x._dtype, x._device)),
    "leaky_relu": lambda x, p0, p1: where(x > 0, x, x * p0),
    "clamp": _clamp_decomposed,
}

# ---- binary -------------------------------------------------------------------------------


def _binary_prepare(name: str, out_dtype=None):
    """prepare for a op b with NumPy broadcasting (same dtype and device); the
    result has a's dtype, or out_dtype (u8 for comparisons)."""

    def prepare(a, b):
        if b.__class__ is not Tensor:
            check_tensor(name, b, "right operand")
        dtype = a._dtype
        if b._dtype is not dtype:
            same_dtype(name, a, b)
        if b._device is not a._device:
            same_device(name, a, b)
        la, lb = a._layout, b._layout
        shape = la.shape
        if lb.shape != shape:
            shape = broadcast_shape(name, shape, lb.shape)
            if la.shape != shape:
                la = la.broadcast_as(shape)
            if lb.shape != shape:
                lb = lb.broadcast_as(shape)
        return shape, out_dtype or dtype, (a._storage, la, b._storage, lb)

    return prepare


def binary(op: str, a: Tensor, b: Tensor) -> Tensor:
    """a op b with NumPy broadcasting; dtypes and devices must match. The result
    has a's dtype (u8 for comparisons)."""
    return apply_binary(BINARY[op], a, b, u8 if op in COMPARE else None)


def _binary_backward(rule):
    def backward(inputs, out, g):
        a, b = inputs
        ga, gb = rule(a, b, out, g)
        return (sum_to(ga, a.shape) if a._node is not None else None,
                sum_to(gb, b.shape) if b._node is not None else None)

    return backward


_AFFINE_LIMIT = {f16: 65504.0}  # f16's largest finite value (bf16's exceeds 2**53)

_AFFINE = {  # scalar forms that are one affine kernel: (mul, add) from the scalar s
    ("add", False): lambda s: (1.0, s),
    ("add", True): lambda s: (1.0, s),
    ("sub", False): lambda s: (1.0, -s),
    ("sub", True): lambda s: (-1.0, s),
    ("mul", False): lambda s: (s, -0.0),  # x * s + -0.0 keeps the sign of a zero product; + 0.0 would not
    ("mul", True): lambda s: (s, -0.0),
}


def binary_any(op: str, x: Tensor, other, reflected: bool = False) -> Tensor:
    """x op other, other a Tensor or a Python/numpy scalar; ``reflected`` computes other op x."""
    if isinstance(other, Tensor):
        return binary(op, other, x) if reflected else binary(op, x, other)
    if not isinstance(other, numbers.Number):
        return NotImplemented
    kind, name, args = _scalar_call(op, x, other, reflected)
    return _RUN[kind](name, *args)


def _scalar_call(op: str, x: Tensor, other, reflected: bool) -> tuple:
    """(kind, kernel, arguments) computing x op other (other op x when reflected) for a scalar other: one
    affine kernel for +, - and *, the square root or powf for a float power, else the binary op with the
    scalar as a 0-d tensor."""
    if x._dtype.is_int:
        _check_int_scalar(other, x._dtype)
    affine = _AFFINE.get((op, reflected))
    # Doubles carry integers exactly up to 2**53, and the affine kernels compute in f32 at least: larger
    # scalars, and ones a half dtype rounds to infinity, take the tensor path (the scalar in the dtype).
    if (affine is not None and abs(other) < _AFFINE_LIMIT.get(x._dtype, 2**53)
            and has_kernel(x._device, "affine", x._dtype)):
        return ("param", "affine", (x, *affine(float(other))))
    if op == "pow" and not reflected and x._dtype.is_float:
        # x ** 0.5 is the square root, as NumPy and PyTorch take it (sqrt(-inf) is NaN where C's pow
        # gives +inf, and sqrt keeps the sign of -0.0)
        return ("unary", "sqrt", (x,)) if other == 0.5 else ("param", "powf", (x, float(other), 0.0))
    s = scalar(other, x._dtype, x._device)
    return ("binary", op, (s, x) if reflected else (x, s))


def kernel_call(op: str, x: Tensor, *operands):
    """The one kernel that computes the Tensor method ``x.op(*operands)`` (a
    unary op; a binary op with a tensor or a scalar, the scalar taken as
    :func:`binary_any` takes it; clamp with scalar bounds) as ``(OpDef,
    inputs, params)`` for :func:`~.dispatch.apply`, or None where the method
    takes more than one kernel. In-place ops run it into x's own memory."""
    if op in UNARY:
        return UNARY[op], (x,), {}
    if op == "clamp":
        lo, hi = operands
        if isinstance(lo, Tensor) or isinstance(hi, Tensor):
            return None
        p0, p1 = _clamp_bounds(x, lo, hi)
        return PARAM["clamp"], (x,), {"p0": float(p0), "p1": float(p1)}
    (other,) = operands
    if isinstance(other, Tensor):
        return BINARY[op], (x, other), {}
    if not isinstance(other, numbers.Number):
        return None
    kind, name, args = _scalar_call(op, x, other, False)
    if kind == "param":
        return PARAM[name], args[:1], {"p0": args[1], "p1": args[2]}
    return (UNARY if kind == "unary" else BINARY)[name], args, {}


def compare(op: str, x: Tensor, other) -> Tensor:
    """x op other as a u8 tensor of 0/1; other a Tensor or a scalar."""
    if isinstance(other, Tensor):
        return apply_binary(BINARY[op], x, other, u8)
    if not isinstance(other, numbers.Number):
        return NotImplemented
    return apply_binary(BINARY[op], x, scalar(other, x._dtype, x._device), u8)


def floor_divide(x: Tensor, other, reflected: bool = False) -> Tensor:
    """x // other (other // x when reflected), rounded toward -inf as Python's and
    PyTorch's //. Integers: the truncated quotient, less one where the remainder
    with the divisor's sign (%) differs from the one with the dividend's (fmod),
    i.e. where the signs differ; division by zero raises, as for /. Floats:
    NumPy's and Python's divmod rule, (x - x % y) / y rounded to the nearest
    integer it should be, and x / y where y is 0."""
    if not isinstance(other, Tensor):
        if not isinstance(other, numbers.Number):
            return NotImplemented
        other = scalar(other, x._dtype, x._device)
    a, b = (other, x) if reflected else (x, other)
    if a._dtype.is_int:
        return binary("div", a, b) - cast(binary("ne", binary("rem", a, b), binary("fmod", a, b)), a._dtype)
    div = (a - binary("rem", a, b)) / b
    q = div.floor()
    q = q + cast(div - q > 0.5, a._dtype)
    return where(b == 0, a / b, q)


_SCALARS: dict = {}


def scalar(value, dtype, device) -> Tensor:
    """A cached 0-d tensor holding value in dtype on device."""
    key = (device, dtype, type(value), value)
    t = _SCALARS.get(key)
    if t is not None:
        return t
    if dtype.is_int:
        _check_int_scalar(value, dtype)
    else:
        try:
            value = float(value)  # NumPy takes no Python int past 2**64 into a float dtype
        except OverflowError:
            raise DTypeError(f"the scalar {value} does not fit in {dtype}") from None
    with np.errstate(over="ignore"):  # a float too large for a half dtype is its infinity, as a cast makes it
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
    if cond._dtype is not u8 and cond._dtype is not bool_:  # the kernel reads the condition's bytes
        cond = compare("ne", cond, 0)
    return apply(WHERE, cond, on_true, on_false)


def _where_prepare(cond, on_true, on_false):
    dtype = same_dtype("where", on_true, on_false)
    same_device("where", cond, on_true, on_false)
    shape = broadcast_shape("where", cond.shape, on_true.shape, on_false.shape)
    return shape, dtype, (cond._storage, cond._layout.broadcast_as(shape), on_true._storage,
                          on_true._layout.broadcast_as(shape), on_false._storage, on_false._layout.broadcast_as(shape))


def _where_backward(inputs, out, g):
    cond, on_true, on_false = inputs
    return None, sum_to(where_or_zero(cond, g), on_true.shape), sum_to(where(cond, 0.0, g), on_false.shape)


def cast(x: Tensor, dtype) -> Tensor:
    """x converted to dtype. Floats saturate into integers and NaN becomes 0
    (Rust's `as`, which Candle inherits); integers wrap into narrower integers."""
    if dtype is x._dtype:
        return x
    if dtype is bool_:  # nonzero (NaN too) is True; backends never get bool as a cast's target
        return reinterpret(compare("ne", x, 0), bool_)
    if dtype in x._device.dtypes:
        return apply_one(CAST, x, x._layout.shape, dtype, dtype)
    x._device.check_dtype(dtype)


def _cast_prepare(x, dtype):
    lay = x._layout
    return lay.shape, dtype, (x._storage, lay, dtype)


def clamp(x: Tensor, lo=None, hi=None) -> Tensor:
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        out = x
        if lo is not None:
            out = binary_any("maximum", out, lo)
        if hi is not None:
            out = binary_any("minimum", out, hi)
        return out
    return param("clamp", x, *_clamp_bounds(x, lo, hi))


def _clamp_bounds(x: Tensor, lo, hi) -> tuple:
    """clamp's kernel parameters for scalar bounds (None: unbounded)."""
    if x._dtype.is_int:  # the scalar rule: a bound the dtype cannot hold exactly is an error, not a rounding
        for bound in (lo, hi):
            if bound is not None:
                _check_int_scalar(bound, x._dtype)
    return -math.inf if lo is None else lo, math.inf if hi is None else hi


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


# ---- the op definitions ------------------------------------------------------------------------
def _unary_backward(rule):
    return lambda inputs, out, g: (rule(inputs[0], out, g),)


def _param_backward(rule):
    return lambda inputs, out, g, p0, p1: (rule(inputs[0], out, g, p0, p1),)


UNARY = {name: define(OpDef(name, prepare=_unary_prepare, backward=_unary_backward(rule),
                            decompose=DECOMPOSITIONS.get(name)))
         for name, rule in UNARY_GRADS.items()}
PARAM = {name: define(OpDef(name, prepare=_param_prepare, backward=_param_backward(rule),
                            decompose=DECOMPOSITIONS.get(name), scalars=("p0", "p1")))
         for name, rule in PARAM_GRADS.items()}
BINARY = {name: define(OpDef(name, prepare=_binary_prepare(name), backward=_binary_backward(rule)))
          for name, rule in BINARY_GRADS.items()}
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
BINARY.update({name: define(OpDef(name, prepare=_binary_prepare(name, u8))) for name in COMPARE})
WHERE = define(OpDef("where", prepare=_where_prepare, backward=_where_backward, key=1))
CAST = define(OpDef("cast", prepare=_cast_prepare, backward=lambda inputs, out, g, dtype: (cast(g, inputs[0]._dtype),),
                    scalars=("dtype",)))
_RUN = {"param": param, "unary": unary, "binary": binary}  # _scalar_call's kinds
