"""The wgpu device against the cpu device, same run: GEMM and element-wise
throughput, and what one op costs to dispatch.

For every case it prints the wgpu time, the cpu time, the throughput of
each (GFLOP/s for products, GB/s of data moved for element-wise ops) and the
ratio (cpu time / wgpu time: above 1 means the GPU is faster). The adapter
is named: on lavapipe (a CPU Vulkan driver) the GPU's kernels run on the same
two cores as the cpu backend, so the figures check the path, not the speed;
on a real GPU they show what it is worth.

Dispatch cost, per op on a tiny tensor: the time to record one op (Python,
ctypes and wgpu-native; the stream is submitted every 256 ops and on reads),
and the same measured through wgpu-py's Python API against ctypes on the
same pipeline (the reason this backend calls wgpu-native through ctypes:
see docs/metal.md).

Method: each repetition runs every case on both devices, interleaved; a
timing is a calibrated batch ended by a synchronize (the GPU's work is
waited for); medians and (min-max) spreads of 7 repetitions (3 with --quick).

    python benchmarks/wgpu_vs_cpu.py [--quick | --large] [--device wgpu:0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import candle_api as c


def _timed(fn, device, min_time: float) -> float:
    """Seconds per call of fn (a batch long enough to measure, then a synchronize)."""
    fn()
    device.synchronize()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        device.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or n >= 1 << 16:
            return elapsed / n
        n *= 2


def cases(quick: bool, large: bool):
    """large: shapes that fill a discrete GPU (products to 4096, 64 Mi-element vectors)."""
    rng = np.random.default_rng(0)
    out = []
    for n in (1024, 2048, 4096) if large else (256, 512) if quick else (256, 512, 1024):
        a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
        out.append((f"matmul f32 {n}", "GFLOP/s", 2 * n**3, (a, b), lambda x, y: x @ y))
    k = 4096 if large else 1024 if quick else 2048
    x, w = rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((k, k)).astype(np.float32)
    out.append((f"decode 1x{k} @ ({k}x{k})^T", "GFLOP/s", 2 * k * k, (x, w), lambda x, y: x @ y.t()))
    n = 1 << (26 if large else 20 if quick else 22)
    u, v = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out.append((f"add f32 {n}", "GB/s", 12 * n, (u, v), lambda x, y: x + y))
    out.append((f"exp f32 {n}", "GB/s", 8 * n, (u,), lambda x: x.exp()))
    out.append((f"cast f32->f16 {n}", "GB/s", 6 * n, (u,), lambda x: x.to_dtype("f16")))
    m = rng.standard_normal((8192 if large else 512, 1024)).astype(np.float32)
    out.append((f"softmax {m.shape[0]}x1024", "GB/s", 8 * m.size, (m,), lambda x: x.softmax(-1)))
    return out


def throughput(gpu, cpu, reps: int, quick: bool, large: bool) -> None:
    rows = []
    prepared = []
    for name, unit, work, arrays, fn in cases(quick, large):
        prepared.append((name, unit, work, [c.Tensor(a, device=gpu) for a in arrays],
                         [c.Tensor(a, device=cpu) for a in arrays], fn))
    times = {p[0]: ([], []) for p in prepared}
    for _ in range(reps):
        for name, _unit, _work, tg, tc, fn in prepared:
            times[name][0].append(_timed(lambda: fn(*tg), gpu, 0.2))
            times[name][1].append(_timed(lambda: fn(*tc), cpu, 0.2))
    print(f"{'case':32} {'wgpu':>22} {'cpu':>22} {'cpu/wgpu':>9}")
    for name, unit, work, *_ in prepared:
        g, h = times[name]
        mg, mc = statistics.median(g), statistics.median(h)
        scale = 1e9
        rows.append((name, mg, mc))
        print(f"{name:32} {work / mg / scale:8.2f} {unit:8} ({min(g)*1e3:6.1f}-{max(g)*1e3:6.1f} ms) "
              f"{work / mc / scale:8.2f} {unit:8} ({min(h)*1e3:6.1f}-{max(h)*1e3:6.1f} ms) {mc / mg:8.2f}x")


def dispatch_cost(gpu, cpu, reps: int) -> None:
    """Per-op cost of a 16-element add: recording only, and with the GPU's run."""
    a, b = (c.Tensor(np.ones(16, np.float32), device=gpu) for _ in range(2))
    ac, bc = (c.Tensor(np.ones(16, np.float32), device=cpu) for _ in range(2))
    record, done, host = [], [], []
    for _ in range(reps):
        gpu.synchronize()
        start = time.perf_counter()
        for _ in range(1000):
            a + b
        record.append((time.perf_counter() - start) / 1000)
        gpu.synchronize()
        done.append(_timed(lambda: a + b, gpu, 0.2))
        host.append(_timed(lambda: ac + bc, cpu, 0.2))
    print(f"\nper op (a 16-element add): recording {statistics.median(record) * 1e6:.1f} us "
          f"({min(record) * 1e6:.1f}-{max(record) * 1e6:.1f}), recorded and run "
          f"{statistics.median(done) * 1e6:.1f} us ({min(done) * 1e6:.1f}-{max(done) * 1e6:.1f}); "
          f"cpu device {statistics.median(host) * 1e6:.2f} us")


def binding_cost(reps: int) -> None:
    """One dispatch (bind group, pipeline, dispatch) recorded through wgpu-py's
    Python API and through ctypes on the same library, pipeline and buffers."""
    import ctypes

    import wgpu
    from wgpu.backends.wgpu_native import ffi

    from candle_backend_metal import library
    from candle_backend_metal import webgpu as w
    from candle_backend_metal.adapter import quiet_stderr

    with quiet_stderr():  # what drivers print while adapters are enumerated, as the plugin does
        device = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
    code = """@group(0) @binding(0) var<storage, read_write> o: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { o[g.x] = a[g.x] + 1.0; }"""
    pipe = device.create_compute_pipeline(layout="auto", compute={"module": device.create_shader_module(code=code),
                                                                  "entry_point": "main"})
    layout = pipe.get_bind_group_layout(0)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
    bufs = [device.create_buffer(size=256, usage=usage) for _ in range(2)]
    lib = library.load()
    handle = lambda obj: int(ffi.cast("uintptr_t", obj._internal))  # noqa: E731
    entries = (w.BindGroupEntry * 2)(*[w.BindGroupEntry(None, i, handle(b), 0, w.WHOLE_SIZE, None, None)
                                       for i, b in enumerate(bufs)])
    desc = w.BindGroupDescriptor(None, w.StringView(None, 0), handle(layout), 2, entries)

    def python_api(cpass):
        group = device.create_bind_group(layout=layout, entries=[{"binding": i, "resource": {"buffer": b}}
                                                                  for i, b in enumerate(bufs)])
        cpass.set_pipeline(pipe)
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(1)

    def through_ctypes(cpass):
        group = lib.wgpuDeviceCreateBindGroup(handle(device), ctypes.byref(desc))
        lib.wgpuComputePassEncoderSetPipeline(cpass, handle(pipe))
        lib.wgpuComputePassEncoderSetBindGroup(cpass, 0, group, 0, None)
        lib.wgpuComputePassEncoderDispatchWorkgroups(cpass, 1, 1, 1)
        lib.wgpuBindGroupRelease(group)

    results = {"wgpu-py": [], "ctypes": []}
    for _ in range(reps):
        for name, fn in (("wgpu-py", python_api), ("ctypes", through_ctypes)):
            encoder = device.create_command_encoder()
            cpass = encoder.begin_compute_pass()
            arg = cpass if name == "wgpu-py" else handle(cpass)
            start = time.perf_counter()
            for _ in range(500):
                fn(arg)
            results[name].append((time.perf_counter() - start) / 500)
            cpass.end()
            device.queue.submit([encoder.finish()])
    py, ct = (statistics.median(results[k]) for k in ("wgpu-py", "ctypes"))
    print(f"one dispatch recorded (bind group + pipeline + dispatch): wgpu-py {py * 1e6:.1f} us "
          f"({min(results['wgpu-py']) * 1e6:.1f}-{max(results['wgpu-py']) * 1e6:.1f}), ctypes {ct * 1e6:.1f} us "
          f"({min(results['ctypes']) * 1e6:.1f}-{max(results['ctypes']) * 1e6:.1f}): {py / ct:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller cases, 3 repetitions")
    parser.add_argument("--device", default="wgpu:0")
    parser.add_argument("--large", action="store_true", help="shapes for a discrete GPU (products to 4096)")
    args = parser.parse_args()
    gpu, cpu = c.get_device(args.device), c.get_device("cpu")
    print(f"{gpu}: {gpu.backend.adapter.describe()}")
    reps = 3 if args.quick else 7
    throughput(gpu, cpu, reps, args.quick, args.large)
    dispatch_cost(gpu, cpu, reps)
    binding_cost(reps)


if __name__ == "__main__":
    main()
