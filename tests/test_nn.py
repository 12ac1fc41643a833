"""candle_api.nn: the Module protocol, containers, layers and activations
against PyTorch (fixtures from tests/fixtures/make_torch_nn.py), init,
dropout, and the errors bad input raises."""

import math

import numpy as np
import pytest

import candle_api as c
from candle_api import nn
from candle_api.errors import DTypeError, ShapeError, TensorNameError
from candle_api.nn import functional as F
from candle_api.nn import init
from torch_reference import assert_close, cases, check_layer_case, tensor

LAYER_CASES = {k: v for k, v in cases("torch_layers").items() if v["config"]["cls"] not in ("LSTM", "GRU")}
ACTIVATION_CASES = {k: v for k, v in cases("torch_activations").items() if k != "x"}


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_layers_match_pytorch(name):
    check_layer_case(LAYER_CASES[name])


@pytest.mark.parametrize("name", sorted(ACTIVATION_CASES))
def test_activations_match_pytorch(name):
    case, x = ACTIVATION_CASES[name], cases("torch_activations")["x"]
    cfg = case["config"]
    functional = getattr(F, cfg["name"], None)
    forms = [nn.Activation(cfg["name"], cfg["param"])]
    if functional is not None:  # gelu_new is a config name only
        forms.append(functional if cfg["param"] is None else lambda t: functional(t, cfg["param"]))
    for form in forms:
        t = tensor(x, grad=True)
        y = form(t)
        (y * tensor(case["gy"])).sum_all().backward()
        assert_close(y, case["y"])
        assert_close(t.grad, case["gx"])


def test_activation_modules_and_names():
    x = c.randn((3, 8))
    pairs = [(nn.ReLU(), F.relu), (nn.ReLU6(), F.relu6), (nn.GELU(), F.gelu), (nn.SiLU(), F.silu),
             (nn.Sigmoid(), F.sigmoid), (nn.Tanh(), F.tanh), (nn.Hardsigmoid(), F.hard_sigmoid),
             (nn.Hardswish(), F.hard_swish), (nn.Mish(), F.mish), (nn.ELU(0.3), lambda t: F.elu(t, 0.3)),
             (nn.LeakyReLU(0.2), lambda t: F.leaky_relu(t, 0.2)),
             (nn.GELU(approximate="tanh"), F.new_gelu), (nn.Activation("newgelu"), F.gelu_pytorch_tanh),
             (nn.Activation("gelupytorchtanh"), F.new_gelu), (nn.Activation("leakyrelu", 0.1),
                                                              lambda t: F.leaky_relu(t, 0.1)),
             (nn.Activation("HardSwish"), F.hardswish), (nn.Activation(), F.gelu)]
    for module, fn in pairs:
        np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy(), err_msg=repr(module))
    # nn's gelu is PyTorch's exact one; candle_api.functional.gelu is Candle's tanh form
    assert not np.allclose(F.gelu(x).numpy(), c.functional.gelu(x).numpy(), rtol=0, atol=1e-7)
    assert repr(nn.Activation("elu", 0.5)) == "Activation(elu, 0.5)"
    assert repr(nn.LeakyReLU()) == "LeakyReLU(negative_slope=0.01)"
    with pytest.raises(ValueError, match="unknown activation 'gleu'.*gelu_new"):
        nn.Activation("gleu")
    with pytest.raises(ValueError, match="takes no parameter"):
        nn.Activation("relu", 0.5)
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(x, approximate="fast")
    with pytest.raises(ShapeError, match="even"):
        F.swiglu(c.randn((2, 3)))


# ---- the Module protocol -----------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = c.Var([2.0])
        self.register_buffer("steps", c.zeros((1,)))
        self.register_buffer("cache", c.ones((2,)), persistent=False)
        self.note = c.ones((5,))  # a plain tensor attribute is not state (as in PyTorch)
        self.gate = None

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(4, 2, bias=False))
        self.tied = self.block  # a shared sub-module is visited once

    def forward(self, x):
        return self.head(self.block(x))


def test_registration_and_traversal():
    net = Net()
    # a module's own members come before its children's, as in PyTorch
    assert [n for n, _ in net.named_parameters()] == ["block.scale", "block.fc.weight", "block.fc.bias",
                                                      "head.1.weight"]
    assert len(list(net.parameters())) == 4 and all(isinstance(p, nn.Parameter) for p in net.parameters())
    assert [n for n, _ in net.named_buffers()] == ["block.steps", "block.cache"]
    assert [n for n, _ in net.named_modules()] == ["", "block", "block.fc", "head", "head.0", "head.1"]
    assert [n for n, _ in net.named_children()] == ["block", "head"] and len(list(net.modules())) == 6
    assert [n for n, _ in net.named_parameters(recurse=False)] == []
    assert net.get_submodule("head.1") is net.head[1] and net.get_submodule("") is net
    with pytest.raises(AttributeError, match="Sequential at head has no sub-module '7'"):
        net.get_submodule("head.7")
    block = net.block
    assert block.gate is None and block.note.shape == (5,) and "note" not in dict(block.named_buffers())
    block.gate = c.Var([1.0])  # a Var attribute becomes a parameter, replacing the plain attribute
    assert "gate" in dict(block.named_parameters())
    block.steps = c.full((1,), 3.0)  # assigning to a buffer's name replaces the buffer
    assert block.steps.item() == 3.0
    with pytest.raises(TypeError, match="parameter 'scale'"):
        block.scale = c.ones((1,))
    with pytest.raises(TypeError, match="sub-module 'fc'"):
        block.fc = 3
    with pytest.raises(KeyError, match="contain no '.'"):
        block.add_module("a.b", nn.ReLU())
    del block.gate
    assert "gate" not in dict(block.named_parameters())
    with pytest.raises(AttributeError, match="'Block' object has no attribute 'missing'"):
        block.missing

    class Forgetful(nn.Module):
        def __init__(self):
            self.w = c.Var([1.0])

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Forgetful()


def test_state_dict_shares_storage_and_round_trips():
    net = Net()
    state = net.state_dict()
    block = ["scale", "steps", "fc.weight", "fc.bias"]  # a shared module appears under each name, as in PyTorch
    assert list(state) == [f"block.{k}" for k in block] + ["head.1.weight"] + [f"tied.{k}" for k in block]
    assert not any(t.requires_grad for t in state.values())
    net.block.scale.set(c.Tensor([5.0]))
    assert state["block.scale"].item() == 5.0  # the entries are views of the live parameters
    other = Net()
    result = other.load_state_dict({k: v.copy() for k, v in state.items()})
    assert result == ([], [])
    x = c.randn((2, 3))
    np.testing.assert_array_equal(other(x).numpy(), net(x).numpy())
    # numpy arrays and other dtypes are converted in place; the Vars stay the same objects
    weight = other.head[1].weight
    other.load_state_dict({k: np.asarray(v.numpy(), dtype=np.float64) * 0 for k, v in state.items()})
    assert other.head[1].weight is weight and weight.dtype == c.f32 and weight.sum_all().item() == 0


def test_load_state_dict_errors_name_the_tensors():
    net = Net()
    state = {k: v.copy() for k, v in net.state_dict().items()}
    before = net.block.fc.weight.numpy().copy()
    bad = dict(state, **{"block.fc.weight": c.zeros((5, 3))})
    with pytest.raises(ShapeError, match=r"Net: size mismatch for block.fc.weight: shape \(5, 3\) in the state "
                                         r"dict, \(4, 3\) in the model"):
        net.load_state_dict(bad)
    missing = {k: v for k, v in state.items() if k != "head.1.weight"}
    with pytest.raises(TensorNameError, match=r"missing keys \['head.1.weight'\]"):
        net.load_state_dict(dict(missing, **{"block.fc.weight": c.zeros((4, 3))}))
    np.testing.assert_array_equal(net.block.fc.weight.numpy(), before)  # nothing is written on error
    with pytest.raises(KeyError, match=r"unexpected keys \['extra'\]"):  # TensorNameError is a KeyError
        net.load_state_dict(dict(state, extra=c.zeros((1,))))
    result = net.load_state_dict(dict(missing, extra=c.zeros((1,))), strict=False)
    assert result.missing_keys == ["head.1.weight"] and result.unexpected_keys == ["extra"]
    with pytest.raises(TypeError, match="'block.scale' is a list"):
        net.load_state_dict(dict(state, **{"block.scale": [1.0]}))


def test_to_converts_in_place():
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    weight = net[0].weight
    net(c.randn((5, 3))).sum_all().backward()
    assert net.to(c.f64) is net
    assert net[0].weight is weight and weight.dtype == c.f64 and weight.grad.dtype == c.f64
    assert net[1].running_mean.dtype == c.f64 and net[1].num_batches_tracked.dtype == c.i64  # ints keep theirs
    assert net(c.randn((5, 3), dtype=c.f64)).dtype == c.f64
    net.to(dtype="f32", device="cpu")
    assert {p.dtype for p in net.parameters()} == {c.f32}
    net.to("cpu")
    with pytest.raises(TypeError, match="needs a dtype or a device"):
        net.to()
    with pytest.raises(DTypeError, match="float dtype"):
        net.to(c.u8)


def test_modes_grads_and_apply():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5), nn.Linear(3, 1))
    assert net.training and net[1].training
    assert net.eval() is net and not net[1].training
    x = c.randn((4, 3))
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # dropout is off in eval
    net.train()
    assert net[1].training
    net(x).sum_all().backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad.sum_all().item() == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not net(x).requires_grad
    net.requires_grad_()
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "Dropout", "Linear", "Sequential"]  # children first, as in PyTorch


def test_repr_is_nested():
    net = Net()
    assert repr(net) == (
        "Net(\n"
        "  (block): Block(\n"
        "    (fc): Linear(in_features=3, out_features=4, bias=True)\n"
        "  )\n"
        "  (head): Sequential(\n"
        "    (0): ReLU()\n"
        "    (1): Linear(in_features=4, out_features=2, bias=False)\n"
        "  )\n"
        "  (tied): Block(\n"
        "    (fc): Linear(in_features=3, out_features=4, bias=True)\n"
        "  )\n"
        ")")
    assert repr(nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2, bias=False)) == (
        "Conv2d(4, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2, bias=False)")
    assert repr(nn.LayerNorm(6)) == "LayerNorm((6,), eps=1e-05, elementwise_affine=True)"


def test_containers():
    a, b, d = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b)
    assert seq.append(d) is seq and len(seq) == 3 and list(seq) == [a, b, d]
    assert seq[-1] is d and isinstance(seq[1:], nn.Sequential) and list(seq[1:]) == [b, d]
    x = c.randn((4, 2))
    np.testing.assert_array_equal(seq(x).numpy(), d(b(a(x))).numpy())
    named = nn.Sequential({"fc": a, "act": b})
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    with pytest.raises(IndexError, match="out of range"):
        seq[3]

    layers = nn.ModuleList([a])
    layers.append(d)
    layers.extend([b])
    layers.insert(1, nn.Tanh())
    assert [type(m).__name__ for m in layers] == ["Linear", "Tanh", "Linear", "ReLU"]
    layers[-1] = nn.SiLU()
    assert isinstance(layers[3], nn.SiLU) and len(layers[1:3]) == 2
    assert list(layers.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]

    heads = nn.ModuleDict({"x": a})
    heads["y"] = d
    assert "y" in heads and list(heads) == ["x", "y"] and len(heads) == 2
    assert list(heads.keys()) == ["x", "y"] and list(heads.values()) == [a, d]
    assert heads.pop("x") is a and list(dict(heads.items())) == ["y"]
    heads.update({"z": b})
    del heads["y"]
    assert list(heads) == ["z"]


# ---- layers: construction, initialization, errors ---------------------------------------------------

def test_pytorch_default_initialization():
    c.manual_seed(1)
    lin = nn.Linear(50, 40)
    bound = 1 / math.sqrt(50)
    for p in (lin.weight, lin.bias):
        v = p.numpy()
        assert np.abs(v).max() <= bound and v.std() > bound / 3  # U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    conv = nn.Conv2d(6, 4, 3, groups=2)
    assert np.abs(conv.weight.numpy()).max() <= 1 / math.sqrt(3 * 9)  # fan_in = in / groups * k * k
    tconv = nn.ConvTranspose1d(4, 6, 3)
    assert tconv.weight.shape == (4, 6, 3) and np.abs(tconv.bias.numpy()).max() <= 1 / math.sqrt(18)
    emb = nn.Embedding(1000, 8, padding_idx=-1)
    assert emb.padding_idx == 999 and abs(emb.weight.numpy()[:999].std() - 1) < 0.05
    assert not emb.weight.numpy()[999].any()
    norm = nn.LayerNorm((2, 3))
    assert norm.weight.numpy().tolist() == [[1] * 3] * 2 and not norm.bias.numpy().any()
    c.manual_seed(1)
    np.testing.assert_array_equal(nn.Linear(50, 40).weight.numpy(), lin.weight.numpy())  # seeded
    assert nn.Linear(3, 2, dtype=c.f64).weight.dtype == c.f64
    assert nn.BatchNorm2d(3, dtype="bf16").running_var.dtype == c.bf16


def test_init_values_and_functions():
    c.manual_seed(0)
    assert init.ZERO.tensor((2,)).numpy().tolist() == [0, 0] and init.ONE.var((1,)).requires_grad
    assert init.Const(3.5).tensor((2, 2), dtype=c.f64).numpy().tolist() == [[3.5, 3.5]] * 2
    u = init.Uniform(-2.0, -1.0).tensor((1000,)).numpy()
    assert u.min() >= -2 and u.max() < -1
    r = init.Randn(1.0, 0.5).tensor((20000,)).numpy()
    assert abs(r.mean() - 1) < 0.02 and abs(r.std() - 0.5) < 0.02
    k = init.DEFAULT_KAIMING_NORMAL.tensor((400, 100)).numpy()
    assert abs(k.std() - math.sqrt(2 / 100)) < 0.005  # gain sqrt(2) / sqrt(fan_in)
    ku = init.Kaiming("uniform", "fan_out", "tanh").tensor((50, 20, 3)).numpy()
    assert np.abs(ku).max() <= math.sqrt(3) * (5 / 3) / math.sqrt(150)
    assert init.Kaiming("normal", "fan_in", 3.0).std((4, 9)) == 1.0  # an explicit gain
    x = init.Xavier("uniform", 2.0).tensor((30, 70)).numpy()
    assert np.abs(x).max() <= 2 * math.sqrt(6 / 100)
    assert init.calculate_gain("leaky_relu") == math.sqrt(2 / (1 + 0.01 ** 2))
    assert init.calculate_gain("conv2d") == 1 and init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        init.calculate_gain("swoosh")
    with pytest.raises(ShapeError, match="at least 2 dims"):
        init.DEFAULT_KAIMING_UNIFORM.tensor((5,))
    with pytest.raises(ValueError, match="fan must be"):
        init.Kaiming(fan="fan_avg").tensor((3, 3))
    with pytest.raises(ValueError, match="dist must be"):
        init.Xavier("laplace").tensor((3, 3))

    w = c.Var.zeros(200, 100)
    view = w.detach()
    assert init.kaiming_uniform_(w, a=math.sqrt(5)) is w
    assert np.abs(view.numpy()).max() <= 1 / math.sqrt(100) and view.numpy().any()  # written in place
    init.constant_(w, 0.25)
    assert set(view.numpy().ravel()) == {0.25}
    assert not init.zeros_(w).numpy().any() and init.ones_(w).numpy().min() == 1
    assert view.numpy().min() == 1
    assert init.uniform_(w, 2.0, 3.0).numpy().min() >= 2
    assert abs(init.normal_(w, 0.0, 0.01).numpy().std() - 0.01) < 0.001
    assert abs(init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu").numpy().std() - math.sqrt(2 / 200)) < 0.005
    assert np.abs(init.xavier_uniform_(w).numpy()).max() <= math.sqrt(6 / 300)
    assert abs(init.xavier_normal_(w, gain=2.0).numpy().std() - 2 * math.sqrt(2 / 300)) < 0.01
    buf = c.zeros((3, 3))
    init.ones_(buf)  # plain tensors (buffers) too
    assert buf.numpy().min() == 1 and w.requires_grad


def test_dropout():
    x = c.ones((200, 50))
    c.manual_seed(3)
    a = F.dropout(x, 0.3)
    c.manual_seed(3)
    np.testing.assert_array_equal(nn.Dropout(0.3)(x).numpy(), a.numpy())  # the device stream, seeded
    kept = a.numpy() != 0
    assert abs(kept.mean() - 0.7) < 0.02 and np.allclose(a.numpy()[kept], 1 / 0.7)
    assert F.dropout(x, 0.3, training=False) is x and F.dropout(x, 0.0) is x
    assert not F.dropout(x, 1.0).numpy().any()
    w = c.Var.ones(100)
    y = F.dropout(w, 0.5)
    y.sum_all().backward()
    np.testing.assert_array_equal(w.grad.numpy(), y.numpy())  # the gradient passes the kept elements, scaled
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        nn.Dropout(1.5)
    assert repr(nn.Dropout(0.25)) == "Dropout(p=0.25)"


def test_norm_layers_details():
    bn = nn.BatchNorm1d(3)
    with pytest.raises(ShapeError, match="more than one value per channel"):
        bn(c.randn((1, 3)))
    bn.eval()
    assert bn(c.randn((1, 3))).shape == (1, 3)  # eval uses the running statistics
    rms = nn.RmsNorm(4)
    x = c.randn((2, 4), dtype=c.f64)
    rms.to(c.f64)
    expected = x.numpy() / np.sqrt((x.numpy() ** 2).mean(-1, keepdims=True) + np.finfo(np.float64).eps)
    np.testing.assert_allclose(rms(x).numpy(), expected, rtol=1e-12)  # eps=None: the input dtype's epsilon
    assert nn.RMSNorm is nn.RmsNorm
    gn = nn.GroupNorm(2, 4)
    assert gn(c.randn((3, 4))).shape == (3, 4)  # (batch, channels) works too


def test_layers_reject_bad_input():
    with pytest.raises(ShapeError, match=r"linear: input of shape \(2, 4\) for a weight of shape \(3, 5\)"):
        nn.Linear(5, 3)(c.randn((2, 4)))
    with pytest.raises(ShapeError, match="channels"):
        nn.Conv2d(3, 4, 3)(c.randn((1, 2, 5, 5)))
    with pytest.raises(ShapeError, match="divide by groups"):
        nn.Conv1d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv1d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="kernel_size must be an int or 2 ints"):
        nn.Conv2d(2, 2, (3, 3, 3))
    with pytest.raises(ShapeError, match=r"BatchNorm2d: expected a 4-d input with 3 channels in dim 1, got shape "
                                         r"\(2, 4, 5, 5\)"):
        nn.BatchNorm2d(3)(c.randn((2, 4, 5, 5)))
    with pytest.raises(ShapeError, match="BatchNorm1d: expected a 2-d or 3-d input"):
        nn.BatchNorm1d(3)(c.randn((2, 3, 4, 4)))
    with pytest.raises(ShapeError, match="num_channels"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ShapeError, match="GroupNorm: expected an at least 2-d input with 4 channels"):
        nn.GroupNorm(2, 4)(c.randn((2, 3, 5)))
    with pytest.raises(ShapeError):
        nn.LayerNorm(4)(c.randn((2, 5)))
    with pytest.raises(DTypeError):
        nn.Embedding(5, 2)(c.Tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(5, 2, padding_idx=5)
    with pytest.raises(DTypeError):
        nn.Linear(2, 2)(c.randn((3, 2), dtype=c.f64))
