"""Ops with tests of their own: com.microsoft contrib ops (against NumPy
formulas of onnxruntime's definitions), control flow reading outer values,
and the onnx.backend API (run_node, supports_device)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import candle_formats.onnx.backend as backend  # noqa: E402
from candle_api.onnx import InferenceSession  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(7)


def run(nodes, feeds: dict, outputs: list[str], inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                     for k, v in feeds.items()],
        [helper.make_value_info(o, helper.TypeProto()) for o in outputs], list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    return InferenceSession(m, check=False).run(outputs, feeds)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def np_layer_norm(x, g, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + (0 if b is None else b)


def erf_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def test_gelu_variants():
    x, bias = randn(2, 3, 8), randn(8)
    tanh = lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))  # noqa: E731
    got = run([helper.make_node("Gelu", ["x"], ["g"], domain=MS),
               helper.make_node("FastGelu", ["x", "b"], ["f"], domain=MS),
               helper.make_node("BiasGelu", ["x", "b"], ["bg"], domain=MS),
               helper.make_node("QuickGelu", ["x"], ["q"], domain=MS, alpha=1.5)],
              {"x": x, "b": bias}, ["g", "f", "bg", "q"])
    np.testing.assert_allclose(got[0], erf_gelu(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], tanh(x + bias), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], erf_gelu(x + bias), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[3], x / (1 + np.exp(-1.5 * x)), rtol=1e-5, atol=1e-6)


def test_layer_norm_variants():
    x, skip, g, b, bias = randn(2, 4, 16), randn(2, 4, 16), randn(16), randn(16), randn(16)
    got = run([helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], domain=MS, epsilon=1e-5),
               helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["rms"], domain=MS, epsilon=1e-6),
               helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "b", "bias"], ["sln", "", "", "sum"],
                                domain=MS, epsilon=1e-5),
               helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g"], ["ssln"], domain=MS,
                                epsilon=1e-6),
               # the norm alone: one pass of the skip_layer_norm kernel
               helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "b", "bias"], ["sln1"], domain=MS,
                                epsilon=1e-5)],
              {"x": x, "skip": skip, "g": g, "b": b, "bias": bias}, ["ln", "rms", "sln", "sum", "ssln", "sln1"])
    s = x + skip + bias
    rms = lambda v: v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-6) * g  # noqa: E731
    np.testing.assert_allclose(got[0], np_layer_norm(x, g, b, 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], rms(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], np_layer_norm(s, g, b, 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[3], s, rtol=1e-6)
    np.testing.assert_allclose(got[4], rms(x + skip), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[5], np_layer_norm(s, g, b, 1e-5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask_kind", [None, "lengths", "2d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_contrib_attention(mask_kind, unidirectional):
    batch, seq, hidden, heads = 2, 5, 16, 4
    x, w, b = randn(batch, seq, 24), randn(24, 3 * hidden) * 0.3, randn(3 * hidden)
    feeds = {"x": x, "w": w, "b": b}
    inputs = ["x", "w", "b"]
    keep = np.ones((batch, seq), np.int32)
    keep[1, 3:] = 0
    if mask_kind == "lengths":
        feeds["m"], inputs = np.array([5, 3], np.int32), inputs + ["m"]
    elif mask_kind == "2d":
        feeds["m"], inputs = keep, inputs + ["m"]
    y, present = run([helper.make_node("Attention", inputs, ["y", "present"], domain=MS, num_heads=heads,
                                       unidirectional=unidirectional)], feeds, ["y", "present"])
    q, k, v = np.split(x @ w + b, 3, -1)
    split = lambda t: t.reshape(batch, seq, heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hidden // heads)
    if mask_kind:
        scores = scores + ((1 - keep) * -10000.0)[:, None, None, :]
    if unidirectional:
        scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -10000.0)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = (p @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(present, np.stack([k, v]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("domain", ["", MS])
def test_dynamic_quantization_and_integer_matmul(domain):
    a, b = randn(3, 8), RNG.integers(-128, 127, (8, 5)).astype(np.int8)
    b_zp = np.array(3, np.int8)
    qa, scale, zp, acc = run(
        [helper.make_node("DynamicQuantizeLinear", ["a"], ["qa", "s", "zp"], domain=domain),
         helper.make_node("MatMulInteger", ["qa", "b", "zp", "bzp"], ["acc"])],
        {"a": a, "b": b, "bzp": b_zp}, ["qa", "s", "zp", "acc"])
    lo, hi = min(a.min(), 0), max(a.max(), 0)
    ref_scale = np.float32((hi - lo) / 255)
    ref_zp = np.uint8(np.clip(np.round(-lo / ref_scale), 0, 255))
    ref_q = np.clip(np.round(a / ref_scale) + ref_zp, 0, 255).astype(np.uint8)
    np.testing.assert_allclose(scale, ref_scale, rtol=1e-6)
    assert zp == ref_zp and qa.dtype == np.uint8
    assert np.abs(qa.astype(int) - ref_q).max() <= 1  # x / scale may round either way at .5
    ref_acc = (qa.astype(np.int64) - int(zp)) @ (b.astype(np.int64) - int(b_zp))
    np.testing.assert_array_equal(acc, ref_acc.astype(np.int32))


@pytest.mark.parametrize("domain", ["", MS])
def test_quantize_dequantize_per_axis(domain):
    x = randn(2, 3, 4)
    scale, zp = np.array([0.1, 0.05, 0.2], np.float32), np.array([0, 10, -5], np.int8)
    q, dq = run([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], domain=domain, axis=1),
                 helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"], domain=domain, axis=1)],
                {"x": x, "s": scale, "zp": zp}, ["q", "dq"], opset=13)
    ref = np.clip(np.round(x / scale[:, None]) + zp[:, None], -128, 127).astype(np.int8)
    np.testing.assert_array_equal(q, ref)
    np.testing.assert_allclose(dq, (ref.astype(np.float32) - zp[:, None]) * scale[:, None], rtol=1e-6)


def test_matmul_integer_to_float_and_dynamic_quantize_matmul():
    a, b = randn(4, 8), RNG.integers(0, 255, (8, 3)).astype(np.uint8)
    b_scale, b_zp, bias = np.array(0.02, np.float32), np.array(128, np.uint8), randn(3)
    (y,) = run([helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bzp", "bias"], ["y"], domain=MS)],
               {"a": a, "b": b, "bs": b_scale, "bzp": b_zp, "bias": bias}, ["y"])
    ref = a @ ((b.astype(np.float32) - 128) * 0.02) + bias
    np.testing.assert_allclose(y, ref, rtol=0.02, atol=0.05)  # a is quantized to 8 bits on the way


def test_if_and_loop_read_outer_values():
    """Subgraphs read values of the enclosing graph (captured, not inputs)."""
    then = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"])], "then", [],
                             [helper.make_value_info("t", helper.TypeProto())])
    other = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                              [helper.make_value_info("e", helper.TypeProto())])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Mul", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_value_info("acc_out", helper.TypeProto()), helper.make_value_info("scan_out", helper.TypeProto())])
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    x = np.array([2.0, 3.0], np.float32)
    for flag, expected in ((True, x + 1), (False, x - 1)):
        y, acc, scans = run([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
                             helper.make_node("Loop", ["trips", "", "y"], ["acc", "scans"], body=body)],
                            {"x": x, "c": np.array(flag)}, ["y", "acc", "scans"], [one, trips])
        np.testing.assert_allclose(y, expected)
        np.testing.assert_allclose(acc, expected * x ** 3)
        np.testing.assert_allclose(scans, np.stack([expected * x ** k for k in (1, 2, 3)]))


def test_backend_run_node_and_devices():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    x = randn(3, 5)
    (y,) = backend.run_node(node, [x])
    np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
    assert backend.supports_device("CPU")
    assert not backend.supports_device("NOSUCHDEVICE")
