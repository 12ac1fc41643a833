"""The ops composed from the contract's kernels (einsum, masks, predicates,
norms, floor division...; sorting's table cases are in
candle_api.testing.opinfo_sort): every dtype and layout against NumPy,
gradients against finite differences, and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import candle_api as c
from candle_api import functional as F
from candle_api.device import get_device
from candle_api.dtype import bool_, get_dtype, u8, u32
from candle_api.errors import ArgumentError, DTypeError, KernelError, ShapeError
from candle_api.ops.creation import from_array
from candle_api.ops.shape import stack
from candle_api.testing import reference as R
from candle_api.testing.conformance import table_tests
from candle_api.testing.opinfo import (
    ALL, FLOATS, NONSCALAR, Index, OpInfo, Sample, shape_for, simple, values,
)
from candle_api.testing.opinfo_sort import tied_values

GRAD_FREE = dict(grad=False)


def _u32(_):
    return u32


def _u8(_):
    return u8


# ---- shapes and masks ----------------------------------------------------------------------------------


def _einsum_samples(rng, dtype, layout):
    if layout == "empty":
        specs = [("ij,jk->ik", (0, 4), (4, 5)), ("ij,jk->ik", (3, 0), (0, 5)), ("ij->j", (0, 4))]
    else:
        specs = [("ij,jk->ik", (3, 4), (4, 5)), ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("ij->ji", (3, 4)),
                 ("ij->j", (3, 4)), ("ij->", (3, 4)), ("ij,kj", (3, 4), (5, 4)), ("i,j->ij", (3,), (4,)),
                 ("...ij,...jk->...ik", (2, 3, 4), (4, 5)), ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
                 ("ij,ij->i", (3, 4), (3, 4)), ("ij,kl->ik", (2, 3), (4, 5)), ("ij,jk,kl->il", (2, 3), (3, 4), (4, 2))]
    lo, hi = (-2, 2) if get_dtype(dtype).is_float else (0, 4)
    return [Sample([values(rng, dtype, s, lo, hi) for s in shapes], {"eq": eq}) for eq, *shapes in specs]


def _einsum_ref(*arrays, eq):
    if arrays[0].dtype.kind in "iu":
        return np.einsum(eq, *(a.astype(np.int64) for a in arrays)).astype(arrays[0].dtype)
    return np.einsum(eq, *arrays)


def _tri_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (4, 5)))
    y = values(rng, dtype, (0 if layout == "empty" else 2, 3, 4))
    return [Sample([a], {"diagonal": d}) for a in (x, y) for d in (-1, 0, 2)]


def _mask_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 5)))
    full = np.asarray(rng.random(x.shape) > 0.5, dtype=np.uint8)
    full.reshape(-1)[:1] = 1  # at least one element selected, also from a 0-d x
    full = Index(full)
    row = Index((rng.random(x.shape[-1:]) > 0.5).astype(np.uint8) * 3)  # any nonzero is true
    return [Sample([x, full]), Sample([x, row])]


def _nonzero_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 5)), -1, 2) if get_dtype(dtype).is_float else None
    if x is None:
        x = values(rng, dtype, shape_for(layout, (3, 5)), 0, 2)
    else:
        x = np.where(np.abs(x.astype(np.float64)) < 0.7, 0, x).astype(x.dtype)
    return [Sample([x])]


def _roll_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 5)))
    if layout == "scalar":
        return [Sample([x], {"shifts": 2, "dims": None})]
    return [Sample([x], {"shifts": s, "dims": d}) for s, d in
            [(1, 0), (-2, 1), (7, -1), ((1, 3), (0, 1)), (4, None), (0, 1)]]


def _matmul_pairs(batched):
    def gen(rng, dtype, layout):
        lo, hi = (-2, 2) if get_dtype(dtype).is_float else (0, 4)
        n = 0 if layout == "empty" else 3
        shapes = [((2, n, 4), (2, 4, 5)), ((3, 2, 6), (3, 6, 1))] if batched else [((n, 4), (4, 5)), ((5, 7), (7, 2))]
        return [Sample([values(rng, dtype, a, lo, hi), values(rng, dtype, b, lo, hi)]) for a, b in shapes]

    return gen


def _int_matmul(a, b):
    if a.dtype.kind in "iu":
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return np.matmul(a, b)


# ---- predicates, reductions, division ------------------------------------------------------------------


def _special_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 5)))
    if get_dtype(dtype).is_float and x.size:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 4)] = np.array([np.nan, np.inf, -np.inf, np.nan]).astype(x.dtype)
    return [Sample([x])]


def _isclose_samples(rng, dtype, layout):
    dt = get_dtype(dtype)
    a = values(rng, dtype, shape_for(layout, (3, 5)), 0.5, 4) if dt.is_float else values(rng, dtype, shape_for(layout, (3, 5)), 0, 20)
    if dt.is_float:  # within 1e-4 (close) or beyond 0.1 (not), relative, far from the bound of 1e-2
        rel = rng.choice([0.0, 1e-4, -1e-4, 0.1, -0.2], size=a.shape)
        b = (a.astype(np.float64) * (1 + rel)).astype(dt.np)
        if a.size >= 3:
            a.reshape(-1)[:3] = np.array([np.nan, np.inf, np.inf]).astype(dt.np)
            b.reshape(-1)[:3] = np.array([np.nan, np.inf, -np.inf]).astype(dt.np)
        kw = dict(rtol=1e-2, atol=1e-3)
    else:
        b = np.clip(a.astype(np.int64) + rng.choice([0, 1, 4], size=a.shape), 0, 20).astype(dt.np)
        kw = dict(rtol=0.1, atol=0.5)
    return [Sample([a, b], kw), Sample([a, b], dict(kw, equal_nan=True))]


def _isclose_ref(a, b, rtol, atol, equal_nan=False):
    return np.isclose(a.astype(np.float64), b.astype(np.float64), rtol, atol, equal_nan)


def _truth_samples(rng, dtype, layout):
    if layout == "scalar":
        return [Sample([values(rng, dtype, (), 0, 2)], {"dim": None})]
    x = values(rng, dtype, (0, 4, 5) if layout == "empty" else (3, 4, 5), 0, 2)
    x = np.where(rng.random(x.shape) < 0.8, x, 0).astype(x.dtype)
    return [Sample([x], {"dim": d, "keepdim": k}) for d in (None, 0, 1, (0, 2), -1) for k in (False, True)]


def _truth_ref(fn):
    return lambda x, dim, keepdim=False: fn(x != 0, axis=dim, keepdims=keepdim)


def _norm_samples(ps):
    def gen(rng, dtype, layout):
        x = np.asarray(values(rng, dtype, shape_for(layout, (3, 5)), 0.2, 2) * np.where(
            rng.random(shape_for(layout, (3, 5))) < 0.5, -1, 1).astype(get_dtype(dtype).np))
        dims = (None,) if layout == "scalar" else (None, 1, (0, 1))
        return [Sample([x], {"p": p, "dim": d, "keepdim": k}) for p in ps for d in dims for k in (False, True)]

    return gen


def _norm_ref(x, p, dim, keepdim):
    a = np.abs(x)
    kw = dict(axis=dim, keepdims=keepdim)
    if p == 0:
        return np.sum(a != 0, **kw).astype(x.dtype)
    if p == math.inf:
        return np.max(a, **kw)
    if p == -math.inf:
        return np.min(a, **kw)
    p = 2 if p == "fro" else p
    return np.sum(a**p, **kw) ** (1 / p)


def _floordiv_samples(rng, dtype, layout):
    return simple(2, -4, 4, (-20, 20), nonzero_last=True)(rng, dtype, layout)


def _pool_ties(rng, dtype, layout):
    """Pooling inputs from a few values (ties in most windows), NaNs among the floats."""
    x = tied_values(rng, dtype, layout, (0 if layout == "empty" else 2, 3, 6, 7)) if layout != "scalar" else None
    if get_dtype(dtype).is_float:
        x = np.where(np.isinf(x), 1.0, x).astype(x.dtype)  # -inf padding would tie with -inf values
    return [Sample([x], dict(kernel=2, stride=2, padding=0)), Sample([x], dict(kernel=3, stride=1, padding=1)),
            Sample([x], dict(kernel=(2, 3), stride=(1, 2), padding=(1, 1)))]


def _pool_argmax_ref(x, kernel, stride, padding):
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    return R.pool2d_argmax(x, pair(kernel), pair(stride), pair(padding))


OPS = [
    OpInfo("max_pool2d_indices", lambda x, kernel, stride, padding: F.max_pool2d(x, kernel, stride, padding,
                                                                                  return_indices=True)[1],
           _pool_argmax_ref, tuple(d for d in ALL if d != "i64"), _pool_ties, NONSCALAR, out_dtype=_u32,
           **GRAD_FREE),  # the dtypes of the max_pool2d kernel, which gives the values
    OpInfo("einsum", lambda *xs, eq: c.einsum(eq, *xs), _einsum_ref, ALL, _einsum_samples, NONSCALAR, tol_scale=4),
    OpInfo("tril", lambda x, diagonal: x.tril(diagonal), lambda x, diagonal: np.tril(x, diagonal), ALL,
           _tri_samples, NONSCALAR),
    OpInfo("triu", lambda x, diagonal: c.triu(x, diagonal), lambda x, diagonal: np.triu(x, diagonal), ALL,
           _tri_samples, NONSCALAR),
    OpInfo("masked_fill", lambda x, m: x.masked_fill(m, 2), lambda x, m: np.where(m != 0, 2, x).astype(x.dtype), ALL,
           _mask_samples),
    OpInfo("masked_select", lambda x, m: x.masked_select(m),
           lambda x, m: x[np.broadcast_to(m != 0, np.broadcast_shapes(x.shape, m.shape))], ALL, _mask_samples),
    OpInfo("nonzero", lambda x: x.nonzero(), lambda x: np.argwhere(x.reshape(-1) if x.ndim == 0 else x)[:, x.ndim == 0:],
           ALL, _nonzero_samples, out_dtype=_u32),
    OpInfo("nonzero_tuple", lambda x: stack(c.nonzero(x, as_tuple=True), 0),
           lambda x: np.stack(np.nonzero(np.atleast_1d(x))), ALL, _nonzero_samples, out_dtype=_u32),
    OpInfo("any", lambda x, **k: x.any(**k), _truth_ref(np.any), ALL, _truth_samples, out_dtype=_u8),
    OpInfo("all", lambda x, **k: c.all(x, **k), _truth_ref(np.all), ALL, _truth_samples, out_dtype=_u8),
    OpInfo("isnan", lambda x: x.isnan(), np.isnan, ALL, _special_samples, out_dtype=_u8),
    OpInfo("isinf", lambda x: c.isinf(x), np.isinf, ALL, _special_samples, out_dtype=_u8),
    OpInfo("isfinite", lambda x: x.isfinite(), np.isfinite, ALL, _special_samples, out_dtype=_u8),
    OpInfo("isclose", lambda a, b, **k: a.isclose(b, **k), _isclose_ref, ALL, _isclose_samples, out_dtype=_u8),
    OpInfo("bool", lambda x: x.bool(), lambda x: x != 0, ALL, _special_samples, out_dtype=lambda _: bool_),
    OpInfo("roll", lambda x, shifts, dims: x.roll(shifts, dims), lambda x, shifts, dims: np.roll(x, shifts, dims), ALL,
           _roll_samples),
    OpInfo("unbind", lambda x, dim: stack(x.unbind(dim)[::-1], dim), lambda x, dim: np.flip(x, dim), ALL,
           lambda rng, dt, lay: [Sample([values(rng, dt, shape_for(lay, (3, 5)))], {"dim": d})
                                 for d in ((-1,) if lay == "empty" else (0, -1))],
           NONSCALAR),
    OpInfo("mm", lambda a, b: a.mm(b), _int_matmul, ALL, _matmul_pairs(False), NONSCALAR, tol_scale=4),
    OpInfo("bmm", lambda a, b: c.bmm(a, b), _int_matmul, ALL, _matmul_pairs(True), NONSCALAR, tol_scale=4),
    OpInfo("mT", lambda x: x.mT.contiguous(), lambda x: np.swapaxes(x, -1, -2), ALL,
           lambda rng, dt, lay: [Sample([values(rng, dt, shape_for(lay, (2, 3, 4)))])], NONSCALAR),
    OpInfo("floor_divide", lambda a, b: a // b, np.floor_divide, ALL, _floordiv_samples, **GRAD_FREE),
    OpInfo("floor_divide_scalar", lambda x: stack([x // 3, 7 // x]), lambda x: np.stack([x // 3, 7 // x]), ALL,
           simple(1, -4, 4, (-20, 20), nonzero_last=True), **GRAD_FREE),
    OpInfo("norm", lambda x, **k: x.norm(**k), _norm_ref, FLOATS, _norm_samples((1, 2, 3, math.inf, -math.inf, "fro")),
           ("contiguous", "transposed", "sliced", "broadcast", "scalar"), tol_scale=4),
    OpInfo("norm_p0", lambda x, **k: c.norm(x, **k), _norm_ref, FLOATS, _norm_samples((0,)), **GRAD_FREE),
]


test_op, test_gradient = table_tests(OPS)


# ---- what the table does not cover -----------------------------------------------------------------------


def _t(device, data, dtype="f32"):
    return from_array(np.asarray(data), dtype, get_device(device))


def test_sort_is_stable_past_a_power_of_two(candle_device):
    x = np.random.default_rng(0).integers(0, 4, size=(2, 37)).astype(np.float32)
    got = _t(candle_device, x).argsort(-1, descending=True).numpy()
    np.testing.assert_array_equal(got, np.stack([np.lexsort((np.arange(37), -row)) for row in x]))


def test_sort_keeps_the_device_and_gives_named_pairs(candle_device):
    x = _t(candle_device, [[3.0, 1.0, 2.0]])
    out = x.sort()
    values, indices = out
    assert values.device == x.device and indices.device == x.device
    assert out.values is values and out.indices is indices and indices.dtype == u32
    assert x.sort_last_dim()[1].values() == [[1, 2, 0]]


def test_allclose(candle_device):
    a = _t(candle_device, [1.0, 2.0, math.nan])
    assert not c.allclose(a, a) and a.allclose(a, equal_nan=True)
    assert a.allclose(a + 1e-6, equal_nan=True) and not a.allclose(a + 1e-3, equal_nan=True)
    assert c.allclose(_t(candle_device, [], "i32"), _t(candle_device, [], "i32"))


def test_creation_and_conversion(candle_device):
    dev = get_device(candle_device)
    x = _t(candle_device, [[1, 2], [3, 4]], "i32")
    for t in (x.new_zeros(2, 3), x.new_ones((2, 3)), x.new_full((2, 3), 5), x.new_tensor([[1, 2, 3]] * 2)):
        assert t.shape == (2, 3) and t.dtype == "i32" and t.device is dev
    assert x.new_zeros(2, dtype="f64").dtype == "f64"
    assert x.type_as(_t(candle_device, [1.0], "f16")).dtype == "f16"
    assert x.cpu().device == "cpu" and x.cpu().values() == x.values()
    np.testing.assert_allclose(c.linspace(-1, 2, 7, device=dev).numpy(), np.linspace(-1, 2, 7), rtol=1e-6)
    assert c.linspace(0, 10, 4, dtype="i64", device=dev).values() == [0, 3, 6, 10]
    assert c.linspace(3, 4, 1).values() == [3.0] and c.linspace(0, 1, 0).shape == (0,)
    assert c.tril2(3, device=dev).values() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert c.triu2(2, dtype="u8", device=dev).values() == [[1, 1], [0, 1]]


def test_masked_fill_with_a_tensor_value_passes_its_gradient(candle_device):
    x = _t(candle_device, [1.0, 2.0, 3.0], "f64").requires_grad_()
    v = _t(candle_device, 5.0, "f64").requires_grad_()
    mask = _t(candle_device, [1, 0, 1], "u8")
    x.masked_fill(mask, v).sum_all().backward()
    assert x.grad.values() == [0.0, 1.0, 0.0] and v.grad.values() == 2.0


def test_norm_of_an_empty_tensor(candle_device):
    assert _t(candle_device, np.zeros((0, 3))).norm().item() == 0.0
    assert _t(candle_device, np.zeros((0, 3))).norm(1, dim=0).values() == [0.0, 0.0, 0.0]


def test_adam_matches_pytorchs_rule(candle_device):
    from candle_api import optim

    rng = np.random.default_rng(1)
    p0, grads = rng.standard_normal(5), [rng.standard_normal(5) for _ in range(3)]
    p = _t(candle_device, p0, "f64").requires_grad_()
    opt = optim.Adam([p], lr=0.1, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.05)
    ref, m, v = p0.copy(), np.zeros(5), np.zeros(5)
    for step, g in enumerate(grads, 1):
        p.grad = _t(candle_device, g, "f64")
        opt.step()
        g = g + 0.05 * ref
        m, v = 0.8 * m + 0.2 * g, 0.9 * v + 0.1 * g * g
        ref = ref - 0.1 * (m / (1 - 0.8**step)) / (np.sqrt(v / (1 - 0.9**step)) + 1e-8)
    np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("call, error", [
    (lambda x: x.topk(4), ShapeError),
    (lambda x: x.topk(-1), ShapeError),
    (lambda x: x.topk(1.5), ArgumentError),
    (lambda x: x.sort(dim=2), ShapeError),
    (lambda x: c.einsum("ij,jk->ik", x, x.t().narrow(0, 0, 2)), ShapeError),
    (lambda x: c.einsum("ii->i", x), ArgumentError),
    (lambda x: c.einsum("ij->k", x), ArgumentError),
    (lambda x: c.einsum("i->i", x), ShapeError),
    (lambda x: c.einsum("ij,jk", x), ArgumentError),
    (lambda x: c.einsum("i1", x), ArgumentError),
    (lambda x: x.tril().sum_all().reshape(()).tril(), ShapeError),
    (lambda x: x.masked_fill(x > 0, 1.0).masked_fill(x.to_dtype("u8").reshape(6, 1), 0), ShapeError),
    (lambda x: x.masked_fill(x, 0), DTypeError),
    (lambda x: x.masked_fill(x > 0, x), ShapeError),
    (lambda x: x.mm(x.unsqueeze(0)), ShapeError),
    (lambda x: x.bmm(x), ShapeError),
    (lambda x: x.reshape(-1).mT, ShapeError),
    (lambda x: x.norm("nuc"), ArgumentError),
    (lambda x: x.norm(-1), ArgumentError),
    (lambda x: x.to_dtype("i32").norm(), DTypeError),
    (lambda x: x.roll((1, 2), 0), ShapeError),
    (lambda x: x.roll((1, 2)), ShapeError),
    (lambda x: x.isclose(x.to_dtype("f64")), DTypeError),
    (lambda x: x.to_dtype("i32") // 1.5, DTypeError),
    (lambda x: c.linspace(0, 1, -1), ArgumentError),
    (lambda x: c.linspace(0, math.inf, 3), ArgumentError),
])
def test_bad_input(candle_device, call, error):
    with pytest.raises(error):
        call(_t(candle_device, np.arange(6.0).reshape(2, 3)))


def test_integer_floor_division_by_zero(candle_device):
    with pytest.raises(KernelError, match="division by zero"):
        _t(candle_device, [4, 5], "i32") // _t(candle_device, [1, 0], "i32")
