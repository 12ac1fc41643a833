"""The wgpu device's own duties, beyond the conformance suite: the alias,
the dtypes it holds (f64 refused, i64 exact beyond 32 bits), the caching
allocator, staging copies, pipelines compiled once, the command stream,
tensors beyond the binding limit, and the reports of a machine without an
adapter. Runs where an adapter is found (lavapipe in CI); the unavailable
paths run everywhere."""

import os
import subprocess
import sys

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import BackendUnavailableError, DeviceError, KernelError, UnsupportedDTypeError
from candle_api.quantized import QTensor
from candle_api.registry import registry

SPEC = registry().backends()["wgpu"][0]
AVAILABLE, REASON = SPEC.availability()
needs_adapter = pytest.mark.skipif(not AVAILABLE, reason=f"no WebGPU adapter: {REASON}")


@pytest.fixture
def dev():
    return c.get_device("wgpu")


@needs_adapter
def test_the_adapter_api_is_an_alias_of_the_same_device(dev):
    aliases = SPEC.aliases()
    assert aliases and set(aliases) <= {"vulkan", "metal", "d3d12"}
    for name in aliases:
        assert c.get_device(f"{name}:0") is dev
        assert c.get_device(name) is dev
        assert c.Tensor([1.0, 2.0], device=name).device == "wgpu:0"


@needs_adapter
def test_an_api_the_adapter_does_not_use_is_no_device():
    other = next(n for n in ("metal", "d3d12", "vulkan") if n not in SPEC.aliases())
    with pytest.raises(DeviceError, match=f"no installed plugin provides device type '{other}'"):
        c.get_device(other)


@needs_adapter
def test_f64_is_refused_naming_the_device(dev):
    with pytest.raises(UnsupportedDTypeError, match="wgpu:0 does not hold f64"):
        c.Tensor(np.ones(3), device=dev)
    with pytest.raises(UnsupportedDTypeError, match="wgpu:0"):
        c.Tensor([1.0, 2.0], device=dev).to_dtype("f64")


@needs_adapter
def test_i64_is_exact_beyond_32_bits(dev):
    """WGSL has no 64-bit integers: i64 lives in pairs of 32-bit words and its
    arithmetic is emulated, exactly (no range to check at copy-in)."""
    a = np.array([2**40 + 7, -(2**35) - 3, 2**62, -5, 3], np.int64)
    b = np.array([3, 2**33 + 1, -2, 7, -(2**31)], np.int64)
    ta, tb = c.Tensor(a, device=dev), c.Tensor(b, device=dev)
    assert ta.numpy().tolist() == a.tolist()
    assert (ta + tb).numpy().tolist() == (a + b).tolist()
    assert (ta * tb).numpy().tolist() == (a * b).tolist()
    assert (ta - tb).numpy().tolist() == (a - b).tolist()
    assert (ta / tb).numpy().tolist() == [int(x / y) if abs(x) < 2**52 else -(2**61) for x, y in zip(a, b)]
    assert (ta % tb).numpy().tolist() == (a % b).tolist()
    assert (ta > tb).numpy().tolist() == (a > b).tolist()
    assert ta.sum().numpy() == a.sum()
    assert ta.cumsum(0).numpy().tolist() == np.cumsum(a).tolist()
    assert ta.argmax().numpy() == np.argmax(a)
    big = c.Tensor(np.array([1e10, -3e12, 1e30], np.float32), device=dev)
    assert big.to_dtype("i64").numpy().tolist() == [10000000000, int(np.float32(-3e12)), 2**63 - 1]
    assert ta.to_dtype("f32").numpy().tolist() == a.astype(np.float32).tolist()


@needs_adapter
def test_freed_buffers_are_reused(dev):
    alloc = dev.backend.allocator
    x = c.Tensor(np.ones(1000, np.float32), device=dev)
    (x * 2 + 1).numpy()
    created = alloc.created
    for _ in range(20):
        (x * 2 + 1).numpy()
    assert alloc.created == created
    assert alloc.reused >= 40


def test_size_classes_waste_at_most_a_quarter():
    from candle_backend_metal.allocator import size_class

    assert size_class(1) == 256 and size_class(4096) == 4096
    for n in (4097, 5000, 10**6, 3 * 2**20 + 1, 2**30 + 5):
        cap = size_class(n)
        assert n <= cap < n * 1.25 + 1
        assert size_class(cap) == cap


@needs_adapter
@pytest.mark.parametrize("dtype", ["u8", "i16", "f16", "bf16", "u32", "f32", "i64"])
def test_host_copies_round_trip(dev, dtype):
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 1027):
        x = c.Tensor((rng.standard_normal(n) * 40).astype(np.float32)).to_dtype(dtype).numpy()
        t = c.Tensor(x, device=dev)
        assert t.numpy().tobytes() == x.tobytes()
    big = (rng.standard_normal((64, 300)) * 40).astype(np.float32)
    t = c.Tensor(big, device=dev).to_dtype(dtype)
    host = c.Tensor(big).to_dtype(dtype).numpy()
    assert t[5:9, 7::13].numpy().tobytes() == np.ascontiguousarray(host[5:9, 7::13]).tobytes()  # a sparse view
    assert t.t()[::-1].numpy().tobytes() == np.ascontiguousarray(host.T[::-1]).tobytes()


@needs_adapter
def test_pipelines_are_compiled_once(dev):
    gpu = dev.backend.gpu
    x = c.Tensor(np.arange(10, dtype=np.float32), device=dev)
    (x.sin() + x).numpy()
    compiled = len(gpu._pipelines)
    for _ in range(3):
        (x.sin() + x).numpy()
        (x[::2].sin() + x[1::2]).numpy()  # the strided shape class: compiled once too
    assert len(gpu._pipelines) == compiled + 2


@needs_adapter
def test_work_is_recorded_until_read(dev):
    gpu = dev.backend.gpu
    x = c.Tensor(np.ones(256, np.float32), device=dev)
    dev.synchronize()
    before = gpu.dispatch_count
    y = x
    for _ in range(10):
        y = y + 1
    assert gpu.dispatch_count == before + 10
    assert gpu._encoder is not None  # recorded, not yet submitted
    assert y.numpy()[0] == 11.0
    assert gpu._encoder is None


@needs_adapter
def test_a_shader_that_does_not_compile_is_a_kernel_error(dev):
    with pytest.raises(KernelError, match="does not compile"):
        dev.backend.gpu.pipeline(("broken",), "w", lambda: "fn main() { let x: u32 = 1.5; }")


@needs_adapter
def test_tensors_beyond_the_binding_limit_run_in_windows(dev, monkeypatch):
    """With the limit lowered to 32 KiB, every split path against the cpu."""
    monkeypatch.setattr(dev.backend.gpu, "max_binding", 32768)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, 70)).astype(np.float32)
    t = c.Tensor(x, device=dev)
    np.testing.assert_array_equal((t * 2 + 1).numpy(), x * 2 + 1)
    np.testing.assert_array_equal(t[100:2900, 3:50].contiguous().numpy(), x[100:2900, 3:50])
    ids = rng.integers(0, 3000, size=77).astype(np.uint32)
    np.testing.assert_array_equal(t.to_dtype("f16").index_select(c.Tensor(ids, device=dev), 0).numpy(),
                                  x.astype(np.float16)[ids])
    a, w = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal((1500, 64)).astype(np.float32)
    tw = c.Tensor(w, device=dev)
    np.testing.assert_allclose((c.Tensor(a, device=dev) @ tw.t()).numpy(), a @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((c.Tensor(a[:1], device=dev) @ tw.t()).numpy(), a[:1] @ w.T, rtol=1e-5, atol=1e-5)
    wq = rng.standard_normal((600, 256)).astype(np.float32)
    qc, qg = QTensor.quantize(c.Tensor(wq), "q4k"), QTensor.quantize(c.Tensor(wq, device=dev), "q4k")
    plain = qc.dequantize().numpy()
    np.testing.assert_array_equal(qg.dequantize().numpy(), plain)
    rows = rng.integers(0, 600, size=9).astype(np.int64)
    np.testing.assert_array_equal(qg.embedding(c.Tensor(rows, device=dev)).numpy(), plain[rows])
    xs = rng.standard_normal((3, 256)).astype(np.float32)
    np.testing.assert_allclose(qg.matmul_t(c.Tensor(xs, device=dev)).numpy(), xs @ plain.T, rtol=1e-4, atol=1e-4)


@needs_adapter
def test_a_tensor_larger_than_the_real_binding_limit(dev):
    gpu = dev.backend.gpu
    n = gpu.max_binding // 4 + 4096
    if n * 4 > 1 << 30:
        pytest.skip(f"the adapter binds {gpu.max_binding} bytes: too much to exercise here")
    t = c.arange(0, n, dtype="f32", device=dev)
    y = (t * 2 + 1).numpy()
    assert y[0] == 1 and y[-1] == 2 * (n - 1) + 1 and y[n // 2] == 2 * (n // 2) + 1
    rows = t.reshape(n // 64, 64).index_select(c.Tensor([0, n // 64 - 1], dtype="u32", device=dev), 0)
    assert rows.numpy()[1, -1] == n - 1


def _run(code: str, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_no_adapter_is_reported_with_the_reason():
    """A machine without a Vulkan driver: `candle info` lists the device as
    unavailable with the reason, and asking for it says so."""
    no_driver = {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json"}
    info = _run("from candle_api.cli import main; main(['info', '--brief'])", **no_driver)
    assert "device wgpu: unavailable: no WebGPU adapter" in info.stdout
    assert info.stderr == ""
    made = _run("import candle_api as c\ntry:\n    c.get_device('wgpu')\nexcept c.BackendUnavailableError as e:\n"
                "    print('refused:', e)", **no_driver)
    assert "refused: device 'wgpu:0' (plugin metal) is not available: no WebGPU adapter" in made.stdout


def test_a_missing_library_is_reported_with_the_paths_tried():
    info = _run("from candle_api.cli import main; main(['info', '--brief'])", CANDLE_WGPU_LIB="/nowhere/libwgpu.so")
    assert "device wgpu: unavailable: cannot load wgpu-native: /nowhere/libwgpu.so: no such file" in info.stdout


def test_importing_the_plugin_opens_nothing():
    code = ("import sys, candle_backend_metal.plugin\n"
            "print(sorted(m for m in sys.modules if m.startswith('candle_backend_metal') or m == 'wgpu'))")
    out = _run(code).stdout
    assert out.strip() == "['candle_backend_metal', 'candle_backend_metal.plugin']"


def test_backend_unavailable_error_is_a_device_error():
    assert issubclass(BackendUnavailableError, DeviceError)


@needs_adapter
def test_indices_are_checked_from_the_host_copy_until_written_in_place(dev):
    """Small uploads keep their bytes on the host, so checking indices costs no read
    back; an in-place write makes that copy stale, and it is dropped."""
    table = c.Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device=dev)
    ids = c.Tensor(np.array([3, 1], np.uint32), device=dev)
    assert ids._storage.host is not None
    np.testing.assert_array_equal(table.index_select(ids, 0).numpy()[:, 0], [9, 0 + 3])
    from candle_api.ops.creation import fill_

    fill_(ids[1:], 7)  # an in-place write (Var.set and copy_into take the same path: the copy kernel)
    assert ids._storage.host is None
    with pytest.raises(c.IndexOutOfRangeError, match="index 7 .*position 1"):
        table.index_select(ids, 0)


@needs_adapter
def test_dlpack_export_is_refused_clearly(dev):
    with pytest.raises(BufferError, match="wgpu:0 tensor has no memory address"):
        np.from_dlpack(c.Tensor([1.0, 2.0], device=dev))
