"""``candle_api.nn``: modules, layers, initialization, VarBuilder/VarMap and
losses for training on any backend, with PyTorch's module API and layer
signatures (so PyTorch state dicts load) and Candle's names (candle-nn).

Layers are built PyTorch-style, ``nn.Linear(784, 512)`` (parameters
initialized as PyTorch does), or from a Candle VarBuilder through the
``vb`` keyword, ``nn.Linear(784, 512, vb=vb.pp("fc1"))``, which reads
``fc1.weight`` and ``fc1.bias`` from a checkpoint or creates them in a VarMap.
"""

from . import functional, init, loss
from .activation import (
    ELU, GELU, Activation, Hardsigmoid, Hardswish, LeakyReLU, LogSoftmax, Mish, PReLU, ReLU, ReLU6, Sigmoid, SiLU,
    Softmax, Tanh,
)
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .dropout import Dropout
from .embedding import Embedding
from .flatten import Flatten, Unflatten
from .linear import Identity, Linear, QLinear
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, MSELoss, NLLLoss
from .module import IncompatibleKeys, Module
from .norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm, RmsNorm
from .parameter import Parameter
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .rnn import GRU, LSTM, GRUCell, LSTMCell
from .transformer import TransformerEncoderLayer
from .var_builder import VarBuilder, VarMap

__all__ = [
    "functional", "init", "loss", "Module", "IncompatibleKeys", "Parameter", "Sequential", "ModuleList",
    "ModuleDict", "Linear", "QLinear", "Embedding", "LayerNorm", "RmsNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d",
    "GroupNorm", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d",
    "AdaptiveAvgPool2d", "Flatten", "Unflatten", "Identity", "Dropout", "LSTM", "GRU", "LSTMCell", "GRUCell",
    "MultiheadAttention", "TransformerEncoderLayer", "Activation", "ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh",
    "Hardsigmoid", "Hardswish", "Mish", "ELU", "LeakyReLU", "PReLU", "Softmax", "LogSoftmax", "NLLLoss",
    "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "HuberLoss", "VarBuilder", "VarMap",
]
