"""VarBuilder and VarMap: prefixes, dtype/device conversion, error messages,
VarMap creation, save/load round trips (safetensors and npz), layers built
from a VarBuilder, from checkpoint files and from PyTorch state dicts."""

import numpy as np
import pytest

import candle_api as c
from candle_api import nn, optim
from candle_api.errors import DTypeError, ShapeError, TensorNameError
from candle_api.io import formats
from candle_api.nn import VarBuilder, VarMap
from candle_api.nn.init import Const, Kaiming
from torch_reference import assert_close, cases, ordered, tensor


def _writable(name: str) -> bool:
    return any(spec.name == name and spec.save is not None for spec, _ in formats())


FILE_FORMATS = [pytest.param(ext, marks=pytest.mark.skipif(not _writable(ext), reason=f"no {ext} format installed"))
                for ext in ("safetensors", "npz")]


@pytest.fixture
def checkpoint():
    return {
        "enc.fc.weight": c.Tensor(np.arange(6, dtype=np.float64).reshape(3, 2)),
        "enc.fc.bias": c.Tensor([1.0, 2.0, 3.0], dtype=c.f64),
        "enc.ids": c.Tensor([4, 5], dtype=c.i64),
        "head.w": c.ones((2,)),
    }


def test_prefixes_dtype_and_lookups(checkpoint):
    vb = VarBuilder.from_tensors(checkpoint, dtype=c.f32)
    assert vb.prefix == "" and vb.dtype == c.f32 and vb.device == "cpu"
    enc = vb.pp("enc")
    assert enc.prefix == "enc" and enc.pp("fc").prefix == "enc.fc" and vb.push_prefix("a").pp(0).prefix == "a.0"
    assert enc.root().prefix == "" and enc.set_prefix("head").get(2, "w").numpy().tolist() == [1.0, 1.0]
    w = enc.pp("fc").get((3, 2), "weight")
    assert w.dtype == c.f32 and w.numpy().tolist() == [[0, 1], [2, 3], [4, 5]] and not w.requires_grad
    assert enc.get_unchecked("ids").dtype == c.i64  # integer tensors keep their dtype
    assert enc.contains_tensor("fc.weight") and not enc.contains_tensor("fc")  # a prefix is not a tensor
    assert vb.to_dtype(c.f16).pp("enc").get([3], "fc.bias").dtype == c.f16
    assert vb.get_with_hints((2,), "head.w", Const(9.0)).numpy().tolist() == [1.0, 1.0]  # a checkpoint ignores hints
    assert repr(enc) == "VarBuilder(Tensors, prefix='enc', f32, cpu)"


def test_error_messages_name_the_tensor(checkpoint):
    fc = VarBuilder.from_tensors(checkpoint).pp("enc").pp("fc")
    with pytest.raises(TensorNameError, match=r"cannot find tensor 'enc.fc.wieght' \(close names: enc.fc.weight"):
        fc.get((3, 2), "wieght")
    with pytest.raises(KeyError, match=r"'xyz' \(it has 4 tensors, e.g. enc.fc.weight, enc.fc.bias"):
        fc.root().get((3,), "xyz")
    with pytest.raises(ShapeError, match=r"tensor 'enc.fc.weight' has shape \(3, 2\) in the checkpoint, "
                                         r"expected \(2, 3\)"):
        fc.get((2, 3), "weight")
    with pytest.raises(TensorNameError, match="it is empty"):
        VarBuilder.from_tensors({}).get_unchecked("x")
    with pytest.raises(DTypeError, match="'q' is a str, not a Tensor"):
        VarBuilder.from_tensors({"q": "not a tensor"}).get((1,), "q")


def test_zeros_builder():
    vb = VarBuilder.zeros(c.f16)
    z = vb.pp("any").get((2, 3), "thing")
    assert z.dtype == c.f16 and z.shape == (2, 3) and not z.numpy().any() and vb.contains_tensor("x")
    with pytest.raises(ShapeError, match="no shape"):
        vb.get_unchecked("thing")
    assert nn.Linear(3, 2, vb=vb).weight.dtype == c.f16


def test_varmap_creates_reuses_and_sets():
    vm = VarMap()
    vb = VarBuilder.from_varmap(vm, c.f32).pp("fc")
    w = vb.get((3, 4), "weight", Const(0.5))
    assert isinstance(w, c.Var) and vm.data()["fc.weight"] is w and w.numpy().min() == 0.5
    assert vb.get((3, 4), "weight", Const(2.0)) is w  # an existing variable is returned as it is
    assert vb.get(2, "bias").numpy().tolist() == [0.0, 0.0]  # no hint: zeros
    assert vm.all_vars() == [w, vm.data()["fc.bias"]] and len(vm) == 2 and vb.contains_tensor("bias")
    assert vb.get_unchecked("weight") is w
    with pytest.raises(ShapeError, match=r"'fc.weight' has shape \(3, 4\), requested \(4, 3\)"):
        vb.get((4, 3), "weight")
    vm.set_one("fc.bias", np.array([7.0, 8.0]))  # converted to the Var's dtype, in place
    assert vm.data()["fc.bias"].numpy().tolist() == [7.0, 8.0]
    vm.set({"fc.bias": c.Tensor([1.0, 1.0], dtype=c.f64)})
    vm.set([("fc.weight", c.zeros((3, 4)))])
    assert not w.numpy().any()
    with pytest.raises(TensorNameError, match=r"cannot find tensor 'fc.bais' \(close names: fc.bias"):
        vm.set_one("fc.bais", c.zeros((2,)))
    with pytest.raises(ShapeError, match="fc.bias"):
        vm.set_one("fc.bias", c.zeros((3,)))
    k = VarBuilder.from_varmap(vm, c.f64).get((20, 10), "k", Kaiming("uniform", "fan_in", "relu"))
    assert k.dtype == c.f64 and np.abs(k.numpy()).max() <= np.sqrt(6 / 10)


@pytest.mark.parametrize("ext", FILE_FORMATS)
def test_varmap_save_load_round_trip(tmp_path, ext):
    vm = VarMap()
    vb = VarBuilder.from_varmap(vm)
    model = nn.Sequential(nn.Linear(3, 4, vb=vb.pp(0)), nn.ReLU(), nn.Linear(4, 2, vb=vb.pp(2)))
    path = tmp_path / f"model.{ext}"
    vm.save(path)
    loaded = c.load(path)
    assert sorted(loaded) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    other_vm = VarMap()
    other = nn.Sequential(nn.Linear(3, 4, vb=VarBuilder.from_varmap(other_vm).pp(0)), nn.ReLU(),
                          nn.Linear(4, 2, vb=VarBuilder.from_varmap(other_vm).pp(2)))
    other_vm.load(path)
    x = c.randn((5, 3))
    np.testing.assert_array_equal(other(x).numpy(), model(x).numpy())
    # a model built straight from the file computes the same (inference from a checkpoint)
    from_file = nn.Sequential(nn.Linear(3, 4, vb=VarBuilder.from_file(path).pp(0)), nn.ReLU(),
                              nn.Linear(4, 2, vb=VarBuilder.from_tensors(c.load(path)).pp(2)))
    np.testing.assert_array_equal(from_file(x).numpy(), model(x).numpy())

    partial = VarMap()
    before = partial.get((4,), "0.bias", Const(3.0)).numpy().copy()
    partial.get((9,), "extra", Const(0.0))
    with pytest.raises(TensorNameError, match="cannot find tensor 'extra'"):
        partial.load(path)
    np.testing.assert_array_equal(partial.data()["0.bias"].numpy(), before)  # nothing is written on error
    wrong = VarMap()
    wrong.get((4, 4), "0.weight")
    with pytest.raises(ShapeError, match=r"'0.weight' has shape \(4, 3\) in the file and \(4, 4\) in the map"):
        wrong.load(path)


class Mlp(nn.Module):
    def __init__(self, vb):
        super().__init__()
        self.fc1 = nn.Linear(2, 16, vb=vb.pp("fc1"))
        self.fc2 = nn.Linear(16, 1, vb=vb.pp("fc2"))

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


def test_training_through_a_varmap():
    c.manual_seed(0)
    vm = VarMap()
    model = Mlp(VarBuilder.from_varmap(vm))
    assert {id(p) for p in model.parameters()} == {id(v) for v in vm.all_vars()}  # the same Vars
    assert sorted(model.state_dict()) == sorted(vm.data())
    x = c.randn((64, 2))
    y = (x[:, :1] * 2 - x[:, 1:]).tanh()
    opt = optim.AdamW(vm.all_vars(), lr=0.05)  # Candle's way: the VarMap's variables
    first = None
    for _ in range(40):
        loss = nn.loss.mse(model(x), y)
        first = first if first is not None else loss.item()
        opt.backward_step(loss)
    assert loss.item() < 0.1 * first


def test_batch_norm_running_stats_live_in_the_varmap():
    vm = VarMap()
    bn = nn.BatchNorm1d(3, vb=VarBuilder.from_varmap(vm).pp("bn"))
    assert sorted(vm.data()) == ["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight"]
    assert bn.running_mean is vm.data()["bn.running_mean"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]  # the statistics are buffers
    bn(c.randn((8, 3)) + 5.0)
    assert vm.data()["bn.running_mean"].numpy().min() > 0.2  # updated in place
    assert bn.num_batches_tracked.item() == 1


def test_pytorch_state_dict_through_a_varbuilder():
    case = cases("torch_layers")["lstm_bidirectional"]
    vb = VarBuilder.from_tensors({f"rnn.{k}": tensor(v) for k, v in case["state"].items()})
    lstm = nn.LSTM(5, 4, num_layers=2, bidirectional=True, vb=vb.pp("rnn"))
    output, (h, cell) = lstm(tensor(ordered(case["in"])[0]))
    for got, expected in zip((output, h, cell), ordered(case["out"])):
        assert_close(got, expected)
    conv = cases("torch_layers")["conv2d_groups"]
    layer = nn.Conv2d(4, 4, (3, 2), padding=(1, 0), groups=2,
                      vb=VarBuilder.from_tensors({k: tensor(v) for k, v in conv["state"].items()}))
    assert_close(layer(tensor(ordered(conv["in"])[0])), ordered(conv["out"])[0])
    bn_case = cases("torch_layers")["batch_norm2d_eval"]
    state = {k: tensor(v) for k, v in bn_case["state"].items()}
    bn = nn.BatchNorm2d(3, vb=VarBuilder.from_tensors(state)).eval()
    assert_close(bn(tensor(ordered(bn_case["in"])[0])), ordered(bn_case["out"])[0])
    bn.train()(c.randn((4, 3, 2, 2)))  # running statistics are copies: the checkpoint is not written
    np.testing.assert_array_equal(state["running_mean"].numpy(), bn_case["state"]["running_mean"])
    assert not np.allclose(bn.running_mean.numpy(), bn_case["state"]["running_mean"])


def test_layers_report_checkpoint_problems():
    vb = VarBuilder.from_tensors({"fc.weight": c.zeros((3, 2))})
    with pytest.raises(TensorNameError, match="cannot find tensor 'fc.bias'"):
        nn.Linear(2, 3, vb=vb.pp("fc"))
    with pytest.raises(ShapeError, match=r"'fc.weight' has shape \(3, 2\) in the checkpoint, expected \(3, 4\)"):
        nn.Linear(4, 3, bias=False, vb=vb.pp("fc"))
    layer = nn.Linear(2, 3, bias=False, vb=vb.pp("fc"))
    assert isinstance(layer.weight, c.Var) and layer.weight.requires_grad  # copied into a trainable Var
    with pytest.raises(TypeError, match="not both"):
        nn.Linear(2, 3, dtype=c.f16, vb=vb)
    with pytest.raises(TypeError, match="must be a VarBuilder"):
        nn.Linear(2, 3, vb={"weight": c.zeros((3, 2))})


@pytest.mark.skipif(not _writable("npz"), reason="no npz format installed")
def test_sharded_files(tmp_path):
    c.save({"fc.weight": c.ones((3, 2))}, tmp_path / "part1.npz")
    c.save({"fc.bias": c.zeros((3,))}, tmp_path / "part2.npz")
    vb = VarBuilder.from_mmaped_safetensors([tmp_path / "part1.npz", tmp_path / "part2.npz"], dtype=c.f16)
    layer = nn.Linear(2, 3, vb=vb.pp("fc"))
    assert layer.weight.dtype == c.f16 and layer(c.ones((1, 2), dtype=c.f16)).numpy().tolist() == [[2.0] * 3]
    with pytest.raises(TensorNameError, match="'fc.gamma'"):
        vb.get((3,), "fc.gamma")
