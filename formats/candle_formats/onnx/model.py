"""ONNXModel (candle-pyo3's names) over one compiled plan (InferenceSession,
onnxruntime's shape of API, is in session.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api.errors import DTypeError, ShapeError

from . import loader
from .dtypes import OnnxType, UnsupportedTypeError, from_numpy_dtype, natural, onnx_type, type_name
from .helpers import tensor_from_array, to_numpy
from .plan import Compiler, Plan, RunOptions, watched
from .replay import Replays


@dataclass(frozen=True)
class TensorDescription:
    """A graph input or output: ``shape`` holds ints for fixed dims, names
    for symbolic ones and None for unknown ones (None for the whole shape
    when the rank is unknown)."""

    name: str
    onnx_type: str                 #: "FLOAT", "INT64", "BOOL", or "SEQUENCE"/"OPTIONAL"...
    dtype: c.DType | None          #: the candle-api dtype holding the values
    shape: tuple | None

    @property
    def type(self) -> str:
        """onnxruntime's spelling: ``tensor(float)``."""
        return f"tensor({self.onnx_type.lower()})" if self.dtype is not None else self.onnx_type.lower()


def _describe(vi) -> TensorDescription:
    tp = vi.type
    kind = tp.WhichOneof("value")
    if kind != "tensor_type":
        return TensorDescription(vi.name, (kind or "undefined").replace("_type", "").upper(), None, None)
    tt = tp.tensor_type
    try:
        t = onnx_type(tt.elem_type)
        name, dtype = t.name, t.storage
    except UnsupportedTypeError:
        name, dtype = type_name(tt.elem_type), None
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return TensorDescription(vi.name, name, dtype, shape)


class ONNXModel:
    """An ONNX model compiled for a device.

    ``ONNXModel(path)`` (or the serialized bytes, or an ``onnx.ModelProto``)
    reads the model and its external data, checks it with onnx's checker,
    infers types and shapes, and plans its evaluation once; ``run`` then
    evaluates it with candle-api ops on ``device``. External data files are
    memory-mapped, or read into memory with ``mmap=False`` (for files other
    programs may truncate: reading a truncated map kills the process with
    SIGBUS). Names follow candle-pyo3's ``candle.onnx.ONNXModel``.

    ``optimization_level`` is onnxruntime's GraphOptimizationLevel (0: the
    nodes as the file has them, 1: constant folding and the simplest
    fusions, 2 and up: every fusion and packed weights; see session.py);
    ``recorded_runs`` replays the kernel calls of a run for later runs with
    inputs of the same shapes (replay.py).
    """

    def __init__(self, source, device="cpu", check: bool = True, fold_constants: bool = True, mmap: bool = True,
                 optimization_level: int = 99, recorded_runs: bool = True):
        proto, path = loader.read_model(source)
        if check:
            loader.check(proto, path)
        self._proto = proto
        self.path = path
        self.device = c.get_device(device)
        self._read = loader.TensorReader(path, mmap)
        inferred = loader.infer(proto)
        functions = {(f.domain, f.name): f for f in proto.functions}
        compiler = Compiler({o.domain: o.version for o in proto.opset_import}, self.device, functions,
                            self._read, self._to_device, fold_constants and optimization_level > 0,
                            optimization_level)
        self.plan: Plan = compiler.graph(inferred.graph)
        self._replays = Replays(self.plan) if recorded_runs else None
        defaults = {t.name for t in proto.graph.initializer}
        self._inputs = {vi.name: _describe(vi) for vi in proto.graph.input if vi.name not in defaults}
        self._outputs = {vi.name: _describe(vi) for vi in proto.graph.output}

    # ---- candle-pyo3's metadata ----
    @property
    def ir_version(self) -> int:
        return self._proto.ir_version

    @property
    def producer_name(self) -> str:
        return self._proto.producer_name

    @property
    def producer_version(self) -> str:
        return self._proto.producer_version

    @property
    def domain(self) -> str:
        return self._proto.domain

    @property
    def model_version(self) -> int:
        return self._proto.model_version

    @property
    def doc_string(self) -> str:
        return self._proto.doc_string

    @property
    def opset_import(self) -> dict[str, int]:
        return {o.domain or "ai.onnx": o.version for o in self._proto.opset_import}

    @property
    def inputs(self) -> dict[str, TensorDescription]:
        """The inputs a run needs (initializers that are also graph inputs are optional and not listed)."""
        return dict(self._inputs)

    @property
    def outputs(self) -> dict[str, TensorDescription]:
        return dict(self._outputs)

    def initializers(self) -> dict[str, c.Tensor]:
        """Every initializer of the main graph, as a tensor on the model's device."""
        return {t.name: self._to_device(self._read(t)) for t in self._proto.graph.initializer}

    def __repr__(self) -> str:
        where = f"{str(self.path)!r}, " if self.path else ""
        return (f"ONNXModel({where}producer={self.producer_name!r}, opset={self.opset_import}, "
                f"inputs={list(self._inputs)}, outputs={list(self._outputs)}, device={self.device!r})")

    # ---- running ----
    def run(self, inputs: Mapping, options: RunOptions | None = None) -> dict:
        """Evaluates the model: ``{input name: Tensor or array}`` -> ``{output
        name: Tensor}`` (a list of tensors for a sequence, None for an empty
        optional). ``options`` limits the run or cancels it (see RunOptions)."""
        return dict(zip(self.plan.outputs, self._run(inputs, options)))

    def run_numpy(self, inputs: Mapping, output_names=None, options: RunOptions | None = None) -> list:
        """NumPy in and out: outputs as arrays of their ONNX types (bool, int8... included)."""
        by_name = dict(zip(self.plan.outputs, self._run(inputs, options)))
        names = list(output_names) if output_names else self.plan.outputs
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise KeyError(f"the model has no outputs {unknown} (outputs: {self.plan.outputs})")
        return [self._export(by_name[n], self.plan.types.get(n)) for n in names]

    def _run(self, inputs: Mapping, options: RunOptions | None) -> list:
        feeds = self._feeds(inputs)
        if options is None and self._replays is not None:
            return self._replays.run(feeds)
        with watched(options):
            return self.plan.run(feeds)

    def _feeds(self, inputs: Mapping) -> dict:
        missing = [n for n in self.plan.inputs if n not in inputs]
        if missing:
            raise KeyError(f"missing model inputs {missing} (inputs: {list(self.plan.inputs)})")
        known = set(self.plan.inputs) | set(self.plan.defaults)
        unknown = [n for n in inputs if n not in known]
        if unknown:
            raise KeyError(f"the model has no inputs {unknown} (inputs: {list(self.plan.inputs)})")
        return {name: self._import(name, value) for name, value in inputs.items()}

    def _import(self, name: str, value):
        if value is None or isinstance(value, c.Tensor):
            return self._check_tensor(name, value)
        if isinstance(value, (list, tuple)) and (not value or not np.isscalar(value[0])):
            return [self._import(name, v) for v in value]  # a sequence
        arr = np.asarray(value)
        declared = self.plan.types.get(name)
        t = from_numpy_dtype(arr.dtype)
        if declared is not None and declared.code != t.code:
            raise DTypeError(f"input {name!r} is {declared.name}, got a {arr.dtype} array")
        self._check_shape(name, arr.shape)
        return self._check_tensor(name, self._to_device(arr, t))

    def _check_tensor(self, name: str, t):
        """The declared dtype, rank and fixed dims, as onnxruntime checks them (before any node runs)."""
        desc = self._inputs.get(name)
        if t is not None and desc is not None and desc.dtype is not None and t.dtype is not desc.dtype:
            raise DTypeError(f"input {name!r} ({desc.onnx_type}) needs a {desc.dtype} tensor, got {t.dtype}")
        if t is not None:
            self._check_shape(name, t.shape)
        return t

    def _check_shape(self, name: str, shape: tuple) -> None:
        desc = self._inputs.get(name)
        if desc is None or desc.shape is None or desc.dtype is None:
            return
        declared = desc.shape
        if len(shape) != len(declared) or any(isinstance(d, int) and d > 0 and d != n for d, n in zip(declared, shape)):
            dims = ", ".join(str(d) if d is not None else "?" for d in declared)
            raise ShapeError(f"input {name!r} is declared with shape ({dims}) (rank {len(declared)}), "
                             f"got shape {tuple(shape)}")

    def _to_device(self, arr: np.ndarray, t: OnnxType | None = None):
        return tensor_from_array(arr, self.device, t)

    def _export(self, value, declared: OnnxType | None):
        if value is None:
            return None
        if isinstance(value, list):
            return [self._export(v, declared) for v in value]
        return to_numpy(value, declared or natural(value.dtype))
