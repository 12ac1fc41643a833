"""The panels rows of the contract (pack_panels, linear_panels,
conv2d_panels: products with weights packed once) against float64 NumPy
references, on shapes that reach every edge of a blocked kernel (a single
row, sizes that are not multiples of a tile or a panel, strided inputs,
groups, depthwise, strides, dilations, pointwise images read in place and
outputs with fewer pixels than a vector has lanes), with each activation,
a residual and an output affine; their gradients through the
decompositions; and the errors of the front ends."""

import math

import numpy as np
import pytest

from candle_api.contract import ACTIVATIONS
from candle_api.device import get_device
from candle_api.errors import DTypeError, ShapeError
from candle_api.ops import panels
from candle_api.ops.creation import from_numpy
from candle_api.autograd.engine import grad as autograd_grad
from candle_api.autograd.graph import enable_grad

#: The kernels these tests exercise (for test_coverage).
KERNELS = {("pack_panels", "f32"), ("linear_panels", "f32"), ("conv2d_panels", "f32")}


def _erf(x):
    return np.vectorize(math.erf)(x)


#: the contract's activations in float64, with the alpha and beta they are tested with
REFERENCE = {
    "none": (lambda x, a, b: x, 0.0, 0.0),
    "relu": (lambda x, a, b: np.maximum(x, 0), 0.0, 0.0),
    "leaky_relu": (lambda x, a, b: np.where(x > 0, x, a * x), 0.1, 0.0),
    "clip": (lambda x, a, b: np.clip(x, a, b), -0.5, 0.75),
    "sigmoid": (lambda x, a, b: 1 / (1 + np.exp(-x)), 0.0, 0.0),
    "hard_sigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "hard_swish": (lambda x, a, b: x * np.clip(x / 6 + 0.5, 0, 1), 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), 0.0, 0.0),
    "gelu_erf": (lambda x, a, b: x / 2 * (1 + _erf(x / math.sqrt(2))), 0.0, 0.0),
    "silu": (lambda x, a, b: x / (1 + np.exp(-x)), 0.0, 0.0),
}


def test_every_activation_has_a_reference():
    assert set(REFERENCE) == set(ACTIVATIONS)


def _check(ours, want, bound):
    """|ours - want| within f32 roundings of a sum whose terms have magnitude ``bound``."""
    err = np.abs(ours.astype(np.float64) - want)
    assert (err <= 2e-6 * bound + 1e-6).all(), f"max error {err.max():.3g} (bound {bound.max():.3g})"


def _tensor(device, arr):
    return from_numpy(np.ascontiguousarray(arr, np.float32)).to_device(device)


@pytest.mark.parametrize("rows,depth,batch", [(1, 1, 1), (16, 5, 1), (37, 70, 2), (3, 200, 3)])
def test_pack_panels(candle_device, rows, depth, batch):
    device = get_device(candle_device)
    w = np.random.default_rng(0).standard_normal((batch, depth, rows)).astype(np.float32)
    got = panels.pack_panels(_tensor(device, w).transpose(1, 2)).numpy()  # a strided (batch, rows, depth) view
    padded = np.zeros((batch, -(-rows // 16) * 16, depth), np.float32)
    padded[:, :rows] = w.transpose(0, 2, 1)
    np.testing.assert_array_equal(got, padded.reshape(batch, -1, 16, depth).transpose(0, 1, 3, 2))
    back = panels.unpack_panels(_tensor(device, got), rows).numpy()
    np.testing.assert_array_equal(back, w.transpose(0, 2, 1))


LINEAR_SHAPES = [(1, 1, 1), (1, 128, 512), (7, 33, 50), (24, 384, 96), (65, 17, 33), (3, 5, 16)]


@pytest.mark.parametrize("m,k,n", LINEAR_SHAPES)
@pytest.mark.parametrize("act", sorted(REFERENCE))
def test_linear_panels(candle_device, m, k, n, act):
    device = get_device(candle_device)
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (n,)))
    fn, alpha, beta = REFERENCE[act]
    wp = panels.pack_panels(_tensor(device, w).t())
    y = panels.linear_panels(_tensor(device, x), wp, n, _tensor(device, b), act, alpha, beta).numpy()
    pre = x.astype(np.float64) @ w + b
    _check(y, fn(pre, alpha, beta), np.abs(x) @ np.abs(w) + np.abs(b))


def test_linear_panels_leading_dims_and_strides(candle_device):
    device = get_device(candle_device)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 5, 20)).astype(np.float32), rng.standard_normal((20, 19)).astype(np.float32)
    wp = panels.pack_panels(_tensor(device, w).t())
    for view in (_tensor(device, x), _tensor(device, x.transpose(0, 2, 1, 3)).transpose(1, 2),
                 _tensor(device, x.transpose(3, 0, 1, 2)).permute(1, 2, 3, 0)):
        y = panels.linear_panels(view, wp, 19).numpy()
        assert y.shape == (2, 3, 5, 19)
        _check(y, x.astype(np.float64) @ w, np.abs(x) @ np.abs(w))
    _check(panels.linear_panels(_tensor(device, x[0, 0, 0]), wp, 19).numpy(), x[0, 0, 0] @ w.astype(np.float64),
           np.abs(x[0, 0, 0]) @ np.abs(w))


def _conv_ref(x, w, b, stride, pad, dilation, groups):
    """float64 conv2d: out[n, o, i, j] = sum over the group's channels and taps."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, cout, oh, ow))
    bound = np.zeros_like(out)
    cout_g = cout // groups
    for o in range(cout):
        g = o // cout_g
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g * cin_g:(g + 1) * cin_g, i * dilation[0]:i * dilation[0] + (oh - 1) * stride[0] + 1:
                          stride[0], j * dilation[1]:j * dilation[1] + (ow - 1) * stride[1] + 1:stride[1]]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
                bound[:, o] += np.einsum("nchw,c->nhw", np.abs(patch), np.abs(w[o, :, i, j]))
    return out + b.reshape(1, -1, 1, 1), bound + np.abs(b).reshape(1, -1, 1, 1)


CONV_CASES = [  # (batch, cin, h, w, cout, kh, kw, stride, pad, dilation, groups)
    (1, 3, 30, 41, 16, 3, 3, (2, 2), (1, 1), (1, 1), 1),     # a stem
    (2, 8, 9, 11, 12, 3, 3, (2, 1), (1, 0), (1, 1), 2),      # groups, uneven strides and pads
    (1, 16, 17, 13, 16, 3, 3, (2, 2), (1, 1), (1, 1), 16),   # depthwise, strided
    (1, 24, 7, 40, 24, 5, 5, (1, 1), (2, 2), (1, 1), 24),    # depthwise 5x5
    (1, 16, 9, 11, 16, 3, 3, (1, 1), (1, 1), (1, 1), 16),    # depthwise, an odd count of phase floats
    (1, 17, 7, 70, 17, 3, 3, (1, 1), (1, 1), (1, 1), 17),    # depthwise 3x3 by rows: 4, 2 and 1, runs and a tail
    (1, 9, 17, 37, 9, 3, 3, (2, 1), (1, 1), (1, 1), 9),      # the same two rows down, a column stride of 1
    (1, 11, 6, 50, 11, 5, 5, (2, 1), (2, 2), (1, 1), 11),    # depthwise 5x5 two rows down: 2 and 1 rows
    (1, 10, 6, 45, 10, 5, 5, (1, 2), (2, 2), (1, 1), 10),    # depthwise 5x5 by rows, columns two apart
    (2, 20, 4, 6, 20, 5, 5, (1, 1), (2, 2), (1, 1), 20),     # depthwise, small planes 16 channels at a time
    (1, 18, 5, 5, 18, 3, 3, (2, 2), (1, 1), (2, 1), 18),     # the same, strided and dilated
    (1, 32, 6, 9, 40, 1, 1, (1, 1), (0, 0), (1, 1), 1),      # pointwise, the image read in place
    (1, 40, 2, 3, 33, 1, 1, (1, 1), (0, 0), (1, 1), 1),      # fewer pixels than lanes: transposed
    (1, 4, 1, 100, 6, 1, 5, (1, 1), (0, 4), (1, 2), 1),      # 1-d, dilated: the taps read the padded rows
    (1, 8, 1, 300, 20, 1, 5, (1, 1), (0, 2), (1, 1), 1),     # 1-d and long: its row split into runs of tiles
    (2, 12, 10, 37, 20, 3, 3, (2, 1), (1, 2), (1, 2), 2),    # the same with groups and a row stride
    (1, 5, 4, 4, 7, 4, 4, (1, 1), (0, 0), (1, 1), 1),        # one output pixel
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[:7])))
@pytest.mark.parametrize("act", ["none", "relu", "hard_swish", "silu"])
def test_conv2d_panels(candle_device, case, act):
    device = get_device(candle_device)
    b_, cin, h, wd, cout, kh, kw, stride, pad, dilation, groups = case
    rng = np.random.default_rng(sum(case[:7]))
    x = rng.standard_normal((b_, cin, h, wd)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    pre, bound = _conv_ref(x, w, b, stride, pad, dilation, groups)
    res = rng.standard_normal(pre.shape).astype(np.float32)
    fn, alpha, beta = REFERENCE[act]
    wp = panels.conv_weights(_tensor(device, w), groups)
    y = panels.conv2d_panels(_tensor(device, x), wp, w.shape, _tensor(device, b), _tensor(device, res), pad, stride,
                             dilation, groups, act, alpha, beta, 0.5, -1.0).numpy()
    _check(y, fn(pre + res, alpha, beta) * 0.5 - 1.0, bound + np.abs(res))
    plain = panels.conv2d_panels(_tensor(device, x), wp, w.shape, None, None, pad, stride, dilation, groups).numpy()
    _check(plain, pre - b.reshape(1, -1, 1, 1), bound)


def test_conv2d_panels_strided_input(candle_device):
    device = get_device(candle_device)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6, 10, 20)).astype(np.float32)
    w = rng.standard_normal((8, 6, 3, 3)).astype(np.float32)
    view = _tensor(device, x.transpose(0, 1, 3, 2)).transpose(2, 3)  # width-major memory
    y = panels.conv2d_panels(view, panels.conv_weights(_tensor(device, w), 1), w.shape, padding=1).numpy()
    pre, bound = _conv_ref(x, w, np.zeros(8, np.float32), (1, 1), (1, 1), (1, 1), 1)
    _check(y, pre, bound)


def test_gradients_follow_the_decompositions(candle_device):
    device = get_device(candle_device)
    rng = np.random.default_rng(4)
    x = _tensor(device, rng.standard_normal((3, 7))).requires_grad_()
    w = _tensor(device, rng.standard_normal((7, 5))).requires_grad_()
    b = _tensor(device, rng.standard_normal(5)).requires_grad_()
    with enable_grad():
        y = panels.linear_panels(x, panels.pack_panels(w.t()), 5, b, "gelu_erf")
        z = panels.activate(x @ w + b, "gelu_erf")
    g = _tensor(device, rng.standard_normal((3, 5)))
    for ours, want in zip(autograd_grad(y, [x, w, b], g), autograd_grad(z, [x, w, b], g)):
        np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_errors(candle_device):
    device = get_device(candle_device)
    w = _tensor(device, np.ones((4, 3)))
    wp = panels.pack_panels(w)
    with pytest.raises(ShapeError, match="depth"):
        panels.linear_panels(_tensor(device, np.ones((2, 4))), wp, 4)
    with pytest.raises(ShapeError, match="not the packing of 40 rows"):
        panels.linear_panels(_tensor(device, np.ones((2, 3))), wp, 40)
    with pytest.raises(ShapeError, match=r"bias must have shape \(4,\)"):
        panels.linear_panels(_tensor(device, np.ones((2, 3))), wp, 4, _tensor(device, np.ones(3)))
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        panels.linear_panels(_tensor(device, np.ones((2, 3))), wp, 4, act="swish")
    with pytest.raises(DTypeError, match="f32"):
        panels.pack_panels(from_numpy(np.ones((4, 3))).to_device(device))
    kernel = _tensor(device, np.ones((4, 2, 3, 3)))
    with pytest.raises(ShapeError, match="packed weights"):
        panels.conv2d_panels(_tensor(device, np.ones((1, 2, 5, 5))), panels.conv_weights(kernel, 1), (4, 2, 1, 1))
    with pytest.raises(ShapeError, match="residual"):
        panels.conv2d_panels(_tensor(device, np.ones((1, 2, 5, 5))), panels.conv_weights(kernel, 1), (4, 2, 3, 3),
                             residual=_tensor(device, np.ones((1, 4, 5, 5))))
