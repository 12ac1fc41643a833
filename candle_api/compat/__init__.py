"""Compatibility namespaces for code written against other Python APIs of
Candle, where they and candle-api's PyTorch habits disagree (see
:mod:`candle_api.compat.pyo3`)."""
