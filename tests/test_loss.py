"""Losses against PyTorch (values and input gradients for every reduction,
label smoothing, ignore_index, K-dim inputs, pos_weight), their module and
nn.functional forms, integer target dtypes, stability and errors."""

import numpy as np
import pytest

import candle_api as c
from candle_api import nn
from candle_api.errors import DTypeError, IndexOutOfRangeError, ShapeError
from candle_api.nn import functional as F
from candle_api.nn import loss as L
from candle_api.ops.elementwise import DECOMPOSITIONS
from torch_reference import assert_close, cases, tensor

LOSS_CASES = cases("torch_losses")
MODULES = {"cross_entropy": nn.CrossEntropyLoss, "nll": nn.NLLLoss, "mse": nn.MSELoss,
           "binary_cross_entropy_with_logits": nn.BCEWithLogitsLoss, "huber": nn.HuberLoss}


def _check(case, compute):
    x = tensor(case["input"], grad=True)
    loss = compute(x, tensor(case["target"]), {k: tensor(v) for k, v in case.get("extra", {}).items()})
    (loss * tensor(case["gloss"])).sum_all().backward()
    assert_close(loss, case["loss"], what="loss")
    assert_close(x.grad, case["ginput"], what="input gradient")


@pytest.mark.parametrize("name", sorted(LOSS_CASES))
def test_losses_match_pytorch(name):
    case = LOSS_CASES[name]
    cfg = case["config"]
    _check(case, lambda x, t, extra: getattr(L, cfg["fn"])(x, t, **cfg["kwargs"], **extra))
    _check(case, lambda x, t, extra: MODULES[cfg["fn"]](**cfg["kwargs"], **extra)(x, t))


def test_pytorch_names_in_functional():
    ce = LOSS_CASES["ce_smoothing"]
    x, t = tensor(ce["input"]), tensor(ce["target"])
    assert_close(F.cross_entropy(x, t, label_smoothing=0.1), ce["loss"])
    nll = LOSS_CASES["nll_none"]
    assert_close(F.nll_loss(tensor(nll["input"]), tensor(nll["target"]), reduction="none"), nll["loss"])
    mse = LOSS_CASES["mse_sum"]
    assert_close(F.mse_loss(tensor(mse["input"]), tensor(mse["target"]), "sum"), mse["loss"])
    huber = LOSS_CASES["huber_delta_none"]
    assert_close(F.huber_loss(tensor(huber["input"]), tensor(huber["target"]), "none", 0.5), huber["loss"])
    bce = LOSS_CASES["bce_pos_weight"]
    pos_weight = tensor(bce["extra"]["pos_weight"])
    assert_close(L.binary_cross_entropy_with_logit(tensor(bce["input"]), tensor(bce["target"]), pos_weight=pos_weight),
                 bce["loss"])
    module = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    buffers = dict(module.named_buffers())  # buffers follow to(), as in PyTorch
    assert list(buffers) == ["pos_weight"] and buffers["pos_weight"] is pos_weight


def test_integer_target_dtypes():
    case = LOSS_CASES["ce_mean"]
    logits, target = tensor(case["input"]), case["target"]
    ids = np.where(target < 0, 0, target)
    expected = L.cross_entropy(logits, c.Tensor(ids.astype(np.int64))).item()
    for dtype in (c.u8, c.u32, c.i32, c.i16):
        # -100 cannot be an unsigned id, so nothing is ignored there: the same targets give the same loss
        assert L.cross_entropy(logits, c.Tensor(ids).to_dtype(dtype)).item() == pytest.approx(expected, rel=1e-6)
    all_ignored = c.full((6,), -100, dtype=c.i64)
    assert np.isnan(L.cross_entropy(logits, all_ignored).item())  # 0 / 0, as PyTorch
    assert L.cross_entropy(logits, all_ignored, reduction="sum").item() == 0
    unbatched = L.cross_entropy(logits[1], c.Tensor(4, dtype=c.i64), reduction="none")
    assert unbatched.shape == () and unbatched.item() == pytest.approx(
        L.cross_entropy(logits, c.Tensor(ids), reduction="none")[1].item())


def test_stable_for_extreme_logits():
    x = c.Tensor([[-1000.0, 1000.0, 0.0]]).requires_grad_()
    t = c.Tensor([[1.0, 0.0, 0.5]])
    loss = L.binary_cross_entropy_with_logits(x, t, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(2000 + np.log(2), rel=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), [[-1.0, 1.0, 0.0]], atol=1e-6)  # sigmoid(x) - t
    assert np.isfinite(L.cross_entropy(c.Tensor([[1e4, -1e4]]), c.Tensor([1])).item())
    # backends without a softplus kernel use the decomposition: stable too, with the kernel's gradient
    big = c.Tensor([-100.0, -5.0, 0.0, 19.0, 21.0, 100.0, 1000.0])
    fused, decomposed = big.copy().requires_grad_(), big.copy().requires_grad_()
    fused.softplus().sum_all().backward()
    DECOMPOSITIONS["softplus"](decomposed).sum_all().backward()
    np.testing.assert_allclose(DECOMPOSITIONS["softplus"](big).numpy(), big.softplus().numpy(), rtol=1e-6)
    np.testing.assert_allclose(decomposed.grad.numpy(), fused.grad.numpy(), rtol=1e-6, atol=1e-30)


def test_loss_errors():
    logits = c.randn((4, 3))
    with pytest.raises(DTypeError, match="integer class ids"):
        L.cross_entropy(logits, c.Tensor([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(ShapeError, match=r"target of shape \(3,\) for an input of shape \(4, 3\).*\(4,\)"):
        L.nll(logits, c.Tensor([0, 1, 2]))
    with pytest.raises(IndexOutOfRangeError):
        L.cross_entropy(logits, c.Tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="reduction must be one of mean, sum, none"):
        L.mse(logits, logits, reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        nn.CrossEntropyLoss(reduction="batchmean")
    with pytest.raises(ShapeError, match="must match"):
        L.mse(logits, c.randn((4,)))
    with pytest.raises(ShapeError, match="must match"):
        L.binary_cross_entropy_with_logits(logits, c.randn((3, 4)))
    with pytest.raises(ValueError, match="label_smoothing"):
        L.cross_entropy(logits, c.Tensor([0, 1, 2, 0]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="delta"):
        L.huber(logits, logits, delta=0.0)
    with pytest.raises(DTypeError, match="float tensor of scores, got u32"):
        L.nll(c.Tensor([[0, 1]]), c.Tensor([0]))
    with pytest.raises(ShapeError, match="class dim"):
        L.cross_entropy(c.Tensor(1.0), c.Tensor(0))
    with pytest.raises(TypeError):
        nn.CrossEntropyLoss(c.ones((3,)))  # class weights are not supported: keywords only
