"""The ops on GGML-quantized weights (the "quantized" rows of the contract).

A quantized tensor's blocks live on its device as a flat u8 tensor; these ops
take that tensor and the type's ggml id (``qtype``). A backend without their
kernels (or older than contract version 2) runs the decompositions: the
reference NumPy codecs on the host for quantize and dequantize, a dequantized
weight for the product, and the rows' blocks gathered, then decoded, for the
embedding lookup.
"""

from __future__ import annotations

import numpy as np

from ..dtype import f32, u8
from ..layout import Layout
from ..tensor import Tensor
from . import dispatch
from .dispatch import OpDef, apply, define

_contig = Layout.contig
_new = object.__new__


def _ggml_type(qtype: int):
    from ..quantized.ggml_types import GGML_TYPE_IDS

    return GGML_TYPE_IDS[qtype]


def _on_host(blocks: Tensor) -> np.ndarray:
    return np.ascontiguousarray(blocks.numpy())


# ---- dequantize: blocks (u8) -> f32 values ------------------------------------------------------------------
def _values(blocks: Tensor, qtype: int) -> int:
    """How many values the flat blocks hold."""
    t = _ggml_type(qtype)
    return blocks.shape[0] // t.type_size * t.block_size


def _dequantize_prepare(blocks, qtype):
    return (_values(blocks, qtype),), f32, (blocks._storage, blocks._layout, qtype)


def _dequantize_decompose(blocks, qtype):
    from ..ops.creation import from_numpy
    from ..quantized.ggml_types import dequantize_array

    return from_numpy(dequantize_array(_on_host(blocks), _ggml_type(qtype), (_values(blocks, qtype),)),
                      device=blocks.device)


# ---- quantize: f32 rows -> blocks ---------------------------------------------------------------------------
def _quantize_prepare(x, qtype):
    t = _ggml_type(qtype)
    return (t.nbytes(x._layout.numel),), u8, (x._storage, x._layout, qtype)


def _quantize_decompose(x, qtype):
    from ..ops.creation import from_numpy
    from ..quantized.ggml_types import quantize_array

    return from_numpy(quantize_array(x.numpy(), _ggml_type(qtype)), device=x.device)


# ---- qmatmul: x (..., k) f32 @ W^T, W (n, k) in blocks --------------------------------------------------------
def _qmatmul_prepare(x, blocks, qtype, n):
    return x.shape[:-1] + (n,), f32, (x._storage, x._layout, blocks._storage, blocks._layout, qtype, n)


def _qmatmul_packed_prepare(x, packed, qtype, n):
    return x.shape[:-1] + (n,), f32, (x._storage, x._layout, packed._storage, packed._layout, qtype, n)


def _weight(blocks: Tensor, qtype: int, n: int) -> Tensor:
    return apply(DEQUANTIZE, blocks, qtype=qtype).reshape((n, -1))


def _qmatmul_decompose(x, blocks, qtype, n):
    return x.matmul(_weight(blocks, qtype, n).t())


def _qmatmul_backward(inputs, out, g, qtype, n):
    """d(x @ W^T)/dx = g @ W; the weights are constants (no gradient for blocks)."""
    _, blocks = inputs
    return g.matmul(_weight(blocks, qtype, n)), None


def _direct_product(op: OpDef, x: Tensor, weight: Tensor, qtype: int, n: int) -> Tensor:
    """x (..., k), f32 and contiguous, @ W^T by ``op``'s kernel. Decoding runs a few of these per layer and
    token: the common case (a kernel, nothing to record or observe) calls it directly, as apply() would."""
    dev = x._device
    k = dev.kernels.get((op.name, "f32"))
    if k is None or x._node is not None or dispatch.observer is not None:
        return apply(op, x, weight, qtype=qtype, n=n)
    lx = x._layout
    lay = _contig(lx.shape[:-1] + (n,))
    out = dev.alloc(lay.numel * 4)
    if lay.numel:
        k(out, x._storage, lx, weight._storage, weight._layout, qtype, n)
    t = _new(Tensor)
    t._storage = out; t._layout = lay; t._dtype = f32; t._device = dev; t._node = None  # noqa: E702
    return t


def qmatmul(x: Tensor, blocks: Tensor, qtype: int, n: int) -> Tensor:
    """x (..., k), f32 and contiguous, @ W^T, W (n, k) in blocks."""
    return _direct_product(QMATMUL, x, blocks, qtype, n)


# ---- qpack / qmatmul_packed: the packed layout (candle_api.quantized.packed) -----------------------------------
def _qpack_prepare(blocks, qtype, n):
    return blocks.shape, u8, (blocks._storage, blocks._layout, qtype, n)


def _qpack_decompose(blocks, qtype, n):
    from ..ops.creation import from_numpy
    from ..quantized.packed import pack_array

    t = _ggml_type(qtype)
    return from_numpy(pack_array(_on_host(blocks), t, (n, _values(blocks, qtype) // max(n, 1))),
                      device=blocks.device)


def _unpacked(packed: Tensor, qtype: int, n: int) -> Tensor:
    from ..ops.creation import from_numpy
    from ..quantized.packed import unpack_array

    t = _ggml_type(qtype)
    return from_numpy(unpack_array(_on_host(packed), t, (n, _values(packed, qtype) // max(n, 1))),
                      device=packed.device)


def _qmatmul_packed_decompose(x, packed, qtype, n):
    return apply(QMATMUL, x, _unpacked(packed, qtype, n), qtype=qtype, n=n)


def _qmatmul_packed_backward(inputs, out, g, qtype, n):
    _, packed = inputs
    return g.matmul(_weight(_unpacked(packed, qtype, n), qtype, n)), None


def qmatmul_packed(x: Tensor, packed: Tensor, qtype: int, n: int) -> Tensor:
    """As :func:`qmatmul`, W packed by QPACK."""
    return _direct_product(QMATMUL_PACKED, x, packed, qtype, n)


# ---- qembedding: rows of W by index ---------------------------------------------------------------------------
def _qembedding_prepare(blocks, ids, qtype, k):
    return (ids._layout.numel, k), f32, (blocks._storage, blocks._layout, ids._storage, ids._layout, ids._dtype,
                                         qtype, k)


def _qembedding_decompose(blocks, ids, qtype, k):
    t = _ggml_type(qtype)
    rows = blocks.reshape((-1, k // t.block_size * t.type_size)).index_select(ids.flatten(), 0)
    return apply(DEQUANTIZE, rows.flatten(), qtype=qtype).reshape((ids._layout.numel, k))


DEQUANTIZE = define(OpDef("dequantize", prepare=_dequantize_prepare, decompose=_dequantize_decompose))
QUANTIZE = define(OpDef("quantize", prepare=_quantize_prepare, decompose=_quantize_decompose))
QMATMUL = define(OpDef("qmatmul", prepare=_qmatmul_prepare, decompose=_qmatmul_decompose,
                       backward=_qmatmul_backward))
QPACK = define(OpDef("qpack", prepare=_qpack_prepare, decompose=_qpack_decompose))
QMATMUL_PACKED = define(OpDef("qmatmul_packed", prepare=_qmatmul_packed_prepare, decompose=_qmatmul_packed_decompose,
                              backward=_qmatmul_packed_backward))
QEMBEDDING = define(OpDef("qembedding", prepare=_qembedding_prepare, decompose=_qembedding_decompose))
