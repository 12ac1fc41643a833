"""The exceptions candle-api raises.

Every error is a :class:`CandleError` and also a subclass of the builtin
exception a Python user would expect (``ValueError`` for shapes, ``TypeError``
for dtypes, ``IndexError`` for indices...), so ``except ValueError`` written for
candle-pyo3, whose errors are all ``ValueError``, keeps working for shapes.
"""

from __future__ import annotations


class CandleError(Exception):
    """Base class of every candle-api error."""


class ArgumentError(CandleError, ValueError):
    """An argument outside the values a function takes (a thread count, a
    sampling temperature, a non-finite bound...)."""


class ShapeError(CandleError, ValueError):
    """Shapes or dims that do not fit the op (mismatch, bad rank, bad dim)."""


class DimensionError(ShapeError, OverflowError):
    """A negative dimension (also OverflowError, which candle-pyo3 raises for one)."""


class ShapeTypeError(ShapeError, TypeError):
    """A shape that is not a sequence of integers (also TypeError)."""


class DTypeError(CandleError, TypeError, ValueError):
    """A dtype the op does not accept, or two dtypes that differ."""


class DeviceError(CandleError, RuntimeError):
    """Tensors on different devices, or an unknown device."""


class BackendUnavailableError(DeviceError):
    """A backend plugin is installed but cannot run here (missing library, no GPU...)."""


class UnsupportedOpError(CandleError, NotImplementedError):
    """No kernel (and no decomposition) for an op on a device and dtype."""

    def __init__(self, op: str, device: str, dtype: str | None, plugins: list[str]):
        self.op, self.device, self.dtype, self.plugins = op, device, dtype, plugins
        on = f" for dtype {dtype}" if dtype else ""
        installed = ", ".join(plugins) or "none"
        super().__init__(
            f"op {op!r} is not implemented on device {device}{on} "
            f"(installed backend and kernel plugins: {installed})"
        )


class ReadOnlyError(CandleError, ValueError):
    """An in-place write into memory the caller may not change."""


class InPlaceError(CandleError, RuntimeError):
    """An in-place op that cannot be done: into a broadcast view, on a leaf
    that requires grad (or a view of one), or on memory a backward pass still
    needs (PyTorch raises RuntimeError for these)."""


class UnsupportedDTypeError(DTypeError):
    """A dtype the device does not hold (its backend's ``BackendSpec.dtypes``)."""


class IndexOutOfRangeError(CandleError, IndexError):
    """An index outside its dimension."""


def check_indices(op: str, ids, size: int):
    """ids (an integer numpy array), each checked to lie in [0, size): the first
    one outside raises IndexOutOfRangeError naming it, its position among the
    ids and the size, the message every backend gives. Returns ids."""
    bad = ((ids < 0) | (ids >= size)).ravel().nonzero()[0]
    if bad.size:
        pos = int(bad[0])
        raise IndexOutOfRangeError(f"{op}: index {ids.flat[pos]} (at position {pos}) is out of range for a "
                                   f"dimension of size {size}")
    return ids


class KernelError(CandleError, RuntimeError):
    """A backend kernel reported a failure (integer division by zero, bad sizes...)."""


class PluginError(CandleError, RuntimeError):
    """A plugin is malformed: wrong hook results, incompatible API version."""


class TensorNameError(CandleError, KeyError):
    """Tensor names that do not match: a name missing from a checkpoint,
    VarBuilder or VarMap, or missing/unexpected keys in a state dict."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class FormatError(CandleError, ValueError):
    """A file that cannot be read: names the file, the byte offset and the reason."""

    def __init__(self, path, offset: int | None, reason: str):
        self.path, self.offset, self.reason = str(path), offset, reason
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {reason}")
