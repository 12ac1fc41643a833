"""Quantized models on the int8 kernels.

- The LSTM exports of onnxruntime's ``quantize_dynamic`` (com.microsoft
  DynamicQuantizeLSTM, DynamicQuantizeLinear, MatMulInteger; fixtures made by
  fixtures/make_int8_lstm.py) load and run, matching onnxruntime within 1e-4:
  forward, bidirectional with lengths and initial states, and with the LSTM's
  options (peepholes and clip, input_forget, non-default activations).
- Every integer product with constant weights (packed once, run on
  matmul_int8) gives what the same graph gives with its weights fed as
  inputs (the float64 path): int8 and uint8 weights and activations, zero
  points per tensor and per column, groups, pads and strides.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import candle_api as c  # noqa: E402
from candle_api.onnx import InferenceSession  # noqa: E402
from candle_formats.onnx.int8_products import Int8Weights  # noqa: E402
from real_models import relative_error  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("name", ["forward", "bidirectional", "peepholes_clip", "input_forget", "activations"])
def test_quantize_dynamic_lstm_exports_match_onnxruntime(name):
    fixture = np.load(FIXTURES / f"int8_lstm_{name}.npz")
    feeds = {k[3:]: fixture[k] for k in fixture.files if k.startswith("in:")}
    session = InferenceSession(FIXTURES / f"int8_lstm_{name}.onnx")
    ops = {s.node.op_type for s in session.model.plan.steps}
    assert {"DynamicQuantizeLSTM", "MatMulInteger", "DynamicQuantizeLinear"} <= ops
    for _ in range(3):  # walked, recorded, replayed
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        for key in (k for k in fixture.files if k.startswith("out:")):
            err = relative_error(outputs[key[4:]], fixture[key])
            assert err <= 1e-4, f"{name} {key[4:]}: relative error {err:.2e}"
    # the float model the int8 one was made from agrees to quantization's precision
    float_out = InferenceSession(FIXTURES / f"int8_lstm_{name}_float.onnx").run(["out"], feeds)[0]
    assert relative_error(float_out, fixture["out:out"]) < 0.05


# ---- constant weights on the int8 kernel == the same weights fed as inputs (float64) -------------------
_TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int32: TensorProto.INT32,
          np.float32: TensorProto.FLOAT}


def _info(name, arr):
    return helper.make_tensor_value_info(name, _TYPES[arr.dtype.type], list(arr.shape))


def _twice(node, data: dict, weights: dict, outputs: list, opset: int = 17):
    """The node run with ``weights`` as initializers (packed) and as fed inputs (not)."""
    results = []
    for constant in (True, False):
        inputs = [_info(k, v) for k, v in data.items()] + ([] if constant else [_info(k, v) for k, v in weights.items()])
        inits = [numpy_helper.from_array(v, k) for k, v in weights.items()] if constant else []
        graph = helper.make_graph([node], "g", inputs, outputs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                        helper.make_opsetid("com.microsoft", 1)])
        session = InferenceSession(model.SerializeToString())
        packed = any(isinstance(v, Int8Weights) for v in session.model.plan.constants.values())
        assert packed == constant
        feeds = dict(data) if constant else {**data, **weights}
        with c.trace() as trace:
            results.append(session.run(None, feeds))
        assert any(op == "matmul_int8" for _, op, _, _ in trace.kernels) == constant
    return results


def _ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer(a_type, b_type, per_column):
    rng = np.random.default_rng(0)
    a, b = _ints(rng, (2, 5, 37), a_type), _ints(rng, (37, 20), b_type)
    a_zp = _ints(rng, (), a_type)
    b_zp = _ints(rng, (20,) if per_column else (), b_type)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])
    packed, plain = _twice(node, {"a": a, "a_zp": a_zp}, {"b": b, "b_zp": b_zp},
                           [helper.make_tensor_value_info("y", TensorProto.INT32, [])])
    want = (a.astype(np.int64) - a_zp) @ (b.astype(np.int64) - b_zp)
    np.testing.assert_array_equal(packed[0], want)
    np.testing.assert_array_equal(plain[0], want)


@pytest.mark.parametrize("group,stride,pad", [(1, 1, 1), (2, 2, 0), (1, 1, 0)])
def test_conv_integer(group, stride, pad):
    rng = np.random.default_rng(1)
    x, w = _ints(rng, (2, 4, 9, 7), np.uint8), _ints(rng, (6, 4 // group, 3, 3), np.int8)
    x_zp, w_zp = np.array(131, np.uint8), np.array(-3, np.int8)
    node = helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], group=group, strides=[stride, stride],
                            pads=[pad] * 4)
    packed, plain = _twice(node, {"x": x, "x_zp": x_zp}, {"w": w, "w_zp": w_zp},
                           [helper.make_tensor_value_info("y", TensorProto.INT32, [])])
    np.testing.assert_array_equal(packed[0], plain[0])


def test_qlinear_products():
    rng = np.random.default_rng(2)
    a, b = _ints(rng, (3, 24), np.uint8), _ints(rng, (24, 10), np.int8)
    scales = {"a_s": np.array(0.05, np.float32), "b_s": rng.random(10).astype(np.float32) * 0.1,
              "y_s": np.array(0.2, np.float32)}
    zps = {"a_zp": np.array(120, np.uint8), "b_zp": np.zeros(10, np.int8), "y_zp": np.array(128, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    packed, plain = _twice(node, {"a": a, "a_s": scales["a_s"], "a_zp": zps["a_zp"], "b_s": scales["b_s"],
                                  "b_zp": zps["b_zp"], "y_s": scales["y_s"], "y_zp": zps["y_zp"]}, {"b": b},
                           [helper.make_tensor_value_info("y", TensorProto.UINT8, [])])
    np.testing.assert_array_equal(packed[0], plain[0])
    x, w = _ints(rng, (1, 4, 6, 6), np.uint8), _ints(rng, (8, 2, 3, 3), np.int8)
    node = helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp", "bias"], ["y"],
                            group=2, pads=[1, 1, 1, 1])
    data = {"x": x, "x_s": np.array(0.02, np.float32), "x_zp": np.array(100, np.uint8),
            "w_s": rng.random(8).astype(np.float32) * 0.05, "w_zp": np.zeros(8, np.int8),
            "y_s": np.array(0.1, np.float32), "y_zp": np.array(5, np.uint8)}
    packed, plain = _twice(node, data, {"w": w, "bias": rng.integers(-500, 500, 8).astype(np.int32)},
                           [helper.make_tensor_value_info("y", TensorProto.UINT8, [])])
    np.testing.assert_array_equal(packed[0], plain[0])


def test_contrib_float_products():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 3, 30)).astype(np.float32), _ints(rng, (30, 17), np.int8)
    b_s, b_zp, bias = rng.random(17).astype(np.float32) * 0.01, _ints(rng, (17,), np.int8), rng.random(17).astype(
        np.float32)
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "b_s", "b_zp", "bias"], ["y"], domain="com.microsoft")
    packed, plain = _twice(node, {"a": a, "b_s": b_s, "b_zp": b_zp, "bias": bias}, {"b": b},
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    np.testing.assert_allclose(packed[0], plain[0], rtol=1e-5, atol=1e-5)
    qa = _ints(rng, (5, 30), np.uint8)
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "a_s", "b_s", "a_zp", "b_zp"], ["y"],
                            domain="com.microsoft")
    packed, plain = _twice(node, {"a": qa, "a_s": np.array([0.03], np.float32), "b_s": b_s,
                                  "a_zp": np.array([7], np.uint8), "b_zp": b_zp}, {"b": b},
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    np.testing.assert_allclose(packed[0], plain[0], rtol=1e-5, atol=1e-5)
