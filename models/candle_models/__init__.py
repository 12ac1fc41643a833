"""Models for candle-api on real weights (see the package README)."""

from .hub import ModelNotFoundError, default_model, resolve

__all__ = ["ModelNotFoundError", "default_model", "resolve"]
