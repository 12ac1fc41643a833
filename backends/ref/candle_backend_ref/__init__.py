"""candle-backend-ref: the ref device of candle-api, a pure-NumPy reference
backend implementing the required kernels of the contract and nothing more.

Importing this package loads nothing; the kernels are built when the ref
device is first used (see plugin.py).
"""

__version__ = "0.1.0"

#: The version of the kernel table implemented: rows added later run as their
#: decompositions (or are reported unsupported) on this device.
CONTRACT_VERSION = 1
