"""candle-api as an ``onnx.backend.base.Backend``, the way
``onnxruntime.backend`` is one: ``prepare(model, device)`` returns a rep
whose ``run(inputs)`` evaluates the model, and ``run_model``, ``run_node``,
``supports_device`` work as the ONNX backend API describes. ONNX device
strings ("CPU", "CUDA:1") name candle-api devices ("cpu", "cuda:1").

    import candle_formats.onnx.backend as backend
    outputs = backend.run_model(model, [x], device="CPU")
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

import candle_api as c

from .model import ONNXModel


def candle_device(device: str) -> str:
    """"CPU" -> "cpu", "CUDA:1" -> "cuda:1"."""
    return str(device).lower()


class CandleRep(BackendRep):
    """A prepared model: ``run`` takes a list (in the model's input order),
    a dict or a single array, and returns the outputs as NumPy arrays."""

    def __init__(self, model: ONNXModel):
        self.model = model

    def run(self, inputs, **kwargs):
        names = list(self.model.inputs)
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(names, inputs))
        outputs = self.model.run_numpy(feeds)
        return namedtupledict("Outputs", self.model.plan.outputs)(*outputs)


class CandleBackend(Backend):
    @classmethod
    def prepare(cls, model: ModelProto | str | bytes, device: str = "CPU", **kwargs) -> CandleRep:
        """``kwargs``: ``check`` (run onnx's checker, default True), ``fold_constants``."""
        return CandleRep(ONNXModel(model, device=candle_device(device), **kwargs))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: NodeProto, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Runs one node on NumPy inputs; ``outputs_info`` gives (dtype, shape)
        per output when known."""
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        names = [n for n in node.input if n]
        arrays = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, map(np.asarray, arrays))]
        infos = outputs_info or [(None, None)] * len(node.output)
        graph_outputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)) if dt is not None else onnx.TensorProto.UNDEFINED, shape)
            for n, (dt, shape) in zip(node.output, infos)]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        domains = {node.domain or ""}
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, opset if d in ("", "ai.onnx") else 1)
                                                        for d in domains])
        return cls.run_model(model, dict(zip(names, arrays)), device, check=False, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            c.get_device(candle_device(device))
        except c.CandleError:
            return False
        return True


prepare = CandleBackend.prepare
run_model = CandleBackend.run_model
run_node = CandleBackend.run_node
supports_device = CandleBackend.supports_device
