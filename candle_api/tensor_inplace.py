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


class InPlaceMethods:
    __slots__ = ()

    # ---- arithmetic ---------------------------------------------------------------------------
    def add_(self, other, alpha=1):
        """self += other * alpha."""
        return _op("add_", self, lambda t, o: t + (o if alpha == 1 else o * alpha), other)

    def sub_(self, other, alpha=1):
        return _op("sub_", self, lambda t, o: t - (o if alpha == 1 else o * alpha), other)

    def mul_(self, other):
        return _op("mul_", self, lambda t, o: t * o, other)

    def div_(self, other):
        return _op("div_", self, lambda t, o: t / o, other)

    def floor_divide_(self, other):
        return _op("floor_divide_", self, lambda t, o: t // o, other)

    def pow_(self, exponent):
        return _op("pow_", self, lambda t, e: t ** e, exponent)

    def neg_(self):
        return _op("neg_", self, lambda t: -t)

    def abs_(self):
        return _op("abs_", self, lambda t: abs(t))

    def clamp_(self, min=None, max=None):
        return _op("clamp_", self, lambda t, lo, hi: t.clamp(lo, hi), min, max)

    clip_ = clamp_

    def clamp_min_(self, min):
        return _op("clamp_min_", self, lambda t, lo: t.clamp(lo, None), min)

    def clamp_max_(self, max):
        return _op("clamp_max_", self, lambda t, hi: t.clamp(None, hi), max)

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
        return _op("relu_", self, lambda t: t.relu())

    def sigmoid_(self):
        return _op("sigmoid_", self, lambda t: t.sigmoid())

    def tanh_(self):
        return _op("tanh_", self, lambda t: t.tanh())

    def exp_(self):
        return _op("exp_", self, lambda t: t.exp())

    def log_(self):
        return _op("log_", self, lambda t: t.log())

    def sqrt_(self):
        return _op("sqrt_", self, lambda t: t.sqrt())

    def round_(self):
        return _op("round_", self, lambda t: t.round())

    def floor_(self):
        return _op("floor_", self, lambda t: t.floor())

    def ceil_(self):
        return _op("ceil_", self, lambda t: t.ceil())

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
