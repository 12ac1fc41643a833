"""ONNX models (made with onnx.helper) whose initializers are stored inline,
as raw bytes or typed fields, or in an external data file; mutants of their
dims, data types, data and external data records, and of the protobuf."""

from __future__ import annotations

import os

import numpy as np

from ..case import interesting_int, pick
from . import Expected, random_shape, sample, splice, truncated

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_]
LOCATIONS = ["/etc/passwd", "../outside.bin", "sub/../../outside.bin", "missing.bin", "sub", "fifo.bin", "",
             "link.bin", "weights.bin\x00x", "weights.bin"]
NUMBERS = ["-1", "abc", "1e3", str(2**64), str(2**63 - 1), "0x10", " 8", ""]


def store_externally(proto, external: bytearray, location: str) -> None:
    """Moves an initializer's raw bytes to the end of ``external``, the file at ``location``."""
    from onnx import TensorProto

    records = (("location", location), ("offset", str(len(external))), ("length", str(len(proto.raw_data))))
    external += proto.raw_data
    proto.ClearField("raw_data")
    proto.data_location = TensorProto.EXTERNAL
    for key, value in records:
        proto.external_data.add(key=key, value=value)


def model(rng, folder):
    """(a ModelProto whose graph adds its initializers' first to its input, expected initializer values)."""
    from onnx import helper, numpy_helper

    arrays = {f"w{i}": sample(rng, pick(rng, DTYPES), random_shape(rng)) for i in range(int(rng.integers(1, 4)))}
    initializers, external = [], bytearray()
    for name, values in arrays.items():
        proto = numpy_helper.from_array(values, name)
        if rng.random() < 0.3 and values.dtype.kind == "f" and values.dtype.itemsize == 4:
            proto.ClearField("raw_data")
            proto.float_data.extend(values.reshape(-1).tolist())  # the typed field instead of raw bytes
        elif rng.random() < 0.3:
            store_externally(proto, external, "weights.bin")
        initializers.append(proto)
    (folder / "weights.bin").write_bytes(bytes(external))
    first = initializers[0]
    x = helper.make_tensor_value_info("x", first.data_type, list(first.dims))
    y = helper.make_tensor_value_info("y", first.data_type, list(first.dims))
    graph = helper.make_graph([helper.make_node("Identity", [first.name], ["y"])], "g", [x], [y], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), arrays


def _initializer_mutant(rng, proto) -> str:
    kind = pick(rng, ["dims", "dims", "data_type", "raw_data", "typed data", "external", "external", "name"])
    if kind == "dims":
        dims = list(proto.dims) or [1]
        value = interesting_int(rng, dims[0])
        dims[int(rng.integers(len(dims)))] = value - 2**64 if value >= 2**63 else value  # dims are int64
        proto.ClearField("dims")
        proto.dims.extend(pick(rng, [dims, dims + [2], dims[:-1], [2**31] * 4]))
        return f"dims {list(proto.dims)[:4]}"
    if kind == "data_type":
        proto.data_type = int(pick(rng, list(range(0, 27)) + [999, -1 % 2**31]))
        return f"data_type {proto.data_type}"
    if kind == "raw_data":
        proto.raw_data = pick(rng, [proto.raw_data[:-1], proto.raw_data + b"\0", b"", b"\0" * 3])
        return "raw_data size"
    if kind == "typed data":
        proto.int64_data.extend([1, 2, 3])
        return "typed and raw data both"
    if kind == "external":
        from onnx import TensorProto

        proto.data_location = TensorProto.EXTERNAL
        records = {e.key: e.value for e in proto.external_data} or {"location": "weights.bin"}
        key = pick(rng, ["location", "offset", "length"])
        records[key] = pick(rng, LOCATIONS if key == "location" else NUMBERS)
        del proto.external_data[:]
        for k, v in records.items():
            proto.external_data.add(key=k, value=v)
        return f"external {key} {records[key][:20]!r}"
    proto.name = pick(rng, ["", "w0", "é" * 100])
    return "initializer name"


def make(rng, folder, mutate: bool):
    proto, arrays = model(rng, folder)
    path = folder / "model.onnx"
    if not mutate:
        path.write_bytes(proto.SerializeToString())
        return path, Expected(arrays), "onnx: valid"
    (folder / "sub").mkdir()
    os.mkfifo(folder / "fifo.bin")
    (folder / "link.bin").symlink_to("/etc/passwd")
    kind = pick(rng, ["initializer", "initializer", "initializer", "model", "bytes", "truncate"])
    if kind == "initializer":
        what = _initializer_mutant(rng, pick(rng, list(proto.graph.initializer)))
    elif kind == "model":
        field = pick(rng, ["ir_version", "opset", "node"])
        if field == "ir_version":
            proto.ir_version = pick(rng, [0, 1, 2**40])
        elif field == "opset":
            proto.opset_import[0].version = pick(rng, [0, 1, 99999])
        else:
            proto.graph.node[0].input[0] = "missing"
        what = field
    raw = proto.SerializeToString()
    if kind == "bytes":
        raw, what = splice(rng, raw), "protobuf bytes changed"
    elif kind == "truncate":
        raw, what = truncated(rng, raw), "truncated"
    path.write_bytes(raw)
    return path, None, f"onnx: {what}"
