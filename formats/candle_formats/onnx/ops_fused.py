"""The fused ops the graph optimizer writes (fusion.py).

- ``FusedConv``: Conv, its bias, an input Z added to the result, then an
  activation (packing.py): onnxruntime's com.microsoft op, and in the
  ``ai.candle`` domain with ``output_scale`` and ``output_shift`` applied
  after the activation (the affine a network may apply to a whole tensor).
- ``ai.candle`` ``FusedConvTranspose``: ConvTranspose, its bias, then an
  activation.
- ``ai.candle`` ``Linear``: MatMul by a (k, n) weight, a bias and an
  activation, for any number of leading dims (Gemm is 2-d only).
- ``ai.candle`` ``ScaledDotProductAttention``: softmax(Q @ K^T * scale +
  mask) @ V from the key already transposed (as exported encoders compute
  it), on the fused attention kernel.
"""

from __future__ import annotations

from candle_api.ops.attention import scaled_dot_product_attention

from .ops_nn import conv_any, conv_transpose_any, pack_blocks
from .packing import FUSED_ATTRIBUTES, matmul_any, pack_conv, pack_matmul
from .registry import MS_DOMAIN, op

CANDLE_DOMAIN = "ai.candle"


_CONV = {**FUSED_ATTRIBUTES, "auto_pad": "NOTSET", "group": 1}


@op("FusedConv", domain=MS_DOMAIN, defaults=_CONV, pack=pack_conv)
@op("FusedConv", domain=CANDLE_DOMAIN, defaults={**_CONV, "output_scale": 1.0, "output_shift": 0.0}, pack=pack_conv)
def fused_conv(node, x, w, bias=None, z=None):
    return conv_any(node, x, w, bias, z)


@op("FusedConvTranspose", domain=CANDLE_DOMAIN, defaults=FUSED_ATTRIBUTES, pack=pack_blocks)
def fused_conv_transpose(node, x, w, bias=None):
    return conv_transpose_any(node, x, w, bias)


@op("Linear", domain=CANDLE_DOMAIN, defaults=FUSED_ATTRIBUTES, pack=pack_matmul)
def linear(node, x, w, bias=None):
    return matmul_any(node, x, w, bias)


@op("ScaledDotProductAttention", domain=CANDLE_DOMAIN, defaults={"scale": 1.0})
def sdpa(node, q, key_t, v, mask=None):
    if min(q.rank, key_t.rank, v.rank) < 2 or q.dtype != key_t.dtype or q.dtype != v.dtype or not q.dtype.is_float:
        scores = (q @ key_t) * node["scale"]  # what the fused nodes compute, for the shapes sdpa does not take
        return (scores if mask is None else scores + mask).softmax(-1) @ v
    if mask is not None and mask.dtype != q.dtype:
        mask = mask.to_dtype(q.dtype)
    return scaled_dot_product_attention(q, key_t.transpose(-1, -2), v, attn_mask=mask, scale=node["scale"])
