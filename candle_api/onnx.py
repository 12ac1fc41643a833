"""ONNX models on candle-api: ``ONNXModel`` (candle-pyo3's names) and
``InferenceSession`` (onnxruntime's NumPy-in, NumPy-out API).

    from candle_api.onnx import ONNXModel, InferenceSession
    model = ONNXModel("model.onnx")                 # device="cpu" by default
    outputs = model.run({"input_ids": ids})         # {name: Tensor}
    [logits] = InferenceSession("model.onnx").run(None, {"input_ids": ids_array})

The evaluator lives in the candle-formats distribution (``candle_formats.onnx``)
and needs the ``onnx`` package; this module only re-exports it, so importing
candle_api never imports either.
"""

from __future__ import annotations

_INSTALL = "pip install 'candle-formats[onnx]'  (installs candle-formats and onnx)"

try:
    import onnx as _onnx  # noqa: F401  (the evaluator's dependency: fail here, with the fix)
    from candle_formats.onnx import InferenceSession, NodeError, ONNXModel, TensorDescription, \
        UnsupportedNodeError, supported_ops
except ImportError as exc:  # a clear message instead of a bare ModuleNotFoundError
    missing = getattr(exc, "name", None) or "a dependency"
    raise ImportError(f"candle_api.onnx needs {missing!r}, which is not installed: {_INSTALL}") from exc

__all__ = ["ONNXModel", "InferenceSession", "TensorDescription", "NodeError", "UnsupportedNodeError",
           "supported_ops"]
