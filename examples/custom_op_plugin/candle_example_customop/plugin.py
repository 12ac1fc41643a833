"""The entry point module (``[project.entry-points.candle_api]`` in
pyproject.toml): the op's definition and the hooks that give it to candle-api.

Importing it is cheap: the C library is opened by the first kernel call
(native.py), not here.
"""

from candle_api import DTypeError, ShapeError
from candle_api.hooks import KernelSet, OpDef, hookimpl

DEFAULT_BETA = 1.0


def check(a, b) -> None:
    """What the op accepts. Called by infer (before the kernel runs: a kernel
    trusts its inputs) and by decompose (infer is not called on that path)."""
    if not a.dtype.is_float:  # (the core checks that a custom op's inputs share one dtype)
        raise DTypeError(f"swiglu needs float tensors, got {a.dtype}")
    if a.shape != b.shape:
        raise ShapeError(f"swiglu: shapes {a.shape} and {b.shape} differ (candle_example_customop.swiglu "
                         "broadcasts them first)")


def infer(a, b, beta=DEFAULT_BETA):
    """The output's (shape, dtype): what the core allocates before calling the kernel."""
    check(a, b)
    return a.shape, a.dtype


def backward(inputs, out, grad, beta=DEFAULT_BETA):
    """One gradient per input, written with candle-api ops so that it runs on any
    device. With s = sigmoid(beta a): d/da = b s (1 + beta a (1 - s)), d/db = a s."""
    a, b = inputs
    s = (a * beta).sigmoid()
    return grad * b * s * ((1 - s) * a * beta + 1), grad * a * s


def decompose(a, b, beta=DEFAULT_BETA):
    """The op from built-in ops: what runs on a device (or dtype) without the
    kernel. Autograd follows these ops, so backward is not used on that path."""
    check(a, b)
    return a * (a * beta).sigmoid() * b


SWIGLU = OpDef("swiglu", infer=infer, backward=backward, decompose=decompose,
               doc="a * sigmoid(beta * a) * b (the SwiGLU gate)")


@hookimpl
def candle_api_custom_ops(registry):
    registry.define(SWIGLU)


@hookimpl
def candle_api_kernels(device_type):
    """Kernels for the cpu device only; every other device runs decompose. The
    cpu backend's storages give the host address (.ptr) the C code needs."""
    if device_type != "cpu":
        return None
    from .native import kernel

    return KernelSet({("swiglu", dtype): kernel(dtype) for dtype in ("f32", "f64")})
