"""The Tensor's in-place methods, a base class of :class:`candle_api.Tensor`:
PyTorch's (``add_``, ``zero_``, ``copy_``, ``scatter_``..., ``x += y`` and
``x[...] = v``) and Candle's (``scatter_set``, ``slice_set``, ``zero_set``...).
Each returns the tensor itself; the rules they keep (read-only memory, leaves
that require grad, version counters, autograd) are in
:mod:`candle_api.ops.inplace`."""

from __future__ import annotations


def _ops():
    from .ops import inplace

    return inplace


def _op(name: str, x, compute, *operands):
    """compute(x, *operands) written into x (operands: the tensors or scalars it reads besides x)."""
    return _ops().apply_inplace(name, x, compute, *operands)


def _ew(name: str, x, op: str, compute, *operands):
    """The elementwise method ``x.op(*operands)`` written into x (compute: the same, out of place): its
    kernel writes straight into x's memory where it may."""
    return _ops().elementwise_(name, x, op, compute, *operands)


def _unary_(x, op: str):
    """``x.op_()`` for a unary op."""
    return _ew(op + "_", x, op, lambda t: getattr(t, op)())


def _clamp(t, lo, hi):
    return t.clamp(lo, hi)


class InPlaceMethods:
    __slots__ = ()

    # ---- arithmetic ---------------------------------------------------------------------------
    def add_(self, other, alpha=1):
        """self += other * alpha."""
        return _ew("add_", self, "add", lambda t, o: t + o, other if alpha == 1 else other * alpha)

    def sub_(self, other, alpha=1):
        return _ew("sub_", self, "sub", lambda t, o: t - o, other if alpha == 1 else other * alpha)

    def mul_(self, other):
        return _ew("mul_", self, "mul", lambda t, o: t * o, other)

    def div_(self, other):
        return _ew("div_", self, "div", lambda t, o: t / o, other)

    def floor_divide_(self, other):
        return _op("floor_divide_", self, lambda t, o: t // o, other)

    def pow_(self, exponent):
        return _ew("pow_", self, "pow", lambda t, e: t ** e, exponent)

    def neg_(self):
        return _ew("neg_", self, "neg", lambda t: -t)

    def abs_(self):
        return _ew("abs_", self, "abs", lambda t: abs(t))

    def clamp_(self, min=None, max=None):
        return _ew("clamp_", self, "clamp", _clamp, min, max)

    clip_ = clamp_

    def clamp_min_(self, min):
        return _ew("clamp_min_", self, "clamp", _clamp, min, None)

    def clamp_max_(self, max):
        return _ew("clamp_max_", self, "clamp", _clamp, None, max)

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def __ifloordiv__(self, other):
        return self.floor_divide_(other)

    def __iand__(self, other):
        return _op("&=", self, lambda t, o: t & o, other)

    def __ior__(self, other):
        return _op("|=", self, lambda t, o: t | o, other)

    def __ixor__(self, other):
        return _op("^=", self, lambda t, o: t ^ o, other)

    # ---- activations and maths ----------------------------------------------------------------------
    def relu_(self):
        return _unary_(self, "relu")

    def sigmoid_(self):
        return _unary_(self, "sigmoid")

    def tanh_(self):
        return _unary_(self, "tanh")

    def exp_(self):
        return _unary_(self, "exp")

    def log_(self):
        return _unary_(self, "log")

    def sqrt_(self):
        return _unary_(self, "sqrt")

    def round_(self):
        return _unary_(self, "round")

    def floor_(self):
        return _unary_(self, "floor")

    def ceil_(self):
        return _unary_(self, "ceil")

    # ---- writes -------------------------------------------------------------------------------------
    def zero_(self):
        return _ops().fill_(self, 0)

    def fill_(self, value):
        """Every element set to value (a scalar or a 0-d tensor)."""
        return _ops().fill_(self, value)

    def copy_(self, src):
        """src's values written in (broadcast to self's shape, converted to its dtype and device)."""
        return _ops().copy_(self, src)

    def uniform_(self, a: float = 0.0, b: float = 1.0):
        return _ops().random_(self, "uniform", a, b)

    def normal_(self, mean: float = 0.0, std: float = 1.0):
        return _ops().random_(self, "normal", mean, std)

    def masked_fill_(self, mask, value):
        return _op("masked_fill_", self, lambda t, v: t.masked_fill(mask, v), value)

    def scatter_(self, dim: int, index, src):
        """PyTorch's argument order: self[index[i][j]][j] = src[i][j] for dim 0
        (src a tensor or a scalar). Candle's order is :meth:`scatter_set`."""
        return _op("scatter_", self, lambda t, s: t.scatter(index, _source(t, index, s), dim), src)

    def scatter_add_(self, dim: int, index, src):
        return _op("scatter_add_", self, lambda t, s: t.scatter_add(index, s, dim), src)

    def index_add_(self, dim: int, index, source, alpha=1):
        return _op("index_add_", self, lambda t, s: t.index_add(index, s if alpha == 1 else s * alpha, dim), source)

    def __setitem__(self, index, value):
        """``x[index] = value``: basic indexing writes through the view; one bool/u8
        mask, or one list of indices along a dim, writes where it picks."""
        _ops().setitem(self, index, value)

    # ---- Candle's spellings -------------------------------------------------------------------------
    def scatter_set(self, indexes, source, dim: int):
        """Candle's in-place scatter: source written at indexes along dim."""
        return _op("scatter_set", self, lambda t, s: t.scatter(indexes, s, dim), source)

    def scatter_add_set(self, indexes, source, dim: int):
        return _op("scatter_add_set", self, lambda t, s: t.scatter_add(indexes, s, dim), source)

    def slice_set(self, src, dim: int, offset: int):
        """Candle's: src written over self.narrow(dim, offset, src.shape[dim])."""
        return _op("slice_set", self, lambda t, s: _ops().slice_assign(t, s, dim, offset), src)

    def const_set(self, value):
        return _ops().fill_(self, value)

    def zero_set(self):
        return _ops().fill_(self, 0)

    def one_set(self):
        return _ops().fill_(self, 1)


def _source(t, index, src):
    """scatter_'s src: a tensor as it is, a scalar as a tensor of index's shape in t's dtype."""
    from .tensor import Tensor

    if isinstance(src, Tensor):
        return src
    from .ops.creation import full

    return full(index.shape, src, dtype=t.dtype, device=t.device)
