"""The nn modules PyTorch users expect (issue 21): pooling, Flatten/Unflatten,
Identity, PReLU, Softmax/LogSoftmax, LSTMCell/GRUCell, multi-layer
bidirectional GRU, MultiheadAttention and TransformerEncoderLayer, each
against a NumPy reference written here with the same weights (loaded under
PyTorch's state_dict keys), plus errors and finite-difference gradient checks."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api import nn
from candle_api.errors import DTypeError, ShapeError

RTOL, ATOL = 1e-5, 1e-5
FIXTURES = Path(__file__).parent / "fixtures"


def rng(seed=0):
    return np.random.default_rng(seed)


def assert_close(actual, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(actual.numpy() if isinstance(actual, c.Tensor) else actual, expected, rtol, atol)


def randomize(module, seed=0):
    """Random weights (in [-0.5, 0.5)) for every parameter, loaded through the
    state dict; returns them as float64 NumPy arrays under their keys."""
    r = rng(seed)
    state = {k: r.uniform(-0.5, 0.5, v.shape) for k, v in module.state_dict().items()}
    module.load_state_dict(state)
    return state


def flat(out):
    """A module's tensor outputs as a list: (y, (h, c)) -> [y, h, c]; None dropped."""
    if out is None:
        return []
    if isinstance(out, c.Tensor):
        return [out]
    return [t for o in out for t in flat(o)]


def gradcheck(module, *arrays, call=None, seed=0):
    """The gradients of sum(outputs * cotangents) for every input and
    parameter, against central differences, in float64."""
    module.to(c.f64)
    call = call or (lambda m, *xs: m(*xs))
    xs = [c.Tensor(a.astype(np.float64)).requires_grad_() for a in arrays]
    outs = flat(call(module, *xs))
    r = rng(seed)
    cots = [r.standard_normal(o.shape) for o in outs]
    sum((o * c.Tensor(k)).sum_all() for o, k in zip(outs, cots)).backward()

    def value():
        with c.no_grad():
            got = flat(call(module, *[c.Tensor(a) for a in current]))
        return sum(float((o.numpy() * k).sum()) for o, k in zip(got, cots))

    current = [a.astype(np.float64) for a in arrays]
    leaves = [(x.grad, current[i], None) for i, x in enumerate(xs)]
    leaves += [(p.grad, p.numpy().copy(), p) for p in module.parameters()]
    for grad, array, param in leaves:
        numeric = np.zeros_like(array)
        flat_a, flat_n = array.reshape(-1), numeric.reshape(-1)
        for i in range(flat_a.size):
            x = flat_a[i]
            eps = 1e-6 * max(1.0, abs(x))
            values = []
            for v in (x + eps, x - eps):
                flat_a[i] = v
                if param is not None:
                    param.set(c.Tensor(array))
                values.append(value())
            flat_a[i] = x
            if param is not None:
                param.set(c.Tensor(array))
            flat_n[i] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(np.zeros_like(numeric) if grad is None else grad.numpy(), numeric,
                                   rtol=1e-5, atol=1e-7)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, dim=-1):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


# ---- pooling ------------------------------------------------------------------------------------

def pool_ref(x, k, s, p, mode, ceil_mode=False, count_include_pad=True):
    """PyTorch's max/avg pooling over (N, C, H, W), window by window."""
    (kh, kw), (sh, sw), (ph, pw) = k, s, p
    n, ch, h, w = x.shape

    def out_size(size, k, s, p):
        o = (size + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
        return o - 1 if ceil_mode and (o - 1) * s >= size + p else o

    oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
    y = np.zeros((n, ch, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - ph, j * sw - pw
            h1, w1 = min(h0 + kh, h + ph), min(w0 + kw, w + pw)
            padded = (h1 - h0) * (w1 - w0)
            win = x[:, :, max(h0, 0):min(h1, h), max(w0, 0):min(w1, w)]
            if mode == "max":
                y[:, :, i, j] = win.max((2, 3))
            else:
                y[:, :, i, j] = win.sum((2, 3)) / (padded if count_include_pad else win.shape[2] * win.shape[3])
    return y


@pytest.mark.parametrize("kwargs, ref", [
    (dict(kernel_size=3), ((3, 3), (3, 3), (0, 0))),  # stride defaults to the kernel
    (dict(kernel_size=(3, 2), stride=(2, 1), padding=1), ((3, 2), (2, 1), (1, 1))),
    (dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), ((3, 3), (2, 2), (1, 1))),
])
def test_max_and_avg_pool_match_reference(kwargs, ref):
    x = rng().standard_normal((2, 3, 7, 9)).astype(np.float32)
    ceil = kwargs.get("ceil_mode", False)
    assert_close(nn.MaxPool2d(**kwargs)(c.Tensor(x)), pool_ref(x, *ref, "max", ceil))
    for include in (True, False):
        got = nn.AvgPool2d(**kwargs, count_include_pad=include)(c.Tensor(x))
        assert_close(got, pool_ref(x, *ref, "avg", ceil, include))
    assert_close(nn.MaxPool2d(**kwargs)(c.Tensor(x[0])), pool_ref(x[:1], *ref, "max", ceil)[0])  # unbatched


def adaptive_ref(x, oh, ow):
    h, w = x.shape[-2:]
    y = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, he = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
            ws, we = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            y[..., i, j] = x[..., hs:he, ws:we].mean((-2, -1))
    return y


@pytest.mark.parametrize("size, out, expected", [
    ((7, 5), (3, 4), (3, 4)),  # no divisors: overlapping windows
    ((6, 9), (3, 3), (3, 3)),
    ((4, 5), (6, 7), (6, 7)),  # larger than the input
    ((7, 5), 1, (1, 1)),  # global average pooling
    ((7, 5), (None, 2), (7, 2)),  # None keeps the input's size
])
def test_adaptive_avg_pool_any_output_size(size, out, expected):
    x = rng().standard_normal((2, 3) + size)
    pool = nn.AdaptiveAvgPool2d(out)
    assert_close(pool(c.Tensor(x)), adaptive_ref(x, *expected), 1e-12, 1e-12)
    assert_close(pool(c.Tensor(x[0])), adaptive_ref(x[0], *expected), 1e-12, 1e-12)
    assert_close(nn.functional.adaptive_avg_pool2d(c.Tensor(x), out), adaptive_ref(x, *expected), 1e-12, 1e-12)


def test_pooling_gradients_and_errors():
    x = rng().standard_normal((1, 2, 5, 4))
    gradcheck(nn.AdaptiveAvgPool2d((3, 3)), x)
    gradcheck(nn.AvgPool2d(3, 2, 1), x)
    gradcheck(nn.MaxPool2d(2, 1), x)
    with pytest.raises(ShapeError, match=r"adaptive_avg_pool2d: expected a 3-d or 4-d input, got shape \(5, 4\)"):
        nn.AdaptiveAvgPool2d(2)(c.randn((5, 4)))
    with pytest.raises(ShapeError, match="output size"):
        nn.AdaptiveAvgPool2d((0, 2))(c.randn((1, 5, 4)))
    with pytest.raises(ShapeError, match="too small"):
        nn.MaxPool2d(5)(c.randn((1, 1, 3, 3)))
    with pytest.raises(NotImplementedError, match="divisor_override"):
        nn.AvgPool2d(2, divisor_override=3)
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, ceil_mode=False, dilation=1)"


def test_max_pool_indices_match_pytorch():
    """First maximum of each window (the last NaN where there is one), as flat
    indices into each input plane: PyTorch's, from tests/fixtures/make_torch_pool_indices.py."""
    data = np.load(FIXTURES / "torch_pool_indices.npz")
    for n, config in enumerate(json.loads(str(data["config"]))):
        x = data[f"x{n}"]
        pool = nn.MaxPool2d(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()},
                            return_indices=True)
        out, idx = pool(c.Tensor(x))
        np.testing.assert_array_equal(out.numpy(), data[f"out{n}"])
        assert idx.dtype == "u32"
        np.testing.assert_array_equal(idx.numpy(), data[f"idx{n}"])
    values, indices = c.functional.max_pool2d(c.Tensor(x), 2, return_indices=True)  # candle-pyo3's stride 1
    assert values.shape == indices.shape == (3, 5, 5)


# ---- shape layers, PReLU, softmax ----------------------------------------------------------------

def test_flatten_unflatten_identity():
    x = rng().standard_normal((2, 3, 5, 7))
    assert_close(nn.Flatten()(c.Tensor(x)), x.reshape(2, -1), 0, 0)
    assert_close(nn.Flatten(0, 2)(c.Tensor(x)), x.reshape(30, 7), 0, 0)
    assert_close(nn.Unflatten(1, (3, 5))(c.Tensor(x.reshape(2, 15, 7))), x, 0, 0)
    assert_close(nn.Unflatten(-1, (-1, 7))(c.Tensor(x.reshape(2, 3, 35))), x, 0, 0)
    t = c.Tensor(x)
    assert nn.Identity(3, any="thing")(t) is t
    model = nn.Sequential(nn.Flatten(), nn.Unflatten(1, (3, 35)))
    assert model(t).shape == (2, 3, 35)
    with pytest.raises(ShapeError, match=r"Unflatten: dim 1 of an input of shape \(2, 16\) has size 16, which does "
                                         r"not unflatten to \(3, 5\)"):
        nn.Unflatten(1, (3, 5))(c.randn((2, 16)))
    with pytest.raises(ShapeError, match="one -1"):
        nn.Unflatten(1, (-1, -1))
    gradcheck(nn.Sequential(nn.Flatten(), nn.Unflatten(1, (2, 6))), x[:1, :2, :2, :3])


def test_prelu():
    x = rng().standard_normal((2, 3, 4, 5)).astype(np.float32)
    one = nn.PReLU()
    assert list(one.state_dict()) == ["weight"] and one.weight.shape == (1,)
    assert_close(one(c.Tensor(x)), np.where(x > 0, x, 0.25 * x))  # PyTorch's initial slope
    per_channel = nn.PReLU(3)
    w = randomize(per_channel)["weight"]
    assert_close(per_channel(c.Tensor(x)), np.where(x > 0, x, w.reshape(3, 1, 1) * x))
    assert_close(per_channel(c.Tensor(x[0, :, 0, 0])), np.where(x[0, :, 0, 0] > 0, x[0, :, 0, 0], w * x[0, :, 0, 0]))
    with pytest.raises(ShapeError, match=r"prelu: 3 slopes for an input of shape \(2, 4\)"):
        per_channel(c.randn((2, 4)))
    gradcheck(nn.PReLU(3), x[:1, :, :2, :2].astype(np.float64) + 0.05)  # away from the kink at 0


def test_softmax_modules():
    x = rng().standard_normal((2, 3, 4))
    for dim in (0, 1, -1):
        assert_close(nn.Softmax(dim)(c.Tensor(x)), softmax(x, dim), 1e-12, 1e-12)
        assert_close(nn.LogSoftmax(dim)(c.Tensor(x)), np.log(softmax(x, dim)), 1e-12, 1e-12)
    assert_close(nn.Softmax()(c.Tensor(x)), softmax(x, 0), 1e-12, 1e-12)  # PyTorch's implicit dim: 0 for 3-d
    assert_close(nn.LogSoftmax()(c.Tensor(x[0])), np.log(softmax(x[0], 1)), 1e-12, 1e-12)  # and 1 for 2-d
    gradcheck(nn.LogSoftmax(1), x[:1])
    gradcheck(nn.Softmax(-1), x[:1])


# ---- recurrent cells and GRU ------------------------------------------------------------------------

def lstm_cell_ref(x, h, cs, p, suffix=""):
    gates = x @ p["weight_ih" + suffix].T + h @ p["weight_hh" + suffix].T
    if "bias_ih" + suffix in p:
        gates = gates + p["bias_ih" + suffix] + p["bias_hh" + suffix]
    i, f, g, o = np.split(gates, 4, -1)
    cs = sigmoid(f) * cs + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(cs), cs


def gru_cell_ref(x, h, p, suffix=""):
    xw, hw = x @ p["weight_ih" + suffix].T, h @ p["weight_hh" + suffix].T
    if "bias_ih" + suffix in p:
        xw, hw = xw + p["bias_ih" + suffix], hw + p["bias_hh" + suffix]
    (xr, xz, xn), (hr, hz, hn) = np.split(xw, 3, -1), np.split(hw, 3, -1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * h


@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_reference(bias):
    r = rng(1)
    x, h, cs = r.standard_normal((3, 5)), r.standard_normal((3, 7)), r.standard_normal((3, 7))
    lstm, gru = nn.LSTMCell(5, 7, bias=bias), nn.GRUCell(5, 7, bias=bias)
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
    assert list(lstm.state_dict()) == names and list(gru.state_dict()) == names
    assert lstm.weight_ih.shape == (28, 5) and gru.weight_hh.shape == (21, 7)
    bound = 1 / math.sqrt(7)
    assert all(np.abs(p.numpy()).max() <= bound for p in lstm.parameters())
    pl, pg = randomize(lstm, 2), randomize(gru, 3)
    h1, c1 = lstm(c.Tensor(x.astype(np.float32)), (c.Tensor(h.astype(np.float32)), c.Tensor(cs.astype(np.float32))))
    eh, ec = lstm_cell_ref(x, h, cs, pl)
    assert_close(h1, eh)
    assert_close(c1, ec)
    assert_close(gru(c.Tensor(x.astype(np.float32)), c.Tensor(h.astype(np.float32))), gru_cell_ref(x, h, pg))
    zeros = np.zeros((3, 7))
    assert_close(lstm(c.Tensor(x.astype(np.float32)))[0], lstm_cell_ref(x, zeros, zeros, pl)[0])  # no hx: zeros
    assert_close(gru(c.Tensor(x[0].astype(np.float32))), gru_cell_ref(x[:1], zeros[:1], pg)[0])  # unbatched
    h1, c1 = lstm(c.Tensor(x[0].astype(np.float32)), (c.Tensor(h[0].astype(np.float32)),
                                                        c.Tensor(cs[0].astype(np.float32))))
    assert h1.shape == c1.shape == (7,)
    assert_close(c1, lstm_cell_ref(x[:1], h[:1], cs[:1], pl)[1][0])


def test_cell_errors_and_gradients():
    with pytest.raises(ShapeError, match=r"LSTMCell: expected a 1-d or 2-d input with 5 features in the last dim, "
                                         r"got shape \(3, 4\)"):
        nn.LSTMCell(5, 7)(c.randn((3, 4)))
    with pytest.raises(ShapeError, match=r"GRUCell: state of shape \(2, 7\), expected \(3, 7\)"):
        nn.GRUCell(5, 7)(c.randn((3, 5)), c.randn((2, 7)))
    with pytest.raises(ShapeError, match="hx must hold 2 tensors"):
        nn.LSTMCell(5, 7)(c.randn((3, 5)), (c.randn((3, 7)),))
    assert repr(nn.GRUCell(5, 7, bias=False)) == "GRUCell(5, 7, bias=False)"
    r = rng(4)
    x, h, cs = r.standard_normal((2, 3)), r.standard_normal((2, 4)), r.standard_normal((2, 4))
    gradcheck(nn.LSTMCell(3, 4), x, h, cs, call=lambda m, x, h, cs: m(x, (h, cs)))
    gradcheck(nn.GRUCell(3, 4), x, h)


def gru_ref(x, h0, p, layers, directions):
    """(T, N, F) input, (layers * directions, N, H) initial state."""
    finals = []
    for layer in range(layers):
        outs = []
        for d in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            h, ys = h0[layer * directions + d], [None] * len(x)
            for t in (reversed(range(len(x))) if d else range(len(x))):
                h = ys[t] = gru_cell_ref(x[t], h, p, suffix)
            outs.append(np.stack(ys))
            finals.append(h)
        x = np.concatenate(outs, -1)
    return x, np.stack(finals)


@pytest.mark.parametrize("layers, bidirectional, batch_first", [
    (1, False, False), (2, True, False), (3, True, True), (2, False, True),
])
def test_gru_multi_layer_bidirectional(layers, bidirectional, batch_first):
    directions = 2 if bidirectional else 1
    gru = nn.GRU(3, 5, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    p = randomize(gru, layers)
    r = rng(5)
    x, h0 = r.standard_normal((7, 2, 3)), r.standard_normal((layers * directions, 2, 5))
    expected, hn = gru_ref(x, h0, p, layers, directions)
    xin = x.transpose(1, 0, 2) if batch_first else x
    out, h = gru(c.Tensor(xin.astype(np.float32)), c.Tensor(h0.astype(np.float32)))
    assert_close(out, expected.transpose(1, 0, 2) if batch_first else expected)
    assert_close(h, hn)
    gradcheck(nn.GRU(2, 2, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first),
              r.standard_normal((2, 3, 2)))


# ---- attention -------------------------------------------------------------------------------------

def mha_ref(q, k, v, p, heads, key_padding_mask=None, attn_mask=None, average=True, bias_kv=False, zero_attn=False):
    """PyTorch's multi_head_attention_forward in NumPy over (N, L, E) inputs;
    u8 masks mark the keys to ignore."""
    e = q.shape[-1]
    if "in_proj_weight" in p:
        wq, wk, wv = np.split(p["in_proj_weight"], 3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq, bk, bv = np.split(p["in_proj_bias"], 3) if "in_proj_bias" in p else (0, 0, 0)
    q, k, v = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    n, l, s = q.shape[0], q.shape[1], k.shape[1]
    mask = np.zeros((n, heads, l, s))
    for m, shape in ((key_padding_mask, (n, 1, 1, s)), (attn_mask, (-1, 1 if attn_mask is not None and
                                                                       attn_mask.ndim == 2 else heads, l, s))):
        if m is not None:
            mask = mask + (np.where(m, -np.inf, 0.0) if m.dtype == np.uint8 else m).reshape(shape)
    if bias_kv:
        k = np.concatenate([k, np.broadcast_to(p["bias_k"], (n, 1, e))], 1)
        v = np.concatenate([v, np.broadcast_to(p["bias_v"], (n, 1, e))], 1)
        mask = np.concatenate([mask, np.zeros(mask.shape[:-1] + (1,))], -1)
    d = e // heads
    q, k, v = (t.reshape(n, t.shape[1], heads, d).transpose(0, 2, 1, 3) for t in (q, k, v))
    if zero_attn:
        k = np.concatenate([k, np.zeros((n, heads, 1, d))], 2)
        v = np.concatenate([v, np.zeros((n, heads, 1, d))], 2)
        mask = np.concatenate([mask, np.zeros(mask.shape[:-1] + (1,))], -1)
    w = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask)
    out = (w @ v).transpose(0, 2, 1, 3).reshape(n, l, e) @ p["out_proj.weight"].T
    if "out_proj.bias" in p:
        out = out + p["out_proj.bias"]
    return out, (w.mean(1) if average else w)


def seq_major(a, batch_first):
    """(N, L, E) as the module takes it."""
    return a if batch_first else a.transpose(1, 0, 2)


def f32(a):
    return c.Tensor(np.ascontiguousarray(a, dtype=np.float32))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "padding", "attn2d", "attn3d_float", "both"])
def test_multihead_self_attention(batch_first, masks):
    n, l, e, heads = 3, 5, 6, 3
    mha = nn.MultiheadAttention(e, heads, batch_first=batch_first).eval()
    p = randomize(mha, 7)
    r = rng(8)
    x = r.standard_normal((n, l, e))
    kpm = am = None
    if masks in ("padding", "both"):
        kpm = np.zeros((n, l), np.uint8)
        kpm[0, 3:], kpm[2, 4] = 1, 1  # no row is left without keys
    if masks in ("attn2d", "both"):
        am = np.triu(np.ones((l, l), np.uint8), 1)  # causal
    if masks == "attn3d_float":
        am = r.standard_normal((n * heads, l, l))
    expected, weights = mha_ref(x, x, x, p, heads, kpm, am)
    _, per_head = mha_ref(x, x, x, p, heads, kpm, am, average=False)
    t = f32(seq_major(x, batch_first))
    kwargs = dict(key_padding_mask=None if kpm is None else c.Tensor(kpm),
                  attn_mask=None if am is None else (c.Tensor(am) if am.dtype == np.uint8 else f32(am)))
    out, w = mha(t, t, t, **kwargs)
    assert_close(out, seq_major(expected, batch_first))
    assert_close(w, weights)
    out, w = mha(t, t, t, need_weights=False, **kwargs)  # the fused path
    assert w is None
    assert_close(out, seq_major(expected, batch_first))
    assert_close(mha(t, t, t, average_attn_weights=False, **kwargs)[1], per_head)


def test_multihead_cross_attention_kdim_vdim_bias_kv_zero_attn_unbatched():
    e, heads = 4, 2
    r = rng(9)
    q, k, v = r.standard_normal((2, 3, e)), r.standard_normal((2, 5, 3)), r.standard_normal((2, 5, 7))
    mha = nn.MultiheadAttention(e, heads, kdim=3, vdim=7, add_bias_kv=True, add_zero_attn=True, batch_first=True)
    assert list(mha.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k",
                                      "bias_v", "out_proj.weight", "out_proj.bias"]
    assert mha.k_proj_weight.shape == (4, 3) and mha.v_proj_weight.shape == (4, 7) and mha.bias_k.shape == (1, 1, 4)
    p = randomize(mha, 10)
    kpm = np.zeros((2, 5), np.uint8)
    kpm[1, :] = 1  # every given key ignored: bias_k and the zero key remain
    expected, weights = mha_ref(q, k, v, p, heads, kpm, bias_kv=True, zero_attn=True)
    out, w = mha(f32(q), f32(k), f32(v), key_padding_mask=c.Tensor(kpm))
    assert_close(out, expected)
    assert_close(w, weights)
    assert w.shape == (2, 3, 7)
    out, w = mha(f32(q[0]), f32(k[0]), f32(v[0]), attn_mask=c.Tensor(np.zeros((3, 5), np.uint8)))  # unbatched
    expected, weights = mha_ref(q[:1], k[:1], v[:1], p, heads, bias_kv=True, zero_attn=True)
    assert_close(out, expected[0])
    assert_close(w, weights[0])


def test_multihead_attention_parameters_and_errors():
    mha = nn.MultiheadAttention(8, 2, bias=False)
    assert list(mha.state_dict()) == ["in_proj_weight", "out_proj.weight"]
    mha = nn.MultiheadAttention(8, 2)
    state = {k: v.numpy() for k, v in mha.state_dict().items()}
    assert {k: v.shape for k, v in state.items()} == {
        "in_proj_weight": (24, 8), "in_proj_bias": (24,), "out_proj.weight": (8, 8), "out_proj.bias": (8,)}
    assert not state["in_proj_bias"].any() and not state["out_proj.bias"].any()  # PyTorch zeroes both biases
    bound = math.sqrt(6 / (8 + 24))  # xavier_uniform_ over the stacked (3E, E) weight
    assert 0.5 * bound < np.abs(state["in_proj_weight"]).max() <= bound
    x = c.randn((4, 2, 8))
    with pytest.raises(ShapeError, match="embed_dim \\(6\\) must be a positive multiple of num_heads \\(4\\)"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ShapeError, match=r"expected key of the query's rank .* with 8 features in the last dim, "
                                         r"got shape \(4, 2, 5\)"):
        mha(x, c.randn((4, 2, 5)), x)
    with pytest.raises(ShapeError, match=r"key_padding_mask of shape \(2, 3\), expected \(batch, source length\) = "
                                         r"\(2, 4\)"):
        mha(x, x, x, key_padding_mask=c.zeros((2, 3), dtype=c.u8))
    with pytest.raises(ShapeError, match=r"attn_mask of shape \(4, 5\), expected \(4, 4\) or \(4, 4, 4\)"):
        mha(x, x, x, attn_mask=c.zeros((4, 5), dtype=c.u8))
    with pytest.raises(ShapeError, match="same batch and length"):
        mha(x, c.randn((3, 2, 8)), x)
    with pytest.raises(DTypeError, match="attn_mask must be bool or u8"):
        mha(x, x, x, attn_mask=c.zeros((4, 4), dtype=c.i64))
    with pytest.raises(ValueError, match="is_causal"):
        mha(x, x, x, is_causal=True)


def test_multihead_attention_dropout_and_gradients():
    mha = nn.MultiheadAttention(4, 2, dropout=0.5)
    randomize(mha, 17)
    x = c.randn((3, 2, 4))
    mha.eval()
    a, kept = mha(x, x, x, average_attn_weights=False)
    assert_close(mha(x, x, x, need_weights=False)[0], a.numpy())  # no dropout in eval
    mha.train()
    c.manual_seed(0)
    out, w = mha(x, x, x, average_attn_weights=False)
    assert not np.allclose(out.numpy(), a.numpy())
    dropped = w.numpy() == 0
    assert dropped.any() and not dropped.all()
    assert_close(w.numpy()[~dropped], 2 * kept.numpy()[~dropped])  # the kept weights scaled by 1 / (1 - p)
    kpm = c.Tensor(np.array([[1, 1, 1], [0, 1, 0]], np.uint8))  # the first sequence has no key left
    mha.eval()
    for need_weights in (True, False):
        out, w = mha(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        assert_close(out[:, 0], np.broadcast_to(mha.out_proj.bias.numpy(), (3, 4)))  # zero attention, then out_proj
        assert not np.isnan(out.numpy()).any()
    r = rng(11)
    q, k = r.standard_normal((2, 1, 4)), r.standard_normal((3, 1, 4))
    kpm = np.array([[0, 1, 0]], np.uint8)
    for need_weights in (True, False):
        gradcheck(nn.MultiheadAttention(4, 2), q, k, k, call=lambda m, q, k, v: m(
            q, k, v, key_padding_mask=c.Tensor(kpm), need_weights=need_weights))
    gradcheck(nn.MultiheadAttention(4, 2, kdim=3, vdim=2, add_bias_kv=True), q, k[..., :3], k[..., :2])


# ---- TransformerEncoderLayer ----------------------------------------------------------------------

def layer_norm_ref(x, w, b, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def encoder_ref(x, p, heads, norm_first, activation, kpm=None, am=None):
    sub = {k[len("self_attn."):]: v for k, v in p.items() if k.startswith("self_attn.")}
    act = (lambda t: np.maximum(t, 0)) if activation == "relu" else (
        lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2))))

    def sa(t):
        return mha_ref(t, t, t, sub, heads, kpm, am)[0]

    def ff(t):
        return act(t @ p["linear1.weight"].T + p["linear1.bias"]) @ p["linear2.weight"].T + p["linear2.bias"]

    def norm(t, i):
        return layer_norm_ref(t, p[f"norm{i}.weight"], p[f"norm{i}.bias"])

    if norm_first:
        x = x + sa(norm(x, 1))
        return x + ff(norm(x, 2))
    x = norm(x + sa(x), 1)
    return norm(x + ff(x), 2)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_encoder_layer(norm_first, activation, batch_first):
    layer = nn.TransformerEncoderLayer(6, 2, dim_feedforward=10, activation=activation, batch_first=batch_first,
                                       norm_first=norm_first).eval()
    p = randomize(layer, 12)
    r = rng(13)
    x = r.standard_normal((2, 5, 6))
    kpm = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], np.uint8)
    am = np.triu(np.ones((5, 5), np.uint8), 1)
    assert_close(layer(f32(seq_major(x, batch_first))), seq_major(encoder_ref(x, p, 2, norm_first, activation), batch_first))
    got = layer(f32(seq_major(x, batch_first)), src_mask=c.Tensor(am), src_key_padding_mask=c.Tensor(kpm),
                is_causal=True)
    assert_close(got, seq_major(encoder_ref(x, p, 2, norm_first, activation, kpm, am), batch_first))
    assert_close(layer(f32(x[0])), encoder_ref(x[:1], p, 2, norm_first, activation)[0])  # unbatched


def test_transformer_encoder_layer_state_dropout_and_gradients():
    layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.3)
    assert list(layer.state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
        "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
        "norm2.weight", "norm2.bias"]
    assert layer.linear1.weight.shape == (6, 4) and layer.linear2.weight.shape == (4, 6)
    state = randomize(layer, 14)
    copy = nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.3)
    copy.load_state_dict(state)
    x = c.randn((3, 2, 4))
    layer.eval(), copy.eval()
    np.testing.assert_array_equal(layer(x).numpy(), copy(x).numpy())
    layer.train()
    c.manual_seed(1)
    assert not np.allclose(layer(x).numpy(), copy(x).numpy())  # dropout in training only
    assert list(nn.TransformerEncoderLayer(4, 2, bias=False).state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "linear2.weight", "norm1.weight",
        "norm2.weight"]
    gelu = nn.GELU()
    assert nn.TransformerEncoderLayer(4, 2, activation=gelu).activation is gelu
    with pytest.raises(ValueError, match="activation must be"):
        nn.TransformerEncoderLayer(4, 2, activation="tanh")
    for norm_first in (False, True):
        gradcheck(nn.TransformerEncoderLayer(4, 2, dim_feedforward=3, dropout=0.0, norm_first=norm_first,
                                             activation="gelu"), rng(15).standard_normal((2, 1, 4)))


# ---- state dict round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("make, x_shape", [
    (lambda: nn.PReLU(3), (2, 3, 4)),
    (lambda: nn.LSTMCell(3, 4), (2, 3)),
    (lambda: nn.GRUCell(3, 4), (2, 3)),
    (lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True), (5, 2, 3)),
    (lambda: nn.MultiheadAttention(4, 2, kdim=3, vdim=3), None),
    (lambda: nn.TransformerEncoderLayer(4, 2, dim_feedforward=5), (3, 2, 4)),
])
def test_state_dict_round_trips(make, x_shape):
    a, b = make().eval(), make().eval()
    state = randomize(a, 16)
    b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})
    assert list(b.state_dict()) == list(state)
    if x_shape is None:
        q, kv = c.randn((3, 2, 4)), c.randn((5, 2, 3))
        outs = [flat(m(q, kv, kv)) for m in (a, b)]
    else:
        x = c.randn(x_shape)
        outs = [flat(m(x)) for m in (a, b)]
    for u, v in zip(*outs):
        np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_var_builder_construction():
    """The vb keyword: a VarMap creates every tensor under PyTorch's names
    (with PyTorch's inits), and a checkpoint loads through the same names."""
    vm = nn.VarMap()
    layer = nn.TransformerEncoderLayer(4, 2, 6, vb=nn.VarBuilder.from_varmap(vm).pp("enc"))
    assert sorted(vm.data()) == sorted("enc." + k for k in layer.state_dict())
    assert not vm.data()["enc.self_attn.out_proj.bias"].numpy().any()
    state = randomize(nn.GRUCell(3, 4), 18)
    checkpoint = {"gru." + k: c.Tensor(v) for k, v in state.items()}
    cell = nn.GRUCell(3, 4, vb=nn.VarBuilder.from_tensors(checkpoint).pp("gru"))
    assert_close(cell.weight_hh, state["weight_hh"])
    prelu = nn.PReLU(2, vb=nn.VarBuilder.from_varmap(nn.VarMap()))
    assert_close(prelu.weight, [0.25, 0.25])
