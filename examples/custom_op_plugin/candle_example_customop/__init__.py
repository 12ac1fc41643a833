"""An example candle-api plugin: the ``swiglu`` op, with a C kernel for the
cpu device and a decomposition that runs it on every other device.

    import candle_api as c
    from candle_example_customop import swiglu

    y = swiglu(c.randn((4, 8)), c.randn((4, 8)))   # a * sigmoid(a) * b
"""

import numpy as np

from candle_api import ShapeError, Tensor, custom_op

from .plugin import DEFAULT_BETA

__all__ = ["swiglu"]


def swiglu(a: Tensor, b: Tensor, beta: float = DEFAULT_BETA) -> Tensor:
    """``a * sigmoid(beta * a) * b``: the gate of SwiGLU feed-forward layers
    (``beta = 1`` is ``silu(a) * b``), with NumPy broadcasting between a and b.

    Differentiable in a and b. Runs the plugin's C kernel on the cpu device for
    f32 and f64, and the op's decomposition on other devices and dtypes."""
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ShapeError(f"swiglu: shapes {a.shape} and {b.shape} do not broadcast") from None
    # The kernel sees same-shaped inputs: a broadcast is a view with zero strides,
    # whose own backward sums the gradient back to the original shape.
    return custom_op("swiglu", a.broadcast_as(shape), b.broadcast_as(shape), beta=float(beta))
