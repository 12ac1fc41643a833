"""The cuda device's own duties, beyond the conformance suite: memory
statistics and the cache, running out of memory, errors found on the
device raised at the op, launch errors naming the kernel, DLPack both
ways, several GPUs, NVRTC for a GPU the fatbins lack, layouts with more
dims than a launch takes, threads, quantized matmul on both its paths, and
the element-wise and row kernels' paths on either side of their conditions
(16-byte alignment, row lengths), and the tensor-core and tiled attention
kernels (which the conformance suite's head sizes do not reach) against
NumPy.

Runs on a GPU, or on the CPU emulation (CANDLE_CUDA_DRIVER=libcuda_emu.so,
emu/); the tests of what only the emulation can set up (its memory size,
its number of GPUs, its compute capability) say so and skip elsewhere.
Without either, every test skips with the reason."""

import re
import threading

import numpy as np
import pytest

import candle_api as c
from candle_api import functional as F
from candle_api.errors import DeviceError, IndexOutOfRangeError
from candle_api.ops.creation import from_array
from candle_api.quantized import QTensor


def test_memory_statistics_and_the_cache(dev):
    backend = dev.backend
    backend.empty_cache()
    before = backend.memory_stats()
    x = c.zeros(1 << 20, dtype="f32", device=dev)  # 4 MiB
    held = backend.memory_stats()
    assert held["allocated"] - before["allocated"] >= 4 << 20
    assert held["peak"] >= held["allocated"]
    del x
    dev.synchronize()
    cached = backend.memory_stats()
    assert cached["allocated"] == before["allocated"] and cached["cached"] >= 4 << 20
    y = c.zeros(1 << 20, dtype="f32", device=dev)  # the same size class: reused, not allocated
    assert backend.memory_stats()["reuses"] > cached["reuses"]
    del y
    assert backend.empty_cache() >= 4 << 20
    assert backend.memory_stats()["cached"] == 0


def test_more_than_the_gpu_holds_is_a_memory_error(dev):
    with pytest.raises(MemoryError, match=f"{dev}: cannot allocate"):
        dev.backend.alloc(dev.backend.gpu.memory + 1)


def test_out_of_memory_frees_the_cache_then_names_the_size(emulated, run_python):
    code = ("import candle_api as c\n"
            "a = c.zeros(12 << 20, dtype='u8', device='cuda'); del a\n"  # 12 MiB cached
            "b = c.zeros(20 << 20, dtype='u8', device='cuda')\n"          # fits once the cache is given back
            "print('retried', c.get_device('cuda').backend.memory_stats()['cached'])\n"
            "try:\n    c.zeros(16 << 20, dtype='u8', device='cuda')\n"
            "except MemoryError as e:\n    print('raised', e)")
    proc = run_python(code, CANDLE_CUDA_EMU_MEMORY=32 << 20)
    assert "retried 0" in proc.stdout, proc.stderr
    assert re.search(r"raised cuda:0: out of memory allocating 16777216 bytes \(2097\d+ bytes held by live tensors, "
                     r"the cache emptied; \d+ of 33554432 bytes free on the device\)", proc.stdout), proc.stdout


def test_a_bad_index_made_on_the_device_raises_at_the_op(dev):
    x = c.Tensor(np.arange(12.0, dtype=np.float32).reshape(4, 3), device=dev)
    ids = c.Tensor(np.array([1, 7, 2], np.int64), device=dev) * 1  # computed on the device: no host copy
    assert ids._storage.host is None
    with pytest.raises(IndexOutOfRangeError, match=r"index_select: index 7 \(at position 1\) is out of range for a "
                                                   r"dimension of size 4"):
        x.index_select(ids, 0)
    good = c.Tensor(np.array([3, 0], np.int64), device=dev) * 1
    np.testing.assert_array_equal(x.index_select(good, 0).numpy(), np.arange(12.0).reshape(4, 3)[[3, 0]])


def test_a_launch_the_gpu_refuses_names_the_kernel(dev):
    x = c.Tensor(np.ones(4, np.float32), device=dev)
    fn = dev.backend.function("elementwise", "unary_f32")
    with pytest.raises(DeviceError, match="launching kernel unary_f32 .*block 2048x1x1"):
        fn.launch(1, 2048, x._storage.ptr, x._storage.ptr, 4, 0, *([0] * 17))


def test_dlpack_round_trip_shares_the_memory(dev):
    x = c.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=dev)
    y = c.from_dlpack(x.__dlpack__())
    assert y.device == dev and y._storage.ptr == x._storage.ptr
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_dlpack_with_pytorch_both_ways(dev):
    torch = pytest.importorskip("torch")
    if "emulation" in dev.backend.gpu.name or not torch.cuda.is_available():
        pytest.skip("needs PyTorch with CUDA on a GPU")
    t = torch.arange(12, dtype=torch.float32, device=f"cuda:{dev.index}").reshape(3, 4)
    x = c.from_dlpack(t)
    assert x._storage.ptr == t.data_ptr()
    np.testing.assert_array_equal((x * 2).numpy(), (t * 2).cpu().numpy())
    back = torch.from_dlpack(x * 3)
    assert back.device.type == "cuda"
    np.testing.assert_array_equal(back.cpu().numpy(), (t * 3).cpu().numpy())


def test_copies_between_gpus(emulated, run_python):
    code = ("import numpy as np, candle_api as c\n"
            "x = c.Tensor(np.arange(5.0), device='cuda:0')\n"
            "y = x.to_device('cuda:1') * 2\n"
            "print(y.device, y.to_device('cuda:0').numpy().tolist())")
    proc = run_python(code, CANDLE_CUDA_EMU_DEVICES=2)
    assert proc.stdout.strip() == "cuda:1 [0.0, 2.0, 4.0, 6.0, 8.0]", proc.stderr


# These two compile only csrc/memory.cu (copies), the smallest source: NVRTC takes a minute or more over the big ones.
def test_a_gpu_the_fatbins_lack_gets_its_kernels_from_nvrtc(emulated, run_python, tmp_path):
    code = ("import ctypes, numpy as np, candle_api as c\n"
            "from candle_backend_cuda import driver\n"
            "x = c.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device='cuda')\n"
            "print(x.t().contiguous().numpy().ravel().tolist(), c.get_device('cuda').backend.modules.source)\n"
            "f, b = ctypes.c_int(), ctypes.c_int()\n"
            "driver.load().candle_emu_images(ctypes.byref(f), ctypes.byref(b))\n"
            "print('images', f.value, b.value)")
    proc = run_python(code, CANDLE_CUDA_EMU_CC="12.0", CANDLE_CUDA_CACHE=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "[0.0, 3.0, 1.0, 4.0, 2.0, 5.0] nvrtc"
    fatbins, cubins = map(int, lines[1].split()[1:])
    assert fatbins == 0 and cubins >= 1


def test_nvrtc_kernels_on_request(dev, run_python, tmp_path):
    """CANDLE_CUDA_KERNELS=nvrtc: the fallback's kernels on this GPU too."""
    code = ("import numpy as np, candle_api as c\n"
            "x = c.Tensor(np.arange(6, dtype=np.int16).reshape(3, 2), device='cuda')\n"
            "print(x.t().contiguous().numpy().ravel().tolist(), c.get_device('cuda').backend.modules.source)")
    proc = run_python(code, CANDLE_CUDA_KERNELS="nvrtc", CANDLE_CUDA_CACHE=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0, 2, 4, 1, 3, 5] nvrtc"


def test_more_dims_than_a_launch_takes(dev):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2,) * 11).astype(np.float32)
    perm = (10, 8, 6, 4, 2, 0, 1, 3, 5, 7, 9)  # no two dims merge
    x = c.Tensor(base, device=dev).permute(perm)
    want = np.transpose(base, perm)
    np.testing.assert_allclose(x.exp().numpy(), np.exp(want), rtol=1e-6)
    np.testing.assert_allclose((x + x).numpy(), want + want, rtol=1e-6)
    np.testing.assert_allclose(x.sum(3).numpy(), want.sum(3), rtol=1e-5, atol=1e-6)


def test_kernels_from_several_threads(dev):
    a = c.Tensor(np.arange(1000, dtype=np.float32), device=dev)
    results, errors = {}, []

    def work(k):
        try:
            results[k] = ((a * float(k)) + 1.0).sum().values()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {k: pytest.approx(k * 499500.0 + 1000.0) for k in range(4)}


@pytest.mark.parametrize("rows", [1, 3, 40])  # the GEMV, and (past 16 rows) the decoded weight times a GEMM
@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q4k", "q6k"])
def test_quantized_matmul_decode_and_prefill(dev, rows, qtype):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 256)).astype(np.float32)
    x = rng.standard_normal((rows, 256)).astype(np.float32)
    qw = QTensor.quantize(c.Tensor(w), qtype)  # the reference codec, on the cpu
    want = x.astype(np.float64) @ qw.dequantize().numpy().T.astype(np.float64)
    on_gpu = qw.to_device(dev)
    np.testing.assert_array_equal(on_gpu.dequantize().numpy(), qw.dequantize().numpy())  # bit-exact decoding
    got = on_gpu.matmul_t(c.Tensor(x, device=dev)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.fixture
def launched(monkeypatch):
    """The names of the kernels launched while the test runs."""
    from candle_backend_cuda.launch import Function

    names, launch = [], Function.launch

    def spy(self, *args, **kwargs):
        names.append(self.name)
        return launch(self, *args, **kwargs)

    monkeypatch.setattr(Function, "launch", spy)
    return names


@pytest.mark.parametrize("start", [0, 1, 4])  # 0 and 4: 16-byte aligned f32 (packs); 1: the element loop
@pytest.mark.parametrize("n", [1, 7, 1003])  # a tail past the last pack
def test_elementwise_packed_and_unaligned(dev, start, n):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(n + 8).astype(np.float32)
    b = rng.standard_normal(n + 8).astype(np.float32)
    x, y = c.Tensor(a, device=dev)[start:start + n], c.Tensor(b, device=dev)[start:start + n]
    a, b = a[start:start + n], b[start:start + n]
    np.testing.assert_allclose(x.exp().numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose(x.affine(2.0, 1.0).numpy(), a * 2 + 1, rtol=1e-6)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal((x < y).where_cond(x, y).numpy(), np.where(a < b, a, b))
    np.testing.assert_array_equal(x.to_dtype("f64").numpy(), a.astype(np.float64))  # widest operand 8 bytes
    np.testing.assert_array_equal(x.to_dtype("f16").to_dtype("f32").numpy(), a.astype(np.float16))
    ints = c.Tensor(np.arange(n + 8, dtype=np.int64), device=dev)[start:start + n]
    np.testing.assert_array_equal((ints + ints).numpy(), 2 * np.arange(start, start + n))
    small = c.Tensor(np.arange(n + 8, dtype=np.uint8), device=dev)[start:start + n]
    np.testing.assert_array_equal((small + small).numpy(), (2 * np.arange(start, start + n)).astype(np.uint8))
    np.testing.assert_array_equal(x.contiguous().numpy(), a)


def _rows_want(op, a, w, bias):
    a = a.astype(np.float64)
    if op == "softmax":
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if op == "log_softmax":
        m = a.max(-1, keepdims=True)
        return a - m - np.log(np.exp(a - m).sum(-1, keepdims=True))
    if op == "rms_norm":
        return a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * w
    mean = a.mean(-1, keepdims=True)
    return (a - mean) / np.sqrt(((a - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * w + bias


def _rows_got(op, x, w, bias):
    if op == "softmax":
        return x.softmax(-1)
    if op == "log_softmax":
        return x.log_softmax(-1)
    if op == "rms_norm":
        return c.functional.rms_norm(x, w, 1e-6)
    return c.functional.layer_norm(x, w, bias, 1e-5)


# (d, the f32 kernel): a warp per row up to 512 elements, a block per row holding the row up to
# 8192, the block per row that reads it on each pass past that or for a d no pack divides
@pytest.mark.parametrize("d, kernel", [(4, "warp"), (128, "warp"), (384, "warp"), (512, "warp"), (516, "block"),
                                       (4096, "block"), (8192, "block"), (8196, ""), (127, "")])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_row_kernels_by_length(dev, launched, op, d, kernel):
    rng = np.random.default_rng(3)
    rows = 5 if d <= 1024 else 2
    a = rng.standard_normal((rows, d)).astype(np.float32) * 3
    w, bias = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    got = _rows_got(op, c.Tensor(a, device=dev), c.Tensor(w, device=dev), c.Tensor(bias, device=dev))
    np.testing.assert_allclose(got.numpy(), _rows_want(op, a, w, bias), rtol=2e-5, atol=2e-5)
    family = "softmax" if "softmax" in op else "norm"
    assert (f"{family}_{kernel}_f32" if kernel else f"{family}_f32") in launched


@pytest.mark.parametrize("dtype, tol", [("bf16", 2e-2), ("f16", 2e-3), ("f64", 1e-12)])
@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
@pytest.mark.parametrize("d", [128, 384, 2048])
def test_row_kernels_by_dtype(dev, launched, op, d, dtype, tol):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, d)).astype(np.float32)
    w, bias = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    t = [c.Tensor(v, device=dev).to_dtype(dtype) for v in (a, w, bias)]
    a, w, bias = (v.to_dtype("f64").numpy() for v in t)  # the inputs as rounded to dtype
    got = _rows_got(op, *t).to_dtype("f64").numpy()
    np.testing.assert_allclose(got, _rows_want(op, a, w, bias), rtol=tol, atol=tol)
    assert any(name.endswith(f"_{dtype}") and ("_warp_" in name or "_block_" in name) for name in launched)


@pytest.mark.parametrize("view", ["unaligned", "strided rows", "strided last dim"])
def test_row_kernels_on_views(dev, launched, view):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 132)).astype(np.float32)
    x = c.Tensor(a, device=dev)
    if view == "unaligned":  # rows of 128 that start 4 bytes past a 16-byte boundary: the fallback
        x, a, kernel = x[:, 1:129], a[:, 1:129], "softmax_f32"
    elif view == "strided rows":  # every other row, 16-byte aligned: the warp per row
        x, a, kernel = x[::2, :128], a[::2, :128], "softmax_warp_f32"
    else:
        x, a, kernel = x.t(), a.T, "softmax_f32"
    np.testing.assert_allclose(x.softmax(-1).numpy(), _rows_want("softmax", a, None, None), rtol=2e-5, atol=1e-7)
    assert launched[-1] == kernel


# ---- scaled-dot-product attention on the tensor-core kernel (flash_attention_e<E>_<dtype>) ----------
def _attention_reference(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q k^T scale + mask) v in f64; u8 masks keep keys where nonzero; rows that see no key are zeros."""
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] <= np.arange(s.shape[-2])[:, None], s, -np.inf)
    if mask is not None:
        s = np.where(mask != 0, s, -np.inf) if mask.dtype == np.uint8 else s + mask
    m = s.max(-1, keepdims=True)
    visible = ~np.isneginf(m)
    with np.errstate(invalid="ignore"):
        p = np.where(visible, np.exp(s - np.where(visible, m, 0)), 0)
        p = p / np.where(visible, p.sum(-1, keepdims=True), 1)
    return p @ v


def _sdpa_case(dev, dtype, shape_q, shape_kv, e_v=None, mask=None, causal=False, scale=None, nan_row=None):
    """(got, want) for F.scaled_dot_product_attention on dev against the f64 reference of the rounded inputs."""
    rng = np.random.default_rng(len(shape_q) * 1000 + shape_q[-2] * 7 + shape_kv[-2])
    q = rng.uniform(-1, 1, shape_q)
    if nan_row is not None:
        q[(0,) * (len(shape_q) - 2) + (nan_row, 0)] = np.nan
    k = rng.uniform(-1, 1, shape_kv)
    v = rng.uniform(-1, 1, shape_kv[:-1] + (e_v or shape_kv[-1],))
    tq, tk, tv = (from_array(x, dtype, dev) for x in (q, k, v))
    q, k, v = (t.to("f32").numpy().astype(np.float64) for t in (tq, tk, tv))
    tm = None
    if mask is not None:
        tm = from_array(mask, None if mask.dtype == np.uint8 else dtype, dev)
        if mask.dtype != np.uint8:
            mask = tm.to("f32").numpy().astype(np.float64)
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal, scale=scale)
    return got.to("f32").numpy(), _attention_reference(q, k, v, mask, causal, scale)


_SDPA_TOL = {"bf16": 1e-2, "f16": 2e-3}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("e", [32, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_tensor_cores_match_numpy(dev, launched, dtype, e, causal):
    # 70 queries and 150 keys: two query tiles and three key tiles, each last one ragged
    got, want = _sdpa_case(dev, dtype, (2, 2, 70, e), (2, 2, 150, e), causal=causal)
    assert f"flash_attention_e{e}_{dtype}" in launched
    np.testing.assert_allclose(got, want, atol=_SDPA_TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_sdpa_tensor_cores_masks_scale_and_broadcasting(dev, launched, dtype):
    rng = np.random.default_rng(3)
    keep = (rng.random((1, 70, 130)) > 0.3).astype(np.uint8)  # broadcast over the 3 heads
    keep[0, 3] = 0  # a row that sees no key: zeros
    got, want = _sdpa_case(dev, dtype, (1, 3, 70, 64), (1, 3, 130, 64), mask=keep)
    assert not got[:, :, 3].any()
    np.testing.assert_allclose(got, want, atol=_SDPA_TOL[dtype], rtol=0)
    added = rng.uniform(-2, 2, (3, 70, 130))
    added[1, 5] = -np.inf  # every key of a row masked out by -inf: zeros
    added[2, :, 7] = -np.inf
    got, want = _sdpa_case(dev, dtype, (2, 3, 70, 64), (2, 3, 130, 64), mask=added, scale=0.3, causal=False)
    assert not got[:, 1, 5].any()
    np.testing.assert_allclose(got, want, atol=_SDPA_TOL[dtype], rtol=0)
    # a causal mask with fewer keys than queries, and a NaN in one query row: that row alone is NaN
    got, want = _sdpa_case(dev, dtype, (1, 2, 100, 128), (1, 2, 66, 128), causal=True, nan_row=80)
    assert np.isnan(got[0, 0, 80]).all() and not np.isnan(np.delete(got, 80, axis=2)).any()
    np.testing.assert_allclose(got, want, atol=_SDPA_TOL[dtype], rtol=0)
    assert launched.count("flash_attention_e64_" + dtype) == 2 and "flash_attention_e128_" + dtype in launched
    assert not any(n.startswith("attention_") for n in launched)


def test_sdpa_tensor_cores_take_strided_and_broadcast_batches(dev, launched):
    rng = np.random.default_rng(4)
    q = rng.uniform(-1, 1, (2, 70, 4, 64))  # (b, t, h, e) viewed as (b, h, t, e): row stride h * e
    kv = rng.uniform(-1, 1, (2, 1, 90, 64))  # one head shared by all four (a zero batch stride)
    tq = from_array(q, "bf16", dev).transpose(1, 2)
    tk = from_array(kv, "bf16", dev).expand(2, 4, 90, 64)
    got = F.scaled_dot_product_attention(tq, tk, tk, is_causal=True).to("f32").numpy()
    qr, kr = (t.to("f32").numpy().astype(np.float64) for t in (tq, tk))
    np.testing.assert_allclose(got, _attention_reference(qr, kr, kr, causal=True), atol=1e-2, rtol=0)
    assert "flash_attention_e64_bf16" in launched and "attention_bf16" not in launched


def test_sdpa_tensor_cores_with_copies_landing_late(emulated, run_python):
    """The emulation's cp.async landing at the last moment the kernel's waits allow (a missing wait reads
    stale tiles): the tensor-core kernel agrees with the warp-per-row kernel on f32."""
    code = ("import numpy as np, candle_api.functional as F\n"
            "from candle_api.ops.creation import from_array\n"
            "rng = np.random.default_rng(5)\n"
            "q, k, v = (from_array(rng.uniform(-1, 1, (1, 2, n, 64)), 'f16', 'cuda') for n in (70, 150, 150))\n"
            "for causal in (False, True):\n"
            "    got = F.scaled_dot_product_attention(q, k, v, is_causal=causal).to('f32').numpy()\n"
            "    want = F.scaled_dot_product_attention(*(t.to('f32') for t in (q, k, v)), is_causal=causal).numpy()\n"
            "    assert np.abs(got - want).max() < 2e-3, np.abs(got - want).max()\n"
            "print('ok')\n")
    proc = run_python(code, CANDLE_EMU_CP_ASYNC="late")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_sdpa_other_cases_keep_the_warp_per_row_kernel(dev, launched):
    got, want = _sdpa_case(dev, "bf16", (1, 2, 20, 64), (1, 2, 30, 64), e_v=32)  # E != Ev
    np.testing.assert_allclose(got, want, atol=1e-2, rtol=0)
    got, want = _sdpa_case(dev, "f64", (1, 2, 20, 64), (1, 2, 30, 64))
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)  # (compared through f32)
    got, want = _sdpa_case(dev, "f32", (1, 2, 20, 64), (1, 2, 30, 64), e_v=83)  # a value row past 64
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    rng = np.random.default_rng(8)
    wide = from_array(rng.uniform(-1, 1, (1, 2, 20, 65)), "f16", dev)[..., 1:]  # rows 65 apart: not 16-byte aligned
    k = from_array(rng.uniform(-1, 1, (1, 2, 30, 64)), "f16", dev)
    got = F.scaled_dot_product_attention(wide, k, k).to("f32").numpy()
    qr, kr = (t.to("f32").numpy().astype(np.float64) for t in (wide, k))
    np.testing.assert_allclose(got, _attention_reference(qr, kr, kr), atol=2e-3, rtol=0)
    assert not any(n.startswith(("flash_", "attention_tiled")) for n in launched)
    assert {"attention_bf16", "attention_f64", "attention_f32", "attention_f16"} <= set(launched)


@pytest.mark.parametrize("e,e_v", [(32, 32), (8, 6), (64, 40)])
def test_sdpa_f32_small_heads_tiled(dev, launched, e, e_v):
    # BERT's head size (and a smaller and a larger one): 150 queries, 170 keys over ragged tiles, with
    # u8 and additive masks (a row that sees nothing, -inf columns) and causal masking
    rng = np.random.default_rng(7)
    keep = (rng.random((150, 170)) > 0.3).astype(np.uint8)
    keep[9] = 0
    got, want = _sdpa_case(dev, "f32", (2, 3, 150, e), (2, 3, 170, e), e_v=e_v, mask=keep)
    assert not got[:, :, 9].any()
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    added = rng.uniform(-2, 2, (3, 150, 170))
    added[:, :, 11] = -np.inf
    got, want = _sdpa_case(dev, "f32", (2, 3, 150, e), (2, 3, 170, e), e_v=e_v, mask=added, scale=0.5)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    got, want = _sdpa_case(dev, "f32", (1, 2, 150, e), (1, 2, 140, e), e_v=e_v, causal=True, nan_row=20)
    assert np.isnan(got[0, 0, 20]).all() and not np.isnan(np.delete(got, 20, axis=2)).any()
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    assert launched.count(f"attention_tiled{32 if max(e, e_v) <= 32 else 64}_f32") == 3
    assert "attention_f32" not in launched


@pytest.mark.parametrize("dtype,e,causal", [("bf16", 128, True), ("f16", 64, False), ("bf16", 32, False)])
def test_sdpa_tensor_cores_at_length_on_a_gpu(dev, launched, dtype, e, causal):
    """Many tiles (2048 queries and keys, the benchmark's length) against the f32 kernels: too
    slow for the emulation."""
    if "emulation" in dev.backend.gpu.name:
        pytest.skip("thousands of tiles: run on a GPU")
    rng = np.random.default_rng(6)
    q, k, v = (from_array(rng.standard_normal((2, 4, 2048, e)), dtype, dev) for _ in range(3))
    got = F.scaled_dot_product_attention(q, k, v, is_causal=causal).to("f32").numpy()
    assert f"flash_attention_e{e}_{dtype}" in launched
    want = F.scaled_dot_product_attention(*(t.to("f32") for t in (q, k, v)), is_causal=causal).numpy()
    np.testing.assert_allclose(got, want, atol=_SDPA_TOL[dtype] * 2, rtol=0)


# The tiled kernel (attention_tiled<D>, csrc/attention.cu) takes heads of up to 64 dims and 32 or more
# query rows: ragged tiles of rows and keys, head dims under the kernel's width, masks of both kinds
# broadcast over heads, a row with every key masked, causal rows, and a query that is a strided view.
@pytest.mark.parametrize("e, ev, length, keys, mask, causal", [
    (32, 32, 128, 128, None, False), (20, 48, 70, 45, "bool", False), (64, 40, 33, 100, "add", False),
    (48, 64, 65, 65, None, True)])
def test_tiled_attention_against_numpy(dev, launched, e, ev, length, keys, mask, causal):
    rng = np.random.default_rng(e + length)
    q = rng.standard_normal((2, 3, length, e)).astype(np.float32)
    k = rng.standard_normal((2, 3, keys, e)).astype(np.float32)
    v = rng.standard_normal((2, 3, keys, ev)).astype(np.float32)
    m = None
    if mask == "bool":
        m = rng.random((2, 1, length, keys)) < 0.7
        m[0, 0, 5] = False  # a row with every key masked gives zeros
    elif mask == "add":
        m = np.where(rng.random((1, 3, length, keys)) < 0.2, -np.inf, rng.standard_normal((1, 3, length, keys)))
        m = m.astype(np.float32)
    want = _attention_reference(*(x.astype(np.float64) for x in (q, k, v)),
                                m.astype(np.uint8) if mask == "bool" else m, causal, 0.3)
    wide = np.zeros((2, 3, length, 2 * e), np.float32)
    wide[..., ::2] = q
    args = [c.Tensor(wide, device=dev)[..., ::2], c.Tensor(k, device=dev), c.Tensor(v, device=dev)]
    tm = None if m is None else c.Tensor(m, device=dev)
    got = F.scaled_dot_product_attention(*args, attn_mask=tm, is_causal=causal, scale=0.3).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert f"attention_tiled{32 if max(e, ev) <= 32 else 64}_f32" in launched


# Rows read contiguously by every input, a row stride apart (each_pack_rows in common.cuh): a bias
# broadcast along a matrix's rows, a row slice of a wider matrix, and rows the packs cannot take
# (a row length off the pack, a row stride off 16 bytes) on the element loop.
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64", "i32"])
@pytest.mark.parametrize("rows, cols, width", [(37, 64, 64), (5, 96, 160), (7, 6, 6), (9, 64, 66)])
def test_binary_and_compare_on_rows(dev, dtype, rows, cols, width):
    rng = np.random.default_rng(rows * cols)
    wide = rng.integers(-8, 8, (rows, width)).astype(np.float64)  # sums and products exact in bf16
    bias = rng.integers(-8, 8, cols).astype(np.float64)
    x = from_array(wide, dtype, dev)[:, :cols]
    b = from_array(bias, dtype, dev)
    np.testing.assert_array_equal((x + b).to("f64").numpy(), wide[:, :cols] + bias)
    np.testing.assert_array_equal((x * b).to("f64").numpy(), wide[:, :cols] * bias)
    np.testing.assert_array_equal((x > b).numpy().astype(bool), wide[:, :cols] > bias)
