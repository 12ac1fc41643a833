"""candle-api: a small PyTorch-like Tensor API whose compute lives in backend plugins.

Importing this package loads no plugin and opens no native library: plugins
are found through the ``candle_api`` entry points on the first device query.
"""

__version__ = "0.1.0"

from .tensor import Tensor  # noqa: E402  (first: the op modules build on it)
from . import autograd, functional, utils  # noqa: E402
from .autograd import GradStore, enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402
from .device import Device, get_device  # noqa: E402
from .dlpack import from_dlpack  # noqa: E402
from .dtype import (  # noqa: E402
    ALL_DTYPES, DType, bf16, bool_, f16, f32, f64, get_dtype, i16, i32, i64, u8, u32,
    bf16 as bfloat16, f16 as float16, f16 as half, f32 as float32, f64 as float64,
    i16 as int16, i32 as int32, i64 as int64, u8 as uint8, u32 as uint32,
)
from .errors import (  # noqa: E402
    ArgumentError, BackendUnavailableError, CandleError, DeviceError, DimensionError, DTypeError, FormatError,
    IndexOutOfRangeError, InPlaceError, KernelError, PluginError, ReadOnlyError, ShapeError, ShapeTypeError,
    TensorNameError, UnsupportedOpError,
)
from .info import plugins  # noqa: E402
from .io import load, save  # noqa: E402
from .ops.creation import (  # noqa: E402
    arange, empty, empty_like, eye, from_numpy, full, full_like, linspace, manual_seed, ones, ones_like, rand,
    rand_like, randn, randn_like, tensor, zeros, zeros_like,
)
from .ops.custom import custom_op  # noqa: E402
from .ops.einsum import einsum  # noqa: E402
from .ops.elementwise import floor_divide, where  # noqa: E402
from .ops.logical import (  # noqa: E402
    bitwise_and, bitwise_not, bitwise_or, bitwise_xor, logical_and, logical_not, logical_or, logical_xor,
)
from .ops.masking import masked_fill, masked_select, nonzero, tril, tril2, triu, triu2  # noqa: E402
from .ops.predicates import all_ as all, allclose, any_ as any, isclose, isfinite, isinf, isnan  # noqa: E402
from .ops.sorting import argsort, sort, topk  # noqa: E402
from .quantized import QTensor  # noqa: E402
from .registry import registry  # noqa: E402
from .debug import ShadowMismatchError, install_from_environment, shadow, trace  # noqa: E402
from .var import Var  # noqa: E402
from .ops.linalg import bmm, matmul, mm, norm  # noqa: E402
from .ops.shape import cat, roll, stack, unbind  # noqa: E402

concat = concatenate = cat
install_from_environment()


def register_plugin(plugin, name: str | None = None) -> str:
    """Registers a plugin object at run time (entry points are the usual way);
    kernel tables are rebuilt and existing devices see the change."""
    return registry().register(plugin, name)


def unregister_plugin(name: str) -> None:
    registry().unregister(name)


def __getattr__(name: str):
    """``candle_api.nn`` and ``candle_api.optim`` are imported on first use;
    ``candle_api.bool`` (torch.bool's spelling) is the bool dtype, kept out of
    the module's namespace so that ``from candle_api import *`` leaves the
    builtin alone."""
    if name == "bool":
        return bool_
    if name in ("nn", "optim"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'candle_api' has no attribute {name!r}")

__all__ = [
    "Tensor", "Var", "GradStore", "autograd", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "DType", "Device", "get_device", "get_dtype", "tensor", "zeros", "ones", "full", "empty",
    "arange", "eye", "rand", "randn", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like",
    "randn_like", "from_numpy", "from_dlpack", "manual_seed", "custom_op", "register_plugin", "unregister_plugin", "cat", "concat", "stack", "where", "matmul", "trace", "shadow", "ShadowMismatchError",
    "linspace", "einsum", "floor_divide", "masked_fill", "masked_select", "nonzero", "tril", "triu", "tril2", "triu2",
    "allclose", "isclose", "isfinite", "isinf", "isnan", "argsort", "sort", "topk", "bmm", "mm", "norm", "roll",
    "unbind",  # any and all are exported too, but not by *, which would shadow the builtins
    "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "functional", "nn", "optim", "utils", "plugins", "load", "save",
    "CandleError", "ArgumentError", "ShapeError", "DTypeError", "DeviceError", "BackendUnavailableError", "UnsupportedOpError",
    "IndexOutOfRangeError", "KernelError", "PluginError", "ReadOnlyError", "FormatError", "TensorNameError",
]
