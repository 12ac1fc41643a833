"""Graph fusions: each pattern an exporter writes out becomes the one fused node
(the plan says which), and the fused plan computes what the unfused one does.
Also the planned-weight paths that only a constant weight takes (ConvTranspose
of non-overlapping blocks) and Resize's whole-number nearest upsampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from candle_formats.onnx import ops_resize  # noqa: E402
from candle_api.onnx import GraphOptimizationLevel, InferenceSession, SessionOptions  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _info(name: str, rank: int):
    return helper.make_tensor_value_info(name, F, [f"{name}{i}" for i in range(rank)])


def _model(nodes, inputs: dict, output: str, inits: dict, opset=17) -> bytes:
    """A model of the nodes; inputs: {name: rank}."""
    graph = helper.make_graph(nodes, "g", [_info(n, r) for n, r in inputs.items()], [_info(output, next(iter(inputs.values())))],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _session(data: bytes, level) -> InferenceSession:
    options = SessionOptions()
    options.graph_optimization_level = level
    return InferenceSession(data, options)


def check(data: bytes, feeds: dict, fused_ops: list[str], rtol=1e-5, atol=1e-5):
    """The fused plan's op types are fused_ops and its result is the unfused plan's, run
    after run (the third run replays the recorded one)."""
    plain = _session(data, GraphOptimizationLevel.ORT_DISABLE_ALL)
    fused = _session(data, GraphOptimizationLevel.ORT_ENABLE_ALL)
    assert [s.node.op_type for s in fused.model.plan.steps] == fused_ops
    want = plain.run(None, feeds)[0]
    for _ in range(3):
        np.testing.assert_allclose(fused.run(None, feeds)[0], want, rtol=rtol, atol=atol)
    return want


def _conv(inputs, out, **kw):
    return helper.make_node("Conv", inputs, [out], pads=[1, 1, 1, 1], **kw)


CONV_INITS = {"w": randn(6, 4, 3, 3), "b": randn(6)}
X = {"x": randn(2, 4, 7, 9)}


def test_conv_residual_relu():
    nodes = [_conv(["x", "w", "b"], "y"), helper.make_node("Add", ["y", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["out"])]
    data = _model(nodes, {"x": 4, "r": 4}, "out", CONV_INITS)
    check(data, {**X, "r": randn(2, 6, 7, 9)}, ["FusedConv"])


@pytest.mark.parametrize("form", ["x*sigmoid", "x*sigmoid(x*1)", "hardsigmoid", "x*clip/6", "(x*clip)/6"])
def test_conv_swish_and_hard_swish_written_out(form):
    inits = dict(CONV_INITS, one=np.float32(1), three=np.float32(3), zero=np.float32(0), six=np.float32(6))
    nodes = [_conv(["x", "w", "b"], "y")]
    if form == "x*sigmoid":
        nodes += [helper.make_node("Sigmoid", ["y"], ["g"]), helper.make_node("Mul", ["y", "g"], ["out"])]
    elif form == "x*sigmoid(x*1)":
        nodes += [helper.make_node("Mul", ["y", "one"], ["y1"]), helper.make_node("Sigmoid", ["y1"], ["g"]),
                  helper.make_node("Mul", ["g", "y"], ["out"])]
    elif form == "hardsigmoid":
        nodes += [helper.make_node("HardSigmoid", ["y"], ["g"], alpha=1 / 6, beta=0.5),
                  helper.make_node("Mul", ["y", "g"], ["out"])]
    else:
        nodes += [helper.make_node("Add", ["y", "three"], ["y3"]),
                  helper.make_node("Clip", ["y3", "zero", "six"], ["c"])]
        if form == "x*clip/6":
            nodes += [helper.make_node("Div", ["c", "six"], ["g"]), helper.make_node("Mul", ["y", "g"], ["out"])]
        else:
            nodes += [helper.make_node("Mul", ["y", "c"], ["p"]), helper.make_node("Div", ["p", "six"], ["out"])]
    check(_model(nodes, {"x": 4}, "out", inits), X, ["FusedConv"])


def test_conv_then_per_channel_affine():
    inits = dict(CONV_INITS, s=randn(1, 6, 1, 1), t=randn(1, 6, 1, 1))
    nodes = [_conv(["x", "w", "b"], "y"), helper.make_node("Mul", ["y", "s"], ["m"]),
             helper.make_node("Add", ["m", "t"], ["out"])]
    check(_model(nodes, {"x": 4}, "out", inits), X, ["Conv"])  # folded into the weights at the basic level


def test_depthwise_conv_relu6():
    inits = {"w": randn(4, 1, 3, 3), "lo": np.float32(0), "hi": np.float32(6)}
    nodes = [_conv(["x", "w"], "y", group=4), helper.make_node("Clip", ["y", "lo", "hi"], ["out"])]
    check(_model(nodes, {"x": 4}, "out", inits), X, ["FusedConv"])


def test_matmul_bias_gelu_is_one_linear():
    inits = {"w": randn(16, 24, scale=0.3), "b": randn(24), "half": np.float32(0.5), "one": np.float32(1),
             "r2": np.float32(np.sqrt(2))}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"]),
             helper.make_node("Div", ["h", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["out"])]
    check(_model(nodes, {"x": 3}, "out", inits), {"x": randn(2, 5, 16)}, ["Linear"])


def test_written_out_layer_norm():
    inits = {"two": np.float32(2), "eps": np.float32(1e-5), "g": randn(16), "b": randn(16),
             "axes": np.array([-1], np.int64)}
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["mu"]), helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq", "axes"], ["var"]),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["out"])]
    check(_model(nodes, {"x": 3}, "out", inits, opset=18), {"x": randn(3, 4, 16)}, ["LayerNormalization"])


def _layer_norm_ref(x, g, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


@pytest.mark.parametrize("order", ["x+y", "y+x"])
def test_residual_add_layer_norm_is_one_skip_layer_norm(order):
    inits = {"g": randn(16), "b": randn(16)}
    a, b = order.split("+")
    nodes = [helper.make_node("Add", [a, b], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["out"], axis=-1, epsilon=1e-5)]
    data = _model(nodes, {"x": 3, "y": 3}, "out", inits)
    feeds = {"x": randn(2, 5, 16), "y": randn(2, 5, 16)}
    assert [s.node.op_type for s in _session(data, GraphOptimizationLevel.ORT_DISABLE_ALL).model.plan.steps] == \
        ["Add", "LayerNormalization"]  # level 0: no fusion
    got = check(data, feeds, ["SkipLayerNormalization"])
    np.testing.assert_allclose(got, _layer_norm_ref(feeds["x"] + feeds["y"], inits["g"], inits["b"], 1e-5),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("order", ["x+c", "c+x"])
def test_bias_add_then_written_out_layer_norm(order):
    # the written-out norm becomes one LayerNormalization first, then the Add of a broadcast constant joins it
    inits = {"two": np.float32(2), "eps": np.float32(1e-6), "g": randn(16), "b": randn(16), "c": randn(16),
             "axes": np.array([-1], np.int64)}
    nodes = [helper.make_node("Add", order.split("+"), ["x1"]),
             helper.make_node("ReduceMean", ["x1", "axes"], ["mu"]), helper.make_node("Sub", ["x1", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq", "axes"], ["var"]),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["out"])]
    feeds = {"x": randn(3, 4, 16)}
    got = check(_model(nodes, {"x": 3}, "out", inits, opset=18), feeds, ["SkipLayerNormalization"])
    np.testing.assert_allclose(got, _layer_norm_ref(feeds["x"] + inits["c"], inits["g"], inits["b"], 1e-6),
                               rtol=1e-5, atol=1e-5)


def _erf_gelu(u):
    return 0.5 * u * (1 + np.vectorize(math.erf)(u / math.sqrt(2)))


def test_bias_then_gelu_written_out_is_one_bias_gelu():
    # x @ y has no constant weight (no Linear): the written-out GELU becomes Gelu, then joins the bias Add
    inits = {"c": randn(16), "half": np.float32(0.5), "one": np.float32(1), "r2": np.float32(np.sqrt(2))}
    nodes = [helper.make_node("MatMul", ["x", "y"], ["m"]), helper.make_node("Add", ["c", "m"], ["h"]),
             helper.make_node("Div", ["h", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["out"])]
    feeds = {"x": randn(2, 5, 8), "y": randn(2, 8, 16)}
    got = check(_model(nodes, {"x": 3, "y": 3}, "out", inits), feeds, ["MatMul", "BiasGelu"])
    np.testing.assert_allclose(got, _erf_gelu(feeds["x"].astype(np.float64) @ feeds["y"] + inits["c"]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_add_then_gelu_op(approximate):
    inits = {"c": randn(16)}
    nodes = [helper.make_node("Add", ["x", "c"], ["h"]), helper.make_node("Gelu", ["h"], ["out"],
                                                                          approximate=approximate)]
    data = _model(nodes, {"x": 3}, "out", inits, opset=20)
    assert [s.node.op_type for s in _session(data, GraphOptimizationLevel.ORT_DISABLE_ALL).model.plan.steps] == \
        ["Add", "Gelu"]  # level 0: no fusion
    feeds = {"x": randn(3, 4, 16)}
    got = check(data, feeds, ["FastGelu" if approximate == "tanh" else "BiasGelu"])
    u = feeds["x"].astype(np.float64) + inits["c"]
    tanh = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
    np.testing.assert_allclose(got, tanh if approximate == "tanh" else _erf_gelu(u), rtol=1e-5, atol=1e-5)


def test_a_sum_read_elsewhere_stays_an_add():
    inits = {"g": randn(16), "b": randn(16)}
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], axis=-1),
             helper.make_node("Add", ["n", "s"], ["out"])]  # a pre-norm block reads the sum again
    check(_model(nodes, {"x": 3, "y": 3}, "out", inits), {"x": randn(2, 3, 16), "y": randn(2, 3, 16)},
          ["Add", "LayerNormalization", "Add"])


@pytest.mark.parametrize("masked", [False, True])
def test_attention_written_out(masked):
    inits = {"s": np.float32(np.sqrt(8))}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Div", ["qk", "s"], ["a"])]
    feeds = {"q": randn(2, 3, 5, 8), "k": randn(2, 3, 6, 8), "v": randn(2, 3, 6, 8)}
    if masked:
        nodes.append(helper.make_node("Add", ["a", "mask"], ["am"]))
        feeds["mask"] = np.where(RNG.random((2, 1, 5, 6)) < 0.3, -1e4, 0).astype(np.float32)
    nodes += [helper.make_node("Softmax", ["am" if masked else "a"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["out"])]
    data = _model(nodes, {n: 4 for n in feeds}, "out", inits)
    check(data, feeds, ["Transpose", "ScaledDotProductAttention"])


def _batch_norm_inits(channels: int) -> dict:
    return {"gamma": randn(channels), "beta": randn(channels), "mean": randn(channels),
            "var": (RNG.random(channels) + 0.5).astype(np.float32)}


def test_conv_transpose_of_blocks_takes_one_product_per_pixel():
    inits = {"w": randn(4, 3, 2, 2), "b": randn(3)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["out"], strides=[2, 2])]
    data = _model(nodes, {"x": 4}, "out", inits)
    fused = _session(data, GraphOptimizationLevel.ORT_ENABLE_ALL)
    assert isinstance(fused.model.plan.steps[0].inputs[1], tuple), "the weight is packed when the model is planned"
    x = X["x"]
    got = fused.run(None, X)[0]
    want = np.zeros((2, 3, 14, 18), np.float32)
    for i in range(2):
        for j in range(2):
            want[:, :, i::2, j::2] = np.einsum("nchw,co->nohw", x, inits["w"][:, :, i, j])
    np.testing.assert_allclose(got, want + inits["b"].reshape(1, 3, 1, 1), rtol=1e-5, atol=1e-5)
    check(data, X, ["ConvTranspose"])


@pytest.mark.parametrize("strides,group", [([2, 3], 1), ([2, 2], 2)])
def test_conv_transpose_bias_batch_norm_relu(strides, group):
    """ConvTranspose, a per-channel Add, BatchNormalization and Relu (PP-OCR's detector head): the
    constants fold into the weights and bias, the activation into one FusedConvTranspose (non-overlapping
    blocks on the packed product, grouped ones on the ordinary path)."""
    inits = {"w": randn(4, 6 // group, 2, 3), "b": randn(1, 6, 1, 1), **_batch_norm_inits(6)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["t"], strides=strides, group=group),
             helper.make_node("Add", ["t", "b"], ["tb"]),
             helper.make_node("BatchNormalization", ["tb", "gamma", "beta", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["out"])]
    check(_model(nodes, {"x": 4}, "out", inits), X, ["FusedConvTranspose"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transform,rounding,repeats", [("asymmetric", "floor", True),
                                                       ("half_pixel", "round_prefer_floor", True),
                                                       ("asymmetric", "round_prefer_floor", False)])
def test_nearest_resize_by_whole_factors(monkeypatch, transform, rounding, repeats):
    """Whole-factor nearest upsampling that repeats each pixel runs as one upsample_nearest2d;
    the same factors that pick other pixels (asymmetric rounding to nearest) take the general path."""
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 3], np.float32)}
    nodes = [helper.make_node("Resize", ["x", "roi", "scales"], ["out"], mode="nearest",
                              coordinate_transformation_mode=transform, nearest_mode=rounding)]
    data = _model(nodes, {"x": 4}, "out", inits)
    got = InferenceSession(data).run(None, X)[0]
    monkeypatch.setattr(ops_resize, "_image_upsampling", lambda *a: False)
    np.testing.assert_array_equal(got, InferenceSession(data).run(None, X)[0])
    assert np.array_equal(got, X["x"].repeat(2, axis=2).repeat(3, axis=3)) == repeats
