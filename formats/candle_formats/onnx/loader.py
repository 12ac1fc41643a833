"""Reading an ONNX model: the protobuf, its external data files, the
checker, and shape/type inference.

External data is never loaded into the protobuf: each tensor stored outside
is a bounds-checked, read-only view of its memory-mapped file (or, with
``mmap=False``, of a copy read into memory), which must lie inside the
model's folder. Anything malformed raises ``FormatError(path, offset,
reason)``; nothing in a model file is executed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError, Message
from onnx import ModelProto, TensorProto

from candle_api.errors import FormatError

from .._common import MappedFile, check_shape, read_whole

#: the largest model file read whole (protobuf's own limit is 2 GiB)
MAX_PROTO = 2**31 - 1


def read_model(source) -> tuple[ModelProto, Path | None]:
    """(model, path) from a path, the serialized bytes or a ModelProto."""
    if isinstance(source, ModelProto):
        _check_strings(source, "model", "<model>")
        return source, None
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(bytes(source), "<bytes>"), None
    path = Path(source)
    # protobuf's own limit; large models keep their weights in external data files
    return _parse(read_whole(path, MAX_PROTO, "model"), path), path


def _parse(raw: bytes, path) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(raw)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise FormatError(path, None, f"not an ONNX model: the protobuf does not parse ({exc})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise FormatError(path, None, "not an ONNX model: no ir_version or no graph")
    _check_strings(model, "model", path)
    return model


def _check_strings(message, where: str, path) -> None:
    """Every string field of the model must be UTF-8: ONNX is proto2, whose
    strings protobuf's Python runtime hands back as bytes when they are not,
    and onnx's checker and every name lookup would then fail in their own
    ways. Checked once here, naming the field."""
    for field in message.DESCRIPTOR.fields:
        if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
            continue  # numbers and bytes (raw_data) are never read here
        value = getattr(message, field.name)
        if isinstance(value, Message) and not message.HasField(field.name):
            continue  # unset: its defaults nest forever (a TypeProto holds TypeProtos)
        single = isinstance(value, (str, bytes, Message))
        for i, item in enumerate((value,) if single else value):
            name = f"{where}.{field.name}" if single else f"{where}.{field.name}[{i}]"
            if isinstance(item, Message):
                _check_strings(item, name, path)
            elif type(item) is not str:
                raise FormatError(path, None, f"{name} is not valid UTF-8")


def has_external_data(model: ModelProto) -> bool:
    return any(t.data_location == TensorProto.EXTERNAL for t in _all_tensors(model))


def _all_tensors(model: ModelProto):
    return onnx.external_data_helper._get_all_tensors(model)


def check(model: ModelProto, path: Path | None) -> None:
    """onnx's checker (it also checks external data files when given the path)."""
    try:
        if path is not None and has_external_data(model):
            onnx.checker.check_model(str(path))
        else:
            onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, onnx.defs.SchemaError) as exc:
        raise FormatError(path or "<model>", None, f"invalid ONNX model: {_first_line(exc)}") from None


def infer(model: ModelProto) -> ModelProto:
    """The model with the types and shapes onnx can infer ahead of time added
    as value_info (the model itself when inference fails: types are then
    taken from the values as they are computed)."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError):
        return model


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class TensorReader:
    """Turns TensorProtos of a model into numpy arrays of their ONNX types,
    reading external data from memory-mapped files in the model's folder."""

    def __init__(self, path: Path | None, mmap: bool = True):
        self.path, self.mmap = path, mmap
        self.base = path.parent.resolve() if path is not None else None
        self._files: dict[Path, MappedFile] = {}

    def __call__(self, proto: TensorProto) -> np.ndarray:
        if proto.data_location == TensorProto.EXTERNAL:
            return self._external(proto)
        try:
            return onnx.numpy_helper.to_array(proto)
        except Exception as exc:  # onnx raises TypeError, ValueError... for inconsistent tensors
            raise FormatError(self.path or "<model>", None,
                              f"tensor {proto.name!r} is malformed: {_first_line(exc)}") from None

    def _external(self, proto: TensorProto) -> np.ndarray:
        info = {e.key: e.value for e in proto.external_data}
        where = self.path or "<model>"
        if self.base is None:
            raise FormatError(where, None, f"tensor {proto.name!r} is stored in an external file, which "
                                           "needs the model to be loaded from a path")
        try:
            offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else None
        except ValueError:
            raise FormatError(where, None, f"tensor {proto.name!r}: external offset/length are not integers")
        file = self._file(info.get("location", ""), proto.name)
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(proto.data_type)
        except KeyError:
            raise FormatError(where, None, f"tensor {proto.name!r}: unknown element type {proto.data_type}") from None
        shape = check_shape(list(proto.dims), where, None, proto.name)
        count = math.prod(shape)
        if dtype.kind not in "biuf":  # ml_dtypes' types (packed 4-bit, float8...) and strings
            return self._unpacked(proto, file, offset, length)
        if length is not None and length != count * dtype.itemsize:
            raise FormatError(file.path, offset, f"tensor {proto.name!r}: length {length} does not match "
                                                 f"{count} elements of {dtype}")
        return file.array(offset, dtype.newbyteorder("<"), shape, f"tensor {proto.name!r}")

    def _unpacked(self, proto, file: MappedFile, offset: int, length: int | None) -> np.ndarray:
        """Types numpy does not view in place: read into a copy of the proto, which onnx decodes."""
        if length is None:
            raise FormatError(file.path, offset, f"tensor {proto.name!r}: packed external data needs a length")
        copy = TensorProto()
        copy.CopyFrom(proto)
        del copy.external_data[:]
        copy.data_location = TensorProto.DEFAULT
        copy.raw_data = file.read(offset, length, f"tensor {proto.name!r}")
        return self(copy)

    def _file(self, location: str, name: str) -> MappedFile:
        target = _inside(self.base, location)
        if target is None:
            raise FormatError(self.path, None, f"tensor {name!r}: external data location {location!r} must be a "
                                               "file inside the model's folder")
        if target not in self._files:
            self._files[target] = MappedFile(target, self.mmap)
        return self._files[target]


def _inside(base: Path, location: str) -> Path | None:
    """The file ``location`` names inside the folder ``base`` (symlinks
    resolved), or None when it names none there."""
    rel = Path(location)
    if not location or "\0" in location or rel.is_absolute() or ".." in rel.parts:
        return None
    target = (base / rel).resolve()
    return target if os.path.commonpath([target, base]) == str(base) else None
