"""ONNX models on every candle-api backend.

``ONNXModel(path)`` loads a model (external data files included), checks
it, infers types and shapes, plans its evaluation once and runs it with
candle-api ops on any device; ``InferenceSession`` is the same with
onnxruntime's NumPy-in, NumPy-out API; ``candle_formats.onnx.backend`` is an
``onnx.backend.base.Backend``. As a format plugin it claims ``.onnx`` files:
``candle_api.load("model.onnx")`` returns the model's initializers.

The evaluator needs the ``onnx`` package (``pip install './formats[onnx]'`` in a checkout);
importing this plugin does not import it.
"""

from __future__ import annotations

from functools import partial

from candle_api.errors import DTypeError, FormatError
from candle_api.hooks import FormatSpec, hookimpl

_LAZY = {"ONNXModel": "model", "InferenceSession": "session", "TensorDescription": "model", "RunOptions": "plan",
         "SessionOptions": "session", "GraphOptimizationLevel": "session", "get_available_providers": "session",
         "ProviderError": "session", "UnsupportedNodeError": "errors", "NodeError": "errors",
         "RunInterruptedError": "errors", "supported_ops": "registry"}
INSTALL_HINT = "the ONNX evaluator needs the onnx package: pip install './formats[onnx]' (in a checkout of candle-api)"


def _require_onnx(path) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise FormatError(path, None, INSTALL_HINT) from None


def _load(path, mmap: bool = True):
    _require_onnx(path)
    import numpy as np

    from candle_api import from_numpy
    from candle_api.io import TensorFile

    from .helpers import tensor_from_array
    from .loader import TensorReader, read_model

    proto, path = read_model(path)
    read = TensorReader(path, mmap)

    def initializer(t):
        try:
            arr = read(t)  # BOOL loads as bool; the evaluator holds it as u8 internally
            return from_numpy(arr) if arr.dtype == np.bool_ else tensor_from_array(arr, "cpu")
        except DTypeError as exc:  # an element type candle-api cannot hold: complex, strings...
            raise FormatError(path, None, f"initializer {t.name!r}: {exc}") from None

    entries = {t.name: partial(initializer, t) for t in proto.graph.initializer}
    metadata = {"ir_version": proto.ir_version, "producer_name": proto.producer_name,
                "producer_version": proto.producer_version,
                "opset_import": {o.domain or "ai.onnx": o.version for o in proto.opset_import}}
    return TensorFile(entries, metadata, "onnx", path)


@hookimpl
def candle_api_formats():
    return [FormatSpec("onnx", (".onnx",), load=_load,
                       description="ONNX models: initializers as tensors (evaluate with candle_api.onnx)")]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name if name != "supported_ops" else "supported")
    globals()[name] = value
    return value
