"""Models for candle-api on real weights (see the package README)."""

__version__ = "0.1.0"

from .hub import ModelNotFoundError, default_model, resolve

__all__ = ["ModelNotFoundError", "default_model", "resolve"]
