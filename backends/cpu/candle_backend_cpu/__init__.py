"""candle-backend-cpu: the cpu device of candle-api, C kernels loaded with ctypes.

Importing this package opens nothing; the library is loaded when the cpu
device is first used (see plugin.py).
"""

__version__ = "0.1.0"
