"""Recorded runs (replay.py) against walking the graph.

Every node case of the ONNX backend suite that candle-api passes is run
twice on its own inputs (walked, then recorded), then replayed on inputs
whose float values are perturbed: the replay must give what walking the
graph gives on those same inputs. A recording that baked a value computed
from the feeds into a constant, missed a kernel or reused a buffer too early
shows here. Plus the rules of replay.py on small graphs of their own.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")

from onnx import TensorProto, helper  # noqa: E402

import candle_api as c  # noqa: E402
from candle_formats.onnx import ONNXModel  # noqa: E402
from candle_formats.onnx.replay import Program  # noqa: E402
from test_backend_node import expected_failures  # noqa: E402


def _perturbed(feeds: dict, rng) -> dict:
    out = {}
    for name, value in feeds.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
            scale = float(np.nanstd(value.astype(np.float64))) or 1.0
            noise = rng.standard_normal(value.shape) * 0.05 * scale
            value = (value + noise.astype(value.dtype)).astype(value.dtype)
        out[name] = value
    return out


def _same(a, b) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def _node_cases():
    import onnx.backend.test.loader as loader

    skip = set(expected_failures())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    return [case for case in cases if case.name not in skip and case.model is not None and case.data_sets]


def test_node_cases_replay_as_they_walk():
    rng = np.random.default_rng(0)
    replayed, failures = 0, []
    for case in _node_cases():
        feeds = {vi.name: v for vi, v in zip(case.model.graph.input, case.data_sets[0][0])}
        if not all(isinstance(v, np.ndarray) for v in feeds.values()):
            continue  # sequences and optionals are not recorded
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ONNXModel(case.model)
            model.run_numpy(feeds)
            model.run_numpy(feeds)                     # recorded
            other = _perturbed(feeds, rng)
            ours = model.run_numpy(other)              # replayed (or walked where a guard failed)
            walked = [model._export(v, model.plan.types.get(n))
                      for n, v in zip(model.plan.outputs, model.plan.run(model._feeds(other)))]
        if any(isinstance(p, Program) for p in model._replays.programs.values()):
            replayed += 1
        if not all(_same(a, b) for a, b in zip(ours, walked)):
            failures.append(case.name)
    assert not failures, f"replays that differ from walking the graph: {failures}"
    assert replayed > 1000, f"only {replayed} node cases were recorded"


# ---- the rules, on small graphs ----------------------------------------------------------------
def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return ONNXModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _programs(model):
    return [p for p in model._replays.programs.values() if isinstance(p, Program)]


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_second_run_records_third_replays():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", [None])], [_float("y", [None])])
    x = np.array([-1.0, 2.0], np.float32)
    model.run_numpy({"x": x})
    assert not _programs(model)
    model.run_numpy({"x": x})
    assert len(_programs(model)) == 1
    (y,) = model.run_numpy({"x": -x})
    np.testing.assert_array_equal(y, [1.0, 0.0])
    model.run_numpy({"x": np.ones(5, np.float32)})  # another signature walks first
    assert len(_programs(model)) == 1


def test_outputs_are_not_overwritten_by_the_next_replay():
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [_float("x", [2])], [_float("y", [2])])
    x = np.array([1.0, 2.0], np.float32)
    for _ in range(3):
        model.run({"x": x})
    first = model.run({"x": x})["y"]
    model.run({"x": 2 * x})
    np.testing.assert_array_equal(first.numpy(), [-1.0, -2.0])


def test_copies_replay_with_their_arguments_bound():
    # a Concat's copies are bound once when recorded (kernel.bind) and read the new feeds on replay
    model = _model([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], [_float("a", [2, 2]), _float("b", [2, 3])],
                   [_float("y", [2, 5])])
    a, b = np.arange(4, dtype=np.float32).reshape(2, 2), np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(2):
        model.run_numpy({"a": a, "b": b})
    (program,) = _programs(model)
    assert [args for _, args in program.calls if not args], "no bound copy in the recorded run"
    (y,) = model.run_numpy({"a": -a, "b": 2 * b})
    np.testing.assert_array_equal(y, np.concatenate([-a, 2 * b], axis=1))


def test_a_value_read_on_the_host_is_guarded():
    # If reads its condition on the host: a replay recorded with one branch must not take it for the other
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_float("t", [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [_float("e", [2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    model = _model(nodes, [_float("x", [2])], [_float("y", [2])], [zero])
    pos, neg = np.array([1.0, 2.0], np.float32), np.array([-1.0, -2.0], np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(model.run_numpy({"x": pos})[0], -pos)
    np.testing.assert_array_equal(model.run_numpy({"x": neg})[0], -neg)  # the guard fails: walked
    np.testing.assert_array_equal(model.run_numpy({"x": pos})[0], -pos)  # replayed again


def test_a_count_read_back_is_guarded():
    # NonZero reads one count back to the host: a replay serves inputs with the same count only
    nodes = [helper.make_node("NonZero", ["x"], ["y"])]
    model = _model(nodes, [_float("x", [6])], [helper.make_tensor_value_info("y", TensorProto.INT64, [1, None])])
    x = np.array([0, 1, 0, 2, 0, 3], np.float32)
    for _ in range(3):
        model.run_numpy({"x": x})
    assert _programs(model)
    np.testing.assert_array_equal(model.run_numpy({"x": x[::-1].copy()})[0], [[0, 2, 4]])  # replayed
    np.testing.assert_array_equal(model.run_numpy({"x": np.ones(6, np.float32)})[0], [np.arange(6)])  # walked


def test_shape_arithmetic_needs_no_guard():
    # the target shape is computed on the device from the input's shape (Shape, Cast, Concat, as
    # PaddleOCR exports a flatten): the same for every feed of a signature, so read without a guard
    i64 = TensorProto.INT64
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
             helper.make_node("Cast", ["batch"], ["batch64"], to=i64),
             helper.make_node("Concat", ["batch64", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [helper.make_tensor("zero", i64, [1], [0]), helper.make_tensor("one", i64, [1], [1]),
             helper.make_tensor("minus_one", i64, [1], [-1])]
    model = _model(nodes, [_float("x", [2, 3, 4])], [_float("y", [2, 12])], inits)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for _ in range(3):
        np.testing.assert_array_equal(model.run_numpy({"x": x})[0], x.reshape(2, 12))
    (program,) = _programs(model)
    assert not [fn for fn, _ in program.calls if fn.__name__ == "_guard"]
    np.testing.assert_array_equal(model.run_numpy({"x": -x})[0], -x.reshape(2, 12))


def test_a_large_host_read_is_not_recorded():
    # ScatterND multiplying reads its indices on the host: 5000 of them are too many to guard
    nodes = [helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"], reduction="mul")]
    indices = helper.make_tensor_value_info("indices", TensorProto.INT64, [5000, 1])
    model = _model(nodes, [_float("data", [8]), indices, _float("updates", [5000])], [_float("y", [8])])
    feeds = {"data": np.arange(8, dtype=np.float32), "indices": (np.arange(5000) % 8).reshape(-1, 1),
             "updates": np.ones(5000, np.float32)}
    for _ in range(3):
        (y,) = model.run_numpy(feeds)
    assert not _programs(model)
    np.testing.assert_array_equal(y, np.arange(8))


def test_random_nodes_run_live():
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    model = _model(nodes, [_float("x", [64])], [_float("y", [64])])
    x = np.zeros(64, np.float32)
    results = [model.run_numpy({"x": x})[0] for _ in range(4)]
    assert _programs(model)
    assert not np.array_equal(results[2], results[3])  # fresh values in every replay


def test_replays_in_threads_agree():
    model = _model([helper.make_node("Mul", ["x", "x"], ["y"])], [_float("x", [256])], [_float("y", [256])])
    base = np.linspace(-1, 1, 256, dtype=np.float32)
    for _ in range(2):
        model.run_numpy({"x": base})
    errors = []

    def work(k: int) -> None:
        for i in range(50):
            x = base * (k + i)
            if not np.array_equal(model.run_numpy({"x": x})[0], x * x):
                errors.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_no_recording_under_another_observer():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", [3])], [_float("y", [3])])
    x = np.array([-1.0, 0.0, 1.0], np.float32)
    with c.trace():
        for _ in range(3):
            model.run_numpy({"x": x})
    assert not _programs(model)


def test_model_outputs_are_onnx_types():
    model = _model([helper.make_node("Greater", ["x", "x"], ["y"])], [_float("x", [3])],
                   [helper.make_tensor_value_info("y", TensorProto.BOOL, [3])])
    x = np.arange(3, dtype=np.float32)
    for _ in range(3):
        (y,) = model.run_numpy({"x": x})
    assert _programs(model) and y.dtype == np.bool_
