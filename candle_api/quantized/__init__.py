"""GGML-quantized tensors: :class:`QTensor` and reference NumPy codecs for
every GGML type candle-api handles (see :mod:`.ggml_types`).

Types use candle's names: ``f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q8_1 q2k
q3k q4k q5k q6k q8k iq4_nl iq4_xs mxfp4`` (ggml's spellings such as ``Q4_K``
and ``IQ4_XS`` are accepted too).
"""

from .ggml_types import GGML_TYPE_IDS, GGML_TYPES, GgmlType, dequantize_array, get_ggml_type, quantize_array
from .qtensor import QTensor

__all__ = ["QTensor", "GgmlType", "GGML_TYPES", "GGML_TYPE_IDS", "get_ggml_type", "quantize_array",
           "dequantize_array"]
