"""The op table of the conformance suite.

Every :class:`OpInfo` names an op, how to call it on candle tensors, a NumPy
reference, the dtypes it must support and sample inputs. A test case is one
(op, dtype, layout) triple run on one device; every data input is given the
layout under test:

- ``contiguous``: a fresh contiguous tensor;
- ``transposed``: the last two dims swapped in memory (a non-contiguous view);
- ``sliced``: every other element of a larger buffer, at an offset (stride 2);
- ``broadcast``: a size-1 dim expanded with stride 0 (plus NumPy broadcasting
  between operands for binary ops);
- ``empty``: a shape with a zero-size dim;
- ``scalar``: 0-d tensors.

Every op whose output is a float is also checked for gradients: the
backward pass against central finite differences in float64, with the leaf
given each layout above (so the views' backward rules are checked too).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import autograd
from ..contract.table import TOLERANCES
from .. import functional as F
from ..device import get_device
from ..errors import DeviceError
from ..dtype import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, f64, from_numpy_dtype, get_dtype, u8, u32
from ..ops import nn as nn_ops
from ..ops.creation import from_array, full_like
from ..ops.shape import cat, stack
from . import reference as R

LAYOUTS = ("contiguous", "transposed", "sliced", "broadcast", "empty", "scalar")
NONSCALAR = LAYOUTS[:5]
FLOATS = tuple(d.name for d in FLOAT_DTYPES)
INTS = tuple(d.name for d in INT_DTYPES)
ALL = tuple(d.name for d in NUMERIC_DTYPES)
WITH_BOOL = ALL + ("bool",)  # the ops that move, select, compare or reduce truth values



class Index:
    """An index input: built contiguous and never given the layout under test."""

    def __init__(self, array: np.ndarray):
        self.array = array


@dataclass
class Sample:
    inputs: list           # numpy arrays (data) or Index
    kwargs: dict = field(default_factory=dict)


@dataclass
class OpInfo:
    name: str
    call: Callable                     # call(*tensors, **kwargs) -> Tensor
    ref: Callable                      # ref(*arrays, **kwargs) -> ndarray
    dtypes: tuple = FLOATS
    samples: Callable = None           # samples(rng, dtype, layout) -> list[Sample]
    layouts: tuple = LAYOUTS
    out_dtype: Callable = None         # dtype -> expected output dtype (default: same)
    tol_scale: float = 1.0             # multiplies the dtype tolerance (long accumulations)
    kernel: str | tuple | None = None  # the kernel op(s) it exercises, when not its name
    grad: bool = True                  # differentiable (checked when its output is a float)

    @property
    def kernels(self) -> tuple:
        k = self.kernel or self.name
        return (k,) if isinstance(k, str) else tuple(k)


# ---- sample helpers ------------------------------------------------------------------------


def values(rng, dtype, shape, lo=-3.0, hi=3.0) -> np.ndarray:
    """Random values of dtype in [lo, hi) (integers clipped to the dtype's range)."""
    dt = get_dtype(dtype)
    if dt.is_float:
        return rng.uniform(lo, hi, size=shape).astype(dt.np)
    if dt.is_bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    info = np.iinfo(dt.np)
    lo_i, hi_i = max(int(math.floor(lo)), int(info.min)), min(int(math.ceil(hi)), int(info.max))
    return rng.integers(lo_i, max(hi_i, lo_i + 1), size=shape).astype(dt.np)


def shape_for(layout: str, base=(3, 5)) -> tuple:
    if layout == "scalar":
        return ()
    if layout == "empty":
        return (0,) + tuple(base[1:])
    return tuple(base)


def simple(n_inputs=1, lo=-3.0, hi=3.0, int_range=(0, 20), nonzero_last=False, base=(3, 5)):
    """Samples of n same-shaped inputs; for broadcast also NumPy-broadcast operands."""

    def gen(rng, dtype, layout):
        dt = get_dtype(dtype)
        rng_lo, rng_hi = (lo, hi) if dt.is_float else int_range
        shapes = [shape_for(layout, base)] * n_inputs
        out = [_make(rng, dt, shapes, rng_lo, rng_hi, nonzero_last)]
        if layout == "broadcast" and n_inputs == 2:
            out.append(_make(rng, dt, [shape_for(layout, base), base[-1:]], rng_lo, rng_hi, nonzero_last))
            out.append(_make(rng, dt, [(base[0], 1), (1, base[-1])], rng_lo, rng_hi, nonzero_last))
        return out

    return gen


def _make(rng, dt, shapes, lo, hi, nonzero_last) -> Sample:
    arrays = [values(rng, dt, s, lo, hi) for s in shapes]
    if nonzero_last:
        last = arrays[-1]
        if dt.is_float:
            arrays[-1] = np.where(np.abs(last.astype(np.float64)) < 0.25, 1, last).astype(dt.np)
        else:
            arrays[-1] = np.where(last == 0, 1, last).astype(dt.np)
    return Sample(arrays)


# ---- layouts ---------------------------------------------------------------------------------


def leaf_for(array: np.ndarray, layout: str):
    """(the array a tensor of the layout under test is a view of, the view)."""
    if layout == "transposed" and array.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(array, -1, -2)), lambda t: t.transpose(-1, -2)
    if layout == "sliced" and array.ndim >= 1:
        big = np.zeros(array.shape[:-1] + (2 * array.shape[-1] + 1,), dtype=array.dtype)
        big[..., 1::2] = array
        return big, lambda t: t[..., 1::2]
    if layout == "broadcast" and array.ndim >= 1 and array.shape[0] > 1:
        return np.ascontiguousarray(array[:1]), lambda t: t.broadcast_as(array.shape)
    return array, lambda t: t


def build(array: np.ndarray, dtype, layout: str, device):
    """(tensor, numpy values it holds) for array given the layout under test."""
    leaf, to_view = leaf_for(array, layout)
    t = to_view(from_array(leaf, dtype, device))
    return t, (np.broadcast_to(leaf, array.shape) if leaf.shape[0:1] != array.shape[0:1] and layout == "broadcast"
               else array)


def _ref_input(arr: np.ndarray) -> np.ndarray:
    """What references compute on: float64 for floats, the integer dtype itself."""
    if arr.dtype.kind == "f" or arr.dtype.name == "bfloat16":
        return np.asarray(arr, dtype=np.float64)
    return np.asarray(arr)


@dataclass(frozen=True)
class Case:
    op: OpInfo
    dtype: str
    layout: str

    @property
    def id(self) -> str:
        return f"{self.op.name}-{self.dtype}-{self.layout}"

    def __str__(self) -> str:
        return self.id

    def check_against_reference(self, device) -> None:
        """Runs every sample on device and asserts the results match the NumPy reference."""
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        dt = get_dtype(self.dtype)
        gen = self.op.samples or simple()
        for sample in gen(rng, self.dtype, self.layout):
            tensors, refs = [], []
            for item in sample.inputs:
                if isinstance(item, Index):
                    tensors.append(from_array(item.array, None, device))
                    refs.append(item.array)
                else:
                    t, held = build(item, from_numpy_dtype(item.dtype), self.layout, device)
                    tensors.append(t)
                    refs.append(_ref_input(held))
            got = self.op.call(*tensors, **sample.kwargs)
            expected = np.asarray(self.op.ref(*refs, **sample.kwargs))
            out_dt = self.op.out_dtype(dt) if self.op.out_dtype else dt
            check(got, expected, out_dt, self.op.tol_scale, f"{self.id} {sample.kwargs}")


    def check_gradient(self, device) -> None:
        """The gradient of sum(op(inputs) * cotangent) for every data input,
        against central differences, in float64 (on the cpu device where it
        is installed: see _difference_device)."""
        rng = np.random.default_rng(zlib.crc32(("grad-" + self.id).encode()))
        differences = _difference_device(device)
        gen = self.op.samples or simple()
        checked = 0
        for sample in gen(rng, "f64", self.layout):
            leaves = [leaf_for(item, self.layout) for item in sample.inputs if _is_leaf(item)]
            if not 0 < sum(leaf.size for leaf, _ in leaves) <= GRAD_MAX_ELEMENTS:
                continue
            out, variables = _forward(self.op, sample, leaves, [leaf for leaf, _ in leaves], device, True)
            if out.dtype is not f64 or out.numel() == 0:
                continue
            assert out.requires_grad, f"{self.id}: the output does not depend on its inputs for autograd"
            cot = rng.standard_normal(out.shape)
            grads = autograd.grad((out * from_array(cot, f64, device)).sum_all(), variables)
            for k, ((leaf, _), g) in enumerate(zip(leaves, grads)):
                numeric = _numeric_grad(self.op, sample, leaves, k, cot, differences)
                got = np.zeros_like(numeric) if g is None else g.numpy()
                np.testing.assert_allclose(got, numeric, rtol=1e-5 * self.op.tol_scale, atol=1e-6 * self.op.tol_scale,
                                           err_msg=f"{self.id} {sample.kwargs}: gradient of input {k}")
            checked += 1
        assert checked, f"{self.id}: no sample small enough for a gradient check"


# Finite differences cost two forward passes per input element: samples beyond
# this many elements are value-checked only.
GRAD_MAX_ELEMENTS = 1200


def _forward(op: OpInfo, sample: Sample, leaves: list, arrays: list, device, as_leaves: bool):
    """op on tensors built from the leaf arrays (and the sample's index inputs)."""
    tensors, variables = [], []
    data = iter(zip(arrays, leaves))
    for item in sample.inputs:
        if not _is_leaf(item):  # indexes and masks: constants
            array = item.array if isinstance(item, Index) else item
            tensors.append(from_array(array, None, device))
            continue
        array, (_, to_view) = next(data)
        t = from_array(array, f64, device)
        if as_leaves:
            variables.append(t.requires_grad_())
        tensors.append(to_view(t))
    return op.call(*tensors, **sample.kwargs), variables


def _is_leaf(item) -> bool:
    return not isinstance(item, Index) and item.dtype == np.float64


def _difference_device(device):
    """The device that evaluates the finite differences for a gradient check on
    device: cpu where its plugin is installed, else device itself. Two forward
    passes per input element are cheap on cpu and slow on an emulated or
    remote device (the cuda emulation spent 74 s on one matmul case); the check
    loses nothing, since test_op holds each device's forward to the same
    NumPy reference and the backward under test is still the device's."""
    if device.type != "cpu":
        try:
            return get_device("cpu")
        except DeviceError:  # no cpu plugin: the device's own forward
            pass
    return device


def _numeric_grad(op: OpInfo, sample: Sample, leaves: list, k: int, cot: np.ndarray, device) -> np.ndarray:
    arrays = [leaf.copy() for leaf, _ in leaves]
    grad = np.zeros_like(arrays[k])
    flat, gflat = arrays[k].reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        x = flat[i]
        eps = 1e-6 * max(1.0, abs(x))
        values = []
        for v in (x + eps, x - eps):
            flat[i] = v
            with autograd.no_grad():
                out, _ = _forward(op, sample, leaves, arrays, device, False)
            values.append(float((out.numpy() * cot).sum()))
        flat[i] = x
        gflat[i] = (values[0] - values[1]) / (2 * eps)
    return grad


def grad_cases(ops=None) -> list[Case]:
    """(op, f64, layout) cases of every differentiable op."""
    return [Case(op, "f64", layout) for op in (ops or OPS) if op.grad and "f64" in op.dtypes
            and (op.out_dtype is None or op.out_dtype(f64) is f64)
            for layout in op.layouts if layout in GRAD_LAYOUTS]


GRAD_LAYOUTS = ("contiguous", "transposed", "sliced", "broadcast", "scalar")


def check(got, expected: np.ndarray, dtype, tol_scale: float = 1.0, what: str = "") -> None:
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    assert tuple(got.shape) == tuple(expected.shape), f"{what}: shape {got.shape}, expected {expected.shape}"
    host = got.numpy()
    if dtype.is_float:
        rtol, atol = TOLERANCES[dtype.name]
        want = expected.astype(dtype.np).astype(np.float64)
        np.testing.assert_allclose(host.astype(np.float64), want, rtol=rtol * tol_scale, atol=atol * tol_scale,
                                   equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(host, expected.astype(dtype.np), err_msg=what)


def covered_kernels(ops) -> set:
    """(kernel op, dtype) pairs the given OpInfos exercise."""
    return {(k, d) for info in ops for k in info.kernels for d in info.dtypes}


def cases(ops=None) -> list[Case]:
    return [Case(op, dtype, layout) for op in (ops or OPS) for dtype in op.dtypes for layout in op.layouts]


# ---- the table -----------------------------------------------------------------------------
OPS: list[OpInfo] = []


def op(*args, **kwargs) -> OpInfo:
    info = OpInfo(*args, **kwargs)
    OPS.append(info)
    return info


def _method(name):
    return lambda x: getattr(x, name)()


# Unary ops: (name, reference, float domain, valid for integers)
UNARY = [
    ("abs", np.abs, (-3, 3), True), ("neg", np.negative, (-3, 3), True), ("sqr", np.square, (-3, 3), True),
    ("sign", np.sign, (-3, 3), True), ("relu", lambda x: np.maximum(x, 0), (-3, 3), True),
    ("ceil", np.ceil, (-3, 3), True), ("floor", np.floor, (-3, 3), True), ("round", np.round, (-3, 3), True),
    ("trunc", np.trunc, (-3, 3), True),
    ("recip", np.reciprocal, (0.25, 3), False), ("sqrt", np.sqrt, (0, 4), False),
    ("rsqrt", lambda x: 1 / np.sqrt(x), (0.1, 4), False), ("exp", np.exp, (-3, 3), False),
    ("expm1", np.expm1, (-3, 3), False), ("log", np.log, (0.1, 4), False), ("log1p", np.log1p, (-0.5, 3), False),
    ("sin", np.sin, (-4, 4), False), ("cos", np.cos, (-4, 4), False), ("tan", np.tan, (-1.2, 1.2), False),
    ("asin", np.arcsin, (-0.95, 0.95), False), ("acos", np.arccos, (-0.95, 0.95), False),
    ("atan", np.arctan, (-4, 4), False), ("sinh", np.sinh, (-3, 3), False), ("cosh", np.cosh, (-3, 3), False),
    ("tanh", np.tanh, (-4, 4), False), ("asinh", np.arcsinh, (-4, 4), False),
    ("acosh", np.arccosh, (1.05, 4), False), ("atanh", np.arctanh, (-0.9, 0.9), False),
    ("erf", R.erf, (-3, 3), False), ("gelu", R.gelu, (-4, 4), False), ("gelu_erf", R.gelu_erf, (-4, 4), False),
    ("silu", lambda x: x * R.sigmoid(x), (-4, 4), False), ("sigmoid", R.sigmoid, (-6, 6), False),
    ("softplus", R.softplus, (-25, 25), False),
]
for _name, _ref, (_lo, _hi), _ints in UNARY:
    op(_name, _method(_name), _ref, ALL if _ints else FLOATS,
       simple(1, _lo, _hi, (-20, 20) if _name != "sqr" else (0, 20)))

# Parameterised unary ops.
op("affine", lambda x: x.affine(1.5, -0.25), lambda x: x * 1.5 - 0.25, FLOATS)
op("affine_int", lambda x: x.affine(3, 2), lambda x: (x * 3 + 2).astype(x.dtype), INTS, kernel="affine")
op("powf", lambda x: x.powf(2.5), lambda x: x**2.5, FLOATS, simple(1, 0.1, 3))
op("elu", lambda x: x.elu(0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)), FLOATS)
op("leaky_relu", lambda x: F.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x), FLOATS)
op("clamp", lambda x: x.clamp(-0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75), FLOATS)
op("clamp_int", lambda x: x.clamp(2, 9), lambda x: np.clip(x, 2, 9).astype(x.dtype), INTS, kernel="clamp")
op("scalar_ops", lambda x: ((x + 2) * 3 - 1) / 2, lambda x: ((x + 2) * 3 - 1) / 2, FLOATS)
op("scalar_rsub", lambda x: 1 - x, lambda x: 1 - x, FLOATS)
op("scalar_rdiv", lambda x: 2 / x, lambda x: 2 / x, FLOATS, simple(1, 0.25, 3))
op("scalar_pow", lambda x: x**2, lambda x: x**2, FLOATS)

# Binary ops.
op("add", lambda a, b: a + b, lambda a, b: a + b, ALL, simple(2))
op("sub", lambda a, b: a - b, lambda a, b: a - b, ALL, simple(2))
op("mul", lambda a, b: a * b, lambda a, b: a * b, ALL, simple(2))
op("div", lambda a, b: a / b, lambda a, b: R.int_div(a, b) if a.dtype.kind in "iu" else a / b, ALL,
   simple(2, int_range=(-20, 20), nonzero_last=True))
op("maximum", lambda a, b: a.maximum(b), np.maximum, ALL, simple(2))
op("minimum", lambda a, b: a.minimum(b), np.minimum, ALL, simple(2))
op("pow", lambda a, b: a.pow(b), np.power, FLOATS, simple(2, 0.2, 2))
op("pow_int", lambda a, b: a.pow(b), lambda a, b: np.power(a, b).astype(a.dtype), INTS, simple(2, int_range=(0, 4)),
   kernel="pow")
op("rem", lambda a, b: a % b, np.remainder, ALL, simple(2, int_range=(-20, 20), nonzero_last=True))
op("fmod", lambda a, b: a.fmod(b), np.fmod, ALL,
   simple(2, int_range=(-20, 20), nonzero_last=True))

# Comparisons: values from a small set so that equal elements occur.
def _cmp_samples(rng, dtype, layout):
    dt = get_dtype(dtype)
    pool = np.array([-1, 0, 0.5, 1] if dt.is_float else [0, 1] if dt.is_bool else [0, 1, 2]).astype(dt.np)
    shapes = [[shape_for(layout)] * 2]
    if layout == "broadcast":
        shapes.append([shape_for(layout), (5,)])
    return [Sample([rng.choice(pool, size=s) for s in pair]) for pair in shapes]


_NP_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}
for _name, _ref in _NP_CMP.items():
    op(_name, (lambda n: lambda a, b: getattr(a, n)(b))(_name), _ref, WITH_BOOL, _cmp_samples, out_dtype=lambda d: u8)


# Where and casts.
def _where_samples(rng, dtype, layout):
    """A u8 condition (any nonzero is true) and a bool one."""
    shape = shape_for(layout)
    return [Sample([cond, values(rng, dtype, shape), values(rng, dtype, shape)])
            for cond in (values(rng, "u8", shape, 0, 3), values(rng, "bool", shape))]


op("where", lambda c, a, b: c.where_cond(a, b), lambda c, a, b: np.where(c != 0, a, b), WITH_BOOL, _where_samples)


def _cast_samples(rng, dtype, layout):
    """Values in [0, 100) with zeros among them (a cast to bool is a test for nonzero)."""
    x = values(rng, dtype, shape_for(layout), 0, 100)
    return [Sample([np.where(rng.random(x.shape) < 0.3, 0, x).astype(x.dtype)])]


for _dst in ALL_DTYPES:
    op(f"to_{_dst.name}", (lambda d: lambda x: x.to_dtype(d))(_dst),
       (lambda d: lambda x: x.astype(d.np) if x.dtype.kind in "iub" else x.astype(np.float64).astype(d.np))(_dst),
       WITH_BOOL, _cast_samples, out_dtype=(lambda d: lambda _: d)(_dst), kernel="cast")


# Reductions.
def _reduce_samples(lo=-3.0, hi=3.0, int_range=(0, 20), dims=(None, 1, (0, 1), -1), reduce_empty=True):
    """x of shape (3, 4, 5) reduced over each of dims, with and without keepdim. In
    the empty layout x is (0, 4, 5); ops without an identity (max, argmax...)
    then only reduce non-empty dims."""

    def gen(rng, dtype, layout):
        dt = get_dtype(dtype)
        lo_, hi_ = (lo, hi) if dt.is_float else int_range
        if layout == "scalar":
            return [Sample([values(rng, dt, (), lo_, hi_)], {"dim": None})]
        x = values(rng, dt, (0, 4, 5) if layout == "empty" else (3, 4, 5), lo_, hi_)
        out = []
        for d in dims:
            reduced = (0, 1, 2) if d is None else d if isinstance(d, tuple) else (d % 3,)
            if layout == "empty" and not reduce_empty and 0 in reduced:
                continue
            out += [Sample([x], {"dim": d, "keepdim": False}), Sample([x], {"dim": d, "keepdim": True})]
        return out

    return gen


def _axis(dim):
    return tuple(dim) if isinstance(dim, tuple) else dim


def _np_reduce(fn):
    def ref(x, dim=None, keepdim=False):
        kw = {"dtype": x.dtype} if x.dtype.kind in "iu" and fn in (np.sum, np.prod) else {}
        return fn(x, axis=_axis(dim), keepdims=keepdim, **kw)

    return ref


def _np_arg(fn):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            r = np.asarray(fn(x.reshape(-1)))
            return r.reshape((1,) * x.ndim) if keepdim else r
        return fn(x, axis=dim, keepdims=keepdim)

    return ref


def _np_mean(x, dim=None, keepdim=False):
    if x.dtype.kind == "f":
        return np.mean(x, axis=_axis(dim), keepdims=keepdim)
    return np.trunc(np.mean(x.astype(np.float64), axis=_axis(dim), keepdims=keepdim))


op("sum", lambda x, **k: x.sum(**k), _np_reduce(np.sum), ALL, _reduce_samples(), tol_scale=4)
op("prod", lambda x, **k: x.prod(**k), _np_reduce(np.prod), ALL, _reduce_samples(0.6, 1.4, (0, 3)), tol_scale=4)
op("max", lambda x, **k: x.amax(**k), _np_reduce(np.max), WITH_BOOL, _reduce_samples(reduce_empty=False))
op("min", lambda x, **k: x.amin(**k), _np_reduce(np.min), WITH_BOOL, _reduce_samples(reduce_empty=False))
op("argmax", lambda x, **k: x.argmax(**k), _np_arg(np.argmax), ALL,
   _reduce_samples(dims=(None, 0, 1, -1), reduce_empty=False), out_dtype=lambda d: u32)
op("argmin", lambda x, **k: x.argmin(**k), _np_arg(np.argmin), ALL,
   _reduce_samples(dims=(None, 0, 1, -1), reduce_empty=False), out_dtype=lambda d: u32)
op("mean", lambda x, **k: x.mean(**k), _np_mean, ALL, _reduce_samples(reduce_empty=False), tol_scale=4)
op("var", lambda x, **k: x.var(**k),
   lambda x, dim=None, keepdim=False: np.var(x, axis=_axis(dim), keepdims=keepdim, ddof=1),
   FLOATS, _reduce_samples(), layouts=NONSCALAR[:4], tol_scale=20)
op("log_sum_exp", lambda x, dim=None, keepdim=False: x.logsumexp(dim, keepdim),
   lambda x, dim=None, keepdim=False: np.log(np.sum(np.exp(x), axis=_axis(dim), keepdims=keepdim)),
   FLOATS, _reduce_samples(), layouts=NONSCALAR[:4], tol_scale=4)
op("cumsum", lambda x, dim: x.cumsum(dim),
   lambda x, dim: np.cumsum(x, axis=dim, dtype=x.dtype if x.dtype.kind in "iu" else None), ALL,
   lambda rng, dt, lay: [Sample([values(rng, dt, shape_for(lay, (3, 4, 5)), -3, 3)], {"dim": d}) for d in (0, 2)],
   layouts=NONSCALAR, tol_scale=4)


# Matmul.
def _matmul_samples(rng, dtype, layout):
    dt = get_dtype(dtype)
    lo, hi = (-2.0, 2.0) if dt.is_float else (0, 5)
    if layout == "empty":
        pairs = [((0, 4), (4, 5)), ((3, 0), (0, 5)), ((2, 0, 3), (2, 3, 4))]
    else:
        # odd sizes past the register tiles and the 16-wide transposes of the packing
        pairs = [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 2, 3, 6), (2, 2, 6, 4)), ((5, 7), (7, 2)),
                 ((37, 53), (53, 70)), ((3, 20, 33), (3, 33, 17)), ((1, 40), (40, 33)), ((29, 18), (18, 1))]
        if layout == "broadcast":
            pairs += [((2, 1, 3, 4), (3, 4, 5)), ((4, 3), (2, 3, 5)), ((4,), (4, 3)), ((2, 3, 4), (4,))]
    samples = [Sample([values(rng, dt, a, lo, hi), values(rng, dt, b, lo, hi)]) for a, b in pairs]
    if layout != "empty":
        # a row long enough for the GEMV's K slices on two threads; positive, so that 600 terms do not
        # cancel into a result smaller than their rounding errors
        lo, hi = (0.0, 1.0) if dt.is_float else (lo, hi)
        samples.append(Sample([values(rng, dt, (1, 600), lo, hi), values(rng, dt, (600, 300), lo, hi)]))
        # deeper than one K slice of every GEMM (the later slices add to C), small enough that the
        # operands are read in place rather than packed, with a row panel cut short
        samples.append(Sample([values(rng, dt, (16, 1100), lo, hi), values(rng, dt, (1100, 32), lo, hi)]))
    return samples


op("matmul", lambda a, b: a @ b,
   lambda a, b: (np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype) if a.dtype.kind in "iu"
                 else np.matmul(a, b)),
   ALL, _matmul_samples, layouts=NONSCALAR, tol_scale=8)


# Shape ops that copy through the strided copy kernel.
def _pair_samples(shape=(3, 5)):
    def gen(rng, dtype, layout):
        return [Sample([values(rng, dtype, shape_for(layout, shape)), values(rng, dtype, shape_for(layout, shape))])]

    return gen


op("fill", lambda x: full_like(x, 7), lambda x: np.full_like(x, 7), WITH_BOOL, grad=False)
op("contiguous", lambda x: x.contiguous(), lambda x: x, WITH_BOOL, kernel="copy")
op("copy", lambda x: x.copy(), lambda x: x, WITH_BOOL)
op("cat0", lambda a, b: cat([a, b], 0), lambda a, b: np.concatenate([a, b], 0), WITH_BOOL, _pair_samples(), NONSCALAR)
op("cat1", lambda a, b: cat([a, b], 1), lambda a, b: np.concatenate([a, b], 1), WITH_BOOL, _pair_samples(), NONSCALAR)
op("stack", lambda a, b: stack([a, b], 1), lambda a, b: np.stack([a, b], 1), WITH_BOOL, _pair_samples(), NONSCALAR)
op("flip", lambda x: x.flip([0, 1]), lambda x: x[::-1, ::-1], WITH_BOOL, layouts=NONSCALAR)
op("repeat", lambda x: x.repeat(2, 1, 3), lambda x: np.tile(x, (2, 1, 3)), WITH_BOOL, layouts=NONSCALAR)
op("pad_with_zeros", lambda x: x.pad_with_zeros(1, 2, 1), lambda x: np.pad(x, ((0, 0), (2, 1))), WITH_BOOL, layouts=NONSCALAR)
op("transpose_reshape", lambda x: x.t().reshape(-1), lambda x: x.T.reshape(-1), WITH_BOOL, layouts=NONSCALAR)
op("getitem_steps", lambda x: x[::2, 1::2], lambda x: x[::2, 1::2], WITH_BOOL, layouts=NONSCALAR)
op("getitem_negative_step", lambda x: x[::-1, ::-2], lambda x: x[::-1, ::-2], WITH_BOOL, layouts=NONSCALAR)
op("narrow", lambda x: x.narrow(1, 1, 3).contiguous(), lambda x: x[:, 1:4], WITH_BOOL, layouts=NONSCALAR)
op("permute", lambda x: x.permute(2, 0, 1).contiguous(), lambda x: x.transpose(2, 0, 1), WITH_BOOL,
   simple(base=(3, 4, 5)), NONSCALAR, kernel="copy")
op("squeeze_unsqueeze", lambda x: x.unsqueeze(0).unsqueeze(-1).squeeze(0) * 1, lambda x: x[..., None] * 1, ALL,
   kernel="mul")
op("expand", lambda x: x.narrow(1, 0, 1).expand(-1, 4) * 1, lambda x: np.repeat(x[:, :1], 4, 1) * 1, ALL,
   layouts=NONSCALAR, kernel="mul")
op("chunk", lambda x: x.chunk(2, 1)[1].contiguous(), lambda x: x[:, 3:], WITH_BOOL, layouts=NONSCALAR, kernel="copy")
op("getitem_index", lambda x: x[[2, 0, 2], 1:], lambda x: x[[2, 0, 2], 1:], WITH_BOOL, layouts=NONSCALAR[:4],
   kernel="index_select")
op("getitem_mask", lambda x: x[x > 0.5], lambda x: x[x > 0.5], FLOATS, layouts=NONSCALAR[:4], kernel="index_select")
op("getitem_bool_mask", lambda x: x[(x > 0.5).bool()], lambda x: x[x > 0.5], FLOATS, layouts=NONSCALAR[:4],
   kernel="index_select")
op("std", lambda x, **k: x.std(**k), lambda x, dim=None, keepdim=False: np.std(x, axis=_axis(dim), keepdims=keepdim,
                                                                            ddof=1),
   FLOATS, _reduce_samples(), layouts=NONSCALAR[:4], tol_scale=20, kernel="sum")


# Indexing.
def _index_samples(kind):
    def gen(rng, dtype, layout):
        x = values(rng, dtype, shape_for(layout, (4, 5)))
        rows = x.shape[0]
        out = []
        for id_dtype in ("u32", "i64", "u8"):
            npd = get_dtype(id_dtype).np
            if kind == "select":
                n = 6 if rows else 0
                out.append(Sample([x, Index(rng.integers(0, max(rows, 1), size=n).astype(npd))], {"dim": 0}))
                out.append(Sample([x, Index(rng.integers(0, 5, size=3).astype(npd))], {"dim": 1}))
            elif kind == "gather":
                out.append(Sample([x, Index(rng.integers(0, 5, size=(rows, 3)).astype(npd))], {"dim": 1}))
                if rows:
                    out.append(Sample([x, Index(rng.integers(0, rows, size=(2, 5)).astype(npd))], {"dim": 0}))
            elif kind in ("scatter", "scatter_add"):
                ids = np.stack([rng.permutation(5)[:3] for _ in range(rows)]) if rows else np.zeros((0, 3))
                if kind == "scatter_add" and rows:
                    ids = rng.integers(0, 5, size=(rows, 3))  # duplicates accumulate
                src = values(rng, dtype, (rows, 4))
                out.append(Sample([x, Index(ids.astype(npd)), src], {"dim": 1}))
            elif kind == "index_add":
                ids = rng.integers(0, 5, size=4).astype(npd)
                out.append(Sample([x, Index(ids), values(rng, dtype, (rows, 4))], {"dim": 1}))
        return out

    return gen


def _np_scatter(x, ids, src, dim, add):
    out = x.copy()
    idx = list(np.indices(ids.shape))
    idx[dim] = ids.astype(np.int64)
    vals = src[tuple(slice(0, n) for n in ids.shape)]
    if add:
        np.add.at(out, tuple(idx), vals)
    else:
        out[tuple(idx)] = vals
    return out


def _np_index_add(x, ids, src, dim):
    out = x.copy()
    moved = np.moveaxis(out, dim, 0)
    np.add.at(moved, ids.astype(np.int64), np.moveaxis(src, dim, 0))
    return out


op("index_select", lambda x, ids, dim: x.index_select(ids, dim), lambda x, ids, dim: np.take(x, ids.astype(np.int64), dim),
   WITH_BOOL, _index_samples("select"), NONSCALAR)
op("gather", lambda x, ids, dim: x.gather(ids, dim),
   lambda x, ids, dim: np.take_along_axis(x, ids.astype(np.int64), dim), WITH_BOOL,
   _index_samples("gather"), NONSCALAR)
op("scatter", lambda x, ids, src, dim: x.scatter(ids, src, dim), lambda x, ids, src, dim: _np_scatter(x, ids, src, dim, False),
   WITH_BOOL, _index_samples("scatter"), NONSCALAR)
op("scatter_add", lambda x, ids, src, dim: x.scatter_add(ids, src, dim),
   lambda x, ids, src, dim: _np_scatter(x, ids, src, dim, True), ALL, _index_samples("scatter_add"), NONSCALAR)
op("index_add", lambda x, ids, src, dim: x.index_add(ids, src, dim), _np_index_add, ALL, _index_samples("index_add"),
   NONSCALAR)
op("embedding", lambda table, ids: F.embedding(ids, table), lambda table, ids: table[ids.astype(np.int64)], ALL,
   lambda rng, dt, lay: [Sample([values(rng, dt, shape_for(lay, (6, 4))), Index(rng.integers(0, 6, size=(2, 3)).astype(np.uint32))])]
   if lay != "empty" else [Sample([values(rng, dt, (6, 0)), Index(rng.integers(0, 6, size=(2, 3)).astype(np.uint32))])],
   NONSCALAR)


# Convolutions, pooling, resampling.
def _conv_samples(transposed, one_d):
    # (kernel height, width), output channels, then the keyword arguments (4 input channels);
    # 1x1 is the pointwise fast path, 4 groups of one channel the depthwise one.
    configs = [((3, 2), 6, dict(padding=0, stride=1, dilation=1, groups=1)),
               ((3, 2), 6, dict(padding=1, stride=2, dilation=1, groups=1)),
               ((3, 2), 6, dict(padding=2, stride=1, dilation=2, groups=1)),
               ((3, 2), 6, dict(padding=1, stride=1, dilation=1, groups=2)),
               ((1, 1), 6, dict(padding=0, stride=1, dilation=1, groups=2)),
               ((3, 2), 4, dict(padding=1, stride=2, dilation=1, groups=4))]

    def gen(rng, dtype, layout):
        out = []
        batch = 0 if layout == "empty" else 2
        for (k, k2), cout, cfg in configs:
            if transposed:
                w_shape = (4, cout // cfg["groups"], k) if one_d else (4, cout // cfg["groups"], k, k2)
                x_shape = (batch, 4, 7) if one_d else (batch, 4, 5, 6)
                kw = dict(cfg, output_padding=1 if cfg["stride"] > 1 else 0)
            else:
                w_shape = (cout, 4 // cfg["groups"], k) if one_d else (cout, 4 // cfg["groups"], k, k2)
                x_shape = (batch, 4, 9) if one_d else (batch, 4, 7, 8)
                kw = cfg
            out.append(Sample([values(rng, dtype, x_shape, -1, 1), values(rng, dtype, w_shape, -1, 1)], dict(kw)))
        return out

    return gen


def _conv_ref(transposed, one_d):
    def ref(x, w, padding, stride, dilation, groups, output_padding=0):
        if one_d:
            x, w = x[:, :, None], w[:, :, None]
            pad2, st2, dil2, op2 = (0, padding), (1, stride), (1, dilation), (0, output_padding)
        else:
            pad2, st2, dil2, op2 = (padding,) * 2, (stride,) * 2, (dilation,) * 2, (output_padding,) * 2
        out = (R.conv_transpose2d(x, w, pad2, op2, st2, dil2, groups) if transposed
               else R.conv2d(x, w, pad2, st2, dil2, groups))
        return out[:, :, 0] if one_d else out

    return ref


for _t in (False, True):
    for _one in (True, False):
        _name = f"conv{'_transpose' if _t else ''}{'1d' if _one else '2d'}"
        op(_name, (lambda n: lambda x, w, **k: getattr(F, n)(x, w, **k))(_name), _conv_ref(_t, _one), FLOATS,
           _conv_samples(_t, _one), NONSCALAR, tol_scale=8,
           kernel=(_name.replace("1d", "2d"), "conv2d_backward_weight"))  # the latter: the gradient check


def _pool_samples(rng, dtype, layout):
    x = values(rng, dtype, (0 if layout == "empty" else 2, 3, 6, 7), -3, 3)
    return [Sample([x], dict(kernel_size=2, stride=2, padding=0)), Sample([x], dict(kernel_size=3, stride=1, padding=1)),
            Sample([x], dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1)))]


def _pool(kind):
    def call(x, kernel_size, stride, padding):
        fn = F.max_pool2d if kind == "max" else F.avg_pool2d
        return fn(x, kernel_size, stride, padding)

    def ref(x, kernel_size, stride, padding):
        pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
        out = R.pool2d(x.astype(np.float64), pair(kernel_size), pair(stride), pair(padding), kind)
        return out if x.dtype.kind == "f" else np.trunc(out).astype(x.dtype)

    return call, ref


op("max_pool2d", *_pool("max"), tuple(d for d in ALL if d != "i64"), _pool_samples, NONSCALAR,
   kernel=("max_pool2d", "max_pool2d_backward"))  # the latter: the gradient check, floats only
op("avg_pool2d", *_pool("avg"), tuple(d for d in ALL if d != "i64"), _pool_samples, NONSCALAR, tol_scale=4,
   kernel=("avg_pool2d", "avg_pool2d_backward"))


def _upsample_samples(rng, dtype, layout):
    x = values(rng, dtype, (0 if layout == "empty" else 2, 3, 4, 5), -3, 3)
    return [Sample([x], dict(h=8, w=10)), Sample([x], dict(h=3, w=7)), Sample([x], dict(h=1, w=1))]


op("upsample_nearest2d", lambda x, h, w: x.upsample_nearest2d(h, w), lambda x, h, w: R.upsample_nearest2d(x, h, w),
   tuple(d for d in ALL if d != "i64"), _upsample_samples, NONSCALAR)
op("upsample_bilinear2d", lambda x, h, w: x.upsample_bilinear2d(h, w), lambda x, h, w: R.upsample_bilinear2d(x, h, w, False),
   FLOATS, _upsample_samples, NONSCALAR, tol_scale=4)
op("upsample_bilinear2d_align", lambda x, h, w: x.upsample_bilinear2d(h, w, align_corners=True),
   lambda x, h, w: R.upsample_bilinear2d(x, h, w, True), FLOATS, _upsample_samples, NONSCALAR, tol_scale=4,
   kernel="upsample_bilinear2d")


# Fused nn ops.
def _rows(shape=(3, 4, 8)):
    return lambda rng, dt, lay: [Sample([values(rng, dt, shape_for(lay, shape), -4, 4)])]


op("softmax", lambda x: x.softmax(-1), lambda x: R.softmax(x, -1), FLOATS, _rows(), NONSCALAR, tol_scale=2,
   kernel="softmax_last")
op("softmax_dim0", lambda x: x.softmax(0), lambda x: R.softmax(x, 0), FLOATS, _rows(), NONSCALAR[:4], tol_scale=2,
   kernel="softmax_last")
op("log_softmax", lambda x: x.log_softmax(-1), lambda x: R.log_softmax(x, -1), FLOATS, _rows(), NONSCALAR, tol_scale=4,
   kernel="log_softmax_last")


def _norm_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 4, 8)), -3, 3)
    return [Sample([x, values(rng, dtype, (8,), 0.5, 1.5), values(rng, dtype, (8,), -1, 1)])]


op("layer_norm", lambda x, w, b: F.layer_norm(x, w, b, 1e-5), lambda x, w, b: R.layer_norm(x, w, b, 1e-5), FLOATS,
   _norm_samples, NONSCALAR, tol_scale=8)


def _skip_norm_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 4, 8)), -3, 3)
    return [Sample([x, values(rng, dtype, x.shape, -2, 2), values(rng, dtype, (8,), 0.5, 1.5),
                    values(rng, dtype, (8,), -1, 1)])]


op("skip_layer_norm", lambda x, r, w, b: nn_ops.skip_layer_norm(x, r, w, b, 1e-5),
   lambda x, r, w, b: R.skip_layer_norm(x, r, w, b, 1e-5), FLOATS, _skip_norm_samples, NONSCALAR, tol_scale=8)


def _bias_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 4, 8)), -3, 3)
    return [Sample([x, values(rng, dtype, (8,), -1, 1)])]


for _approx in (False, True):
    op("bias_gelu" + ("_tanh" if _approx else ""), lambda x, b, a=_approx: nn_ops.bias_gelu(x, b, a),
       lambda x, b, a=_approx: R.bias_gelu(x, b, a), FLOATS, _bias_samples, NONSCALAR, tol_scale=8,
       kernel="bias_gelu")
op("rms_norm", lambda x, w, b: F.rms_norm(x, w, 1e-6), lambda x, w, b: R.rms_norm(x, w, 1e-6), FLOATS,
   _norm_samples, NONSCALAR, tol_scale=8)


op("silu_mul", lambda x: F.silu_mul(x), lambda x: R.silu_mul(x), FLOATS, _rows(), NONSCALAR, tol_scale=2)


def _rope_samples(rng, dtype, layout):
    b = 0 if layout == "empty" else 2
    x = values(rng, dtype, (b, 3, 5, 8), -2, 2)
    out = [Sample([x, values(rng, dtype, (5, 4), -1, 1), values(rng, dtype, (5, 4), -1, 1)])]
    if b:
        out.append(Sample([x, values(rng, dtype, (b, 5, 4), -1, 1), values(rng, dtype, (b, 5, 4), -1, 1)]))
    return out


op("rope", lambda x, c, s: F.rope(x, c, s), lambda x, c, s: R.rope(x, c, s, False), FLOATS, _rope_samples, NONSCALAR,
   tol_scale=4)
op("rope_i", lambda x, c, s: F.rope_i(x, c, s), lambda x, c, s: R.rope(x, c, s, True), FLOATS, _rope_samples, NONSCALAR,
   tol_scale=4)
op("rope_thd", lambda x, c, s: F.rope_thd(x.transpose(1, 2), c, s).transpose(1, 2),
   lambda x, c, s: R.rope(x, c, s, False), FLOATS, _rope_samples, NONSCALAR, tol_scale=4, kernel="rope")


def _attention_samples(rng, dtype, layout):
    """Several query and key blocks (online softmax across blocks, causal block
    skipping), every mask kind, grouped heads, a fully masked row."""
    b = 0 if layout == "empty" else 2

    def qkv(n_q, n_k, e, e_v, heads=3, kv_heads=3):
        return [values(rng, dtype, (b, heads, n_q, e), -1, 1), values(rng, dtype, (b, kv_heads, n_k, e), -1, 1),
                values(rng, dtype, (b, kv_heads, n_k, e_v), -1, 1)]

    keep = (rng.random((70, 300)) > 0.3).astype(np.uint8)
    keep[3] = 0  # a row that sees no key
    return [
        Sample(qkv(5, 7, 8, 6)),
        Sample(qkv(3, 4, 4, 3, heads=2, kv_heads=2), {"is_causal": True}),
        Sample(qkv(70, 300, 16, 12), {"is_causal": True}),
        Sample(qkv(2, 300, 16, 12)),  # a few rows (a decoding step's) over several key blocks
        Sample(qkv(3, 300, 64, 83)),  # and at a head size that fills whole vectors (then a tail of each kind)
        Sample(qkv(70, 300, 16, 12) + [Index(keep)]),
        Sample(qkv(5, 7, 8, 6) + [values(rng, dtype, (3, 1, 7), -2, 2)], {"scale": 0.3}),
        Sample(qkv(1, 9, 8, 8, heads=4, kv_heads=2), {"enable_gqa": True}),
    ]


def _attention_call(q, k, v, mask=None, **kw):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


def _attention_ref(q, k, v, mask=None, is_causal=False, scale=None, enable_gqa=False):
    return R.attention(q, k, v, mask, is_causal, scale, enable_gqa)


op("scaled_dot_product_attention", _attention_call, _attention_ref, FLOATS, _attention_samples, NONSCALAR,
   tol_scale=8, kernel="sdpa")


# Fused optimizer steps (in place on copies; the result stacks the updated buffers).
def _adamw_call(p, g, m, v):
    from ..ops.optim import adamw_step

    p, m, v = p.copy(), m.copy(), v.copy()
    adamw_step(p, g, m, v, step=3, lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.01)
    return stack([p, m, v])


def _adamw_ref(p, g, m, v):
    m = 0.9 * m + 0.1 * g
    v = 0.99 * v + 0.01 * g * g
    p = p * (1 - 0.1 * 0.01) - 0.1 * (m / (1 - 0.9**3)) / (np.sqrt(v / (1 - 0.99**3)) + 1e-8)
    return np.stack([p, m, v])


def _sgd_call(p, g, buf, nesterov):
    from ..ops.optim import sgd_step

    p, buf = p.copy(), buf.copy()
    sgd_step(p, g, buf, first=False, lr=0.1, momentum=0.9, dampening=0.1, nesterov=nesterov, weight_decay=0.01)
    return stack([p, buf])


def _sgd_ref(p, g, buf, nesterov):
    d = g + 0.01 * p
    buf = 0.9 * buf + 0.9 * d
    step = d + 0.9 * buf if nesterov else buf
    return np.stack([p - 0.1 * step, buf])


def _optim_samples(n_inputs, lo=-1.0, hi=1.0):
    def gen(rng, dtype, layout):
        arrays = [values(rng, dtype, shape_for(layout), lo, hi) for _ in range(n_inputs)]
        arrays[-1] = np.abs(arrays[-1]) if n_inputs == 4 else arrays[-1]  # AdamW's second moment is >= 0
        return [Sample(arrays)]

    return gen


op("adamw_step", _adamw_call, _adamw_ref, ("f32", "f64"), _optim_samples(4), tol_scale=4, grad=False)
op("sgd_step", lambda p, g, b: _sgd_call(p, g, b, False), lambda p, g, b: _sgd_ref(p, g, b, False), ("f32", "f64"),
   _optim_samples(3), tol_scale=4, grad=False)
op("sgd_step_nesterov", lambda p, g, b: _sgd_call(p, g, b, True), lambda p, g, b: _sgd_ref(p, g, b, True),
   ("f32", "f64"), _optim_samples(3), tol_scale=4, grad=False, kernel="sgd_step")

from . import opinfo_rnn, opinfo_sort  # noqa: E402,F401  (the recurrent layers' and sorting cases join OPS)
