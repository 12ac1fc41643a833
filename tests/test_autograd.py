"""Autograd beyond the conformance suite's finite-difference checks: the Var
and GradStore APIs, grad mode, accumulation, errors, custom ops, and fused
kernels agreeing with their decompositions."""

import threading

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import CandleError, DTypeError
from candle_api.hooks import KernelSet, OpDef, hookimpl
from candle_api.ops.nn import _rope_decomposed


def test_var_api():
    v = c.Var([[1.0, 2.0], [3.0, 4.0]])
    assert v.requires_grad and v.is_leaf and v.grad is None
    assert isinstance(c.Var.zeros(2, 3), c.Var) and c.Var.ones((2,)).shape == (2,)
    assert c.Var.randn(3, 4, std=0.5).shape == (3, 4) and c.Var.rand(2, lo=1, up=2).dtype == c.f32
    t = v.as_tensor()
    assert not t.requires_grad
    v.set(c.Tensor([[5.0, 6.0], [7.0, 8.0]]))
    np.testing.assert_array_equal(t.numpy(), [[5, 6], [7, 8]])  # as_tensor shares the storage
    with pytest.raises(ValueError, match="shape"):
        v.set(c.ones(3))
    with pytest.raises(DTypeError):
        c.Var([1, 2, 3])  # integers cannot carry gradients
    copy = c.Var.from_tensor(t)
    copy.set(c.zeros((2, 2)))
    assert t.numpy()[0, 0] == 5  # from_tensor copies


def test_backward_accumulates_and_returns_a_gradstore():
    w = c.Var([1.0, 2.0, 3.0])
    x = c.Tensor([2.0, 0.5, -1.0])
    store = (w * x).sum_all().backward()
    np.testing.assert_array_equal(store.get(w).numpy(), [2.0, 0.5, -1.0])
    assert w in store and len(store) == 1 and store.get_ids() == [id(w)]
    (w * x).sum_all().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 1.0, -2.0])  # .grad accumulates across calls
    w.grad = None
    ((w * w).sum_all()).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0, 6.0])
    removed = store.remove(w)
    assert removed is not None and store.get(w) is None
    store.insert(w, removed)
    assert store[w] is removed


def test_shared_subexpressions_and_detach():
    a = c.Var([3.0])
    b = a * a  # used twice below
    out = (b + b * a).sum_all()
    out.backward()
    np.testing.assert_allclose(a.grad.numpy(), [2 * 3 + 3 * 9])  # d(a^2 + a^3)/da
    a.grad = None
    (a.detach() * a).sum_all().backward()
    np.testing.assert_allclose(a.grad.numpy(), [3.0])  # the detached factor is a constant


def test_no_grad_and_grad_mode_per_thread():
    w = c.Var([1.0])
    with c.no_grad():
        assert not (w * 2).requires_grad
        seen = []
        t = threading.Thread(target=lambda: seen.append((w * 2).requires_grad))
        t.start()
        t.join()
        assert seen == [True]  # grad mode is per thread, as in PyTorch
    assert (w * 2).requires_grad

    @c.no_grad()
    def infer(v):
        return v * 3

    assert not infer(w).requires_grad
    with c.set_grad_enabled(False):
        with c.enable_grad():
            assert (w * 2).requires_grad
        assert not c.is_grad_enabled()


def test_requires_grad_on_plain_tensors():
    x = c.Tensor([1.0, 2.0]).requires_grad_()
    (x.exp().sum_all()).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]), rtol=1e-6)
    x.requires_grad_(False)
    assert x.grad is None and not x.requires_grad
    with pytest.raises(DTypeError):
        c.Tensor([1, 2]).requires_grad_()


def test_backward_errors():
    with pytest.raises(CandleError, match="does not depend"):
        c.Tensor([1.0]).backward()
    w = c.Var([1.0, 2.0])
    with pytest.raises(CandleError, match="non-scalar"):
        (w * 2).backward()
    store = (w * 2).backward(c.Tensor([1.0, 10.0]))
    np.testing.assert_array_equal(store[w].numpy(), [2.0, 20.0])
    with pytest.raises(CandleError, match="shape"):
        (w * 2).backward(c.ones(3))
    with pytest.raises(ValueError, match="leaf"):
        (w * 2).grad = c.ones(2)


def test_grad_function_on_intermediates():
    x = c.Var([1.0, 2.0])
    y = x * x
    z = (y * 3).sum_all()
    gy, gx = c.autograd.grad(z, [y, x])
    np.testing.assert_array_equal(gy.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(gx.numpy(), [6.0, 12.0])
    assert x.grad is None  # grad() leaves .grad alone
    assert c.autograd.grad(z, c.Var([1.0])) is None


def test_cast_and_half_precision_gradients():
    w = c.Var([1.5, -2.0])
    (w.to_dtype("f64") * 2).sum_all().backward()
    assert w.grad.dtype == c.f32
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0])
    h = c.Var([1.0, 2.0], dtype="bf16")
    ((h * h).sum_all()).backward()
    assert h.grad.dtype == c.bf16
    np.testing.assert_array_equal(h.grad.to_dtype("f32").numpy(), [2.0, 4.0])
    assert not (w.to_dtype("i64")).requires_grad  # integer results carry no gradient


@pytest.mark.parametrize("interleaved", [False, True])
def test_fused_rope_and_norm_gradients_match_decompositions(interleaved):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 8))
    cos, sin = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))

    def grads(fused):
        xs = [c.Tensor(a).requires_grad_() for a in (x, cos, sin)]
        fn = (c.functional.rope_i if interleaved else c.functional.rope) if fused else \
            (lambda a, b, s: _rope_decomposed(a, b, s, interleaved))
        (fn(*xs) * c.Tensor(np.arange(240.0).reshape(2, 3, 5, 8))).sum_all().backward()
        return [t.grad.numpy() for t in xs]

    for got, want in zip(grads(True), grads(False)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


class _ScaleOp:
    """A custom op plugin: 'scale' with a kernel, with or without a backward."""

    def __init__(self, with_backward):
        self.with_backward = with_backward

    @hookimpl
    def candle_api_custom_ops(self, registry):
        backward = (lambda inputs, out, g, factor=2.0: (g * factor,)) if self.with_backward else None
        registry.define(OpDef("scale_ad", infer=lambda x, factor=2.0: (x.shape, x.dtype), backward=backward))

    @hookimpl
    def candle_api_kernels(self, device_type):
        if device_type != "cpu":
            return None

        def kernel(out, inputs, params):
            (storage, layout), = inputs
            src = c.ops.core.make(storage, layout, c.f32, c.get_device("cpu"))
            c.ops.shape.copy_into(c.ops.core.make(out, c.layout.Layout.contig(layout.shape), c.f32,
                                                  c.get_device("cpu")), c.layout.Layout.contig(layout.shape),
                                  src * params.get("factor", 2.0))

        return KernelSet({("scale_ad", "f32"): kernel})


@pytest.mark.parametrize("with_backward", [True, False])
def test_custom_op_gradients_are_never_dropped(with_backward):
    name = c.register_plugin(_ScaleOp(with_backward), "scale_ad_plugin")
    try:
        w = c.Var([1.0, 2.0])
        out = c.custom_op("scale_ad", w, factor=3.0).sum_all()
        if with_backward:
            out.backward()
            np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])
        else:
            with pytest.raises(CandleError, match="has no backward"):
                out.backward()
    finally:
        c.unregister_plugin(name)


@pytest.mark.parametrize("groups,stride,dilation", [(1, 1, 1), (2, 2, 1), (1, 1, 2)])
def test_conv_weight_gradient_kernel_matches_the_decomposition(groups, stride, dilation):
    """Devices without the conv2d_backward_weight kernel compute it as a convolution."""
    from candle_api.ops import conv

    rng = np.random.default_rng(groups)
    x = c.Tensor(rng.standard_normal((3, 4, 9, 8)))
    g = c.Tensor(rng.standard_normal((3, 6, (9 + 2 - 2 * dilation - 1) // stride + 1,
                                      (8 + 2 - 2 * dilation - 1) // stride + 1)))
    args = (x, g, (3, 3), (1, 1), (stride, stride), (dilation, dilation), groups)
    fused = conv._weight_grad(*args)
    params = (3, 4, 9, 8, 6, 3, 3, stride, stride, 1, 1, dilation, dilation, groups, *g.shape[2:], 0, 0)
    decomposed = conv.CONV2D_BACKWARD_WEIGHT.decompose(x, g, params)
    np.testing.assert_allclose(decomposed.numpy(), fused.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype,tol", [("f32", 1e-5), ("f16", 2e-2), ("bf16", 1e-1)])
def test_conv_and_pool_gradients_in_every_float_dtype(dtype, tol):
    """The gradient kernels in the narrower dtypes agree with float64 (the
    conformance suite checks float64 against finite differences)."""
    rng = np.random.default_rng(7)
    x, w = rng.uniform(-1, 1, (2, 4, 9, 8)), rng.uniform(-1, 1, (6, 2, 3, 3))
    cot = rng.standard_normal((2, 6, 4, 4))

    def grads(dt):
        xt, wt = c.Tensor(x).to_dtype(dt).requires_grad_(), c.Tensor(w).to_dtype(dt).requires_grad_()
        y = c.functional.conv2d(xt, wt, padding=1, stride=2, groups=2)
        y = c.functional.max_pool2d(y, 2, 1) + c.functional.avg_pool2d(y, 2, 1)
        (y.to_dtype("f64") * c.Tensor(cot[:, :, :y.shape[2], :y.shape[3]])).sum_all().backward()
        return xt.grad.to_dtype("f64").numpy(), wt.grad.to_dtype("f64").numpy()

    for got, want in zip(grads(dtype), grads("f64")):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_graphs_are_freed_without_the_garbage_collector():
    """No reference cycles: a step's activations go as soon as its loss does
    (otherwise their memory waits for the cycle collector)."""
    import gc
    import weakref

    gc.disable()
    try:
        w = c.Var.randn(8, 8)
        x = c.randn((4, 8))
        h = (x @ w).relu().softmax(-1).log().sigmoid().amax(1)
        out = h.exp().sum_all() / 2
        refs = [weakref.ref(t) for t in (h, out)]
        out.backward()
        del h, out
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
