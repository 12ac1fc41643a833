"""QTensor: a tensor kept in a GGML block format."""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from .ggml_types import GgmlType, check_blocks, dequantize_array, get_ggml_type, quantize_array

# Unquantized GGML types: a Tensor can use their bytes as they are.
_PLAIN = ("f32", "f16", "bf16")


class QTensor:
    """A tensor in a GGML block format (candle's ``QTensor``).

    ``QTensor(data, shape, ggml_dtype)`` wraps the raw blocks ``data`` (a
    uint8 array, kept as it is: a view of a memory-mapped file stays one).
    ``shape`` is the logical row-major shape; each row (last dim) is a whole
    number of blocks. :meth:`quantize` builds one from a Tensor, and
    :meth:`dequantize` gives the f32 values back.
    """

    __slots__ = ("_data", "_shape", "_type")

    def __init__(self, data, shape, ggml_dtype):
        t = get_ggml_type(ggml_dtype)
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ShapeError(f"a shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise ShapeError(f"negative dimension in shape {shape}")
        self._data = check_blocks(data, shape, t)
        self._shape = shape
        self._type: GgmlType = t

    @classmethod
    def quantize(cls, tensor, ggml_dtype) -> "QTensor":
        """``tensor`` (a Tensor of any float dtype, or array-like) in ``ggml_dtype``,
        quantized as ggml's reference ``quantize_row_*_ref`` does."""
        values = tensor.numpy() if hasattr(tensor, "numpy") else np.asarray(tensor, dtype=np.float32)
        return cls(quantize_array(values, ggml_dtype), values.shape, ggml_dtype)

    # ---- metadata ------------------------------------------------------------------
    @property
    def ggml_dtype(self) -> str:
        return self._type.name

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def rank(self) -> int:
        return len(self._shape)

    @property
    def data(self) -> np.ndarray:
        """The raw blocks (flat uint8)."""
        return self._data

    @property
    def nbytes(self) -> int:
        return self._data.size

    def __repr__(self) -> str:
        return f"QTensor[{list(self._shape)}, {self._type.name}]"

    # ---- compute -------------------------------------------------------------------
    def dequantize(self, device=None):
        """The values as an f32 Tensor on ``device`` (default: the cpu). An f32
        QTensor on the cpu shares its memory; f16/bf16 convert in one cast."""
        from ..ops.creation import from_numpy

        name = self._type.name
        if name not in _PLAIN:
            return from_numpy(dequantize_array(self._data, self._type, self._shape), device=device)
        values = self._data.view(self._type.block)
        if not values.flags.aligned:  # a file may place tensors at odd offsets; kernels want aligned data
            values = values.copy()
        out = from_numpy(values.reshape(self._shape), device=device)
        return out if name == "f32" else out.to_dtype("f32")

    def matmul_t(self, lhs):
        """``lhs @ self.T`` for a 2-d QTensor (a linear layer's weight of shape
        ``(out_features, in_features)``), through the dequantized weight."""
        if self.rank != 2:
            raise ShapeError(f"matmul_t needs a 2-d QTensor, got shape {self._shape}")
        if not lhs.dtype.is_float:
            raise DTypeError(f"matmul_t needs a float lhs, got {lhs.dtype}")
        weight = self.dequantize(lhs.device)
        if weight.dtype != lhs.dtype:
            weight = weight.to_dtype(lhs.dtype)
        return lhs.matmul(weight.t())
