"""Optimizers against PyTorch trajectories (SGD with momentum, dampening,
Nesterov and weight decay; AdamW; parameter groups), both training loops,
gradient accumulation, state dicts, schedulers against PyTorch's rate
sequences, and a small MLP that learns."""

import math

import numpy as np
import pytest

import candle_api as c
from candle_api import nn, optim
from candle_api.errors import DTypeError
from candle_api.optim import lr_scheduler
from torch_reference import assert_close, cases, ordered

OPTIM = cases("torch_optim")
OPTIM_CASES = {k: v for k, v in OPTIM.items() if "config" in v}
SCHEDULER_CASES = cases("torch_schedulers")


def _problem():
    """The fixtures' parameters and loss sum(0.5 * c * p ** 2 + d * p)."""
    params = [c.Var(a) for a in ordered(OPTIM["init"])]
    consts = [(c.Tensor(cv), c.Tensor(dv)) for cv, dv in zip(ordered(OPTIM["c"]), ordered(OPTIM["d"]))]

    def loss():
        return sum((p * p * cv * 0.5 + p * dv).sum_all() for p, (cv, dv) in zip(params, consts))

    return params, loss


def _optimizer(cfg, params):
    groups = cfg["groups"]
    spec = [{**g, "params": [params[i] for i in g["params"]]} for g in groups] if groups else params
    return getattr(optim, cfg["cls"])(spec, **cfg["kwargs"])


@pytest.mark.parametrize("loop", ["pytorch", "candle_backward_step", "candle_gradstore"])
@pytest.mark.parametrize("name", sorted(OPTIM_CASES))
def test_trajectories_match_pytorch(name, loop):
    case = OPTIM_CASES[name]
    params, loss = _problem()
    opt = _optimizer(case["config"], params)
    expected = ordered(case["trajectory"])
    for step in range(int(OPTIM["steps"])):
        if loop == "pytorch":
            opt.zero_grad()
            loss().backward()
            opt.step()
        elif loop == "candle_backward_step":
            opt.backward_step(loss())
        else:
            opt.step(loss().backward())
        for i, p in enumerate(params):
            assert_close(p, expected[i][step], rtol=1e-5, atol=1e-6, what=f"param {i} after step {step + 1}")


def test_parameters_without_gradient_are_skipped():
    used, unused = c.Var([1.0, 2.0]), c.Var([3.0])
    opt = optim.AdamW([used, unused], lr=0.1)
    (used * used).sum_all().backward()
    opt.step()
    assert unused.numpy().tolist() == [3.0] and unused not in opt.state and opt.state[used]["step"] == 1
    frozen = c.Var([1.0]).requires_grad_(False)
    sgd = optim.SGD([frozen], lr=1.0)
    sgd.step()
    sgd.backward_step((used * 2).sum_all())  # no gradient reaches the frozen parameter
    assert frozen.item() == 1.0


def test_gradient_accumulation_and_backward_step_isolation():
    w1, w2, w3 = (c.Var([1.0, -2.0]) for _ in range(3))
    x1, x2 = c.Tensor([0.5, 1.0]), c.Tensor([-1.0, 3.0])
    opt1 = optim.SGD([w1], lr=0.1, momentum=0.9)
    (w1 * w1 * x1).sum_all().backward()
    (w1 * w1 * x2).sum_all().backward()  # .grad accumulates over micro-batches
    opt1.step()
    opt2 = optim.SGD([w2], lr=0.1, momentum=0.9)
    opt2.backward_step((w2 * w2 * x1).sum_all() + (w2 * w2 * x2).sum_all())
    np.testing.assert_allclose(w1.numpy(), w2.numpy(), rtol=1e-6)
    assert w2.grad is None  # backward_step neither reads nor writes .grad
    w3.grad = c.Tensor([100.0, 100.0])  # stale accumulated gradient: not counted by backward_step
    opt3 = optim.SGD([w3], lr=0.1, momentum=0.9)
    opt3.backward_step((w3 * w3 * x1).sum_all() + (w3 * w3 * x2).sum_all())
    np.testing.assert_allclose(w3.numpy(), w2.numpy(), rtol=1e-6)
    assert w3.grad.numpy().tolist() == [100.0, 100.0]
    opt3.zero_grad(set_to_none=False)
    assert w3.grad.numpy().tolist() == [0.0, 0.0]
    opt3.zero_grad()
    assert w3.grad is None


def test_learning_rate_and_groups():
    a, b = c.Var([1.0]), c.Var([1.0])
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.1)
    assert opt.learning_rate() == 0.1 and [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    opt.set_learning_rate(0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.01]
    opt.add_param_group({"params": [c.Var([0.0])], "momentum": 0.9})
    assert opt.param_groups[2]["lr"] == 0.1 and opt.param_groups[2]["momentum"] == 0.9  # others: the defaults


def test_state_dict_resumes_training():
    case = OPTIM_CASES["adamw_groups"]
    params, loss = _problem()
    opt = _optimizer(case["config"], params)
    for _ in range(3):
        opt.backward_step(loss())
    state = opt.state_dict()
    assert state["param_groups"][0]["params"] == [0] and state["state"][1]["step"] == 3
    resumed_params = [c.Var(p) for p in params]
    consts = [(c.Tensor(cv), c.Tensor(dv)) for cv, dv in zip(ordered(OPTIM["c"]), ordered(OPTIM["d"]))]
    resumed = _optimizer({**case["config"], "kwargs": {**case["config"]["kwargs"], "lr": 1.0}}, resumed_params)
    resumed.load_state_dict(state)
    assert resumed.param_groups[0]["lr"] == 0.05  # hyperparameters come back too
    assert resumed.state[resumed_params[0]]["exp_avg"] is not state["state"][0]["exp_avg"]  # copied
    expected = ordered(case["trajectory"])
    for step in range(3, int(OPTIM["steps"])):
        opt.backward_step(loss())
        resumed.backward_step(sum((p * p * cv * 0.5 + p * dv).sum_all()
                                  for p, (cv, dv) in zip(resumed_params, consts)))
        for i, p in enumerate(resumed_params):
            assert_close(p, expected[i][step], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="do not match"):
        optim.AdamW([c.Var([1.0])]).load_state_dict(state)


def test_optimizer_errors():
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(DTypeError, match="float tensors"):
        optim.SGD([c.Tensor([1, 2])], lr=0.1)
    w = c.Var([1.0])
    with pytest.raises(ValueError, match="more than once"):
        optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([w * 2], lr=0.1)
    with pytest.raises(TypeError, match="got list"):
        optim.SGD([[w]], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        optim.AdamW([w], lr=-1.0)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.AdamW([w], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD([w], momentum=-0.5)


def _build_scheduler(opt, spec):
    cls = getattr(lr_scheduler, spec["cls"])
    if spec["cls"] == "SequentialLR":
        return cls(opt, [_build_scheduler(opt, s) for s in spec["schedulers"]], milestones=spec["milestones"])
    return cls(opt, **spec["kwargs"])


@pytest.mark.parametrize("name", sorted(SCHEDULER_CASES))
def test_schedulers_match_pytorch(name):
    case = SCHEDULER_CASES[name]
    opt = optim.SGD([{"params": [c.Var([0.0])]}, {"params": [c.Var([0.0])], "lr": 0.01}], lr=0.1)
    sched = _build_scheduler(opt, case["config"])
    lrs = [sched.get_last_lr()]
    for _ in range(len(case["lrs"]) - 1):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == lrs[-1]
    np.testing.assert_allclose(lrs, case["lrs"], rtol=1e-12, atol=1e-15)


def test_lambda_scheduler_and_resuming():
    opt = optim.AdamW([c.Var([0.0])], lr=0.2)
    sched = lr_scheduler.LambdaLR(opt, lambda epoch: min(1.0, (epoch + 1) / 4) * 0.5 ** (epoch // 10))
    rates = [sched.get_last_lr()[0]]
    for _ in range(11):
        sched.step()
        rates.append(opt.learning_rate())
    assert rates[:5] == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2]) and rates[10] == pytest.approx(0.1)
    resumed = lr_scheduler.CosineAnnealingLR(opt, T_max=20, last_epoch=4)  # 'initial_lr' is in the group
    assert resumed.last_epoch == 5 and opt.learning_rate() == pytest.approx(0.1 + 0.1 * math.cos(math.pi / 4))
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(optim.SGD([c.Var([0.0])]), 2, last_epoch=3)
    with pytest.raises(ValueError, match="functions for"):
        lr_scheduler.LambdaLR(opt, [lambda e: 1.0, lambda e: 1.0])
    with pytest.raises(ValueError, match="milestones"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(opt, 2)], milestones=[3])


@pytest.mark.parametrize("loop", ["pytorch", "candle"])
def test_mlp_learns(loop):
    c.manual_seed(0)
    x = c.randn((128, 2))
    y = ((x[:, 0] * x[:, 1]) > 0).to_dtype(c.i64)  # XOR of the signs: needs the hidden layer
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
    opt = optim.AdamW(model.parameters(), lr=0.05) if loop == "pytorch" else optim.SGD(
        model.parameters(), lr=0.5, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    losses = []
    for _ in range(60):
        loss = criterion(model(x), y)
        losses.append(loss.item())
        if loop == "pytorch":
            loss.backward()
            opt.step()
            opt.zero_grad()
        else:
            opt.backward_step(loss)
    assert losses[-1] < 0.3 * losses[0]
    accuracy = (model(x).argmax(-1) == y.to_dtype(c.u32)).to_dtype(c.f32).mean_all().item()
    assert accuracy > 0.9
