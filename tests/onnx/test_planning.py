"""Planning (once per model: topological order, constant folding, dead nodes
dropped, intermediates freed after their last reader), errors that name the
node, and hostile files."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from candle_api.errors import FormatError  # noqa: E402
from candle_api.onnx import NodeError, ONNXModel, UnsupportedNodeError  # noqa: E402

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, None) for n in inputs],
                              [helper.make_tensor_value_info(n, F, None) for n in outputs], list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=ops)


def test_nodes_out_of_order_are_sorted_topologically():
    nodes = [helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    m = ONNXModel(model(nodes, ["x"], ["y"]), check=False)
    assert [s.node.op_type for s in m.plan.steps] == ["Relu", "Neg"]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(m.run_numpy({"x": x})[0], -np.maximum(x, 0))


def test_constant_subgraphs_are_folded_and_dead_nodes_dropped():
    inits = [numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "a"),
             numpy_helper.from_array(np.array([3.0, 4.0], np.float32), "b")]
    nodes = [helper.make_node("Add", ["a", "b"], ["ab"]),        # constant: folded at planning
             helper.make_node("Exp", ["ab"], ["e"]),              # constant too
             helper.make_node("Mul", ["x", "e"], ["y"]),
             helper.make_node("Sin", ["x"], ["unused"])]          # no output depends on it
    m = ONNXModel(model(nodes, ["x"], ["y"], inits), check=False)
    assert [s.node.op_type for s in m.plan.steps] == ["Mul"]
    x = np.array([0.5, 2.0], np.float32)
    np.testing.assert_allclose(m.run_numpy({"x": x})[0], x * np.exp([4.0, 6.0]), rtol=1e-6)
    unfolded = ONNXModel(model(nodes, ["x"], ["y"], inits), check=False, fold_constants=False)
    assert [s.node.op_type for s in unfolded.plan.steps] == ["Add", "Exp", "Mul"]


def test_intermediates_are_freed_after_their_last_reader():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Abs", ["c"], ["y"])]
    m = ONNXModel(model(nodes, ["x"], ["y"]), check=False)
    frees = {s.node.op_type: s.free for s in m.plan.steps}
    assert frees == {"Relu": ["x"], "Neg": [], "Add": ["a", "b"], "Abs": ["c"]}
    assert m.plan.peak_live == 3  # a, b and c while Add runs; never x with them


def _flatten_batch_model(extra_outputs=()):
    """y = x reshaped to (x.shape[0] * x.shape[1], -1), the shape computed in the graph as exporters do."""
    i64 = TensorProto.INT64
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["b"]), helper.make_node("Gather", ["shape", "one"], ["t"]),
             helper.make_node("Mul", ["b", "t"], ["bt"]), helper.make_node("Unsqueeze", ["bt", "axis0"], ["bt1"]),
             helper.make_node("Concat", ["bt1", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, None)],
                              [helper.make_tensor_value_info("y", F, None)] +
                              [helper.make_tensor_value_info(n, i64, None) for n in extra_outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_arithmetic_runs_on_the_host():
    m = ONNXModel(_flatten_batch_model(), check=False)
    on_host = [s.node.op_type for s in m.plan.steps if all(isinstance(o, tuple) for o in s.outputs)]
    assert on_host == ["Shape", "Gather", "Gather", "Mul", "Unsqueeze", "Concat"]
    reshape = m.plan.steps[-1]
    assert reshape.node.op_type == "Reshape" and isinstance(reshape.inputs[1], tuple)  # reads the host value
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(m.run_numpy({"x": x})[0], x.reshape(6, 4))
    x = np.arange(10, dtype=np.float32).reshape(5, 1, 2)  # other shapes, same plan
    np.testing.assert_array_equal(m.run_numpy({"x": x})[0], x.reshape(5, 2))


def test_host_values_become_tensors_where_read_as_outputs():
    m = ONNXModel(_flatten_batch_model(extra_outputs=("target", "bt")), check=False)
    y, target, bt = m.run_numpy({"x": np.zeros((2, 3, 4), np.float32)})
    assert target.dtype == np.int64 and target.tolist() == [6, -1]
    assert bt.shape == () and int(bt) == 6


def test_host_gather_out_of_range_names_the_node():
    model_ = _flatten_batch_model()
    model_.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(5, np.int64), "one"))
    m = ONNXModel(model_, check=False)
    with pytest.raises(NodeError, match="Gather.*out of range"):
        m.run_numpy({"x": np.zeros((2, 3, 4), np.float32)})


def test_the_plan_is_made_once_and_reused():
    m = ONNXModel(model([helper.make_node("Relu", ["x"], ["y"])], ["x"], ["y"]), check=False)
    plan, steps = m.plan, list(m.plan.steps)
    for v in (1.0, -1.0):
        m.run({"x": np.array([v], np.float32)})
    assert m.plan is plan and m.plan.steps == steps


def test_an_unsupported_op_names_node_op_domain_and_opset():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob_1", domain="my.ops")
    with pytest.raises(UnsupportedNodeError) as err:
        ONNXModel(model([node], ["x"], ["y"], extra_opsets=[("my.ops", 3)]), check=False)
    e = err.value
    assert (e.node_name, e.op_type, e.domain, e.opset) == ("frob_1", "Frobnicate", "my.ops", 3)
    assert "'frob_1'" in str(e) and "Frobnicate" in str(e) and "my.ops" in str(e) and "opset 3" in str(e)


def test_a_failing_node_names_itself():
    shape = numpy_helper.from_array(np.array([3, 5], np.int64), "shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")
    m = ONNXModel(model([node], ["x"], ["y"], [shape]), check=False)
    with pytest.raises(NodeError, match=r"'bad_reshape' \(Reshape, domain 'ai.onnx', opset 17\)"):
        m.run({"x": np.zeros(4, np.float32)})


@pytest.mark.parametrize("nodes, message", [
    ([helper.make_node("Relu", ["nowhere"], ["y"], name="orphan")], "not produced"),
    ([helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
      helper.make_node("Relu", ["x"], ["y"])], "cycle"),
])
def test_malformed_graphs_name_the_node(nodes, message):
    with pytest.raises(NodeError, match=message):
        ONNXModel(model(nodes, ["x"], ["y"]), check=False)


def test_the_checker_rejects_invalid_models():
    bad = model([helper.make_node("Relu", ["x"], ["y"], bogus=1)], ["x"], ["y"])
    with pytest.raises(FormatError, match="invalid ONNX model"):
        ONNXModel(bad)


@pytest.mark.parametrize("content", [b"", b"\x00" * 16, b"not a protobuf at all \xff\xfe", b"\x08\x07\x12"])
def test_garbage_files_raise_format_errors(tmp_path, content):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(FormatError):
        ONNXModel(path)


def test_a_truncated_model_raises_a_format_error(tmp_path):
    good = model([helper.make_node("Relu", ["x"], ["y"])], ["x"], ["y"],
                 [numpy_helper.from_array(np.ones((64, 64), np.float32), "w")]).SerializeToString()
    for cut in (len(good) // 3, len(good) - 7):
        path = tmp_path / f"cut{cut}.onnx"
        path.write_bytes(good[:cut])
        with pytest.raises(FormatError):
            ONNXModel(path)


def _external(tmp_path, location: str, length: int = 16):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], ["x"], ["y"], [t])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return path


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "missing.bin"])
def test_external_data_must_exist_inside_the_model_folder(tmp_path, location):
    with pytest.raises(FormatError):
        ONNXModel(_external(tmp_path, location), check=False)


def test_external_data_shorter_than_declared_is_rejected(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\x00" * 8)
    with pytest.raises(FormatError):
        ONNXModel(_external(tmp_path, "w.bin"), check=False)


def test_external_data_is_read(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    m = ONNXModel(_external(tmp_path, "w.bin"), check=False)
    np.testing.assert_array_equal(m.run_numpy({"x": np.ones(4, np.float32)})[0], np.arange(4) + 1)


def test_a_tensor_whose_data_does_not_match_its_dims_is_rejected():
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.dims[:] = [1000, 1000]
    with pytest.raises(FormatError, match="malformed"):
        ONNXModel(model([helper.make_node("Add", ["x", "w"], ["y"])], ["x"], ["y"], [t]), check=False)
