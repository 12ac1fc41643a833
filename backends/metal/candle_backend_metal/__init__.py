"""candle-backend-metal: the ``wgpu`` device of candle-api, WGSL compute
kernels run through WebGPU (wgpu-native, the C library inside the ``wgpu``
wheel, through ctypes): Metal on macOS, Vulkan on Linux and Android, D3D12
on Windows. The device type is ``wgpu``; the adapter's backend (``metal``,
``vulkan``, ``d3d12``) is an alias for it.

Importing this package opens nothing; the library is loaded and the GPU
probed when the device is first asked about (see plugin.py).
"""

__version__ = "0.1.0"

#: The version of the kernel table (candle_api.contract) this backend implements.
CONTRACT_VERSION = 2

#: The dtypes the device holds (BackendSpec.dtypes): WGSL has no 64-bit floats, so no f64.
DTYPES = ("u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32")
