"""ONNX element types and how candle-api holds them.

candle-api has u8 u32 i16 i32 i64 bf16 f16 f32 f64. ONNX types without an
equal are held in a wider dtype that represents every value exactly: bool as
u8 (0/1), int8/int4/int2 as i16, uint16 as u32, uint4/uint2 as u8, uint64 as
i64 (values up to 2**63 - 1), and the small floats (float8, float6, float4,
e8m0) as f32 holding values on their grid. Values are converted to the ONNX
numpy dtype only where they leave the evaluator (``to_numpy``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from candle_api import dtype as cd
from candle_api.errors import DTypeError


@dataclass(frozen=True)
class OnnxType:
    code: int           #: TensorProto.DataType value
    name: str           #: TensorProto.DataType name
    np: np.dtype        #: the numpy (or ml_dtypes) dtype at the boundary
    storage: cd.DType   #: the candle-api dtype holding the values
    exact: bool         #: storage is the ONNX type itself (bit-identical)

    @property
    def is_float(self) -> bool:
        return self.storage.is_float

    @property
    def is_bool(self) -> bool:
        return self.code == BOOL

    @property
    def int_range(self) -> tuple[int, int]:
        """(min, max) of an integer type (bool: 0, 1)."""
        if self.code == BOOL:
            return 0, 1
        info = np.iinfo(self.np) if self.np.kind in "iu" else ml_dtypes.iinfo(self.np)
        return int(info.min), int(info.max)


FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL, FLOAT16, DOUBLE, UINT32, UINT64 = range(1, 14)
BFLOAT16 = 16
FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, UINT4, INT4, FLOAT4E2M1, FLOAT8E8M0 = range(17, 25)
UINT2, INT2, FLOAT6E2M3, FLOAT6E3M2 = range(25, 29)

_TABLE = [
    # code, name, numpy type, storage
    (FLOAT, "FLOAT", np.float32, cd.f32), (DOUBLE, "DOUBLE", np.float64, cd.f64),
    (FLOAT16, "FLOAT16", np.float16, cd.f16), (BFLOAT16, "BFLOAT16", ml_dtypes.bfloat16, cd.bf16),
    (UINT8, "UINT8", np.uint8, cd.u8), (INT8, "INT8", np.int8, cd.i16),
    (UINT16, "UINT16", np.uint16, cd.u32), (INT16, "INT16", np.int16, cd.i16),
    (INT32, "INT32", np.int32, cd.i32), (INT64, "INT64", np.int64, cd.i64),
    (UINT32, "UINT32", np.uint32, cd.u32), (UINT64, "UINT64", np.uint64, cd.i64),
    (BOOL, "BOOL", np.bool_, cd.u8),
    (FLOAT8E4M3FN, "FLOAT8E4M3FN", ml_dtypes.float8_e4m3fn, cd.f32),
    (FLOAT8E4M3FNUZ, "FLOAT8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz, cd.f32),
    (FLOAT8E5M2, "FLOAT8E5M2", ml_dtypes.float8_e5m2, cd.f32),
    (FLOAT8E5M2FNUZ, "FLOAT8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz, cd.f32),
    (FLOAT8E8M0, "FLOAT8E8M0", ml_dtypes.float8_e8m0fnu, cd.f32),
    (FLOAT4E2M1, "FLOAT4E2M1", ml_dtypes.float4_e2m1fn, cd.f32),
    (FLOAT6E2M3, "FLOAT6E2M3", ml_dtypes.float6_e2m3fn, cd.f32),
    (FLOAT6E3M2, "FLOAT6E3M2", ml_dtypes.float6_e3m2fn, cd.f32),
    (UINT4, "UINT4", ml_dtypes.uint4, cd.u8), (INT4, "INT4", ml_dtypes.int4, cd.i16),
    (UINT2, "UINT2", ml_dtypes.uint2, cd.u8), (INT2, "INT2", ml_dtypes.int2, cd.i16),
]

TYPES: dict[int, OnnxType] = {
    code: OnnxType(code, name, np.dtype(npt), storage, np.dtype(npt) == storage.np)
    for code, name, npt, storage in _TABLE
}
_BY_NUMPY = {t.np: t for t in TYPES.values()}
#: the small float types, held as f32 on their grid
MINIFLOATS = frozenset({FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0, FLOAT4E2M1,
                        FLOAT6E2M3, FLOAT6E3M2})
#: the ONNX type a candle dtype stands for when nothing says otherwise
_NATURAL = {cd.f32: FLOAT, cd.f64: DOUBLE, cd.f16: FLOAT16, cd.bf16: BFLOAT16, cd.u8: UINT8, cd.i16: INT16,
            cd.i32: INT32, cd.i64: INT64, cd.u32: UINT32}


class UnsupportedTypeError(DTypeError):
    """An ONNX element type candle-api cannot hold (strings, complex numbers)."""


def onnx_type(code: int) -> OnnxType:
    t = TYPES.get(code)
    if t is None:
        raise UnsupportedTypeError(f"ONNX element type {type_name(code)} has no candle-api equivalent "
                                   "(candle-api tensors hold booleans, integers and floats)")
    return t


def type_name(code: int) -> str:
    names = {8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 0: "UNDEFINED"}
    t = TYPES.get(code)
    return t.name if t else names.get(code, f"#{code}")


def natural(dtype) -> OnnxType:
    """The ONNX type a candle-api dtype holds when no declared type says otherwise."""
    return TYPES[_NATURAL[dtype]]


def from_numpy_dtype(dtype: np.dtype) -> OnnxType:
    t = _BY_NUMPY.get(np.dtype(dtype).newbyteorder("="))
    if t is None:
        raise UnsupportedTypeError(f"numpy dtype {dtype} has no ONNX type candle-api can hold")
    return t


def storage_array(arr: np.ndarray, t: OnnxType) -> np.ndarray:
    """arr (of ONNX type t) as an array of t's storage dtype: shared when they are the same."""
    if arr.dtype == np.bool_:
        return arr.view(np.uint8)
    if arr.dtype == t.storage.np and arr.dtype.isnative:
        return arr
    return arr.astype(t.storage.np)


def boundary_array(arr: np.ndarray, t: OnnxType) -> np.ndarray:
    """Storage values as an array of the ONNX type: integers wrap as numpy's
    casts do, small floats are already on their grid."""
    if t.code == BOOL:
        return arr != 0
    if arr.dtype == t.np:
        return arr
    if t.code in (UINT4, INT4, UINT2, INT2):  # ml_dtypes casts of wider ints saturate: wrap first
        lo, hi = t.int_range
        arr = (arr.astype(np.int64) - lo) % (hi - lo + 1) + lo
    return arr.astype(t.np)
