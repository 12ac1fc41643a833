"""The trace and the shadow check (candle_api.debug)."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import candle_api as c
from candle_api.hooks import KernelSet, hookimpl
from candle_api.info import kernel_providers


def test_the_trace_names_kernels_decompositions_and_crossings():
    x = c.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    with c.trace() as t:
        (x.softmax(-1) @ x.t()).sum_all()
        on_ref = x.to_device("ref")
        on_ref.softmax(-1).to_device("cpu")
    assert t.kernels[("cpu", "softmax_last", "f32", "cpu")] == 1
    matmul_plugin = kernel_providers("cpu")["matmul"]["f32"]  # mkl's where candle-backend-mkl serves it
    assert t.kernels[("cpu", "matmul", "f32", matmul_plugin)] == 1
    assert t.decompositions[("ref:0", "softmax_last", "f32")] == 1
    assert t.kernels[("ref:0", "exp", "f32", "ref")] == 1
    assert t.crossings[("cpu", "ref:0")] == (1, 48)
    summary = t.summary()
    assert "softmax_last" in summary and "decomposition" in summary and "cpu -> ref:0: 1 copies, 48 bytes" in summary
    (x + 1).exp()  # outside the block: not recorded
    assert sum(t.kernels.values()) == 8


def test_the_trace_switch_prints_at_exit():
    env = dict(os.environ, CANDLE_TRACE="1")
    proc = subprocess.run([sys.executable, "-c", "import candle_api as c; (c.ones(3) * 2).exp()"],
                          capture_output=True, text=True, env=env, check=True)
    assert "candle-api trace" in proc.stderr and "exp" in proc.stderr and "kernel of cpu" in proc.stderr


class _Buggy:
    """An exp kernel that is wrong on strided inputs only: the kind of bug a new backend has."""

    def __init__(self):
        self.good = c.get_device("cpu").kernels[("exp", c.f32)]

    @hookimpl
    def candle_api_kernels(self, device_type):
        def exp(out, x, lx):
            self.good(out, x, lx)
            if not lx.contiguous:
                ctypes.memset(out.ptr, 0, 4)

        return KernelSet({("exp", "f32"): exp}, priority=9) if device_type == "cpu" else None


def test_shadow_finds_a_wrong_kernel_and_names_it():
    name = c.register_plugin(_Buggy(), "buggy")
    try:
        x = c.randn(5, 6)
        with c.shadow("ref") as s:
            x.exp()  # contiguous: right
            with pytest.raises(c.ShadowMismatchError) as info:
                x.t().exp()
        assert s.checked == 2
        message = str(info.value)
        assert message.startswith("exp (f32) on cpu, kernel of plugin buggy: at index (0, 0)")
        assert "inputs: f32(6, 5) strides (1, 6) offset 0" in message
    finally:
        c.unregister_plugin(name)


def test_a_training_step_agrees_with_the_reference_device():
    c.manual_seed(3)
    model = c.nn.Sequential(c.nn.Linear(6, 8), c.nn.ReLU(), c.nn.Linear(8, 3))
    opt = c.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = c.randn(5, 6), c.Tensor([0, 2, 1, 1, 0]).to_dtype("i64")
    with c.shadow("ref") as s:
        for _ in range(2):
            loss = c.nn.loss.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert s.checked > 40  # every kernel of the forward, backward and optimizer steps


def test_shadow_from_the_environment():
    env = dict(os.environ, CANDLE_SHADOW="ref")
    code = ("import candle_api as c, candle_api.ops.dispatch as d; x = c.randn(4, 4); (x @ x).softmax(-1); "
            "print(type(d.observer).__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert proc.stdout.strip() == "_Chain"


class _WrongIndices:
    """A topk kernel whose values are right and whose indices are not."""

    def __init__(self):
        self.good = c.get_device("cpu").kernels[("topk_last", c.f32)]

    @hookimpl
    def candle_api_kernels(self, device_type):
        def topk_last(out, x, lx, indices, k, largest):
            self.good(out, x, lx, indices, k, largest)
            ctypes.memset(indices.ptr, 0, 4)

        return KernelSet({("topk_last", "f32"): topk_last}, priority=9) if device_type == "cpu" else None


def test_shadow_checks_every_output_of_a_kernel():
    name = c.register_plugin(_WrongIndices(), "wrong_indices")
    try:
        x = c.Tensor([[1.0, 3.0, 2.0]])
        with c.shadow("ref"), pytest.raises(c.ShadowMismatchError) as info:
            x.topk(2)
        assert str(info.value).startswith("topk_last (f32) on cpu, kernel of plugin wrong_indices: at index (0, 0)")
    finally:
        c.unregister_plugin(name)
