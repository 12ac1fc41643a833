"""InferenceSession as onnxruntime users know it: SessionOptions (threads,
optimization levels, recorded runs), execution providers mapped to
candle-api devices, and the feeds checked against the model's declarations
before any node runs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import candle_api as c  # noqa: E402
from candle_api.errors import DTypeError, ShapeError  # noqa: E402
from candle_api.onnx import (GraphOptimizationLevel, InferenceSession, ProviderError, SessionOptions,  # noqa: E402
                             get_available_providers)


def _conv_bn_relu() -> bytes:
    """Conv -> BatchNormalization -> Relu with seeded weights, serialized."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in (
        (rng.standard_normal((4, 3, 3, 3)), "w"), (rng.standard_normal(4), "b"), (rng.random(4) + 0.5, "gamma"),
        (rng.standard_normal(4), "beta"), (rng.standard_normal(4), "mean"), (rng.random(4) + 0.5, "var"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["y", "gamma", "beta", "mean", "var"], ["z"]),
             helper.make_node("Relu", ["z"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, "h", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _ops(session) -> list[str]:
    return [s.node.op_type for s in session.model.plan.steps]


def _options(**kw) -> SessionOptions:
    options = SessionOptions()
    for k, v in kw.items():
        setattr(options, k, v)
    return options


X = np.random.default_rng(1).standard_normal((1, 3, 5, 8)).astype(np.float32)


def test_optimization_levels_change_the_plan_not_the_result():
    results = {}
    for level, ops in ((GraphOptimizationLevel.ORT_DISABLE_ALL, ["Conv", "BatchNormalization", "Relu"]),
                       (GraphOptimizationLevel.ORT_ENABLE_BASIC, ["Conv", "Relu"]),
                       (GraphOptimizationLevel.ORT_ENABLE_ALL, ["FusedConv"])):
        session = InferenceSession(_conv_bn_relu(), _options(graph_optimization_level=level))
        assert _ops(session) == ops, level
        results[level] = session.run(None, {"x": X})[0]
    base = results[GraphOptimizationLevel.ORT_DISABLE_ALL]
    for out in results.values():
        np.testing.assert_allclose(out, base, rtol=1e-5, atol=1e-5)


def test_mem_pattern_is_the_recorded_runs():
    for enabled in (True, False):
        session = InferenceSession(_conv_bn_relu(), _options(enable_mem_pattern=enabled))
        for _ in range(3):
            session.run(None, {"x": X})
        assert (session.model._replays is not None and len(session.model._replays.programs) == 1) == enabled


def test_intra_op_threads_apply_when_the_session_runs():
    before = c.utils.get_num_threads()
    try:
        session = InferenceSession(_conv_bn_relu(), _options(intra_op_num_threads=1))
        c.utils.set_num_threads(2)
        session.run(None, {"x": X})
        assert c.utils.get_num_threads() == 1
        assert session.get_session_options().intra_op_num_threads == 1
    finally:
        c.utils.set_num_threads(before)


def test_providers_map_to_devices():
    assert "CPUExecutionProvider" in get_available_providers()
    session = InferenceSession(_conv_bn_relu(), providers=["CPUExecutionProvider"])
    assert session.get_providers() == ["CPUExecutionProvider"] and session.model.device == "cpu"
    if "CUDAExecutionProvider" not in get_available_providers():  # the preferred one is absent: the next runs
        session = InferenceSession(_conv_bn_relu(), providers=[("CUDAExecutionProvider", {"device_id": 0}),
                                                                "CPUExecutionProvider"])
        assert session.get_providers() == ["CPUExecutionProvider"]
        with pytest.raises(ProviderError, match="CUDAExecutionProvider.*candle-backend-cuda"):
            InferenceSession(_conv_bn_relu(), providers=["CUDAExecutionProvider"])
    with pytest.raises(ProviderError, match="'TensorrtExecutionProvider' has no candle-api device"):
        InferenceSession(_conv_bn_relu(), providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])


def test_feeds_are_checked_before_any_node_runs():
    session = InferenceSession(_conv_bn_relu())
    with pytest.raises(ShapeError, match=r"input 'x' is declared with shape \(1, 3, h, 8\) \(rank 4\), got shape "
                                         r"\(3, 5, 8\)"):
        session.run(None, {"x": X[0]})
    with pytest.raises(ShapeError, match=r"got shape \(1, 3, 5, 9\)"):  # a fixed dim
        session.run(None, {"x": np.zeros((1, 3, 5, 9), np.float32)})
    with pytest.raises(DTypeError, match="input 'x' is FLOAT, got a float64 array"):
        session.run(None, {"x": X.astype(np.float64)})
    with pytest.raises(DTypeError, match=r"input 'x' \(FLOAT\) needs a f32 tensor"):
        session.model.run({"x": c.from_numpy(X.astype(np.float64))})
    with pytest.raises(ShapeError, match="input 'x'"):
        session.model.run({"x": c.from_numpy(X[0])})
    assert session.run(None, {"x": np.zeros((1, 3, 7, 8), np.float32)})[0].shape == (1, 4, 7, 8)  # a named dim
