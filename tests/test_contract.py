"""The contract as code: the table, its generated page, the op definitions
that use it, and the registry's refusals."""

import dataclasses
import subprocess
import sys

import pytest

import candle_api as c
from candle_api.contract import BY_NAME, ROWS, docs
from candle_api.dtype import get_dtype
from candle_api.errors import PluginError, UnsupportedOpError
from candle_api.hooks import BackendSpec, KernelSet, OpDef, hookimpl
from candle_api.ops import dispatch
from candle_api.registry import registry


def test_the_page_is_generated_from_the_table():
    assert docs.PAGE.read_text() == docs.render(), "run: python -m candle_api.contract.docs"


def test_every_row_has_one_op_definition_and_every_builtin_op_a_row():
    custom = set(registry().ops.names())
    builtin = {name for name in dispatch.OPS if name not in custom}
    assert builtin == set(BY_NAME)
    for row in ROWS:
        op = dispatch.OPS[row.name]
        if not row.required:
            assert op.decompose is not None, f"optional row {row.name} has no decomposition"


def test_every_cpu_kernel_is_a_row_in_one_of_its_dtypes():
    from candle_backend_cpu.plugin import candle_api_kernels

    # the cpu plugin's own set: a kernel plugin (mkl) may serve some of them in the device's table
    served = {(op, get_dtype(dtype)) for op, dtype in candle_api_kernels("cpu").kernels}
    for op, dtype in served:
        assert op in BY_NAME and dtype in BY_NAME[op].dtypes, (op, dtype)
    # every row in every dtype, but for the optimizer steps' halves (updated with elementwise ops) and bool
    # (the registry serves it with the u8 kernels)
    missing = {(r.name, d) for r in ROWS for d in r.dtypes if d != "bool"} - {(op, str(dt)) for op, dt in served}
    assert missing == {(op, d) for op in ("adamw_step", "sgd_step") for d in ("bf16", "f16")}
    cpu = {r.name: r for r in registry().records()}["cpu"]
    assert not cpu.error


class _Kernels:
    def __init__(self, kernels):
        self.kernels = kernels

    @hookimpl
    def candle_api_kernels(self, device_type):
        return KernelSet(self.kernels, priority=-5) if device_type == "cpu" else None


@pytest.mark.parametrize("kernels,why", [
    ({("exp_fast", "f32"): lambda *a: None}, "'exp_fast' is not a kernel of the contract table"),
    ({("softmax_last", "u8"): lambda *a: None}, "'softmax_last' has no u8 kernel in the contract"),
    ({("exp", "f99"): lambda *a: None}, "'exp': 'f99' is not a dtype"),
])
def test_the_registry_refuses_kernels_the_contract_does_not_name(kernels, why):
    with pytest.raises(PluginError, match=f"plugin 'stray' refused: kernels for cpu refused: {why}"):
        c.register_plugin(_Kernels(kernels), "stray")
    assert "stray" not in {r.name for r in registry().records()}
    assert (c.ones(2) + 1).numpy().tolist() == [2.0, 2.0]


def test_a_custom_op_makes_its_name_a_kernel_name():
    class Plugin(_Kernels):
        @hookimpl
        def candle_api_custom_ops(self, registry):
            registry.define(OpDef("twice", infer=lambda x: (x.shape, x.dtype), decompose=lambda x: x * 2))

    name = c.register_plugin(Plugin({("twice", "f32"): lambda *a: None}), "twice-plugin")
    try:
        assert c.info.kernel_providers("cpu")["twice"] == {"f32": "twice-plugin"}
    finally:
        c.unregister_plugin(name)
    assert "twice" not in dispatch.OPS and "twice" not in registry().ops.names()


def test_a_custom_op_cannot_take_a_builtin_name():
    with pytest.raises(PluginError, match="'exp' is built in"):
        registry().ops.define(OpDef("exp", infer=lambda x: (x.shape, x.dtype)))


def test_a_backend_for_a_newer_contract_is_refused():
    class Future:
        @hookimpl
        def candle_api_backends(self):
            return [BackendSpec("future", open=lambda i: None, availability=lambda: (True, ""),
                                contract_version=99)]

    with pytest.raises(PluginError, match="implements contract version 99.*upgrade candle-api"):
        c.register_plugin(Future(), "future")


def test_a_row_newer_than_the_backend_is_reported_with_both_versions(monkeypatch):
    implemented = registry().backends()["cpu"][0].contract_version
    monkeypatch.setitem(BY_NAME, "erf", dataclasses.replace(BY_NAME["erf"], since=implemented + 1))
    err = dispatch.unsupported("erf", c.get_device("cpu"), c.f32)
    assert isinstance(err, UnsupportedOpError)
    assert (f"added in contract version {implemented + 1} and the cpu backend implements version {implemented}"
            in str(err))


def test_a_decomposition_runs_only_for_the_rows_dtypes():
    """sigmoid's row covers floats: an integer tensor is refused by name, not by
    whichever op of the decomposition fails first."""
    with pytest.raises(UnsupportedOpError, match="'sigmoid'"):
        c.Tensor([1, 2]).sigmoid()


def test_an_incomplete_device_object_is_named():
    class Half:
        def alloc(self, nbytes):
            return bytearray(nbytes)

    class Plugin:
        @hookimpl
        def candle_api_backends(self):
            return [BackendSpec("half", open=lambda i: Half(), availability=lambda: (True, ""))]

    name = c.register_plugin(Plugin(), "half")
    try:
        with pytest.raises(PluginError, match="lacks from_numpy, to_numpy, wrap, random"):
            c.get_device("half")
    finally:
        c.unregister_plugin(name)


def test_conformance_on_a_device_that_is_not_installed_is_one_usage_error():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--pyargs", "candle_api.testing.conformance",
                           "--candle-device", "nosuch"], capture_output=True, text=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--candle-device nosuch: no installed plugin provides device type 'nosuch'" in proc.stderr
    assert "installed devices: cpu" in proc.stderr


# Gradient kernels themselves: differentiating through them again raises (their OpDef has no backward).
_NO_BACKWARD = {"conv2d_backward_weight", "max_pool2d_backward", "avg_pool2d_backward"}
# Quantized blocks are integers: no gradient reaches them or comes out of them (qmatmul's reaches x);
# nor does one reach the u8 activations and int8 weights of the int8 products.
_BLOCKS = {"quantize", "dequantize", "qembedding", "qpack", "quantize_u8_params", "quantize_u8", "pack_int8_panels",
           "matmul_int8"}


def test_every_differentiable_builtin_op_has_a_backward():
    """An op with float outputs either has a backward or is one of the
    gradient kernels, whose missing backward raises when reached."""
    for row in ROWS:
        op = dispatch.OPS[row.name]
        in_place = row.args[0] != "out"
        if (in_place or row.family == "compare" or row.name in ("argmax", "argmin") or row.name in _NO_BACKWARD
                or row.name in _BLOCKS):
            continue
        assert op.backward is not None, f"{row.name} has no backward"
    for name in _NO_BACKWARD:
        assert dispatch.OPS[name].backward is None


def test_a_gradient_through_an_op_without_backward_raises():
    x = c.randn(1, 1, 4, 4).requires_grad_()
    g = c.ones(1, 1, 2, 2).requires_grad_()
    gx = dispatch.apply(dispatch.OPS["max_pool2d_backward"], x, g, params=(1, 1, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1, 2, 2, 1))
    with pytest.raises(c.CandleError, match="'max_pool2d_backward' has no backward"):
        gx.sum_all().backward()


def test_a_kernel_writes_over_its_input_only_where_its_row_and_its_set_allow():
    cpu = c.get_device("cpu")
    assert ("add", c.f32) in cpu.aliasing and ("matmul", c.f32) not in cpu.aliasing  # matmul's row has no alias
    add = cpu.kernels[("add", c.f32)]

    class Plain:
        @hookimpl
        def candle_api_kernels(self, device_type):
            return KernelSet({("add", "f32"): add}, priority=9) if device_type == "cpu" else None

    name = c.register_plugin(Plain(), "plain")
    try:  # a set that does not declare aliasing: its kernel gets fresh memory
        assert ("add", c.f32) not in cpu.aliasing and ("sub", c.f32) in cpu.aliasing
    finally:
        c.unregister_plugin(name)
    assert ("add", c.f32) in cpu.aliasing
