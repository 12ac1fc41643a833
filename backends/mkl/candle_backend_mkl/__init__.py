"""candle-backend-mkl: Intel MKL kernels for candle-api's cpu device.

Importing this package opens nothing; libmkl_rt (from the ``mkl`` wheel) opens
when the cpu device's kernel table is built (see plugin.py).
"""

__version__ = "0.1.0"
