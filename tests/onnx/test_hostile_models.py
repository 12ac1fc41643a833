"""Hostile ONNX models and runs: files that must give a FormatError naming the
file (invalid UTF-8, negative external dims, NUL in a path, a FIFO), external
data read into memory with mmap=False, and runs that must stop when told to
(a Loop of 2**62 iterations under RunOptions limits, or cancelled from
another thread)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import candle_api as c  # noqa: E402
from candle_api.errors import CandleError, FormatError  # noqa: E402
from candle_api.onnx import InferenceSession, ONNXModel  # noqa: E402
from candle_formats.onnx import RunInterruptedError, RunOptions  # noqa: E402

F32 = TensorProto.FLOAT


def relu_model() -> bytes:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", F32, [2])],
                              [helper.make_tensor_value_info("y", F32, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def external_model(folder, dims=(2, 2), location="w.bin") -> str:
    """x + w, w stored in folder/w.bin (4 floats: 0, 1, 2, 3)."""
    np.arange(4, dtype=np.float32).tofile(os.path.join(folder, "w.bin"))
    w = TensorProto(name="w", data_type=F32, dims=list(dims), data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", F32, [2, 2])],
                              [helper.make_tensor_value_info("y", F32, [2, 2])], initializer=[w])
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


# ---- hostile files -------------------------------------------------------------------------------
@pytest.mark.parametrize("check", [True, False])
def test_invalid_utf8_in_an_op_type(tmp_path, check):
    """protobuf hands invalid UTF-8 back as bytes: onnx's checker raised
    UnicodeDecodeError, the planner TypeError."""
    path = tmp_path / "bad.onnx"
    path.write_bytes(relu_model().replace(b"Relu", b"Re\xffu"))
    with pytest.raises(FormatError, match=r"model\.graph\.node\[0\]\.op_type is not valid UTF-8") as info:
        ONNXModel(path, check=check)
    assert info.value.path == str(path)
    with pytest.raises(FormatError, match="op_type is not valid UTF-8"):
        c.load(path)


def test_invalid_utf8_in_serialized_bytes():
    with pytest.raises(FormatError, match="op_type is not valid UTF-8"):
        ONNXModel(relu_model().replace(b"Relu", b"Re\xffu"))


@pytest.mark.parametrize("dims", [(-2, -2), (-1, -4), (2**40, 2**40)])
def test_external_data_with_impossible_dims(tmp_path, dims):
    """Negative dims whose product matches the length raised numpy's ValueError."""
    path = external_model(tmp_path, dims)
    for load in (lambda: ONNXModel(path), lambda: ONNXModel(path, check=False), lambda: dict(c.load(path))):
        with pytest.raises(FormatError, match="'w'") as info:
            load()
        assert info.value.path == path


def test_nul_in_a_path(tmp_path):
    for load in (lambda: ONNXModel(str(tmp_path / "m\0.onnx")), lambda: c.load(str(tmp_path / "m\0.onnx")),
                 lambda: c.load(str(tmp_path / "m\0.onnx"), format="onnx")):
        with pytest.raises(FormatError, match="cannot open"):
            load()
    path = external_model(tmp_path, location="w.bin\0x")
    with pytest.raises(FormatError, match="must be a file inside the model's folder"):
        ONNXModel(path, check=False)


def test_a_fifo_is_refused(tmp_path):
    """A model file or external data file that is a FIFO is refused, not read
    (which blocks forever): in a child process, which the timeout ends if not."""
    model_fifo = tmp_path / "fifo.onnx"
    os.mkfifo(model_fifo)
    path = external_model(tmp_path)
    os.remove(tmp_path / "w.bin")
    os.mkfifo(tmp_path / "w.bin")
    script = ("from candle_api.onnx import ONNXModel\n"
              f"for source, check in (({str(model_fifo)!r}, True), ({path!r}, True), ({path!r}, False)):\n"
              "    try:\n"
              "        ONNXModel(source, check=check)\n"
              "    except Exception as exc:\n"
              "        print(type(exc).__name__, exc)\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    lines = child.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("FormatError") for line in lines), child.stdout + child.stderr
    assert "a FIFO" in lines[0] and "not regular file" in lines[1] and "a FIFO" in lines[2]


def test_external_data_read_into_memory_survives_truncation(tmp_path):
    """mmap=False reads external data when it is first used: truncating the
    file afterwards (which kills a process reading a map with SIGBUS) changes nothing."""
    path = external_model(tmp_path)
    model = ONNXModel(path, mmap=False)
    weights = c.load(path, mmap=False)
    first = weights["w"]
    os.truncate(tmp_path / "w.bin", 0)
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(model.run({"x": x})["y"].numpy(), x + np.arange(4).reshape(2, 2))
    np.testing.assert_array_equal(first.numpy(), np.arange(4, dtype=np.float32).reshape(2, 2))


# ---- runs that must stop ---------------------------------------------------------------------------
def counting_loop() -> InferenceSession:
    """y = x + trips, one Loop iteration at a time."""
    one = helper.make_tensor("one", F32, [1], [1.0])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["x", "one"], ["x_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("x", F32, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", F32, [1])], [one])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], name="count", body=body)], "g",
        [helper.make_tensor_value_info("trips", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", F32, [1])],
        [helper.make_tensor_value_info("y", F32, [1])])
    return InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def feeds(trips: int) -> dict:
    return {"trips": np.array(trips, np.int64), "cond": np.array(True), "x": np.zeros(1, np.float32)}


def test_limits_are_off_by_default_and_allow_what_fits():
    session = counting_loop()
    assert session.run(None, feeds(50))[0].tolist() == [50.0]
    options = RunOptions(max_iterations=50, max_seconds=60)
    assert session.run(None, feeds(50), options)[0].tolist() == [50.0]
    assert session.model.run(feeds(3), options)["y"].numpy().tolist() == [3.0]


def test_iteration_limit_stops_a_huge_loop():
    start = time.perf_counter()
    with pytest.raises(RunInterruptedError, match=r"node 'count' \(Loop.*100 iterations.*max_iterations") as info:
        counting_loop().run(None, feeds(2**62), RunOptions(max_iterations=100))
    assert isinstance(info.value, CandleError) and info.value.node_name == "count"
    assert time.perf_counter() - start < 2


def test_time_limit_stops_a_huge_loop():
    start = time.perf_counter()
    with pytest.raises(RunInterruptedError, match="max_seconds"):
        counting_loop().run(None, feeds(2**62), RunOptions(max_seconds=0.2))
    assert time.perf_counter() - start < 2


def test_a_run_is_cancelled_from_another_thread():
    session, options, outcome = counting_loop(), RunOptions(), []

    def run():
        try:
            session.run(None, feeds(2**62), options)
        except RunInterruptedError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.2)
    assert worker.is_alive() and not outcome
    options.terminate = True  # onnxruntime's RunOptions.terminate
    worker.join(2)
    assert not worker.is_alive(), "the run went on after terminate was set"
    assert "the run was cancelled (RunOptions.terminate)" in str(outcome[0])  # at the Loop or a node of its body
    # the options of one run do not reach another
    assert session.run(None, feeds(3))[0].tolist() == [3.0]
