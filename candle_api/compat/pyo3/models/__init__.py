"""candle-pyo3's model modules: ``models.bert`` and ``models.llama``."""
