"""Elementwise math, logic, comparisons, activations and matrix products."""

from __future__ import annotations

import math
from functools import reduce

import candle_api as c
from candle_api.ops import elementwise as ew
from candle_api.ops.logical import bit_and

from .helpers import bool_, const, floor_div, full, ints, scalar
from .ops_cast import wrap_int
from .packing import Panels, matmul_any, pack_matmul
from .registry import op

# ---- unary ------------------------------------------------------------------------------------
_UNARY = {
    "Abs": "abs", "Neg": "neg", "Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Sin": "sin", "Cos": "cos",
    "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Tanh": "tanh",
    "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Erf": "erf", "Sigmoid": "sigmoid", "Relu": "relu",
    "Ceil": "ceil", "Floor": "floor", "Round": "round", "Reciprocal": "recip", "Sign": "sign", "Softplus": "softplus",
}


def _unary(kernel_op: str):
    def run(node, x):
        return ew.unary(kernel_op, x)
    return run


for _name, _kernel in _UNARY.items():
    op(_name)(_unary(_kernel))


@op("Identity")
def identity(node, x):
    return x


@op("Not")
def not_(node, x):
    return x == 0


@op("IsNaN")
def isnan(node, x):
    return x != x


@op("IsInf")
def isinf(node, x):
    pos, neg = node.get("detect_positive", 1), node.get("detect_negative", 1)
    if pos and neg:
        return x.abs() == math.inf
    if pos or neg:
        return x == (math.inf if pos else -math.inf)
    return c.zeros(x.shape, dtype=c.u8, device=x.device)


# ---- binary -----------------------------------------------------------------------------------
def _binary(kernel_op: str):
    def run(node, a, b):
        return ew.binary(kernel_op, a, b)
    return run


for _name, _kernel in {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}.items():
    op(_name)(_binary(_kernel))

for _name, _kernel in {"Equal": "eq", "Greater": "gt", "Less": "lt", "GreaterOrEqual": "ge",
                       "LessOrEqual": "le"}.items():
    op(_name)(lambda node, a, b, k=_kernel: ew.binary(k, a, b))


@op("And")
def and_(node, a, b):
    return bool_(a) * bool_(b)


@op("Or")
def or_(node, a, b):
    return bool_(a).maximum(bool_(b))


@op("Xor")
def xor(node, a, b):
    return bool_(a) != bool_(b)


@op("Pow")
def pow_(node, x, y):
    if x.dtype.is_float:
        return ew.binary("pow", x, y.to_dtype(x.dtype))
    if y.dtype.is_float:  # an integer base with a float exponent: computed in float, truncated
        return ew.binary("pow", x.to_dtype(c.f64), y.to_dtype(c.f64)).to_dtype(x.dtype)
    return ew.binary("pow", x, y.to_dtype(x.dtype))


@op("Mod", since=10)
def mod(node, a, b):
    """fmod=0: the remainder takes the divisor's sign (numpy's mod); fmod=1: the dividend's (C's fmod)."""
    return ew.binary("fmod" if node.get("fmod", 0) else "rem", a, b)


def _variadic(kernel_op: str):
    def run(node, *xs):
        return reduce(lambda a, b: ew.binary(kernel_op, a, b), xs)
    return run


op("Sum")(_variadic("add"))
op("Max")(_variadic("maximum"))
op("Min")(_variadic("minimum"))


@op("Mean")
def mean(node, *xs):
    return _variadic("add")(node, *xs) / len(xs)


@op("Where")
def where(node, cond, x, y):
    return c.where(bool_(cond), x, y)


@op("Clip")
def clip_v6(node, x):
    return x.clamp(node.get("min", -math.inf), node.get("max", math.inf))


@op("Clip", since=11)
def clip(node, x, lo=None, hi=None):
    if x.dtype.is_float:  # one clamp kernel with the bounds read on the host, not two broadcast binaries
        low, high = -math.inf if lo is None else scalar(lo), math.inf if hi is None else scalar(hi)
        if not (math.isnan(low) or math.isnan(high)):
            return x.clamp(min(low, high), high)  # min(max(x, low), high): high wins when low > high
    if lo is not None:
        x = x.maximum(lo.to_dtype(x.dtype).reshape(()))
    if hi is not None:
        x = x.minimum(hi.to_dtype(x.dtype).reshape(()))
    return x


# ---- bitwise (candle_api's bit_and sums bit planes: there are no bit kernels) -----------------
def _bits(node, x) -> int:
    return node.in_type(0, x).np.itemsize * 8


@op("BitwiseAnd", since=18)
def bitwise_and(node, a, b):
    return bit_and(a, b, _bits(node, a))


@op("BitwiseOr", since=18)
def bitwise_or(node, a, b):
    return a + b - bit_and(a, b, _bits(node, a))


@op("BitwiseXor", since=18)
def bitwise_xor(node, a, b):
    return a + b - bit_and(a, b, _bits(node, a)) * 2


@op("BitwiseNot", since=18)
def bitwise_not(node, x):
    t = node.in_type(0, x)
    if t.np.kind == "u":  # all ones minus x
        return const(t.int_range[1], x.dtype, x.device) - x
    return -x - 1


@op("BitShift", since=11)
def bit_shift(node, x, y):
    """Shifts as multiplications or floor divisions by 2**y; shifts outside
    [0, width) give 0 (-1 for negative values shifted right)."""
    t = node.in_type(0, x)
    width = t.np.itemsize * 8
    y = y.to_dtype(x.dtype)
    valid = (y >= 0) * (y < width)
    power = ew.binary("pow", const(2, x.dtype, x.device), c.where(valid, y, 0))
    if node["direction"] == "RIGHT":
        return c.where(valid, floor_div(x, power), -(x < 0).to_dtype(x.dtype) if x.dtype.is_signed else 0)
    return c.where(valid, wrap_int(x * power, t), 0)


# ---- activations ------------------------------------------------------------------------------
@op("LeakyRelu")
def leaky_relu(node, x):
    return ew.param("leaky_relu", x, node.get("alpha", 0.01), 0.0)


@op("Elu")
def elu(node, x):
    return x.elu(node.get("alpha", 1.0))


@op("Selu")
def selu(node, x):
    return x.elu(node["alpha"]) * node["gamma"]


@op("Celu", since=12)
def celu(node, x):
    alpha = node.get("alpha", 1.0)
    return (x / alpha).elu(1.0) * alpha


@op("HardSigmoid")
def hard_sigmoid(node, x):
    return x.affine(node.get("alpha", 0.2), node.get("beta", 0.5)).clamp(0.0, 1.0)


@op("HardSwish", since=14)
def hard_swish(node, x):
    return x * x.affine(1.0 / 6.0, 0.5).clamp(0.0, 1.0)


@op("Softsign")
def softsign(node, x):
    return x / (x.abs() + 1.0)


@op("ThresholdedRelu", since=10)
def thresholded_relu(node, x):
    return c.where(x > node.get("alpha", 1.0), x, 0.0)


@op("Shrink", since=9)
def shrink(node, x):
    lambd, bias = node.get("lambd", 0.5), node.get("bias", 0.0)
    if x.dtype.is_int:
        lambd, bias = int(lambd), int(bias)
    return c.where(x < -lambd, x + bias, c.where(x > lambd, x - bias, 0))


@op("PRelu")
def prelu(node, x, slope):
    return c.where(x < 0, x * slope, x)


@op("Mish", since=18)
def mish(node, x):
    return x * x.softplus().tanh()


@op("Gelu", since=20)
def gelu(node, x):
    return x.gelu() if node.get("approximate", "none") == "tanh" else x.gelu_erf()


@op("Swish", since=24)
def swish(node, x):
    alpha = node.get("alpha", 1.0)
    return x * (x * alpha).sigmoid() if alpha != 1.0 else x.silu()


# ---- matrix products --------------------------------------------------------------------------
@op("MatMul", pack=pack_matmul)
def matmul(node, a, b):
    return matmul_any(node, a, b) if isinstance(b, Panels) else a @ b


@op("Gemm")
def gemm(node, a, b, bias=None):
    if node.get("transA", 0):
        a = a.t()
    if node.get("transB", 0):
        b = b.t()
    y = a @ b
    alpha, beta = node.get("alpha", 1.0), node.get("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if bias is not None and beta != 0.0:
        y = y + (bias * beta if beta != 1.0 else bias)
    return y


@op("Det", since=11)
def det(node, x):
    """LU elimination with partial pivoting, batched over leading dims."""
    n = x.shape[-1]
    batch = x.shape[:-2]
    a = x.reshape(-1, n, n)
    sign = full((a.shape[0],), 1.0, a.dtype, a.device)
    result = full((a.shape[0],), 1.0, a.dtype, a.device)
    for k in range(n):
        col = a[:, k:, k]
        p = col.abs().argmax(1).to_dtype(c.i64) + k                      # pivot row per matrix
        rows = c.arange(0, n, dtype=c.i64, device=x.device).unsqueeze(0)
        swap = c.where(rows == k, p.unsqueeze(1), c.where(rows == p.unsqueeze(1), k, rows))
        a = a.gather(swap.unsqueeze(2).broadcast_as(a.shape).contiguous(), 1)
        sign = c.where(p == k, sign, -sign)
        pivot = a[:, k, k]
        result = result * pivot
        if k + 1 < n:
            factors = a[:, k + 1:, k] / pivot.unsqueeze(1)
            below = a[:, k + 1:, :] - factors.unsqueeze(2) * a[:, k:k + 1, :]
            a = c.cat([a[:, :k + 1, :], below], 1)
    return (result * sign).reshape(batch)


@op("CumSum", since=11)
def cumsum(node, x, axis):
    a = ints(axis)[0]
    if node.get("reverse", 0):
        x = x.flip(a)
    y = x.cumsum(a)
    if node.get("exclusive", 0):
        y = y - x
    return y.flip(a) if node.get("reverse", 0) else y


@op("CumProd", since=26)
def cumprod(node, x, axis):
    """A log-step scan: each pass multiplies by the value 2**k places back."""
    a = ints(axis)[0] % max(x.rank, 1)
    if node.get("reverse", 0):
        x = x.flip(a)
    n = x.shape[a]
    if node.get("exclusive", 0):
        x = c.cat([full(_with(x.shape, a, 1), 1, x.dtype, x.device), x.narrow(a, 0, max(n - 1, 0))], a) \
            if n else x
    y, k = x, 1
    while k < n:
        ones = full(_with(x.shape, a, k), 1, x.dtype, x.device)
        y = y * c.cat([ones, y.narrow(a, 0, n - k)], a)
        k *= 2
    return y.flip(a) if node.get("reverse", 0) else y


def _with(shape, a, n):
    return shape[:a] + (n,) + shape[a + 1:]


@op("Einsum", since=12)
def einsum(node, *xs):
    from .einsum import einsum as run

    return run(node["equation"], xs)

