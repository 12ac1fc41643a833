"""onnxruntime's InferenceSession on candle-api: NumPy in, NumPy out, with
its SessionOptions and execution providers.

- ``SessionOptions``: ``intra_op_num_threads`` (0: candle-api's default,
  the number of cores), ``graph_optimization_level`` (what planning does,
  see :class:`GraphOptimizationLevel`), ``enable_mem_pattern`` (recorded
  runs, replay.py: onnxruntime's reuse of one run's memory plan for inputs
  of the same shapes), ``inter_op_num_threads`` and ``execution_mode``
  (accepted; nodes run one after another).
- ``providers``: onnxruntime's names mapped to candle-api devices
  (``CPUExecutionProvider`` -> ``cpu``, ``CUDAExecutionProvider`` ->
  ``cuda:<device_id>``). Listed in order of preference as in onnxruntime:
  the first whose device is installed and available runs the model
  (``get_providers()`` says which); a name candle-api does not know, or a
  list none of whose devices is available, raises :class:`ProviderError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum

import candle_api as c
from candle_api.errors import CandleError

from .model import ONNXModel, TensorDescription
from .plan import RunOptions


class GraphOptimizationLevel(IntEnum):
    """onnxruntime's levels, and what each does here:

    - ``ORT_DISABLE_ALL``: nodes run as the file has them (no constant folding);
    - ``ORT_ENABLE_BASIC``: constant folding, Identity nodes dropped, Conv
      with a following BatchNormalization (or constant Mul and Add) folded;
    - ``ORT_ENABLE_EXTENDED`` and ``ORT_ENABLE_ALL``: every fusion of
      fusion.py (FusedConv, Linear, attention, GELU, LayerNorm) and the
      constant weights packed for the products."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """The options of an :class:`InferenceSession`, as onnxruntime spells them."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.enable_mem_pattern = True
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL

    def __repr__(self) -> str:
        return (f"SessionOptions(intra_op_num_threads={self.intra_op_num_threads}, "
                f"graph_optimization_level={GraphOptimizationLevel(self.graph_optimization_level).name}, "
                f"enable_mem_pattern={self.enable_mem_pattern})")


class ProviderError(CandleError, ValueError):
    """An execution provider candle-api has no device for."""


#: onnxruntime's execution providers -> candle-api device types
PROVIDERS = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}


def get_available_providers() -> list[str]:
    """The providers whose candle-api device is installed and available here."""
    return [name for name, kind in PROVIDERS.items() if _available(kind)]


def _available(kind: str) -> bool:
    return kind == "cpu" or c.utils.device_count(kind) > 0


def resolve_providers(providers, provider_options=None) -> tuple[str, str]:
    """(the provider that runs the model, its candle-api device) for a list in
    onnxruntime's form: names, or (name, options) pairs."""
    entries = []
    for i, entry in enumerate(providers):
        name, options = entry if isinstance(entry, (tuple, list)) else (entry, None)
        if provider_options is not None and options is None and i < len(provider_options):
            options = provider_options[i]
        if name not in PROVIDERS:
            raise ProviderError(f"execution provider {name!r} has no candle-api device (known: "
                                f"{', '.join(PROVIDERS)}; available here: {', '.join(get_available_providers())})")
        entries.append((name, dict(options or {})))
    for name, options in entries:
        kind = PROVIDERS[name]
        if _available(kind):
            return name, kind if kind == "cpu" else f"{kind}:{int(options.get('device_id', 0))}"
    raise ProviderError(f"none of the execution providers {[n for n, _ in entries]} has an available device here "
                        f"(available: {', '.join(get_available_providers())}; CUDAExecutionProvider needs "
                        "candle-backend-cuda and a GPU)")


class InferenceSession:
    """onnxruntime's InferenceSession shape of API on candle-api:
    ``run(output_names, {name: array})`` returns a list of NumPy arrays.

    ``InferenceSession(path_or_bytes, sess_options=None, providers=None)`` as
    in onnxruntime; ``device=`` names a candle-api device directly instead of
    providers; other keywords go to :class:`ONNXModel`."""

    def __init__(self, source, sess_options: SessionOptions | None = None, providers=None, provider_options=None,
                 device=None, **options):
        self._options = sess_options or SessionOptions()
        if providers is not None and device is not None:
            raise ValueError("give providers or device, not both")
        if providers:
            self._provider, device = resolve_providers(providers, provider_options)
        else:
            device = device or "cpu"
            self._provider = next((n for n, k in PROVIDERS.items() if str(device).startswith(k)), None)
        level = int(self._options.graph_optimization_level)
        self.model = ONNXModel(source, device=device, optimization_level=level,
                               recorded_runs=bool(self._options.enable_mem_pattern), **options)

    def get_inputs(self) -> list[TensorDescription]:
        return list(self.model.inputs.values())

    def get_outputs(self) -> list[TensorDescription]:
        return list(self.model.outputs.values())

    def get_providers(self) -> list[str]:
        return [self._provider] if self._provider else []

    def get_session_options(self) -> SessionOptions:
        return self._options

    def run(self, output_names, input_feed: Mapping, run_options: RunOptions | None = None) -> list:
        threads = self._options.intra_op_num_threads
        if threads and c.utils.get_num_threads() != threads:
            c.utils.set_num_threads(threads)  # candle-api's pool is per process: set while this session runs
        return self.model.run_numpy(input_feed, output_names, run_options)
