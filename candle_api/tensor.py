"""The Tensor: a storage owned by a backend, a layout, a dtype and a device.

Method names and semantics follow candle-pyo3 (the ``candle`` Python package)
so its code runs after changing the import; PyTorch spellings are accepted
where they do not conflict (where they do, Candle's meaning wins and the
docstring says so). The work happens in ``candle_api.ops``.
"""

from __future__ import annotations

import collections
import numbers

import numpy as np

from . import autograd
from .dtype import DType, get_dtype
from .errors import DTypeError, ShapeError
from .tensor_inplace import InPlaceMethods
from .tensor_logic import LogicalMethods


class _Strides(tuple):
    """A tuple that can also be called: ``t.stride`` (candle-pyo3) and
    ``t.stride()`` / ``t.stride(dim)`` (PyTorch) both work."""

    def __call__(self, dim=None):
        return self if dim is None else self[dim]


class _Count(int):
    """An int that can also be called: ``t.nelement`` and ``t.nelement()``."""

    def __call__(self):
        return int(self)


def _shape_args(shape) -> tuple:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all mean shape (2, 3)."""
    if len(shape) == 1 and not isinstance(shape[0], int) and hasattr(shape[0], "__iter__"):
        return tuple(shape[0])
    return tuple(shape)


class Tensor(LogicalMethods, InPlaceMethods):
    """An n-dimensional array on a device.

    ``Tensor(data)`` builds one from a Python scalar, nested lists or a numpy
    array (copied; see :func:`candle_api.from_numpy` to share memory). Python
    floats become f32; Python ints become u32 when they all fit, else i64, as in
    candle-pyo3; Python bools become bool; numpy arrays keep their dtype.
    """

    __slots__ = ("_storage", "_layout", "_dtype", "_device", "_node", "__weakref__")

    def __init__(self, data, dtype=None, device=None):
        src = ops.creation.tensor(data, dtype=dtype, device=device)
        self._storage, self._layout, self._dtype, self._device = src._storage, src._layout, src._dtype, src._device
        self._node = None

    # ---- metadata ----------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._layout.shape

    @property
    def dims(self) -> tuple:
        return self._layout.shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self):
        return self._device

    @property
    def rank(self) -> int:
        return len(self._layout.shape)

    @property
    def ndim(self) -> int:
        return len(self._layout.shape)

    @property
    def stride(self) -> _Strides:
        """Strides in elements (a tuple you may also call, as in PyTorch)."""
        return _Strides(self._layout.strides)

    @property
    def nelement(self) -> _Count:
        """Number of elements (also callable, as in PyTorch)."""
        return _Count(self._layout.numel)

    def numel(self) -> int:
        return self._layout.numel

    def elem_count(self) -> int:
        return self._layout.numel

    def size(self, dim=None):
        """The shape, or one dim of it (PyTorch)."""
        return self._layout.shape if dim is None else self._layout.shape[dim]

    def dim(self, dim=None):
        """With no argument the rank (PyTorch); with one, that dim's size (Candle)."""
        return len(self._layout.shape) if dim is None else self._layout.shape[dim]

    def is_contiguous(self) -> bool:
        return self._layout.contiguous

    def is_fortran_contiguous(self) -> bool:
        return self._layout.fortran_contiguous

    @property
    def layout(self):
        return self._layout

    def __len__(self) -> int:
        if not self._layout.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._layout.shape[0]

    def __hash__(self) -> int:  # identity, as in candle-pyo3; __eq__ is elementwise
        return id(self)

    # ---- host conversion ---------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a numpy array (a read-only view of cpu memory, a copy otherwise)."""
        if ops.dispatch.observer is not None:
            ops.dispatch.observer.read(self)
        if self._dtype.is_bool:  # backends see bool as u8 (the same bytes)
            return self._device.backend.to_numpy(self._storage, self._layout, _u8).view(np.bool_)
        return self._device.backend.to_numpy(self._storage, self._layout, self._dtype)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if dtype is not None:
            arr = arr.astype(dtype)
        elif copy:
            arr = arr.copy()
        return arr

    def values(self):
        """The values as a Python scalar (0-d) or nested lists; f16/bf16 become floats."""
        arr = self.numpy()
        if self._dtype.is_float and self._dtype.itemsize == 2:
            arr = arr.astype(np.float32)
        return arr.tolist()

    tolist = values

    def item(self):
        if self._layout.numel != 1:
            raise ShapeError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.flatten_all().values()[0]

    to_scalar = item

    def to_vec(self):
        return self.flatten_all().values()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self._dtype.is_int:
            raise TypeError(f"only integer tensors can be used as an index, got {self._dtype}")
        return int(self.item())

    def __bool__(self) -> bool:
        if self._layout.numel != 1:
            raise ValueError(
                f"the truth value of a tensor with {self._layout.numel} elements is ambiguous; "
                "use .equal() or reduce it first"
            )
        return bool(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return dlpack.to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.device_of(self)

    def __repr__(self) -> str:
        return ops.formatting.tensor_repr(self)

    __str__ = __repr__

    # ---- conversion ------------------------------------------------------------------
    def to_dtype(self, dtype) -> "Tensor":
        return _ew.cast(self, dtype if dtype.__class__ is DType else get_dtype(dtype))

    def to_device(self, device) -> "Tensor":
        return ops.creation.to_device(self, device)

    def quantize(self, ggml_dtype: str):
        """This tensor as a GGML-quantized ``QTensor`` (``"q4_0"``, ``"q8_0"``, ``"q4k"``...)."""
        from .quantized import QTensor

        return QTensor.quantize(self, ggml_dtype)

    def to(self, *args, **kwargs) -> "Tensor":
        """``to(dtype)``, ``to(device)``, ``to(other_tensor)`` or keywords ``dtype=``, ``device=``."""
        return ops.creation.to(self, *args, **kwargs)

    def float(self):
        return self.to_dtype("f32")

    def double(self):
        return self.to_dtype("f64")

    def half(self):
        return self.to_dtype("f16")

    def bfloat16(self):
        return self.to_dtype("bf16")

    def long(self):
        return self.to_dtype("i64")

    def int(self):
        return self.to_dtype("i32")

    def bool(self):
        """A bool tensor, True where self is nonzero (NaN included), as in PyTorch."""
        return self.to_dtype("bool")

    def type_as(self, other) -> "Tensor":
        """Self in other's dtype, on other's device (PyTorch's tensor type is both)."""
        return ops.creation.to(self, other)

    def cpu(self) -> "Tensor":
        return ops.creation.to_device(self, "cpu")

    def cuda(self, device=None) -> "Tensor":
        """Self on a cuda device: ``cuda()`` is cuda:0, ``cuda(1)`` cuda:1, or a device name."""
        return ops.creation.to_device(self, f"cuda:{device or 0}" if device is None or isinstance(device, int)
                                      else device)

    def _made_like(self, dtype, device) -> dict:
        """The dtype and device keywords of new_*: self's unless given."""
        return {"dtype": self._dtype if dtype is None else dtype, "device": self._device if device is None else device}

    def new_zeros(self, *size, dtype=None, device=None) -> "Tensor":
        """Zeros of size, in self's dtype and on its device unless given (as new_ones, new_full, new_tensor)."""
        return ops.creation.zeros(_shape_args(size), **self._made_like(dtype, device))

    def new_ones(self, *size, dtype=None, device=None) -> "Tensor":
        return ops.creation.ones(_shape_args(size), **self._made_like(dtype, device))

    def new_full(self, size, fill_value, dtype=None, device=None) -> "Tensor":
        return ops.creation.full(size, fill_value, **self._made_like(dtype, device))

    def new_tensor(self, data, dtype=None, device=None) -> "Tensor":
        return ops.creation.tensor(data, **self._made_like(dtype, device))

    def contiguous(self) -> "Tensor":
        """Itself when contiguous, else a contiguous copy."""
        return ops.shape.contiguous(self)

    def copy(self) -> "Tensor":
        """A new tensor with its own storage."""
        return ops.shape.copy(self)

    clone = copy

    def detach(self) -> "Tensor":
        """The same data, cut from the autograd graph."""
        return ops.core.view(self, self._layout)

    # ---- autograd ------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """True when gradients flow to or through this tensor."""
        return self._node is not None

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Makes this tensor a leaf whose gradient is kept in ``.grad`` (or,
        with False, cuts it from the graph). Returns self, as in PyTorch."""
        if requires_grad:
            if not self._dtype.is_float:
                raise DTypeError(f"only float tensors can require gradients, not {self._dtype}")
            if not isinstance(self._node, autograd.Leaf):
                self._node = autograd.Leaf()
        else:
            self._node = None
        return self

    @property
    def is_leaf(self) -> bool:
        return not isinstance(self._node, autograd.Node)

    @property
    def grad(self):
        """The gradient accumulated by backward passes (leaves only, else None)."""
        node = self._node
        return node.grad if isinstance(node, autograd.Leaf) else None

    @grad.setter
    def grad(self, value) -> None:
        if not isinstance(self._node, autograd.Leaf):
            raise ValueError("only a leaf that requires gradients has a .grad (see requires_grad_())")
        if value is not None and (value.shape != self.shape or value.dtype is not self.dtype):
            raise ShapeError(f"a gradient of shape {value.shape} and dtype {value.dtype} for a tensor of "
                             f"shape {self.shape} and dtype {self.dtype}")
        self._node.grad = value

    def backward(self, gradient=None):
        """Back-propagates from this tensor: every leaf it depends on gets its
        gradient added to ``.grad``; returns the gradients as a GradStore (Candle)."""
        return autograd.backward(self, gradient)

    # ---- views -------------------------------------------------------------------------
    def reshape(self, *shape) -> "Tensor":
        """A tensor of the given shape (one dim may be -1). A view when the
        layout allows, else a copy, as in PyTorch."""
        return ops.shape.reshape(self, _shape_args(shape))

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        return ops.shape.flatten(self, start_dim, end_dim)

    def flatten_all(self) -> "Tensor":
        return ops.shape.flatten(self, 0, -1)

    def flatten_from(self, dim: int) -> "Tensor":
        return ops.shape.flatten(self, dim, -1)

    def flatten_to(self, dim: int) -> "Tensor":
        return ops.shape.flatten(self, 0, dim)

    def squeeze(self, dim=None) -> "Tensor":
        """Removes dim if its size is 1 (all size-1 dims when dim is None)."""
        return ops.shape.squeeze(self, dim)

    def unsqueeze(self, dim: int) -> "Tensor":
        return ops.shape.unsqueeze(self, dim)

    def t(self) -> "Tensor":
        """Swaps the last two dims."""
        return ops.shape.t(self)

    @property
    def mT(self) -> "Tensor":
        """The last two dims swapped (a batch of transposed matrices)."""
        return ops.shape.t(self)

    @property
    def T(self) -> "Tensor":
        """All dims reversed, as numpy's ``.T``."""
        return ops.shape.permute(self, tuple(range(self.rank - 1, -1, -1)))

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        return ops.shape.transpose(self, dim0, dim1)

    def permute(self, *dims) -> "Tensor":
        return ops.shape.permute(self, _shape_args(dims))

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        return ops.shape.narrow(self, dim, start, length)

    def chunk(self, chunks: int, dim: int = 0) -> list:
        return ops.shape.chunk(self, chunks, dim)

    def split(self, split_size, dim: int = 0) -> list:
        return ops.shape.split(self, split_size, dim)

    def broadcast_as(self, *shape) -> "Tensor":
        return ops.shape.broadcast_as(self, _shape_args(shape))

    def broadcast_left(self, *shape) -> "Tensor":
        """Adds the given dims on the left: shape becomes ``shape + self.shape``."""
        return ops.shape.broadcast_as(self, _shape_args(shape) + self.shape)

    def expand(self, *shape) -> "Tensor":
        """broadcast_as where -1 keeps a dim, as in PyTorch."""
        return ops.shape.expand(self, _shape_args(shape))

    def get(self, index: int) -> "Tensor":
        """The sub-tensor at ``index`` of dim 0."""
        return self[index]

    def get_on_dim(self, dim: int, index: int) -> "Tensor":
        return ops.shape.select(self, dim, index)

    def __getitem__(self, index) -> "Tensor":
        return _getitem(self, index)

    def pad_with_zeros(self, dim: int, left: int, right: int) -> "Tensor":
        return ops.shape.pad_with_zeros(self, dim, left, right)

    def repeat(self, *repeats) -> "Tensor":
        """Tiles the tensor: ``repeat(2, 3)`` doubles dim -2 and triples dim -1."""
        return ops.shape.repeat(self, _shape_args(repeats))

    def flip(self, dims) -> "Tensor":
        return ops.shape.flip(self, dims)

    def roll(self, shifts, dims=None) -> "Tensor":
        return ops.shape.roll(self, shifts, dims)

    def unbind(self, dim: int = 0) -> tuple:
        return ops.shape.unbind(self, dim)

    def tril(self, diagonal: int = 0) -> "Tensor":
        return ops.masking.tril(self, diagonal)

    def triu(self, diagonal: int = 0) -> "Tensor":
        return ops.masking.triu(self, diagonal)

    def masked_fill(self, mask, value) -> "Tensor":
        """value where mask (u8, broadcast to self's shape) is nonzero."""
        return ops.masking.masked_fill(self, mask, value)

    def masked_select(self, mask) -> "Tensor":
        """The elements where mask is nonzero, as a 1-d tensor."""
        return ops.masking.masked_select(self, mask)

    def nonzero(self, as_tuple: bool = False):
        """u32 coordinates of the nonzero elements: (count, rank), or one tensor per dim."""
        return ops.masking.nonzero(self, as_tuple)

    def equal(self, other) -> bool:
        """True when shapes and all values are equal (Candle/PyTorch ``equal``)."""
        return ops.reduce.equal(self, other)

    # ---- elementwise -------------------------------------------------------------------
    def affine(self, mul: float, add: float) -> "Tensor":
        """``self * mul + add``."""
        return ops.elementwise.param("affine", self, mul, add)

    def powf(self, exponent: float) -> "Tensor":
        return ops.elementwise.param("powf", self, exponent, 0.0)

    def elu(self, alpha: float = 1.0) -> "Tensor":
        return ops.elementwise.param("elu", self, alpha, 0.0)

    def clamp(self, min=None, max=None) -> "Tensor":
        """Limits values to [min, max]; bounds are scalars or tensors (broadcast)."""
        return ops.elementwise.clamp(self, min, max)

    clip = clamp

    def maximum(self, other) -> "Tensor":
        return ops.elementwise.binary_any("maximum", self, other)

    def minimum(self, other) -> "Tensor":
        return ops.elementwise.binary_any("minimum", self, other)

    def pow(self, other) -> "Tensor":
        """Elementwise power (tensor or scalar exponent)."""
        return ops.elementwise.binary_any("pow", self, other)

    def add(self, other) -> "Tensor":
        return ops.elementwise.binary_any("add", self, other)

    def sub(self, other) -> "Tensor":
        return ops.elementwise.binary_any("sub", self, other)

    def mul(self, other) -> "Tensor":
        return ops.elementwise.binary_any("mul", self, other)

    def div(self, other) -> "Tensor":
        return ops.elementwise.binary_any("div", self, other)

    def broadcast_add(self, rhs) -> "Tensor":
        return ops.elementwise.binary("add", self, rhs)

    def broadcast_sub(self, rhs) -> "Tensor":
        return ops.elementwise.binary("sub", self, rhs)

    def broadcast_mul(self, rhs) -> "Tensor":
        return ops.elementwise.binary("mul", self, rhs)

    def broadcast_div(self, rhs) -> "Tensor":
        return ops.elementwise.binary("div", self, rhs)

    def broadcast_maximum(self, rhs) -> "Tensor":
        return ops.elementwise.binary("maximum", self, rhs)

    def broadcast_minimum(self, rhs) -> "Tensor":
        return ops.elementwise.binary("minimum", self, rhs)

    def broadcast_pow(self, rhs) -> "Tensor":
        return ops.elementwise.binary("pow", self, rhs)

    def __add__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["add"], self, other)
        return _ew.binary_any("add", self, other)

    def __radd__(self, other):
        return ops.elementwise.binary_any("add", self, other)

    def __sub__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["sub"], self, other)
        return _ew.binary_any("sub", self, other)

    def __rsub__(self, other):
        return ops.elementwise.binary_any("sub", self, other, reflected=True)

    def __mul__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["mul"], self, other)
        return _ew.binary_any("mul", self, other)

    def __rmul__(self, other):
        return ops.elementwise.binary_any("mul", self, other)

    def __truediv__(self, other):
        """Division keeping the dtype; integer division truncates, as in Candle."""
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["div"], self, other)
        return _ew.binary_any("div", self, other)

    def __rtruediv__(self, other):
        return ops.elementwise.binary_any("div", self, other, reflected=True)

    def __floordiv__(self, other):
        """Division rounded toward -inf (Python's and PyTorch's //)."""
        return ops.elementwise.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return ops.elementwise.floor_divide(self, other, reflected=True)

    def floor_divide(self, other) -> "Tensor":
        return ops.elementwise.floor_divide(self, other)

    def __mod__(self, other):
        """Remainder with the sign of the divisor (Python's and PyTorch's)."""
        return ops.elementwise.binary_any("rem", self, other)

    def remainder(self, other) -> "Tensor":
        """Remainder with the sign of the divisor (``%``)."""
        return ops.elementwise.binary_any("rem", self, other)

    def fmod(self, other) -> "Tensor":
        """Remainder with the sign of the dividend (C's fmod)."""
        return ops.elementwise.binary_any("fmod", self, other)

    def __pow__(self, other):
        return ops.elementwise.binary_any("pow", self, other)

    def __rpow__(self, other):
        return ops.elementwise.binary_any("pow", self, other, reflected=True)

    def __neg__(self):
        return ops.elementwise.unary("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return ops.elementwise.unary("abs", self)

    def __matmul__(self, other):
        return _matmul(self, other)

    def __rmatmul__(self, other):
        return ops.linalg.matmul(other, self)

    # comparisons return u8 tensors, as in Candle
    def __eq__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["eq"], self, other, _u8)
        return _ew.compare("eq", self, other)

    def __ne__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["ne"], self, other, _u8)
        return _ew.compare("ne", self, other)

    def __lt__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["lt"], self, other, _u8)
        return _ew.compare("lt", self, other)

    def __le__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["le"], self, other, _u8)
        return _ew.compare("le", self, other)

    def __gt__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["gt"], self, other, _u8)
        return _ew.compare("gt", self, other)

    def __ge__(self, other):
        if other.__class__ is Tensor:
            return _apply_binary(_ew.BINARY["ge"], self, other, _u8)
        return _ew.compare("ge", self, other)

    def eq(self, other):
        return ops.elementwise.compare("eq", self, other)

    def ne(self, other):
        return ops.elementwise.compare("ne", self, other)

    def lt(self, other):
        return ops.elementwise.compare("lt", self, other)

    def le(self, other):
        return ops.elementwise.compare("le", self, other)

    def gt(self, other):
        return ops.elementwise.compare("gt", self, other)

    def ge(self, other):
        return ops.elementwise.compare("ge", self, other)

    broadcast_eq, broadcast_ne, broadcast_lt = eq, ne, lt
    broadcast_le, broadcast_gt, broadcast_ge = le, gt, ge

    def isnan(self) -> "Tensor":
        return ops.predicates.isnan(self)

    def isinf(self) -> "Tensor":
        return ops.predicates.isinf(self)

    def isfinite(self) -> "Tensor":
        return ops.predicates.isfinite(self)

    def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> "Tensor":
        """u8: 1 where |self - other| <= atol + rtol * |other| (PyTorch's isclose)."""
        return ops.predicates.isclose(self, other, rtol, atol, equal_nan)

    def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
        return ops.predicates.allclose(self, other, rtol, atol, equal_nan)

    def where_cond(self, on_true, on_false) -> "Tensor":
        """``on_true`` where self is nonzero, else ``on_false`` (broadcasting)."""
        return ops.elementwise.where(self, on_true, on_false)

    # ---- reductions ---------------------------------------------------------------------
    def any(self, dim=None, keepdim: bool = False) -> "Tensor":
        """u8: whether some element along dim (all dims when None) is nonzero."""
        return ops.predicates.any_(self, dim, keepdim)

    def all(self, dim=None, keepdim: bool = False) -> "Tensor":
        """u8: whether every element along dim (all dims when None) is nonzero."""
        return ops.predicates.all_(self, dim, keepdim)

    def sum(self, dim=None, keepdim: bool = False) -> "Tensor":
        """Sum over ``dim`` (an int, a list of ints, or None for all dims)."""
        return ops.reduce.reduce("sum", self, dim, keepdim)

    def sum_keepdim(self, dim) -> "Tensor":
        return ops.reduce.reduce("sum", self, dim, True)

    def sum_all(self) -> "Tensor":
        return ops.reduce.reduce("sum", self, None, False)

    def prod(self, dim=None, keepdim: bool = False) -> "Tensor":
        return ops.reduce.reduce("prod", self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False) -> "Tensor":
        return ops.reduce.mean(self, dim, keepdim)

    def mean_keepdim(self, dim) -> "Tensor":
        return ops.reduce.mean(self, dim, True)

    def mean_all(self) -> "Tensor":
        return ops.reduce.mean(self, None, False)

    def max(self, dim=None, keepdim: bool = False):
        """As PyTorch: with no dim, the maximum of all elements; with an int dim,
        ``(values, indices)`` along it (indices u32, of the first maximum). Over
        several dims at once, use :meth:`amax`."""
        return _extreme("max", self, dim, keepdim)

    def amax(self, dim=None, keepdim: bool = False) -> "Tensor":
        """The maximum over ``dim``: an int, several dims, or all of them (None); values only."""
        return ops.reduce.reduce("max", self, dim, keepdim)

    def max_keepdim(self, dim) -> "Tensor":
        return ops.reduce.reduce("max", self, dim, True)

    def max_all(self) -> "Tensor":
        return ops.reduce.reduce("max", self, None, False)

    def min(self, dim=None, keepdim: bool = False):
        """As :meth:`max`, for the minimum (:meth:`amin` over several dims)."""
        return _extreme("min", self, dim, keepdim)

    def amin(self, dim=None, keepdim: bool = False) -> "Tensor":
        """The minimum over ``dim``: an int, several dims, or all of them (None); values only."""
        return ops.reduce.reduce("min", self, dim, keepdim)

    def min_keepdim(self, dim) -> "Tensor":
        return ops.reduce.reduce("min", self, dim, True)

    def min_all(self) -> "Tensor":
        return ops.reduce.reduce("min", self, None, False)

    def argmax(self, dim=None, keepdim: bool = False) -> "Tensor":
        """u32 index of the first maximum along ``dim`` (of the flattened tensor when None)."""
        return ops.reduce.arg("argmax", self, dim, keepdim)

    def argmax_keepdim(self, dim) -> "Tensor":
        return ops.reduce.arg("argmax", self, dim, True)

    def argmin(self, dim=None, keepdim: bool = False) -> "Tensor":
        return ops.reduce.arg("argmin", self, dim, keepdim)

    def argmin_keepdim(self, dim) -> "Tensor":
        return ops.reduce.arg("argmin", self, dim, True)

    def var(self, dim=None, keepdim: bool = False, unbiased: bool = True) -> "Tensor":
        """Variance over ``dim``, unbiased (n - 1) by default as in Candle and PyTorch."""
        return ops.reduce.var(self, dim, keepdim, unbiased)

    def var_keepdim(self, dim) -> "Tensor":
        return ops.reduce.var(self, dim, True, True)

    def std(self, dim=None, keepdim: bool = False, unbiased: bool = True) -> "Tensor":
        return ops.reduce.std(self, dim, keepdim, unbiased)

    def log_sum_exp(self, dim) -> "Tensor":
        """``log(sum(exp(x)))`` over ``dim``, computed stably."""
        return ops.reduce.log_sum_exp(self, dim, False)

    def logsumexp(self, dim, keepdim: bool = False) -> "Tensor":
        return ops.reduce.log_sum_exp(self, dim, keepdim)

    def cumsum(self, dim: int) -> "Tensor":
        return ops.reduce.cumsum(self, dim)

    def norm(self, p=2, dim=None, keepdim: bool = False) -> "Tensor":
        """The vector p-norm over dim (all elements when None): p a number >= 0,
        inf, -inf or 'fro'."""
        return ops.linalg.norm(self, p, dim, keepdim)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """(values, u32 indices) sorted along dim; ties keep their order (always stable)."""
        return ops.sorting.sort(self, dim, descending, stable)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> "Tensor":
        return ops.sorting.argsort(self, dim, descending, stable)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        """(values, u32 indices) of the k largest (smallest) elements along dim, sorted."""
        return ops.sorting.topk(self, k, dim, largest, sorted)

    def sort_last_dim(self, asc: bool = True) -> tuple:
        """Candle's: (sorted values, u32 indices) along the last dim."""
        return ops.sorting.sort_last_dim(self, asc)

    def arg_sort_last_dim(self, asc: bool = True) -> "Tensor":
        """Candle's: the u32 indices that sort the last dim."""
        return ops.sorting.arg_sort_last_dim(self, asc)

    # ---- linear algebra and indexing --------------------------------------------------
    def matmul(self, rhs) -> "Tensor":
        """Batched matrix product with broadcast batch dims; any strides work."""
        return ops.linalg.matmul(self, rhs)

    broadcast_matmul = matmul

    def mm(self, other) -> "Tensor":
        """The product of two 2-d tensors (no broadcasting)."""
        return ops.linalg.mm(self, other)

    def bmm(self, other) -> "Tensor":
        """Batched products of two 3-d tensors with the same batch size."""
        return ops.linalg.bmm(self, other)

    def mv(self, vec) -> "Tensor":
        return ops.linalg.matmul(self, vec.unsqueeze(-1)).squeeze(-1)

    def index_select(self, indexes, dim: int) -> "Tensor":
        return ops.indexing.index_select(self, indexes, dim)

    def gather(self, indexes, dim: int) -> "Tensor":
        return ops.indexing.gather(self, indexes, dim)

    def scatter(self, indexes, source, dim: int) -> "Tensor":
        """A copy of self with ``source`` written at ``indexes`` along ``dim``."""
        return ops.indexing.scatter(self, indexes, source, dim, accumulate=False)

    def scatter_add(self, indexes, source, dim: int) -> "Tensor":
        """A copy of self with ``source`` added at ``indexes`` along ``dim``."""
        return ops.indexing.scatter(self, indexes, source, dim, accumulate=True)

    def index_add(self, indexes, source, dim: int) -> "Tensor":
        """A copy of self with slices of ``source`` added at ``indexes`` of ``dim``."""
        return ops.indexing.index_add(self, indexes, source, dim)

    def embedding(self, ids) -> "Tensor":
        """Rows of this (vocab, hidden) table for the ids: shape ids.shape + (hidden,)."""
        return ops.indexing.embedding(ids, self)

    # ---- nn ------------------------------------------------------------------------
    def softmax(self, dim: int = -1) -> "Tensor":
        return _softmax_like(_SOFTMAX_LAST, self, dim)

    def log_softmax(self, dim: int = -1) -> "Tensor":
        return ops.nn.log_softmax(self, dim)

    def conv1d(self, kernel, padding=0, stride=1, dilation=1, groups=1) -> "Tensor":
        return ops.conv.conv1d(self, kernel, padding, stride, dilation, groups)

    def conv2d(self, kernel, padding=0, stride=1, dilation=1, groups=1) -> "Tensor":
        return ops.conv.conv2d(self, kernel, padding, stride, dilation, groups)

    def conv_transpose1d(self, kernel, padding=0, output_padding=0, stride=1, dilation=1, groups=1) -> "Tensor":
        return ops.conv.conv_transpose1d(self, kernel, padding, output_padding, stride, dilation, groups)

    def conv_transpose2d(self, kernel, padding=0, output_padding=0, stride=1, dilation=1, groups=1) -> "Tensor":
        return ops.conv.conv_transpose2d(self, kernel, padding, output_padding, stride, dilation, groups)

    def avg_pool2d(self, kernel_size, stride=None) -> "Tensor":
        return ops.conv.avg_pool2d(self, kernel_size, stride)

    def max_pool2d(self, kernel_size, stride=None) -> "Tensor":
        return ops.conv.max_pool2d(self, kernel_size, stride)

    def upsample_nearest2d(self, target_h: int, target_w: int) -> "Tensor":
        return ops.conv.upsample2d(self, target_h, target_w, "nearest")

    def upsample_bilinear2d(self, target_h: int, target_w: int, align_corners: bool = False) -> "Tensor":
        return ops.conv.upsample2d(self, target_h, target_w, "bilinear", align_corners)


def _unary_method(op, doc: str):
    def method(self):
        return _apply_unary(op, self)

    method.__name__ = method.__qualname__ = op.name
    method.__doc__ = doc
    return method


UNARY_DOCS = {
    "abs": "Absolute value.", "neg": "Negation.", "sqr": "Square.", "sign": "-1, 0 or 1 (NaN stays NaN).",
    "relu": "max(x, 0).", "ceil": "Round up.", "floor": "Round down.",
    "round": "Round half to even, as numpy and PyTorch.", "trunc": "Round toward zero.",
    "recip": "1 / x.", "sqrt": "Square root.", "rsqrt": "1 / sqrt(x).", "exp": "e ** x.",
    "expm1": "e ** x - 1.", "log": "Natural logarithm.", "log1p": "log(1 + x).", "sin": "Sine.",
    "cos": "Cosine.", "tan": "Tangent.", "asin": "Arcsine.", "acos": "Arccosine.", "atan": "Arctangent.",
    "sinh": "Hyperbolic sine.", "cosh": "Hyperbolic cosine.", "tanh": "Hyperbolic tangent.",
    "asinh": "Inverse hyperbolic sine.", "acosh": "Inverse hyperbolic cosine.",
    "atanh": "Inverse hyperbolic tangent.", "erf": "Error function.",
    "gelu": "GELU, tanh approximation (Candle's gelu).", "gelu_erf": "GELU with the exact erf.",
    "silu": "x * sigmoid(x).", "sigmoid": "1 / (1 + exp(-x)).", "softplus": "log(1 + exp(x)).",
}
# The op modules construct Tensors, so they are imported once the class exists.
from . import dlpack, ops  # noqa: E402
from .ops import elementwise as _ew  # noqa: E402  (the hottest paths skip an attribute lookup)
from .ops.dispatch import apply_binary as _apply_binary, apply_unary as _apply_unary  # noqa: E402
from .dtype import u8 as _u8  # noqa: E402

for _op, _doc in UNARY_DOCS.items():
    setattr(Tensor, _op, _unary_method(_ew.UNARY[_op], _doc))
del _op, _doc

from .ops.indexing import getitem as _getitem  # noqa: E402
from .ops.linalg import matmul as _matmul  # noqa: E402
from .ops.nn import SOFTMAX_LAST as _SOFTMAX_LAST, _softmax_like  # noqa: E402


#: PyTorch's torch.return_types.max / min: a tuple with ``.values`` and ``.indices``.
MaxResult = collections.namedtuple("max", ["values", "indices"])
MinResult = collections.namedtuple("min", ["values", "indices"])


def _extreme(kind: str, x: Tensor, dim, keepdim: bool):
    """Tensor.max / Tensor.min: all elements' (dim None), or values and indices along one dim."""
    if dim is None:
        return ops.reduce.reduce(kind, x, None, keepdim)
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{kind}(dim) takes one int dim (values and indices along it), got {dim!r}: "
                        f"use a{kind}() to reduce over several dims")
    result = MaxResult if kind == "max" else MinResult
    return result(ops.reduce.reduce(kind, x, dim, keepdim), ops.reduce.arg(f"arg{kind}", x, dim, keepdim))
