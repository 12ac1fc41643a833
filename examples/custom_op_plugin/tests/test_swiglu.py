"""The swiglu op through candle-api's conformance machinery, on every device
installed (the candle_device fixture, or --candle-device): values against a
NumPy reference in every dtype and layout, gradients against finite
differences; then what is particular to this plugin: its kernel serves the cpu
device, its decomposition agrees with it, and a missing library says where."""

import numpy as np
import pytest

import candle_api as c
from candle_api.device import get_device
from candle_api.info import kernel_providers
from candle_api.registry import registry
from candle_api.testing.opinfo import FLOATS, OpInfo, Sample, cases, grad_cases, simple

from candle_example_customop import native, swiglu

PLUGIN = "example_swiglu"  # the entry point's name in pyproject.toml


def reference(a, b, beta=1.0):
    """float64 NumPy, as the conformance references are."""
    return a / (1.0 + np.exp(-beta * a)) * b


def with_beta(beta):
    """simple()'s samples (both operands in the layout under test, plus NumPy
    broadcasting between them for the broadcast layout) with a beta keyword."""
    base = simple(2, -4, 4)
    return lambda rng, dtype, layout: [Sample(s.inputs, {"beta": beta}) for s in base(rng, dtype, layout)]


OPS = [
    OpInfo("swiglu", swiglu, reference, FLOATS, simple(2, -4, 4)),
    OpInfo("swiglu_beta", swiglu, reference, FLOATS, with_beta(1.7), kernel="swiglu"),
]


def run(device, check):
    try:
        check(get_device(device))
    except c.UnsupportedOpError as exc:  # a partial backend lacks an op the decomposition uses
        pytest.skip(f"not implemented: {exc}")


@pytest.mark.parametrize("case", cases(OPS), ids=str)
def test_values(candle_device, case):
    run(candle_device, case.check_against_reference)


@pytest.mark.parametrize("case", grad_cases(OPS), ids=str)
def test_gradient(candle_device, case):
    run(candle_device, case.check_gradient)


def test_the_cpu_kernel_is_this_plugins():
    assert kernel_providers("cpu")["swiglu"] == {"f32": PLUGIN, "f64": PLUGIN}
    assert "swiglu" in registry().ops.names()


@pytest.mark.parametrize("dtype,served_by", [("f32", "kernel"), ("f64", "kernel"), ("f16", "decomposition"),
                                             ("bf16", "decomposition")])
def test_cpu_runs_the_kernel_for_f32_f64_only(dtype, served_by):
    a, b = c.randn((3, 4), dtype=dtype), c.randn((3, 4), dtype=dtype)
    with c.trace() as seen:  # records what served each op
        swiglu(a, b)
    if served_by == "kernel":
        assert seen.kernels[("cpu", "swiglu", dtype, PLUGIN)] == 1
    else:
        assert seen.decompositions[("cpu", "swiglu", dtype)] == 1


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_kernel_and_decomposition_agree(dtype):
    """On the same cpu tensors, in layouts the kernel walks differently, and with
    values far out in both tails (where exp overflows)."""
    rng = np.random.default_rng(0)
    big = c.Tensor(rng.uniform(-60, 60, (7, 9, 11)), dtype=dtype)
    decompose = registry().ops.get("swiglu").decompose
    views = [(big, big * 0.5), (big.transpose(0, 2), big.transpose(0, 2)), (big[:, ::2, 1:], big[:, 8::-2, :-1]),
             (big[0].broadcast_as((7, 9, 11)), big), (big.flip([1]), big), (big[1, 2, 3], big[4, 5, 6])]
    tol = {"f32": 2e-6, "f64": 1e-14}[dtype]
    for beta in (1.0, 0.3, -2.0):
        for a, b in views:
            np.testing.assert_allclose(swiglu(a, b, beta).numpy(), decompose(a, b, beta=beta).numpy(), rtol=tol,
                                       atol=tol * 1e-3)


def test_shadow_check_against_the_reference_device():
    """candle_api.shadow re-runs every kernel on the ref device, which has no
    swiglu kernel and so runs the decomposition: the public form of the check above."""
    if "ref" not in registry().backends():
        pytest.skip("the ref backend (candle-backend-ref) is not installed")
    big = c.randn((6, 9, 5))
    with c.shadow("ref") as shadow:
        swiglu(big.transpose(0, 2), big[:, :, 0].t(), beta=0.7)
        swiglu(big.to_dtype("f64")[:, 7::-2], big.to_dtype("f64")[:, 1::2])
    assert shadow.checked >= 2


def test_gradient_through_the_kernel_matches_the_decomposition():
    rng = np.random.default_rng(1)
    a0, b0 = rng.standard_normal((5, 6)), rng.standard_normal((6,))
    grads = []
    for fn in (swiglu, registry().ops.get("swiglu").decompose):
        a, b = c.Tensor(a0, dtype="f64").requires_grad_(), c.Tensor(b0, dtype="f64").requires_grad_()
        fn(a, b.broadcast_as((5, 6)), beta=1.3).sum_all().backward()
        grads.append((a.grad.numpy(), b.grad.numpy()))
    for kernel_grad, decomposed_grad in zip(*grads):
        np.testing.assert_allclose(kernel_grad, decomposed_grad, rtol=1e-12, atol=1e-14)


def test_inputs_are_checked():
    x = c.randn((2, 3))
    with pytest.raises(c.DTypeError, match=r"swiglu: dtypes differ \(f32, f64\)"):
        swiglu(x, x.to_dtype("f64"))
    with pytest.raises(c.DTypeError, match="float"):
        swiglu(c.Tensor([1, 2]), c.Tensor([3, 4]))
    with pytest.raises(c.ShapeError, match="do not broadcast"):
        swiglu(x, c.randn((4,)))
    with pytest.raises(c.ShapeError, match="differ"):  # the op itself, called without the broadcasting front end
        c.custom_op("swiglu", x, c.randn((3,)))


def test_a_missing_library_is_an_error_naming_its_path(monkeypatch, tmp_path):
    missing = tmp_path / "libswiglu.so"
    monkeypatch.setattr(native, "LIB_PATH", missing)
    monkeypatch.setattr(native, "_lib", None)  # restored, loaded library included, after the test
    with pytest.raises(c.BackendUnavailableError, match=str(missing)):
        swiglu(c.randn((2, 2)), c.randn((2, 2)))


def test_importing_the_plugin_opens_no_library():
    """What candle-api asks of a plugin module: the library opens on first use."""
    import subprocess
    import sys

    code = ("import candle_api as c, candle_example_customop.plugin as p, candle_example_customop.native as n; "
            "c.Tensor([1.0]).exp(); assert n._lib is None, 'opened early'; "
            "from candle_example_customop import swiglu; swiglu(c.Tensor([1.0]), c.Tensor([2.0])); "
            "assert n._lib is not None")
    subprocess.run([sys.executable, "-c", code], check=True)
