"""One WebGPU device and its queue: buffers, the command stream, host<->device
copies through mapped staging buffers, compute pipelines, and waiting.

Everything the kernels ask of the GPU goes through one :class:`Gpu`:

- **The command stream.** Dispatches and copies are recorded, in the order
  they are asked for, into one open command encoder (one compute pass between
  copies) and submitted together when a result is read back, when
  :meth:`Gpu.synchronize` is called, or every ``FLUSH_EVERY`` dispatches. The
  GPU runs them in that order, so a buffer freed by Python and handed to the
  next allocation is never written before the work that still reads it.
- **Parameters.** Each dispatch's small parameter block (shapes, strides,
  scalars) is appended to a host array and bound as a slice of one storage
  buffer; the whole array is written with one ``wgpuQueueWriteBuffer`` just
  before the submit, which the queue orders before the submitted work.
- **Copies.** Host to device: the bytes go into a staging buffer mapped at
  creation, and a copy into the storage is recorded in the stream. Device to
  host: a copy into a mappable buffer, a submit, a map, a memmove.
- **Errors.** wgpu-native reports validation and out-of-memory errors through
  callbacks; they are collected and raised as Python exceptions by the call
  that caused them (pipeline creation checks its own; buffer creation runs
  inside an error scope).

Recording is serialized by a lock (kernels may be called from several
threads); the ctypes calls release the GIL.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from candle_api.errors import BackendUnavailableError, DeviceError, KernelError

from . import library
from . import webgpu as w
from .adapter import AdapterDesc, probe

#: Dispatches recorded before the stream is submitted without being asked.
FLUSH_EVERY = 256
#: Bytes of staging uploads recorded before the stream is submitted (bounds the memory they hold).
FLUSH_UPLOAD_BYTES = 64 << 20
#: Capacity of the parameter buffer (a flush makes room).
PARAMS_BYTES = 1 << 20
WORKGROUP = 256


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class Pipeline:
    """A compiled compute pipeline: its handle, its bind group layout and the
    access of each binding ("r" read-only, "w" read-write); the parameter
    buffer is always the last binding."""

    __slots__ = ("handle", "layout", "access", "label", "entries", "desc")

    def __init__(self, handle, layout, access: str, label: str):
        self.handle, self.layout, self.access, self.label = handle, layout, access, label
        n = len(access) + 1
        self.entries = (w.BindGroupEntry * n)()
        for i in range(n):
            self.entries[i].binding = i
        self.desc = w.BindGroupDescriptor(None, w.StringView(None, 0), layout, n, self.entries)


class Gpu:
    """The device object's engine: see the module docstring."""

    def __init__(self, desc: AdapterDesc):
        self.lib = lib = library.load()
        self.desc = desc
        self.errors: list[str] = []
        self.lost = ""
        self.lock = threading.RLock()
        self._keep = []  # ctypes callbacks and descriptors that must outlive the calls
        self.device = self._request_device(desc)
        self.queue = lib.wgpuDeviceGetQueue(self.device)
        self.limits = w.Limits()
        lib.wgpuDeviceGetLimits(self.device, ctypes.byref(self.limits))
        self.max_binding = self.limits.maxStorageBufferBindingSize
        self.max_buffer = self.limits.maxBufferSize
        self.offset_align = max(self.limits.minStorageBufferOffsetAlignment, 4)
        self.max_groups = self.limits.maxComputeWorkgroupsPerDimension
        self._pipelines: dict = {}
        self._layouts: dict = {}
        self._encoder = None
        self._pass = None
        self._dispatches = 0
        self._upload_bytes = 0
        self._params = bytearray(PARAMS_BYTES)
        self._params_used = 0
        self._params_buf = self._create_buffer(PARAMS_BYTES, w.BUFFER_STORAGE | w.BUFFER_COPY_DST)
        self._map_done: dict[int, int] = {}
        self._map_cb = w.BufferMapCallback(self._on_mapped)
        self.dispatch_count = 0  # every dispatch recorded so far (tests and benchmarks read it)

    # ---- set-up --------------------------------------------------------------------------------
    def _request_device(self, desc: AdapterDesc):
        lib = self.lib
        got = {}

        def on_device(status, device, message, _u1, _u2):
            got["status"], got["device"], got["message"] = status, device, message.text()

        def on_error(_device, kind, message, _u1, _u2):
            self.errors.append(f"{w.ERROR_TYPES.get(kind, kind)} error: {message.text()}")

        def on_lost(_device, reason, message, _u1, _u2):
            self.lost = message.text() or f"reason {reason}"

        callbacks = (w.RequestDeviceCallback(on_device), w.UncapturedErrorCallback(on_error),
                     w.DeviceLostCallback(on_lost))
        self._keep.append(callbacks)
        # The limits that matter for compute, raised to what the adapter allows: large bindings
        # (embedding tables), many bindings (attention), big workgroup memory (tiled matmul).
        limits = w.Limits()
        for name, kind in w.Limits._fields_[1:]:
            setattr(limits, name, w.LIMIT_U64_UNDEFINED if kind is ctypes.c_uint64 else w.LIMIT_U32_UNDEFINED)
        for name in ("maxStorageBufferBindingSize", "maxBufferSize", "maxStorageBuffersPerShaderStage",
                     "maxComputeWorkgroupStorageSize", "maxComputeInvocationsPerWorkgroup",
                     "maxComputeWorkgroupSizeX", "maxComputeWorkgroupSizeY", "maxComputeWorkgroupsPerDimension"):
            setattr(limits, name, getattr(desc.limits, name))
        dd = w.DeviceDescriptor()
        dd.requiredLimits = ctypes.pointer(limits)
        dd.deviceLostCallbackInfo.mode = w.CALLBACK_MODE_ALLOW_SPONTANEOUS
        dd.deviceLostCallbackInfo.callback = callbacks[2]
        dd.uncapturedErrorCallbackInfo.callback = callbacks[1]
        info = w.RequestDeviceCallbackInfo(None, w.CALLBACK_MODE_ALLOW_SPONTANEOUS, callbacks[0], None, None)
        lib.wgpuAdapterRequestDevice(desc.handle, ctypes.byref(dd), info)
        instance = probe().instance
        for _ in range(1000):
            if got:
                break
            lib.wgpuInstanceProcessEvents(instance)
        if got.get("status") != w.REQUEST_SUCCESS or not got.get("device"):
            raise BackendUnavailableError(f"wgpu: the adapter {desc.name} refused a device: "
                                          f"{got.get('message') or 'no answer'}")
        return got["device"]

    def check(self, what: str) -> None:
        """Raises the errors wgpu-native reported since the last check."""
        if self.lost:
            raise DeviceError(f"wgpu: the device was lost ({self.lost})")
        if self.errors:
            message = "; ".join(self.errors)
            self.errors.clear()
            raise KernelError(f"wgpu: {what}: {message}")

    # ---- buffers --------------------------------------------------------------------------------
    def _create_buffer(self, size: int, usage: int, mapped: bool = False):
        bd = w.BufferDescriptor(None, w.StringView(None, 0), usage, size, int(mapped))
        return self.lib.wgpuDeviceCreateBuffer(self.device, ctypes.byref(bd))

    def create_storage_buffer(self, size: int):
        """A storage buffer of size bytes, or None when the device is out of memory."""
        lib = self.lib
        with self.lock:
            lib.wgpuDevicePushErrorScope(self.device, w.ERROR_FILTER_OUT_OF_MEMORY)
            handle = self._create_buffer(size, w.BUFFER_STORAGE | w.BUFFER_COPY_SRC | w.BUFFER_COPY_DST)
            failed = self._pop_error_scope()
        if failed or not handle:
            if handle:
                lib.wgpuBufferRelease(handle)
            return None
        return handle

    def _pop_error_scope(self) -> str:
        got = {}

        def on_pop(status, kind, message, _u1, _u2):
            got["error"] = message.text() if kind not in (0, 1) else ""

        cb = w.PopErrorScopeCallback(on_pop)
        info = w.PopErrorScopeCallbackInfo(None, w.CALLBACK_MODE_ALLOW_SPONTANEOUS, cb, None, None)
        self.lib.wgpuDevicePopErrorScope(self.device, info)
        instance = probe().instance
        for _ in range(1000):
            if got:
                break
            self.lib.wgpuInstanceProcessEvents(instance)
        return got.get("error", "")

    def release_buffer(self, handle) -> None:
        """Drops our reference: wgpu frees the memory once recorded work no longer uses it
        (wgpuBufferDestroy would free it under that work's feet)."""
        self.lib.wgpuBufferRelease(handle)

    # ---- pipelines ------------------------------------------------------------------------------
    def pipeline(self, key, access: str, source):
        """The pipeline for key, compiled from source() the first time (one per
        kernel, dtype and shape class; see shaders.py). access: one letter per
        tensor binding, "r" or "w"."""
        pipe = self._pipelines.get(key)
        if pipe is None:
            with self.lock:
                pipe = self._pipelines.get(key)
                if pipe is None:
                    pipe = self._compile(key, access, source())
                    self._pipelines[key] = pipe
        return pipe

    def _bind_layout(self, access: str):
        layout = self._layouts.get(access)
        if layout is None:
            n = len(access) + 1
            entries = (w.BindGroupLayoutEntry * n)()
            for i, a in enumerate(access + "r"):
                entries[i].binding = i
                entries[i].visibility = w.SHADER_STAGE_COMPUTE
                entries[i].buffer.type = w.BINDING_STORAGE if a == "w" else w.BINDING_READ_ONLY_STORAGE
            desc = w.BindGroupLayoutDescriptor(None, w.StringView(None, 0), n, entries)
            bgl = self.lib.wgpuDeviceCreateBindGroupLayout(self.device, ctypes.byref(desc))
            layouts = (ctypes.c_void_p * 1)(bgl)
            pdesc = w.PipelineLayoutDescriptor(None, w.StringView(None, 0), 1, layouts, 0)
            layout = (bgl, self.lib.wgpuDeviceCreatePipelineLayout(self.device, ctypes.byref(pdesc)))
            self._layouts[access] = layout
        return layout

    def _compile(self, key, access: str, code: str) -> Pipeline:
        lib = self.lib
        bgl, playout = self._bind_layout(access)
        text = code.encode()
        src = w.ShaderSourceWGSL()
        src.chain.sType = w.STYPE_SHADER_SOURCE_WGSL
        src.code = w.string_view(text)
        label = repr(key).encode()
        mdesc = w.ShaderModuleDescriptor(ctypes.cast(ctypes.pointer(src), ctypes.POINTER(w.ChainedStruct)),
                                         w.string_view(label))
        lib.wgpuDevicePushErrorScope(self.device, w.ERROR_FILTER_VALIDATION)
        module = lib.wgpuDeviceCreateShaderModule(self.device, ctypes.byref(mdesc))
        entry = b"main"
        cdesc = w.ComputePipelineDescriptor(None, w.string_view(label), playout,
                                            w.ComputeState(None, module, w.string_view(entry), 0, None))
        handle = lib.wgpuDeviceCreateComputePipeline(self.device, ctypes.byref(cdesc))
        error = self._pop_error_scope()
        lib.wgpuShaderModuleRelease(module)
        if error or not handle:
            raise KernelError(f"wgpu: the shader for {key!r} does not compile: {error}")
        return Pipeline(handle, bgl, access, repr(key))

    # ---- the command stream ---------------------------------------------------------------------
    def _encoder_open(self):
        if self._encoder is None:
            self._encoder = self.lib.wgpuDeviceCreateCommandEncoder(self.device, None)
        return self._encoder

    def _end_pass(self):
        if self._pass is not None:
            self.lib.wgpuComputePassEncoderEnd(self._pass)
            self.lib.wgpuComputePassEncoderRelease(self._pass)
            self._pass = None

    def dispatch(self, pipe: Pipeline, buffers, params, groups: int, groups_y: int = 1, groups_z: int = 1) -> None:
        """Records pipe over buffers (one (handle, offset, size) per tensor
        binding, size 0 meaning to the end), with params (bytes: launch.pack)
        and groups x groups_y x groups_z workgroups (groups may exceed the
        per-dimension limit: it is folded into y, and the shader recovers the
        linear index from num_workgroups)."""
        lib = self.lib
        if groups > self.max_groups:
            folded = -(-groups // self.max_groups)
            groups, groups_y = -(-groups // folded), groups_y * folded
        raw = params or b"\0\0\0\0"
        with self.lock:
            if self._dispatches >= FLUSH_EVERY or self._params_used + len(raw) > PARAMS_BYTES:
                self._submit()
            start = self._params_used
            self._params[start:start + len(raw)] = raw
            self._params_used = align(start + len(raw), self.offset_align)
            entries = pipe.entries
            for i, (handle, offset, size) in enumerate(buffers):
                e = entries[i]
                e.buffer, e.offset, e.size = handle, offset, size or w.WHOLE_SIZE
            last = entries[len(buffers)]
            last.buffer, last.offset, last.size = self._params_buf, start, len(raw)
            group = lib.wgpuDeviceCreateBindGroup(self.device, ctypes.byref(pipe.desc))
            if self._pass is None:
                self._pass = lib.wgpuCommandEncoderBeginComputePass(self._encoder_open(), None)
            lib.wgpuComputePassEncoderSetPipeline(self._pass, pipe.handle)
            lib.wgpuComputePassEncoderSetBindGroup(self._pass, 0, group, 0, None)
            lib.wgpuComputePassEncoderDispatchWorkgroups(self._pass, groups, groups_y, groups_z)
            lib.wgpuBindGroupRelease(group)
            self._dispatches += 1
            self.dispatch_count += 1
            if self.errors:
                self.check(f"dispatching {pipe.label}")

    def upload(self, handle, data: np.ndarray) -> None:
        """Records a copy of data (a contiguous array) to the start of buffer handle,
        through a staging buffer mapped at creation."""
        nbytes = data.nbytes
        if not nbytes:
            return
        size = align(nbytes, 4)
        lib = self.lib
        with self.lock:
            staging = self._create_buffer(size, w.BUFFER_COPY_SRC | w.BUFFER_MAP_WRITE, mapped=True)
            if not staging:
                raise MemoryError(f"wgpu: no memory for a {size}-byte staging buffer")
            ptr = lib.wgpuBufferGetMappedRange(staging, 0, size)
            ctypes.memmove(ptr, data.ctypes.data, nbytes)
            lib.wgpuBufferUnmap(staging)
            self._end_pass()
            lib.wgpuCommandEncoderCopyBufferToBuffer(self._encoder_open(), staging, 0, handle, 0, size)
            lib.wgpuBufferRelease(staging)
            self._upload_bytes += size
            if self._upload_bytes >= FLUSH_UPLOAD_BYTES:
                self._submit()
            self.check("uploading")

    def copy_buffer(self, src, src_offset: int, dst, dst_offset: int, size: int) -> None:
        """Records a buffer-to-buffer copy (offsets and size multiples of 4)."""
        with self.lock:
            self._end_pass()
            self.lib.wgpuCommandEncoderCopyBufferToBuffer(self._encoder_open(), src, src_offset, dst, dst_offset,
                                                          size)

    def download(self, handle, offset: int, nbytes: int) -> np.ndarray:
        """bytes [offset, offset + nbytes) of buffer handle, after the work
        recorded so far: a uint8 array."""
        out = np.empty(nbytes, np.uint8)
        if not nbytes:
            return out
        start, end = offset & ~3, align(offset + nbytes, 4)
        size = end - start
        lib = self.lib
        with self.lock:
            readback = self._create_buffer(size, w.BUFFER_MAP_READ | w.BUFFER_COPY_DST)
            if not readback:
                raise MemoryError(f"wgpu: no memory for a {size}-byte readback buffer")
            try:
                self._end_pass()
                lib.wgpuCommandEncoderCopyBufferToBuffer(self._encoder_open(), handle, start, readback, 0, size)
                self._submit()
                self._map_read(readback, size)
                ptr = lib.wgpuBufferGetConstMappedRange(readback, 0, size)
                ctypes.memmove(out.ctypes.data, ptr + (offset - start), nbytes)
                lib.wgpuBufferUnmap(readback)
            finally:
                lib.wgpuBufferRelease(readback)
            self.check("reading back")
        return out

    def _on_mapped(self, status, message, userdata1, _u2):
        self._map_done[userdata1 or 0] = status

    def _map_read(self, buffer, size: int) -> None:
        key = int(buffer)
        info = w.BufferMapCallbackInfo(None, w.CALLBACK_MODE_ALLOW_SPONTANEOUS, self._map_cb, key, None)
        self.lib.wgpuBufferMapAsync(buffer, w.MAP_MODE_READ, 0, size, info)
        while key not in self._map_done:
            self.lib.wgpuDevicePoll(self.device, 1, None)
            self.check("mapping a readback buffer")
        if self._map_done.pop(key) != w.MAP_SUCCESS:
            raise KernelError("wgpu: mapping a readback buffer failed")

    def _submit(self) -> None:
        lib = self.lib
        self._end_pass()
        if self._params_used:
            lib.wgpuQueueWriteBuffer(self.queue, self._params_buf, 0,
                                     (ctypes.c_char * self._params_used).from_buffer(self._params),
                                     self._params_used)
            self._params_used = 0
        if self._encoder is not None:
            commands = lib.wgpuCommandEncoderFinish(self._encoder, None)
            lib.wgpuCommandEncoderRelease(self._encoder)
            self._encoder = None
            array = (ctypes.c_void_p * 1)(commands)
            lib.wgpuQueueSubmit(self.queue, 1, array)
            lib.wgpuCommandBufferRelease(commands)
        self._dispatches = 0
        self._upload_bytes = 0

    def flush(self) -> None:
        """Submits what is recorded, without waiting for it."""
        with self.lock:
            self._submit()
            self.check("submitting")

    def synchronize(self) -> None:
        """Submits what is recorded and waits until the GPU has done it."""
        with self.lock:
            self._submit()
            self.lib.wgpuDevicePoll(self.device, 1, None)
            self.check("waiting for the queue")
