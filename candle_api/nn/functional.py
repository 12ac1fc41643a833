"""``candle_api.nn.functional``: the functional forms of the nn layers under
``torch.nn.functional``'s names and argument orders (activations with
PyTorch's exact ``gelu``, dropout, linear, embedding, softmax, losses, and
adaptive_avg_pool2d). Convolutions, pooling and normalization keep Candle's
argument order in ``candle_api.functional``, so they are not repeated here."""

from ..functional import embedding, log_softmax, softmax
from .activation import (
    elu, gelu, gelu_pytorch_tanh, hard_sigmoid, hard_swish, hardsigmoid, hardswish, leaky_relu, mish, new_gelu,
    prelu, relu, relu2, relu6, sigmoid, silu, softplus, swiglu, swish, tanh,
)
from .dropout import dropout
from .linear import linear
from .loss import binary_cross_entropy_with_logits, cross_entropy, huber, mse, nll
from .pooling import adaptive_avg_pool2d

nll_loss = nll
mse_loss = mse


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    """PyTorch's argument order for :func:`candle_api.nn.loss.huber`."""
    return huber(input, target, delta, reduction)


__all__ = [
    "embedding", "log_softmax", "softmax", "elu", "gelu", "gelu_pytorch_tanh", "hard_sigmoid", "hard_swish",
    "hardsigmoid", "hardswish", "leaky_relu", "mish", "new_gelu", "prelu", "relu", "relu2", "relu6", "sigmoid",
    "silu", "softplus", "swiglu", "swish", "tanh", "dropout", "linear", "binary_cross_entropy_with_logits",
    "cross_entropy", "nll_loss", "mse_loss", "huber_loss", "adaptive_avg_pool2d",
]
