"""candle-pyo3's ``candle`` package, on candle-api: ``import
candle_api.compat.pyo3 as candle`` and code written for candle-pyo3 runs.

Most of candle-pyo3's API is candle-api's own (the same Tensor class, dtypes,
creation functions, ``utils``, ``functional``), so this namespace re-exports
it. What differs lives here:

- ``nn``: candle-pyo3's Module, whose Tensor attributes are buffers and whose
  QTensor attributes stay quantized where ``_quantizable_buffers`` says so
  (candle-api's ``nn.Module`` is PyTorch's: parameters, registered buffers);
  ``Linear`` (weights of ones, a QTensor weight multiplied quantized),
  ``Embedding``, ``LayerNorm``, the containers;
- ``testing``: ``assert_equal`` and ``assert_almost_equal``;
- ``typing``: candle-pyo3's type names;
- ``models.bert`` and ``models.llama``: BERT and a quantized Llama built from
  this ``nn``, with candle-pyo3's class names and state-dict keys.

``install_as("candle")`` registers the namespace and its submodules under
another name, so that unchanged code doing ``import candle`` and ``from
candle.nn import Linear`` finds them (tools/run_pyo3_tests.py runs
candle-pyo3's own test suite that way).
"""

from __future__ import annotations

import importlib
import sys

from ... import (  # noqa: F401  (re-exported: candle-pyo3's names)
    DType, QTensor, Tensor, bf16, cat, f16, f32, f64, i64, ones, rand, randn, stack, tensor, u8, u32, zeros,
)
from ... import functional, utils  # noqa: F401  (candle.functional and candle.utils are candle-api's own)

#: The submodules, in the order install_as registers them.
SUBMODULES = ("functional", "utils", "typing", "testing", "nn", "models", "models.bert", "models.llama")

__all__ = ["DType", "QTensor", "Tensor", "bf16", "cat", "f16", "f32", "f64", "i64", "ones", "rand", "randn",
           "stack", "tensor", "u8", "u32", "zeros", *SUBMODULES[:6]]


def __getattr__(name: str):
    """The submodules written for this namespace load on first use."""
    if name in ("typing", "testing", "nn", "models"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install_as(name: str = "candle") -> None:
    """Makes ``import name`` and ``import name.nn`` (every submodule) this namespace."""
    here = sys.modules[__name__]
    sys.modules[name] = here
    for sub in SUBMODULES:
        own = sub not in ("functional", "utils")  # those two are candle-api's own modules
        sys.modules[f"{name}.{sub}"] = importlib.import_module(f"{__name__}.{sub}") if own else getattr(here, sub)
