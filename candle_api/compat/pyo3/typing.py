"""candle-pyo3's type names (``candle.typing``), for annotations."""

from __future__ import annotations

from typing import Sequence, TypeVar, Union

_T = TypeVar("_T")

#: A value, or nested sequences of values up to four deep (what Tensor(data) takes).
_ArrayLike = Union[_T, Sequence[_T], Sequence[Sequence[_T]], Sequence[Sequence[Sequence[_T]]],
                   Sequence[Sequence[Sequence[Sequence[_T]]]]]

CPU: str = "cpu"
CUDA: str = "cuda"

#: A device name (candle-api's devices are strings too).
Device = TypeVar("Device", CPU, CUDA)

Scalar = Union[int, float]

#: One item of an index: an int, a slice, None or ``...``.
Index = Union[int, slice, None, "Ellipsis"]

#: A shape: one dim, or a sequence of dims.
Shape = Union[int, Sequence[int]]
