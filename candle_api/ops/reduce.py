"""Reductions over one, several or all dims: sum, prod, max, min, argmax,
argmin (kernels), and mean, var, log_sum_exp (composed from them); cumsum."""

from __future__ import annotations

import math

from ..dtype import bf16, f16, f32, f64, i64, u32
from ..errors import DTypeError, ShapeError
from ..layout import normalize_dim
from ..tensor import Tensor
from .core import dims_arg, require_float
from .dispatch import OpDef, apply, apply_one, define
from .elementwise import cast


def _out_shape(shape: tuple, dims: tuple, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


_PLANS: dict = {}


def _plan(name: str, shape: tuple, dim, keepdim: bool) -> tuple:
    """(sorted dims, output shape) of reducing shape over dim (an int, a sequence
    or None), checked once and remembered: a model reduces the same few shapes
    again and again."""
    try:
        key = (name, shape, tuple(dim) if dim.__class__ is list else dim, keepdim)
        plan = _PLANS.get(key)
    except TypeError:  # an unhashable dim: dims_arg says what is wrong with it
        key, plan = None, None
    if plan is None:
        dims = dims_arg(name, dim, len(shape))
        out_shape = _out_shape(shape, dims, keepdim)
        # without an identity, an empty reduced dim has no answer
        if name not in ("sum", "prod") and any(shape[d] == 0 for d in dims):
            raise ShapeError(f"{name}: cannot reduce an empty dim (shape {shape}, dims {list(dims)})")
        plan = (dims, out_shape)
        if key is not None:
            if len(_PLANS) >= 4096:
                _PLANS.clear()
            _PLANS[key] = plan
    return plan


def _run(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    dims, shape = _plan(op, x._layout.shape, dim, keepdim)
    return apply_one(REDUCE[op], x, shape, u32 if op in ("argmax", "argmin") else x._dtype, dims,
                     params={"dims": dims, "keepdim": keepdim})


def _reduce_prepare(name: str, out_dtype):
    """prepare for a reduction; out_dtype None keeps x's dtype."""

    def prepare(x, dims, keepdim):
        lay = x._layout
        return _plan(name, lay.shape, dims, keepdim)[1], out_dtype or x._dtype, (x._storage, lay, dims)

    return prepare


def _reduce_backward(rule):
    def backward(inputs, out, g, dims, keepdim):
        x = inputs[0]
        keep = _out_shape(x.shape, dims, True)
        return (rule(x, out.reshape(keep), g.reshape(keep), dims),)

    return backward


def _extreme_grad(x, out, g, dims):
    """max/min: the gradient goes to the extreme elements, split evenly on ties."""
    hit = cast(x == out, x._dtype)
    return hit * (g / _run("sum", hit, dims, True))


def _prod_grad(x, out, g, dims):
    """d prod / d x_i = the product of the others: out / x_i without zeros; with
    one zero only that element gets the product of the rest; with more, none."""
    is_zero = x == 0
    zeros = _run("sum", cast(is_zero, x._dtype), dims, True)
    rest = _run("prod", is_zero.where_cond(1.0, x), dims, True)
    no_zero = (zeros == 0).where_cond(out / is_zero.where_cond(1.0, x), 0.0)
    one_zero = ((zeros == 1) * is_zero).where_cond(rest, 0.0)
    return g * (no_zero + one_zero)


_GRADS = {
    "sum": lambda x, out, g, dims: g.broadcast_as(x.shape),
    "max": _extreme_grad,
    "min": _extreme_grad,
    "prod": _prod_grad,
}


def reduce(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    """sum / prod / max / min over dim (int, list, or None for all); same dtype
    out, except that bool sums and products count in i64, as in PyTorch."""
    if x._dtype.is_bool and op in ("sum", "prod"):
        x = cast(x, i64)
    return _run(op, x, dim, keepdim)


def arg(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    """argmax / argmin: u32 index along dim, or into the flattened tensor when dim is None."""
    if dim is not None and not isinstance(dim, int):
        raise ShapeError(f"{op} takes a single dim, got {dim!r}")
    return _run(op, x, dim, keepdim)


def _count(x: Tensor, dims: tuple) -> int:
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


# Half floats overflow their own sums (f16 past 65504): their means and variances accumulate in f32,
# as NumPy's and PyTorch's do, and round once at the end.
_ACCUMULATE = {f16: f32, bf16: f32}


def mean(x: Tensor, dim, keepdim: bool) -> Tensor:
    """The mean; integer tensors are averaged exactly and truncated, as in Candle."""
    if x._dtype.is_bool:
        raise DTypeError("mean of a bool tensor: convert it first (x.to_dtype('f32').mean())")
    dims = dims_arg("mean", dim, x.rank)
    n = _count(x, dims)
    wider = f64 if x._dtype.is_int else _ACCUMULATE.get(x._dtype)
    if wider is not None:
        return cast(mean(cast(x, wider), dims, keepdim), x._dtype)
    total = _run("sum", x, dims, keepdim)
    return total.affine(1.0 / n if n else float("nan"), 0.0)


def var(x: Tensor, dim, keepdim: bool, unbiased: bool = True) -> Tensor:
    require_float("var", x)
    dims = dims_arg("var", dim, x.rank)
    if x._dtype in _ACCUMULATE:
        return cast(var(cast(x, _ACCUMULATE[x._dtype]), dims, keepdim, unbiased), x._dtype)
    n = _count(x, dims)
    centered = x - mean(x, dims, True)
    denom = n - 1 if unbiased else n
    return _run("sum", centered * centered, dims, keepdim).affine(
        1.0 / denom if denom > 0 else float("nan"), 0.0
    )


def std(x: Tensor, dim, keepdim: bool, unbiased: bool = True) -> Tensor:
    """The standard deviation; halves in f32 (their variance may overflow where the deviation does not)."""
    if x._dtype in _ACCUMULATE:
        return cast(std(cast(x, _ACCUMULATE[x._dtype]), dim, keepdim, unbiased), x._dtype)
    return var(x, dim, keepdim, unbiased).sqrt()


def log_sum_exp(x: Tensor, dim, keepdim: bool) -> Tensor:
    """log(sum(exp(x))) over dim, shifting by the max so large values do not overflow."""
    require_float("log_sum_exp", x)
    dims = dims_arg("log_sum_exp", dim, x.rank)
    if any(x.shape[d] == 0 for d in dims):  # the log of an empty sum, as NumPy and PyTorch give it
        from .creation import full

        return full(_out_shape(x.shape, dims, keepdim), -math.inf, dtype=x._dtype, device=x._device)
    m = _run("max", x, dims, True).detach()  # a shift: the result does not depend on it
    # Rows whose max is +-inf would give inf - inf = NaN: shift them by 0 instead.
    finite = (m - m) == 0
    m = finite.where_cond(m, 0.0)
    s = _run("sum", (x - m).exp(), dims, True).log() + m
    return s if keepdim else s.reshape(_out_shape(x.shape, dims, False))


def cumsum(x: Tensor, dim: int) -> Tensor:
    """Running sums along dim (bool counts in i64, as in PyTorch)."""
    if x._dtype.is_bool:
        x = cast(x, i64)
    if x.rank == 0:
        return x.copy()
    return apply(CUMSUM, x, dim=normalize_dim(dim, x.rank))


def _cumsum_prepare(x, dim):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay, dim)


def equal(a: Tensor, b) -> bool:
    """Same shape and every value equal (NaN is not equal to itself)."""
    if not isinstance(b, Tensor):
        raise TypeError(f"equal: expected a Tensor, got {type(b).__name__}")
    if a.shape != b.shape:
        return False
    if a._dtype is not b._dtype:
        raise DTypeError(f"equal: dtypes differ ({a._dtype}, {b._dtype})")
    if a._layout.numel == 0:
        return True
    return bool((a == b).min_all().item())


REDUCE = {name: define(OpDef(name, prepare=_reduce_prepare(name, None), backward=_reduce_backward(rule)))
          for name, rule in _GRADS.items()}
REDUCE.update({name: define(OpDef(name, prepare=_reduce_prepare(name, u32))) for name in ("argmax", "argmin")})
# the gradient is the reversed cumulative sum of g
CUMSUM = define(OpDef("cumsum", prepare=_cumsum_prepare,
                      backward=lambda inputs, out, g, dim: (cumsum(g.flip(dim), dim).flip(dim),)))
