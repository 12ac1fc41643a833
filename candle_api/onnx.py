"""ONNX models on candle-api: ``ONNXModel`` (candle-pyo3's names) and
``InferenceSession`` (onnxruntime's NumPy-in, NumPy-out API).

    from candle_api.onnx import ONNXModel, InferenceSession
    model = ONNXModel("model.onnx")                 # device="cpu" by default
    outputs = model.run({"input_ids": ids})         # {name: Tensor}
    [logits] = InferenceSession("model.onnx").run(None, {"input_ids": ids_array})

The evaluator is a plugin: the module named by the ``candle_api.onnx`` entry
point group (candle-formats provides one) exports these names, and this
module re-exports them. Importing candle_api imports neither.
"""

from __future__ import annotations

from importlib import metadata

GROUP = "candle_api.onnx"
NAMES = ("ONNXModel", "InferenceSession", "TensorDescription", "NodeError", "UnsupportedNodeError", "supported_ops",
         "RunOptions", "RunInterruptedError", "SessionOptions", "GraphOptimizationLevel", "get_available_providers",
         "ProviderError")
_INSTALL = ("pip install './formats[onnx]' in a checkout of candle-api  (installs the ONNX evaluator plugin and "
            "the onnx package)")


def _evaluator():
    found = sorted(metadata.entry_points(group=GROUP), key=lambda ep: ep.name)
    if not found:
        raise ImportError(f"candle_api.onnx needs an ONNX evaluator plugin (entry point group {GROUP!r}); "
                          f"none is installed: {_INSTALL}")
    try:
        module = found[0].load()
        return {name: getattr(module, name) for name in NAMES}
    except ImportError as exc:  # the evaluator's own dependency (onnx): fail here, with the fix
        missing = getattr(exc, "name", None) or "a dependency"
        raise ImportError(f"candle_api.onnx needs {missing!r}, which is not installed: {_INSTALL}") from exc


globals().update(_evaluator())
__all__ = list(NAMES)
