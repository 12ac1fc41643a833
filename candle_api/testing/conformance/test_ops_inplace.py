"""In-place ops: each writes into a tensor of the layout under test (a fresh
contiguous copy, or a strided view into a larger buffer) and is checked
against NumPy, and its gradient, through the copy it wrote into, against
finite differences. Then the rules: read-only memory, leaves, broadcast
views, version counters."""

from __future__ import annotations

import numpy as np
import pytest

import candle_api as c
from candle_api.device import get_device
from candle_api.errors import InPlaceError, ReadOnlyError, ShapeError
from candle_api.ops.creation import zeros
from candle_api.testing.conformance.test_ops_api import _t
from candle_api.testing.conformance import table_tests
from candle_api.testing.opinfo import (
    ALL, FLOATS, INTS, NONSCALAR, WITH_BOOL, Index, OpInfo, Sample, shape_for, simple, values,
)


def _target(x):
    """A tensor holding x's values to write into: contiguous for a contiguous x,
    else every other element of a larger buffer (strided, at an offset)."""
    if x._layout.contiguous or not x.rank:
        return x.copy()
    buf = zeros((*x.shape, 2), dtype=x.dtype, device=x.device)
    return buf[..., 1].copy_(x)


def _inplace(method, *args, **kwargs):
    """call(x, *operands): method applied to a target holding x's values; the target is returned."""
    def call(x, *operands, **kw):
        t = _target(x)
        out = getattr(t, method)(*operands, *args, **kwargs, **kw)
        assert out is t, f"{method} returns the tensor itself"
        return t

    return call


def _fits(gen):
    """gen's samples whose operands broadcast to the first input's shape (the tensor written in place)."""
    def fits(rng, dtype, layout):
        return [s for s in gen(rng, dtype, layout)
                if np.broadcast_shapes(*(a.shape for a in s.inputs)) == s.inputs[0].shape]

    return fits


def _same_shapes(rng, dtype, layout):
    return [s for s in simple(2)(rng, dtype, layout) if s.inputs[0].shape == s.inputs[1].shape]


def _scatter_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (4, 5)))
    rows = x.shape[0]
    ids = np.stack([rng.permutation(5)[:3] for _ in range(rows)]) if rows else np.zeros((0, 3), np.int64)
    return [Sample([x, Index(ids.astype(np.int64)), values(rng, dtype, (rows, 3))], {"dim": 1})]


def _index_add_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (4, 5)))
    return [Sample([x, Index(rng.integers(0, 5, size=3)), values(rng, dtype, (x.shape[0], 3))], {"dim": 1})]


def _np_scatter(x, ids, src, dim, add=False):
    out = x.copy()
    idx = list(np.indices(ids.shape))
    idx[dim] = ids
    (np.add.at(out, tuple(idx), src) if add else out.__setitem__(tuple(idx), src))
    return out


def _np_index_add(x, ids, src, dim):
    out = x.copy()
    np.add.at(np.moveaxis(out, dim, 0), ids, np.moveaxis(src, dim, 0))
    return out


def _mask_samples(rng, dtype, layout):
    x = values(rng, dtype, shape_for(layout, (3, 5)))
    return [Sample([x, Index(rng.random(x.shape) > 0.5)]), Sample([x, Index((rng.random(x.shape[-1:]) > 0.5)
                                                                            .astype(np.uint8))])]


def _setitem(index_of, value):
    """x[index] = value on a target (index_of(x) builds the index)."""
    def call(x, *operands):
        t = _target(x)
        t[index_of(t, *operands)] = value(t, *operands) if callable(value) else value
        return t

    return call


def _np_setitem(index_of, value):
    def ref(x, *operands):
        out = x.copy()
        out[index_of(out, *operands)] = value(out, *operands) if callable(value) else value
        return out

    return ref


_ROWS = lambda t, *_: slice(1, None, 2)  # noqa: E731
_PART = lambda t, y: y[1::2] if y.ndim == t.ndim else y  # noqa: E731  (y's rows under _ROWS, or y broadcast)
_PICK = lambda t, *_: (slice(None), [4, 0]) if t.ndim == 2 else [0]  # noqa: E731

OPS = [
    OpInfo("add_", _inplace("add_"), lambda x, y: x + y, ALL, _fits(simple(2)), kernel=("add", "copy")),
    OpInfo("add_alpha", _inplace("add_", alpha=2), lambda x, y: x + 2 * y, ALL, _fits(simple(2, int_range=(0, 9))),
           kernel="add"),
    OpInfo("sub_", _inplace("sub_"), lambda x, y: x - y, ALL, _fits(simple(2)), kernel="sub"),
    OpInfo("mul_", _inplace("mul_"), lambda x, y: x * y, ALL, _fits(simple(2)), kernel="mul"),
    OpInfo("div_", _inplace("div_"), lambda x, y: x / y, FLOATS, _fits(simple(2, nonzero_last=True)), kernel="div"),
    OpInfo("iadd_scalar", lambda x: _iadd(_target(x), 3), lambda x: x + 3, ALL, kernel="affine"),
    OpInfo("imul", lambda x, y: _imul(_target(x), y), lambda x, y: x * y, ALL, _fits(simple(2)), kernel="mul"),
    OpInfo("pow_", _inplace("pow_", 2.0), lambda x: x**2.0, FLOATS, kernel="powf"),
    OpInfo("clamp_", _inplace("clamp_", -0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75), FLOATS, kernel="clamp"),
    OpInfo("clamp_min_", _inplace("clamp_min_", 2), lambda x: np.maximum(x, 2).astype(x.dtype), INTS,
           kernel="clamp", grad=False),
    OpInfo("relu_", _inplace("relu_"), lambda x: np.maximum(x, 0), FLOATS, kernel="relu"),
    OpInfo("tanh_", _inplace("tanh_"), np.tanh, FLOATS, kernel="tanh"),
    OpInfo("exp_", _inplace("exp_"), np.exp, FLOATS, kernel="exp"),
    OpInfo("neg_", _inplace("neg_"), np.negative, ALL, kernel="neg"),
    OpInfo("zero_", _inplace("zero_"), np.zeros_like, WITH_BOOL, kernel="fill", grad=False),  # cut from the graph
    OpInfo("fill_", _inplace("fill_", 1), np.ones_like, WITH_BOOL, kernel="fill", grad=False),
    OpInfo("copy_", lambda x, y: _target(x).copy_(y), lambda x, y: np.broadcast_to(y, x.shape), WITH_BOOL,
           _fits(simple(2)), kernel="copy"),
    OpInfo("masked_fill_", _inplace("masked_fill_", value=7), lambda x, m: np.where(m != 0, 7, x).astype(x.dtype),
           ALL, _mask_samples, kernel="where"),
    OpInfo("scatter_", lambda x, ids, src, dim: _target(x).scatter_(dim, ids, src),
           lambda x, ids, src, dim: _np_scatter(x, ids, src, dim), WITH_BOOL, _scatter_samples, NONSCALAR, kernel="scatter"),
    OpInfo("scatter_add_", lambda x, ids, src, dim: _target(x).scatter_add_(dim, ids, src),
           lambda x, ids, src, dim: _np_scatter(x, ids, src, dim, add=True), ALL, _scatter_samples,
           NONSCALAR, kernel="scatter_add"),
    OpInfo("index_add_", lambda x, ids, src, dim: _target(x).index_add_(dim, ids, src),
           _np_index_add, ALL, _index_add_samples, NONSCALAR, kernel="index_add"),
    OpInfo("setitem_slice", _setitem(_ROWS, 7), _np_setitem(_ROWS, 7), WITH_BOOL, layouts=NONSCALAR, kernel="fill"),
    OpInfo("setitem_tensor", _setitem(_ROWS, _PART), _np_setitem(_ROWS, _PART), ALL,
           _fits(simple(2)), NONSCALAR, kernel="copy"),
    OpInfo("setitem_mask", lambda x, m: _set_mask(_target(x), m), lambda x, m: np.where(m, 0, x).astype(x.dtype),
           WITH_BOOL, lambda rng, dt, lay: [s for s in _mask_samples(rng, dt, lay) if s.inputs[1].array.dtype == bool],
           kernel="where"),
    OpInfo("setitem_list", _setitem(_PICK, 5), _np_setitem(_PICK, 5), WITH_BOOL, kernel="scatter",
           layouts=("contiguous", "transposed", "sliced", "broadcast")),
    OpInfo("scatter_set", lambda x, ids, src, dim: _target(x).scatter_set(ids, src, dim),
           lambda x, ids, src, dim: _np_scatter(x, ids, src, dim), ALL, _scatter_samples, NONSCALAR, kernel="scatter"),
    OpInfo("slice_set", lambda x, y: _target(x).slice_set(y.narrow(1, 0, 2), 1, 1),
           lambda x, y: np.concatenate([x[:, :1], y[:, :2], x[:, 3:]], 1), ALL, _same_shapes,
           NONSCALAR, kernel="copy"),
]


def _iadd(t, v):
    t += v
    return t


def _imul(t, v):
    t *= v
    return t


def _set_mask(t, m):
    t[m.bool()] = 0
    return t


test_op, test_gradient = table_tests(OPS)


# ---- the rules -------------------------------------------------------------------------------------------


def test_aliases_see_the_write(candle_device):
    x = _t(candle_device, [[1.0, 2.0], [3.0, 4.0]])
    view, same = x.t(), x
    same += 1
    x[0, 1] = -1.0
    assert view.values() == [[2.0, 4.0], [-1.0, 5.0]] and same is x


def test_read_only_memory_is_refused_before_any_write(candle_device):
    host = np.arange(4.0, dtype=np.float32)
    host.setflags(write=False)
    x = c.from_numpy(host, device=get_device(candle_device))
    if x._storage.writable:
        pytest.skip("this device copies host arrays: its memory is its own")
    for call in (lambda: x.add_(1), lambda: x.zero_(), lambda: x.copy_(x), lambda: x.__setitem__(0, 1.0)):
        with pytest.raises(ReadOnlyError):
            call()
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_broadcast_view_is_refused(candle_device):
    x = _t(candle_device, [1.0, 2.0]).broadcast_as((3, 2))
    with pytest.raises(InPlaceError, match="broadcast"):
        x.add_(1)


def test_leaves_that_require_grad_are_refused_outside_no_grad(candle_device):
    w = _t(candle_device, [1.0, 2.0]).requires_grad_()
    for call in (lambda: w.add_(1), lambda: w.zero_(), lambda: w[0:1].mul_(2), lambda: w.reshape(2, 1).fill_(0)):
        with pytest.raises(InPlaceError, match="leaf"):
            call()
    with c.no_grad():
        w.mul_(3)
    assert w.values() == [3.0, 6.0] and w.is_leaf


def test_gradients_flow_through_in_place_ops(candle_device):
    a = _t(candle_device, [1.0, -2.0, 3.0], "f64").requires_grad_()
    b = _t(candle_device, [0.5, 0.5, 0.5], "f64").requires_grad_()
    h = a * 2
    h.mul_(b).add_(a).relu_()  # relu_(2ab + a)
    h.sum_all().backward()
    alive = np.array([1.0, 0.0, 1.0])
    np.testing.assert_allclose(a.grad.numpy(), alive * (2 * 0.5 + 1))
    np.testing.assert_allclose(b.grad.numpy(), alive * 2 * np.array([1.0, -2.0, 3.0]))


def test_storages_take_weak_references(candle_device):
    """The version counters of in-place writes live in the core, keyed by storage, and go with it
    (candle_api.autograd.versions): a storage that takes no weak reference leaves its counts to the
    next storage at its address."""
    import gc
    import weakref

    from candle_api.autograd import versions

    t = c.zeros((4,), device=candle_device)
    ref = weakref.ref(t._storage)
    t.add_(1)
    key = id(t._storage)
    assert versions._COUNTS[key][0] == 1
    del t
    gc.collect()
    assert ref() is None and key not in versions._COUNTS


def test_a_saved_tensor_changed_in_place_is_refused(candle_device):
    a = _t(candle_device, [1.0, 2.0], "f64").requires_grad_()
    y = a.exp()           # exp's backward reads its output
    y.add_(1)
    with pytest.raises(InPlaceError, match="modified by an in-place operation"):
        y.sum_all().backward()
    z = a * 1.0
    w = z * z             # mul's backward reads its inputs
    z.mul_(2)
    with pytest.raises(InPlaceError, match="version 1; it was at version 0"):
        w.sum_all().backward()
    x = _t(candle_device, [3.0, 4.0], "f64")
    w = x * a             # x is no graph's, but mul's backward reads it
    x.add_(1)             # written straight into x's memory where the kernel may: counted all the same
    with pytest.raises(InPlaceError, match="modified by an in-place operation"):
        w.sum_all().backward()
    z = a * 1.0
    s = z + a             # add's backward reads no values: the write does not matter to it
    z.zero_()
    s.sum_all().backward()


def test_optimizer_steps_count_as_writes(candle_device):
    from candle_api import optim

    w = _t(candle_device, [1.0, 2.0], "f64").requires_grad_()
    loss = (w * w).sum_all()
    opt = optim.SGD([w], lr=0.1)
    w.grad = _t(candle_device, [1.0, 1.0], "f64")
    opt.step()
    with pytest.raises(InPlaceError):
        loss.backward()


def test_a_view_changed_through_its_base_is_refused(candle_device):
    a = _t(candle_device, [1.0, 2.0, 3.0, 4.0], "f64").requires_grad_()
    b = a * 2
    v = b.reshape(2, 2)
    b.mul_(3)             # v's values change, its graph does not know
    with pytest.raises(InPlaceError, match="another tensor that shares it"):
        v.sum_all().backward()
    b.sum_all().backward()
    assert a.grad.values() == [6.0] * 4


def test_in_place_errors_name_the_problem(candle_device):
    x = _t(candle_device, [1.0, 2.0])
    with pytest.raises(ShapeError, match="broadcasts past it"):
        x.add_(_t(candle_device, [[1.0, 2.0]] * 2))
    with pytest.raises(TypeError):
        x.copy_([1.0, 2.0])
    with pytest.raises(IndexError):
        x[[True]] = 1.0


def test_random_fills_and_mask_assignments(candle_device):
    x = _t(candle_device, np.zeros((64, 32)))
    assert x.uniform_(2.0, 3.0) is x and 2.0 <= x.numpy().min() and x.numpy().max() < 3.0
    x.normal_(5.0, 0.1)
    assert abs(float(x.numpy().mean()) - 5.0) < 0.05
    m = _t(candle_device, [True, False, True], "bool")
    m |= _t(candle_device, [False, True, False], "bool")
    m &= _t(candle_device, [True, True, False], "bool")
    m ^= _t(candle_device, [False, True, True], "bool")
    assert m.values() == [True, False, True] and m.dtype == "bool"
    n = _t(candle_device, [7, -7], "i32")
    n //= 2
    assert n.values() == [3, -4]


# ---- kernels that write over their input ------------------------------------------------------------------


def _operands(rng, op, dtype, n):
    """x (the aliased input) and another operand for op: positive values, divisors from 1."""
    dt = c.get_dtype(dtype)
    lo, hi = (0.1, 3.0) if op not in ("asin", "acos", "atanh") else (-0.9, 0.9)
    if op == "acosh":
        lo, hi = 1.1, 3.0
    if dt.is_float:
        return [rng.uniform(lo, hi, n).astype(dt.np) for _ in range(2)]
    return [rng.integers(1, 6, n).astype(dt.np) for _ in range(2)]


def test_kernels_that_may_write_over_an_input_do_so_exactly(candle_device):
    """Every (op, dtype) whose kernel the device lets write over an input
    (contract rows with ``alias``, a kernel set declaring ``aliasing``) gives,
    with out in that input's memory, the result it gives into fresh memory:
    lengths that end vector loops early and ones the threads split."""
    from candle_api.contract import BY_NAME
    from candle_api.ops.dispatch import OPS, apply
    from candle_api.ops.creation import from_array

    device = get_device(candle_device)
    rng = np.random.default_rng(11)
    checked = 0
    for name, dtype in sorted(device.aliasing, key=lambda k: (k[0], str(k[1]))):
        op, params = OPS[name], {"p0": 0.5, "p1": 2.0} if BY_NAME[name].family == "param" else {}
        for n in (5, 1000, 40001):
            a, b = (from_array(v, dtype, device) for v in _operands(rng, name, str(dtype), n))
            scalar = from_array(b.numpy()[:1].reshape(()), dtype, device)
            cases = [(0, (a,))] if len(BY_NAME[name].alias) == 1 else [
                (0, (a, b)), (1, (b, a)), (0, (a, a)), (0, (a, scalar))]
            for target, inputs in cases:
                want = apply(op, *inputs, **params).numpy()
                inputs = tuple(t.copy() if t is inputs[target] else t for t in inputs)
                x = inputs[target]
                aliased = tuple(x if t is inputs[target] else t for t in inputs)
                _shape, _dtype, args = op.prepare(*aliased, **params)
                device.kernels[(name, dtype)](x._storage, *args)
                np.testing.assert_array_equal(x.numpy(), want, err_msg=f"{name} {dtype} n={n} out = input {target}")
                checked += 1
    assert checked or not device.aliasing


def test_in_place_writes_go_straight_into_the_tensor_where_they_may(candle_device, monkeypatch):
    """x.add_(y), x.mul_(2) and x.exp_() on a contiguous x allocate nothing on
    a device whose kernels may write over their input (one pass); an operand
    elsewhere in x's memory (the same storage, or another over the same
    host buffer), or a target at an offset, takes the two-pass path, with the
    same values."""
    device = get_device(candle_device)
    x = _t(candle_device, np.arange(6.0).reshape(2, 3))
    one = _t(candle_device, [1.0, 1.0, 1.0])
    storage, allocs, alloc = x._storage, [], device.alloc
    monkeypatch.setattr(device, "alloc", lambda n: allocs.append(n) or alloc(n))
    x.add_(one).mul_(2).exp_()
    monkeypatch.undo()
    np.testing.assert_allclose(x.numpy(), np.exp((np.arange(6.0).reshape(2, 3) + 1) * 2), rtol=1e-6)
    assert x._storage is storage
    direct = all((op, c.f32) in device.aliasing for op in ("add", "affine", "exp"))
    assert (not allocs) == direct, f"allocations {allocs} (kernels writing over their input: {direct})"
    y = _t(candle_device, [1.0, 2.0, 3.0, 4.0])
    y.add_(y.flip(0))                        # overlaps y other than as y: read whole before the write
    assert y.values() == [5.0, 5.0, 5.0, 5.0]
    z = _t(candle_device, [1.0, 2.0, 3.0, 4.0])
    z[1:].mul_(z[:3])                        # an offset target, an overlapping operand
    assert z.values() == [1.0, 2.0, 6.0, 12.0]
    base = np.arange(8.0, dtype=np.float32)
    u, v = c.from_numpy(base[1:7], candle_device), c.from_numpy(base[0:6], candle_device)
    u.add_(v)                                # two storages over one buffer where the device shares numpy's memory
    assert u.values() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
