"""QTensor: a tensor kept in a GGML block format, on a device."""

from __future__ import annotations

import mmap

import numpy as np

from ..dtype import f32
from ..errors import DTypeError, ShapeError
from ..layout import numel
from ..ops.core import same_device
from ..ops.quantized import qmatmul, qmatmul_packed
from .ggml_types import GGML_TYPES, GgmlName, GgmlType, check_blocks, check_nbytes, check_rows, get_ggml_type
from .packed import GROUP, packable

# Bytes of rows packed per step when the blocks are a file map's pages (QTensor._pack_rows).
_PACK_STEP_BYTES = 4 << 20
# Unquantized GGML types: a Tensor can use their bytes as they are.
_PLAIN = ("f32", "f16", "bf16")
_QUANTIZED_IDS = frozenset(t.type_id for t in GGML_TYPES.values() if t.name not in _PLAIN)


class QTensor:
    """A tensor in a GGML block format (candle's ``QTensor``).

    ``QTensor(data, shape, ggml_dtype)`` wraps the raw blocks ``data``: a
    uint8 NumPy array, kept as it is (a view of a memory-mapped file stays
    one), or a flat u8 Tensor on any device. ``shape`` is the logical
    row-major shape; each row (last dim) is a whole number of blocks.

    The blocks stay quantized on their device: :meth:`matmul_t` multiplies
    by them (a quantized linear layer), :meth:`embedding` decodes only the
    rows it looks up, and :meth:`quantize` builds one from a Tensor on the
    Tensor's device. :meth:`dequantize` gives the f32 values back.
    :meth:`pack` rearranges a weight for its device's matrix products.
    """

    __slots__ = ("_data", "_blocks", "_shape", "_type", "_packed")

    def __init__(self, data, shape, ggml_dtype):
        t = get_ggml_type(ggml_dtype)
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ShapeError(f"a shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise ShapeError(f"negative dimension in shape {shape}")
        from ..tensor import Tensor

        if isinstance(data, Tensor):
            if data.dtype.name != "u8" or data.rank != 1:
                raise DTypeError(f"quantized blocks must be a flat u8 tensor, got {data.dtype} of shape {data.shape}")
            check_rows(shape, t)
            check_nbytes(data.shape[0], shape, t)
            self._data, self._blocks = None, data.contiguous()
        else:
            self._data, self._blocks = check_blocks(data, shape, t), None
        self._shape = shape
        self._type: GgmlType = t
        self._packed = None  # the blocks in the packed layout (pack), a u8 Tensor

    @classmethod
    def quantize(cls, tensor, ggml_dtype) -> "QTensor":
        """``tensor`` (a Tensor of any float dtype, or array-like) in
        ``ggml_dtype``, quantized on the tensor's device as ggml's reference
        ``quantize_row_*_ref`` does (bit for bit)."""
        from ..ops.creation import from_numpy
        from ..ops.quantized import QUANTIZE
        from ..tensor import Tensor

        t = get_ggml_type(ggml_dtype)
        if not isinstance(tensor, Tensor):
            tensor = from_numpy(np.ascontiguousarray(np.asarray(tensor, dtype=np.float32)))
        if not tensor.dtype.is_float:
            raise DTypeError(f"quantize needs a float tensor, got {tensor.dtype}")
        check_rows(tensor.shape, t)
        if t.name in _PLAIN:
            values = tensor.to_dtype(t.name).contiguous().flatten()
            return cls(values.numpy().view(np.uint8).reshape(-1), tensor.shape, t)
        x = tensor.to_dtype("f32").contiguous()
        return cls(QUANTIZE(x, qtype=t.type_id), tensor.shape, t)

    # ---- metadata ------------------------------------------------------------------
    @property
    def ggml_dtype(self) -> str:
        """The type's name ("q4_0"), equal to any spelling of it ("Q4_0", "Q4_K"...)."""
        return GgmlName(self._type.name)

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def rank(self) -> int:
        return len(self._shape)

    @property
    def device(self):
        if self._blocks is not None:
            return self._blocks.device
        return self._packed.device if self._packed is not None else _cpu()

    @property
    def packed(self) -> bool:
        """Whether :meth:`pack` rearranged the blocks (matmul_t reads them packed)."""
        return self._packed is not None

    @property
    def data(self) -> np.ndarray:
        """The raw blocks (flat uint8, on the host)."""
        if self._data is None:
            if self._blocks is None:  # packed, its own layout given up: unpack on the host
                from .packed import unpack_array

                self._data = unpack_array(self._packed.numpy(), self._type, self._shape)
            else:
                self._data = np.ascontiguousarray(self._blocks.numpy())
        return self._data

    @property
    def blocks(self):
        """The raw blocks as a flat u8 Tensor on the QTensor's device."""
        if self._blocks is None:
            from ..ops.creation import from_numpy

            # Kernels read a block's scales as f16/f32 fields: a file may place a tensor at an odd offset.
            data = self.data
            aligned = data.ctypes.data % 4 == 0
            self._blocks = from_numpy(data if aligned else data.copy())
            if self._packed is not None and self._packed.device != self._blocks.device:
                self._blocks = self._blocks.to_device(self._packed.device)
        return self._blocks

    @property
    def nbytes(self) -> int:
        return self._type.nbytes(numel(self._shape))

    def __repr__(self) -> str:
        return f"QTensor[{list(self._shape)}, {self._type.name}]"

    def to_device(self, device) -> "QTensor":
        """The same blocks on ``device`` (self when already there)."""
        from ..device import get_device

        device = get_device(device)
        if device == self.device:
            return self
        return QTensor(self.blocks.to_device(device), self._shape, self._type)

    def pack(self) -> bool:
        """Rearranges a 2-d weight, once, into the packed layout (:mod:`candle_api.quantized.packed`) when its
        type has one and its device multiplies by it natively; :meth:`matmul_t` then reads the packed blocks,
        one stream in the order the vector kernels consume it. Returns whether the weight is packed.

        The packed blocks replace the others in memory: blocks viewed from a read-only file map keep their
        view, but their pages are given back to the system (read again from the file if something else
        asks for them, such as an embedding lookup); blocks in memory are dropped, and unpacked again if
        asked for."""
        if self._packed is not None:
            return True
        if self.rank != 2 or not packable(self._type):
            return False
        blocks = self.blocks
        kernels = blocks.device.kernels
        if ("qpack", "u8") not in kernels or ("qmatmul_packed", "f32") not in kernels:
            return False
        self._packed = self._pack_rows(blocks)
        self._blocks = None
        if not self.release_pages():
            self._data = None
        return True

    def _pack_rows(self, blocks):
        """The packed blocks. A file map's pages are packed a few MB of rows at a time, each step's pages
        given back before the next: the weight is never in memory twice (the packed layout keeps groups of
        16 rows whole and in order, so steps of whole groups pack exactly as the whole does)."""
        from ..ops.creation import empty
        from ..ops.dispatch import apply
        from ..ops.quantized import QPACK
        from ..ops.shape import copy_into

        n, qtype = self._shape[0], self._type.type_id
        row = self._type.nbytes(self._shape[1])
        step = max(GROUP, _PACK_STEP_BYTES // max(row, 1) // GROUP * GROUP)
        if n <= step or self._data is None or _file_map(self._data) is None:
            return apply(QPACK, blocks, qtype=qtype, n=n)
        packed = empty((blocks.shape[0],), dtype="u8", device=blocks.device)
        for r0 in range(0, n, step):
            rows = min(step, n - r0)
            part = apply(QPACK, blocks.narrow(0, r0 * row, rows * row), qtype=qtype, n=rows)
            copy_into(packed, packed._layout.narrow(0, r0 * row, rows * row), part)
            release_pages(self._data[r0 * row:(r0 + rows) * row])
        return packed

    def release_pages(self) -> bool:
        """When the blocks are a view of a read-only file map, gives their whole pages back to the system
        (they are read from the file again if used) and returns True; False otherwise."""
        return self._data is not None and release_pages(self._data)

    # ---- compute -------------------------------------------------------------------
    def dequantize(self, device=None):
        """The values as an f32 Tensor on ``device`` (default: the QTensor's).
        An f32 QTensor on the cpu shares its memory; f16/bf16 convert in one cast."""
        from ..ops.quantized import DEQUANTIZE

        name = self._type.name
        if name in _PLAIN:
            out = self._plain().to_device(device if device is not None else self.device)
        else:
            out = DEQUANTIZE(self.blocks, qtype=self._type.type_id).reshape(self._shape)
            if device is not None:
                out = out.to_device(device)
        return out if name == "f32" else out.to_dtype("f32")

    def _plain(self):
        """An unquantized type's values as a cpu Tensor of that dtype."""
        from ..ops.creation import from_numpy

        values = self.data.view(self._type.block)
        if not values.flags.aligned:  # a file may place tensors at odd offsets; kernels want aligned data
            values = values.copy()
        return from_numpy(values.reshape(self._shape))

    def matmul_t(self, lhs):
        """``lhs @ self.T`` for a 2-d QTensor (a linear layer's weight of shape
        ``(out_features, in_features)``), on the quantized weights: lhs
        (..., in_features) of any float dtype, the result in lhs's dtype. The
        gradient flows to lhs (the weights are constants)."""
        # Decoding calls this a few times per layer and token: the common case goes straight to the op.
        lay, packed = lhs._layout, self._packed
        if (packed is not None and lhs._dtype is f32 and lay.contiguous and lhs._device is packed._device
                and lay.shape and lay.shape[-1] == self._shape[1]):
            return qmatmul_packed(lhs, packed, self._type.type_id, self._shape[0])
        blocks = self._blocks
        if (lhs._dtype is f32 and lay.contiguous and blocks is not None and lhs._device is blocks._device
                and self._type.type_id in _QUANTIZED_IDS and len(self._shape) == 2 and lay.shape
                and lay.shape[-1] == self._shape[1]):
            return qmatmul(lhs, blocks, self._type.type_id, self._shape[0])
        if self.rank != 2:
            raise ShapeError(f"matmul_t needs a 2-d QTensor, got shape {self._shape}")
        if not lhs.dtype.is_float:
            raise DTypeError(f"matmul_t needs a float lhs, got {lhs.dtype}")
        n, k = self._shape
        if lhs.rank == 0 or lhs.shape[-1] != k:
            raise ShapeError(f"matmul_t: lhs of shape {lhs.shape} does not end in the weight's {k} input features")
        if self._type.name in _PLAIN:
            weight = self.dequantize(lhs.device)
            return lhs.matmul((weight if weight.dtype == lhs.dtype else weight.to_dtype(lhs.dtype)).t())
        same_device("matmul_t", self._packed if self._packed is not None else self.blocks, lhs)
        x = lhs if lhs.dtype is f32 and lhs.is_contiguous() else lhs.to_dtype(f32).contiguous()
        if self._packed is not None:
            y = qmatmul_packed(x, self._packed, self._type.type_id, n)
        else:
            y = qmatmul(x, self.blocks, self._type.type_id, n)
        return y if lhs.dtype is f32 else y.to_dtype(lhs.dtype)

    def embedding(self, ids):
        """Rows ``ids`` (a Tensor of integer ids, any shape) of a 2-d QTensor,
        decoded to f32: shape ``ids.shape + (columns,)``. Only those rows'
        blocks are read."""
        from ..ops.quantized import QEMBEDDING

        if self.rank != 2:
            raise ShapeError(f"embedding needs a 2-d QTensor, got shape {self._shape}")
        if not ids.dtype.is_int:
            raise DTypeError(f"embedding ids must be integers, got {ids.dtype}")
        k = self._shape[1]
        if self._type.name in _PLAIN:  # pick the rows, then convert only them
            rows = self._plain().to_device(ids.device).index_select(ids.flatten(), 0)
            return rows.to_dtype("f32").reshape(ids.shape + (k,))
        same_device("embedding", self.blocks, ids)
        flat = ids.flatten().contiguous()
        return QEMBEDDING(self.blocks, flat, qtype=self._type.type_id, k=k).reshape(ids.shape + (k,))

    # ---- rows ----------------------------------------------------------------------
    def follows(self, other: "QTensor") -> bool:
        """True when ``other`` (2-d, of this type and width) starts in host memory right where this
        one ends, in the same buffer: :meth:`cat_rows` then joins them without a copy."""
        if (self.rank != 2 or other.rank != 2 or other._type != self._type or other._shape[1] != self._shape[1]
                or self._data is None or other._data is None):
            return False
        root = _root(self._data)
        return (root is _root(other._data) and root.ndim == 1 and root.flags.c_contiguous
                and other._data.ctypes.data == self._data.ctypes.data + self._data.size)

    @staticmethod
    def cat_rows(parts) -> "QTensor":
        """2-d QTensors of one type and width stacked row-wise, still quantized: a view of their
        buffer when each follows the one before (:meth:`follows`), else a copy."""
        from ..ops.shape import cat

        parts = list(parts)
        first = parts[0]
        for p in parts:
            if p.rank != 2 or p._type != first._type or p._shape[1] != first._shape[1]:
                raise ShapeError(f"cat_rows needs 2-d QTensors of one type and width, got {p} and {first}")
        shape = (sum(p._shape[0] for p in parts), first._shape[1])
        if all(a.follows(b) for a, b in zip(parts, parts[1:])):
            root = _root(first._data)
            start = first._data.ctypes.data - root.ctypes.data
            return QTensor(root[start:start + sum(p._data.size for p in parts)], shape, first._type)
        return QTensor(cat([p.blocks for p in parts], 0), shape, first._type)


def _file_map(data: np.ndarray):
    """The read-only file map ``data`` views, or None."""
    owner = _root(data).base
    if isinstance(owner, memoryview):  # np.frombuffer's
        owner = owner.obj
    return owner if isinstance(owner, mmap.mmap) and not data.flags.writeable else None


def release_pages(data: np.ndarray) -> bool:
    """When ``data`` is a view of a read-only file map, tells the system its whole pages may leave memory
    (they are read from the file again if used) and returns True; False for any other array."""
    owner = _file_map(data)
    if owner is None or not data.size:
        return owner is not None
    start = data.ctypes.data - np.frombuffer(owner, np.uint8).ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (start + data.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > first:
        owner.madvise(mmap.MADV_DONTNEED, first, end - first)
    return True


def _root(a: np.ndarray) -> np.ndarray:
    """The array at the bottom of a chain of NumPy views."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _cpu():
    from ..device import get_device

    return get_device("cpu")
