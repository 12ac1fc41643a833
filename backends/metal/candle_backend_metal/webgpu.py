"""The part of WebGPU's C API (webgpu.h, plus wgpu-native's wgpu.h) this
backend uses, declared for ctypes: structures, enums, callback types and
function prototypes.

The declarations follow the headers shipped in the ``wgpu`` wheel this
package pins (``wgpu/resources/webgpu.h`` and ``wgpu.h``); the library's
version is checked when it is loaded (library.py), since a struct that moved
would corrupt memory rather than fail. Every function gets argtypes and
restype: an undeclared pointer argument would be truncated to a C int.
"""

from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int32, c_size_t, c_uint32, c_uint64,
                    c_void_p)

# ---- enums and flags (the values of webgpu.h / wgpu.h) ---------------------------------------
STRLEN = (1 << 64) - 1          # WGPU_STRLEN: a NUL-terminated string
WHOLE_SIZE = (1 << 64) - 1      # WGPU_WHOLE_SIZE
LIMIT_U32_UNDEFINED = 0xFFFFFFFF
LIMIT_U64_UNDEFINED = (1 << 64) - 1

BACKEND_NAMES = {1: "null", 2: "webgpu", 3: "d3d11", 4: "d3d12", 5: "metal", 6: "vulkan", 7: "opengl",
                 8: "opengles"}
ADAPTER_TYPES = {1: "discrete GPU", 2: "integrated GPU", 3: "CPU", 4: "unknown"}
ADAPTER_CPU = 3

INSTANCE_BACKEND_VULKAN, INSTANCE_BACKEND_GL, INSTANCE_BACKEND_METAL, INSTANCE_BACKEND_DX12 = 1, 2, 4, 8
STYPE_SHADER_SOURCE_WGSL = 0x00000002
STYPE_INSTANCE_EXTRAS = 0x00030004

CALLBACK_MODE_ALLOW_PROCESS_EVENTS = 2
CALLBACK_MODE_ALLOW_SPONTANEOUS = 3
STATUS_SUCCESS = 1
REQUEST_SUCCESS = 1             # WGPURequestAdapterStatus/RequestDeviceStatus_Success
MAP_SUCCESS = 1                 # WGPUMapAsyncStatus_Success
ERROR_FILTER_VALIDATION, ERROR_FILTER_OUT_OF_MEMORY = 1, 2
ERROR_TYPES = {1: "no error", 2: "validation", 3: "out of memory", 4: "internal", 5: "unknown"}
POWER_HIGH_PERFORMANCE = 2
FEATURE_SHADER_F16 = 0x0000000B

BUFFER_MAP_READ, BUFFER_MAP_WRITE, BUFFER_COPY_SRC, BUFFER_COPY_DST = 0x1, 0x2, 0x4, 0x8
BUFFER_STORAGE = 0x80
MAP_MODE_READ = 1
SHADER_STAGE_COMPUTE = 4
BINDING_STORAGE, BINDING_READ_ONLY_STORAGE = 3, 4

WGPUFlags = c_uint64
WGPUBool = c_uint32
WGPUEnum = c_int32


# ---- structures ---------------------------------------------------------------------------------
class StringView(Structure):
    _fields_ = [("data", c_void_p), ("length", c_size_t)]

    def text(self) -> str:
        if not self.data:
            return ""
        if self.length == STRLEN:
            return ctypes.string_at(self.data).decode("utf-8", "replace")
        return ctypes.string_at(self.data, self.length).decode("utf-8", "replace")


def string_view(text: bytes | None) -> StringView:
    """A view of bytes that the caller keeps alive for the call."""
    if text is None:
        return StringView(None, 0)
    return StringView(ctypes.cast(c_char_p(text), c_void_p), len(text))


class ChainedStruct(Structure):
    pass


ChainedStruct._fields_ = [("next", POINTER(ChainedStruct)), ("sType", WGPUEnum)]


class Future(Structure):
    _fields_ = [("id", c_uint64)]


class InstanceDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("requiredFeatureCount", c_size_t), ("requiredFeatures", c_void_p),
                ("requiredLimits", c_void_p)]


class InstanceExtras(Structure):
    """wgpu.h: the backends an instance looks at (and flags we leave at their defaults)."""
    _fields_ = [("chain", ChainedStruct), ("backends", WGPUFlags), ("flags", WGPUFlags),
                ("dx12ShaderCompiler", WGPUEnum), ("gles3MinorVersion", WGPUEnum), ("glFenceBehaviour", WGPUEnum),
                ("dxcPath", StringView), ("dxcMaxShaderModel", WGPUEnum), ("dx12PresentationSystem", WGPUEnum),
                ("budgetForDeviceCreation", c_void_p), ("budgetForDeviceLoss", c_void_p),
                ("displayHandleType", WGPUEnum), ("displayHandleData", c_void_p * 2)]


class InstanceEnumerateAdapterOptions(Structure):
    _fields_ = [("nextInChain", c_void_p), ("backends", WGPUFlags)]


class AdapterInfo(Structure):
    _fields_ = [("nextInChain", c_void_p), ("vendor", StringView), ("architecture", StringView),
                ("device", StringView), ("description", StringView), ("backendType", WGPUEnum),
                ("adapterType", WGPUEnum), ("vendorID", c_uint32), ("deviceID", c_uint32),
                ("subgroupMinSize", c_uint32), ("subgroupMaxSize", c_uint32)]


_U32_LIMITS = ("maxTextureDimension1D maxTextureDimension2D maxTextureDimension3D maxTextureArrayLayers maxBindGroups "
               "maxBindGroupsPlusVertexBuffers maxBindingsPerBindGroup maxDynamicUniformBuffersPerPipelineLayout "
               "maxDynamicStorageBuffersPerPipelineLayout maxSampledTexturesPerShaderStage maxSamplersPerShaderStage "
               "maxStorageBuffersPerShaderStage maxStorageTexturesPerShaderStage maxUniformBuffersPerShaderStage")


class Limits(Structure):
    _fields_ = ([("nextInChain", c_void_p)] + [(n, c_uint32) for n in _U32_LIMITS.split()]
                + [("maxUniformBufferBindingSize", c_uint64), ("maxStorageBufferBindingSize", c_uint64),
                   ("minUniformBufferOffsetAlignment", c_uint32), ("minStorageBufferOffsetAlignment", c_uint32),
                   ("maxVertexBuffers", c_uint32), ("maxBufferSize", c_uint64)]
                + [(n, c_uint32) for n in (
                    "maxVertexAttributes maxVertexBufferArrayStride maxInterStageShaderVariables maxColorAttachments "
                    "maxColorAttachmentBytesPerSample maxComputeWorkgroupStorageSize "
                    "maxComputeInvocationsPerWorkgroup maxComputeWorkgroupSizeX maxComputeWorkgroupSizeY "
                    "maxComputeWorkgroupSizeZ maxComputeWorkgroupsPerDimension maxImmediateSize").split()])


RequestAdapterCallback = CFUNCTYPE(None, WGPUEnum, c_void_p, StringView, c_void_p, c_void_p)
RequestDeviceCallback = CFUNCTYPE(None, WGPUEnum, c_void_p, StringView, c_void_p, c_void_p)
DeviceLostCallback = CFUNCTYPE(None, c_void_p, WGPUEnum, StringView, c_void_p, c_void_p)
UncapturedErrorCallback = CFUNCTYPE(None, c_void_p, WGPUEnum, StringView, c_void_p, c_void_p)
BufferMapCallback = CFUNCTYPE(None, WGPUEnum, StringView, c_void_p, c_void_p)
PopErrorScopeCallback = CFUNCTYPE(None, WGPUEnum, WGPUEnum, StringView, c_void_p, c_void_p)


def _callback_info(callback_type):
    class CallbackInfo(Structure):
        _fields_ = [("nextInChain", c_void_p), ("mode", WGPUEnum), ("callback", callback_type),
                    ("userdata1", c_void_p), ("userdata2", c_void_p)]

    return CallbackInfo


RequestAdapterCallbackInfo = _callback_info(RequestAdapterCallback)
RequestDeviceCallbackInfo = _callback_info(RequestDeviceCallback)
DeviceLostCallbackInfo = _callback_info(DeviceLostCallback)
BufferMapCallbackInfo = _callback_info(BufferMapCallback)
PopErrorScopeCallbackInfo = _callback_info(PopErrorScopeCallback)


class UncapturedErrorCallbackInfo(Structure):
    _fields_ = [("nextInChain", c_void_p), ("callback", UncapturedErrorCallback), ("userdata1", c_void_p),
                ("userdata2", c_void_p)]


class QueueDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView)]


class DeviceDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView), ("requiredFeatureCount", c_size_t),
                ("requiredFeatures", POINTER(WGPUEnum)), ("requiredLimits", POINTER(Limits)),
                ("defaultQueue", QueueDescriptor), ("deviceLostCallbackInfo", DeviceLostCallbackInfo),
                ("uncapturedErrorCallbackInfo", UncapturedErrorCallbackInfo)]


class BufferDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView), ("usage", WGPUFlags), ("size", c_uint64),
                ("mappedAtCreation", WGPUBool)]


class ShaderSourceWGSL(Structure):
    _fields_ = [("chain", ChainedStruct), ("code", StringView)]


class ShaderModuleDescriptor(Structure):
    _fields_ = [("nextInChain", POINTER(ChainedStruct)), ("label", StringView)]


class ComputeState(Structure):
    _fields_ = [("nextInChain", c_void_p), ("module", c_void_p), ("entryPoint", StringView),
                ("constantCount", c_size_t), ("constants", c_void_p)]


class ComputePipelineDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView), ("layout", c_void_p), ("compute", ComputeState)]


class BufferBindingLayout(Structure):
    _fields_ = [("nextInChain", c_void_p), ("type", WGPUEnum), ("hasDynamicOffset", WGPUBool),
                ("minBindingSize", c_uint64)]


class BindGroupLayoutEntry(Structure):
    # the sampler, texture and storage texture layouts stay zero: "binding not used"
    _fields_ = [("nextInChain", c_void_p), ("binding", c_uint32), ("visibility", WGPUFlags),
                ("bindingArraySize", c_uint32), ("buffer", BufferBindingLayout),
                ("sampler", c_void_p * 2), ("texture", c_void_p * 3), ("storageTexture", c_void_p * 3)]


class BindGroupLayoutDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView), ("entryCount", c_size_t),
                ("entries", POINTER(BindGroupLayoutEntry))]


class PipelineLayoutDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView), ("bindGroupLayoutCount", c_size_t),
                ("bindGroupLayouts", POINTER(c_void_p)), ("immediateSize", c_uint32)]


class BindGroupEntry(Structure):
    _fields_ = [("nextInChain", c_void_p), ("binding", c_uint32), ("buffer", c_void_p), ("offset", c_uint64),
                ("size", c_uint64), ("sampler", c_void_p), ("textureView", c_void_p)]


class BindGroupDescriptor(Structure):
    _fields_ = [("nextInChain", c_void_p), ("label", StringView), ("layout", c_void_p), ("entryCount", c_size_t),
                ("entries", POINTER(BindGroupEntry))]


# ---- functions: name -> (restype, argtypes) ------------------------------------------------------
_P = c_void_p
SIGNATURES = {
    "wgpuGetVersion": (c_uint32, []),
    "wgpuCreateInstance": (_P, [POINTER(InstanceDescriptor)]),
    "wgpuInstanceRelease": (None, [_P]),
    "wgpuInstanceEnumerateAdapters": (c_size_t, [_P, POINTER(InstanceEnumerateAdapterOptions), POINTER(_P)]),
    "wgpuInstanceProcessEvents": (None, [_P]),
    "wgpuAdapterGetInfo": (WGPUEnum, [_P, POINTER(AdapterInfo)]),
    "wgpuAdapterInfoFreeMembers": (None, [AdapterInfo]),
    "wgpuAdapterGetLimits": (WGPUEnum, [_P, POINTER(Limits)]),
    "wgpuAdapterHasFeature": (WGPUBool, [_P, WGPUEnum]),
    "wgpuAdapterRequestDevice": (Future, [_P, POINTER(DeviceDescriptor), RequestDeviceCallbackInfo]),
    "wgpuAdapterRelease": (None, [_P]),
    "wgpuDeviceGetQueue": (_P, [_P]),
    "wgpuDeviceGetLimits": (WGPUEnum, [_P, POINTER(Limits)]),
    "wgpuDeviceRelease": (None, [_P]),
    "wgpuDevicePoll": (WGPUBool, [_P, WGPUBool, c_void_p]),
    "wgpuDevicePushErrorScope": (None, [_P, WGPUEnum]),
    "wgpuDevicePopErrorScope": (Future, [_P, PopErrorScopeCallbackInfo]),
    "wgpuDeviceCreateBuffer": (_P, [_P, POINTER(BufferDescriptor)]),
    "wgpuBufferRelease": (None, [_P]),
    "wgpuBufferDestroy": (None, [_P]),
    "wgpuBufferGetMappedRange": (_P, [_P, c_size_t, c_size_t]),
    "wgpuBufferGetConstMappedRange": (_P, [_P, c_size_t, c_size_t]),
    "wgpuBufferMapAsync": (Future, [_P, WGPUFlags, c_size_t, c_size_t, BufferMapCallbackInfo]),
    "wgpuBufferUnmap": (None, [_P]),
    "wgpuDeviceCreateShaderModule": (_P, [_P, POINTER(ShaderModuleDescriptor)]),
    "wgpuShaderModuleRelease": (None, [_P]),
    "wgpuDeviceCreateBindGroupLayout": (_P, [_P, POINTER(BindGroupLayoutDescriptor)]),
    "wgpuBindGroupLayoutRelease": (None, [_P]),
    "wgpuDeviceCreatePipelineLayout": (_P, [_P, POINTER(PipelineLayoutDescriptor)]),
    "wgpuPipelineLayoutRelease": (None, [_P]),
    "wgpuDeviceCreateComputePipeline": (_P, [_P, POINTER(ComputePipelineDescriptor)]),
    "wgpuComputePipelineRelease": (None, [_P]),
    "wgpuDeviceCreateBindGroup": (_P, [_P, POINTER(BindGroupDescriptor)]),
    "wgpuBindGroupRelease": (None, [_P]),
    "wgpuDeviceCreateCommandEncoder": (_P, [_P, c_void_p]),
    "wgpuCommandEncoderBeginComputePass": (_P, [_P, c_void_p]),
    "wgpuCommandEncoderCopyBufferToBuffer": (None, [_P, _P, c_uint64, _P, c_uint64, c_uint64]),
    "wgpuCommandEncoderClearBuffer": (None, [_P, _P, c_uint64, c_uint64]),
    "wgpuCommandEncoderFinish": (_P, [_P, c_void_p]),
    "wgpuCommandEncoderRelease": (None, [_P]),
    "wgpuComputePassEncoderSetPipeline": (None, [_P, _P]),
    "wgpuComputePassEncoderSetBindGroup": (None, [_P, c_uint32, _P, c_size_t, c_void_p]),
    "wgpuComputePassEncoderDispatchWorkgroups": (None, [_P, c_uint32, c_uint32, c_uint32]),
    "wgpuComputePassEncoderEnd": (None, [_P]),
    "wgpuComputePassEncoderRelease": (None, [_P]),
    "wgpuCommandBufferRelease": (None, [_P]),
    "wgpuQueueSubmit": (None, [_P, c_size_t, POINTER(_P)]),
    "wgpuQueueWriteBuffer": (None, [_P, _P, c_uint64, c_void_p, c_size_t]),
    "wgpuQueueRelease": (None, [_P]),
}

