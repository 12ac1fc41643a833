"""Element types.

A :class:`DType` is a ``str`` subclass whose value is its short name
(``"f32"``), so ``t.dtype == "f32"`` holds, dtypes work as dict keys next to
their names, and kernel tables keyed by ``(op, dtype)`` hash at C speed.
"""

from __future__ import annotations

import numpy as np

from .errors import DTypeError

try:  # bf16 has no numpy dtype of its own
    import ml_dtypes

    _BF16_NP = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16_NP = None


class DType(str):
    """A tensor element type: ``bool u8 u32 i16 i32 i64 bf16 f16 f32 f64``.

    Attributes: ``code`` (the number shared with native backends), ``itemsize``,
    ``np`` (the numpy dtype), ``is_float``, ``is_int``, ``is_bool``, ``is_signed``.
    bool is neither an integer nor a float: one byte holding 0 or 1, whose
    kernels are u8's (see :func:`storage_dtype`).
    """

    code: int
    itemsize: int
    np: np.dtype
    is_float: bool
    is_int: bool
    is_bool: bool
    is_signed: bool

    def __new__(cls, name: str, code: int, np_dtype, is_float: bool, is_signed: bool):
        self = super().__new__(cls, name)
        self.code = code
        self.np = np.dtype(np_dtype) if np_dtype is not None else None
        self.itemsize = self.np.itemsize if self.np is not None else 2
        self.is_float = is_float
        self.is_bool = self.np == np.bool_
        self.is_int = not is_float and not self.is_bool
        self.is_signed = is_signed
        return self

    @property
    def name(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"candle_api.{self.name}"

    def __reduce__(self):
        return (get_dtype, (self.name,))


u8 = DType("u8", 0, np.uint8, False, False)
u32 = DType("u32", 1, np.uint32, False, False)
i16 = DType("i16", 2, np.int16, False, True)
i32 = DType("i32", 3, np.int32, False, True)
i64 = DType("i64", 4, np.int64, False, True)
bf16 = DType("bf16", 5, _BF16_NP, True, True)
f16 = DType("f16", 6, np.float16, True, True)
f32 = DType("f32", 7, np.float32, True, True)
f64 = DType("f64", 8, np.float64, True, True)
bool_ = DType("bool", 9, np.bool_, False, False)

#: The dtypes native backends know by code (0-8); bool (code 9) reaches a
#: backend as u8 unless it registers bool kernels of its own.
NUMERIC_DTYPES: tuple[DType, ...] = (u8, u32, i16, i32, i64, bf16, f16, f32, f64)
ALL_DTYPES: tuple[DType, ...] = NUMERIC_DTYPES + (bool_,)
FLOAT_DTYPES = (bf16, f16, f32, f64)
INT_DTYPES = (u8, u32, i16, i32, i64)
INDEX_DTYPES = INT_DTYPES
BY_CODE = {d.code: d for d in ALL_DTYPES}


def storage_dtype(dtype: DType) -> DType:
    """The dtype a backend sees for dtype: u8 for bool (same bytes), else itself."""
    return u8 if dtype is bool_ else dtype

_ALIASES = {d.name: d for d in ALL_DTYPES}
_ALIASES.update(
    uint8=u8, uint32=u32, int16=i16, short=i16, int32=i32, int=i32, int64=i64, long=i64,
    bfloat16=bf16, float16=f16, half=f16, float32=f32, float=f32, float64=f64, double=f64,
)
_FROM_NUMPY = {d.np: d for d in ALL_DTYPES if d.np is not None}


def get_dtype(value) -> DType:
    """Resolves a DType, a name or alias (``"f32"``, ``"float32"``, ``"half"``...),
    a numpy dtype or a torch-like object with a ``.name``. Raises DTypeError."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        d = _ALIASES.get(value.lower().removeprefix("torch.").removeprefix("candle.").removeprefix("candle_api."))
        if d is not None:
            return d
        raise DTypeError(f"unknown dtype {value!r}; expected one of {', '.join(d.name for d in ALL_DTYPES)}")
    try:
        return from_numpy_dtype(np.dtype(value))
    except TypeError:
        pass
    raise DTypeError(f"cannot interpret {value!r} as a dtype")


def from_numpy_dtype(np_dtype: np.dtype) -> DType:
    np_dtype = np.dtype(np_dtype)
    d = _FROM_NUMPY.get(np_dtype.newbyteorder("=") if np_dtype.byteorder not in "=|" else np_dtype)
    if d is None:
        raise DTypeError(
            f"numpy dtype {np_dtype} has no candle-api equivalent; "
            f"supported: {', '.join(str(d.np) for d in ALL_DTYPES)}"
        )
    return d
