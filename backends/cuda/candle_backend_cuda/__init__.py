"""candle-backend-cuda: the ``cuda`` device of candle-api. CUDA kernels
prebuilt by nvcc into fatbins when the wheel is built (NVRTC compiles them
for a GPU the fatbins lack), GEMM through cuBLASLt, everything through the
driver API with ctypes; the libraries come from NVIDIA's pip wheels first,
so a machine needs a driver, not a toolkit.

Importing this package opens nothing; the driver is loaded, and the GPUs
probed, when the device is first asked about (see plugin.py).
"""

__version__ = "0.1.0"

#: The version of the kernel table (candle_api.contract) this backend implements.
CONTRACT_VERSION = 2

#: The dtypes the device holds (BackendSpec.dtypes): all of candle-api's.
DTYPES = ("u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64")
